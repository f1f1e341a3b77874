-- queens.lua — Are We Fast Yet's Queens for Lua 5.4 (the same program as
-- queens.nbl / queens.py; README.md: the harness).
local dir = arg[0]:match("^(.*)/") or "."
package.path = dir .. "/?.lua;" .. package.path
local awfy = require("awfy")

local bench = {name = "Queens"}

function bench:benchmark()
  local result = true
  for _ = 1, 10 do
    result = result and self:queens()
  end
  return result
end

function bench:queens()
  self.free_rows = {true, true, true, true, true, true, true, true}
  self.free_maxs = {true, true, true, true, true, true, true, true,
                    true, true, true, true, true, true, true, true}
  self.free_mins = {true, true, true, true, true, true, true, true,
                    true, true, true, true, true, true, true, true}
  self.queen_rows = {-1, -1, -1, -1, -1, -1, -1, -1}
  return self:place_queen(1)
end

function bench:place_queen(c)
  for r = 1, 8 do
    if self:get_row_column(r, c) then
      self.queen_rows[r] = c
      self:set_row_column(r, c, false)
      if c == 8 then
        return true
      end
      if self:place_queen(c + 1) then
        return true
      end
      self:set_row_column(r, c, true)
    end
  end
  return false
end

function bench:get_row_column(r, c)
  return self.free_rows[r] and self.free_maxs[c + r] and self.free_mins[c - r + 8]
end

function bench:set_row_column(r, c, v)
  self.free_rows[r] = v
  self.free_maxs[c + r] = v
  self.free_mins[c - r + 8] = v
end

function bench:verify_result(result)
  return result
end

-- The boards are solved ten times over: the checksum is whether all were.
function bench:checksum(result)
  return result and 1 or 0
end

awfy.run(bench, arg)
