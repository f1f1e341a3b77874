-- list.lua — Are We Fast Yet's List for Lua 5.4 (the same program as list.nbl
-- / list.py; README.md: the harness).
local dir = arg[0]:match("^(.*)/") or "."
package.path = dir .. "/?.lua;" .. package.path
local awfy = require("awfy")

local Element = {}
Element.__index = Element

function Element.new(v)
  return setmetatable({val = v, next = nil}, Element)
end

function Element:length()
  if not self.next then
    return 1
  else
    return 1 + self.next:length()
  end
end

local bench = {name = "List"}

function bench:benchmark()
  local result = self:tail(self:make_list(15), self:make_list(10), self:make_list(6))
  return result:length()
end

function bench:make_list(length)
  if length == 0 then
    return nil
  else
    local e = Element.new(length)
    e.next = self:make_list(length - 1)
    return e
  end
end

function bench:is_shorter_than(x, y)
  local x_tail, y_tail = x, y
  while y_tail do
    if not x_tail then
      return true
    end
    x_tail = x_tail.next
    y_tail = y_tail.next
  end
  return false
end

function bench:tail(x, y, z)
  if self:is_shorter_than(y, x) then
    return self:tail(self:tail(x.next, y, z),
                     self:tail(y.next, z, x),
                     self:tail(z.next, x, y))
  else
    return z
  end
end

function bench:verify_result(result)
  return result == 10
end

function bench:checksum(result)
  return result
end

awfy.run(bench, arg)
