-- bounce.lua — Are We Fast Yet's Bounce for Lua 5.4 (the same program as
-- bounce.nbl / bounce.py; README.md: the harness).
local dir = arg[0]:match("^(.*)/") or "."
package.path = dir .. "/?.lua;" .. package.path
local awfy = require("awfy")

local abs = math.abs

local Ball = {}
Ball.__index = Ball

function Ball.new(random)
  local obj = {
    x = random:next() % 500,
    y = random:next() % 500,
    x_vel = (random:next() % 300) - 150,
    y_vel = (random:next() % 300) - 150,
  }
  return setmetatable(obj, Ball)
end

function Ball:bounce()
  local x_limit, y_limit = 500, 500
  local bounced = false
  self.x = self.x + self.x_vel
  self.y = self.y + self.y_vel
  if self.x > x_limit then
    self.x = x_limit
    self.x_vel = 0 - abs(self.x_vel)
    bounced = true
  end
  if self.x < 0 then
    self.x = 0
    self.x_vel = abs(self.x_vel)
    bounced = true
  end
  if self.y > y_limit then
    self.y = y_limit
    self.y_vel = 0 - abs(self.y_vel)
    bounced = true
  end
  if self.y < 0 then
    self.y = 0
    self.y_vel = abs(self.y_vel)
    bounced = true
  end
  return bounced
end

local bench = {name = "Bounce"}

function bench:benchmark()
  local random = awfy.Random()
  local ball_count = 100
  local bounces = 0
  local balls = {}
  for i = 1, ball_count do
    balls[i] = Ball.new(random)
  end
  for _ = 1, 50 do
    for i = 1, #balls do
      if balls[i]:bounce() then
        bounces = bounces + 1
      end
    end
  end
  return bounces
end

function bench:verify_result(result)
  return result == 1331
end

function bench:checksum(result)
  return result
end

awfy.run(bench, arg)
