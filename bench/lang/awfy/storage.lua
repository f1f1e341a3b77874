-- storage.lua — Are We Fast Yet's Storage for Lua 5.4 (the same program as
-- storage.nbl / storage.py; README.md: the harness).
local dir = arg[0]:match("^(.*)/") or "."
package.path = dir .. "/?.lua;" .. package.path
local awfy = require("awfy")

local bench = {name = "Storage"}

function bench:benchmark()
  local random = awfy.Random()
  self.count = 0
  self:build_tree_depth(7, random)
  return self.count
end

function bench:build_tree_depth(depth, random)
  self.count = self.count + 1
  if depth == 1 then
    -- A Lua table cannot be pre-allocated: the suite records the size only.
    return {n = random:next() % 10 + 1}
  else
    local arr = {n = 4}
    for i = 1, 4 do
      arr[i] = self:build_tree_depth(depth - 1, random)
    end
    return arr
  end
end

function bench:verify_result(result)
  return result == 5461
end

function bench:checksum(result)
  return result
end

awfy.run(bench, arg)
