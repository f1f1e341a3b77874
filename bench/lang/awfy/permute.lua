-- permute.lua — Are We Fast Yet's Permute for Lua 5.4 (the same program as
-- permute.nbl / permute.py; README.md: the harness).
local dir = arg[0]:match("^(.*)/") or "."
package.path = dir .. "/?.lua;" .. package.path
local awfy = require("awfy")

local bench = {name = "Permute"}

function bench:benchmark()
  self.count = 0
  self.v = {0, 0, 0, 0, 0, 0}
  self:permute(6)
  return self.count
end

function bench:permute(n)
  self.count = self.count + 1
  if n ~= 0 then
    local n1 = n - 1
    self:permute(n1)
    for i = n, 1, -1 do
      self:swap(n, i)
      self:permute(n1)
      self:swap(n, i)
    end
  end
end

function bench:swap(i, j)
  local tmp = self.v[i]
  self.v[i] = self.v[j]
  self.v[j] = tmp
end

function bench:verify_result(result)
  return result == 8660
end

function bench:checksum(result)
  return result
end

awfy.run(bench, arg)
