-- loop.lua: the same program as loop.nbl / loop.py, for Lua 5.4.  s is a
-- global, as in loop.nbl (whose top-level names are globals) and loop.py.
s = 0
for i = 0, 10000000 - 1 do s = s + i * 0.5 end
print(string.format("%.1f", s))
