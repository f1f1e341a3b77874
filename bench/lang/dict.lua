-- dict.lua: the same program as dict.nbl / dict.py, for Lua 5.4.
local d = {}
local n = 200000
for i = 0, n - 1 do d["w" .. i] = i end
local s = 0
for r = 0, 4 do for i = 0, n - 1 do s = s + d["w" .. i] end end
print(s)
