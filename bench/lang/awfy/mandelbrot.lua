-- mandelbrot.lua — Are We Fast Yet's Mandelbrot for Lua 5.4 (the same program
-- as mandelbrot.nbl / mandelbrot.py; README.md: the harness).
local dir = arg[0]:match("^(.*)/") or "."
package.path = dir .. "/?.lua;" .. package.path
local awfy = require("awfy")

local function mandelbrot(size)
  local sum = 0
  local byte_acc = 0
  local bit_num = 0
  local y = 0
  while y < size do
    local ci = (2.0 * y / size) - 1.0
    local x = 0
    while x < size do
      local zrzr = 0.0
      local zizi, zi = 0.0, 0.0
      local cr = (2.0 * x / size) - 1.5
      local z = 0
      local not_done = true
      local escape = 0
      while not_done and z < 50 do
        local zr = zrzr - zizi + cr
        zi = 2.0 * zr * zi + ci
        -- preserve recalculation
        zrzr = zr * zr
        zizi = zi * zi
        if zrzr + zizi > 4.0 then
          not_done = false
          escape = 1
        end
        z = z + 1
      end
      byte_acc = (byte_acc << 1) + escape
      bit_num = bit_num + 1
      if bit_num == 8 then
        sum = sum ~ byte_acc
        byte_acc = 0
        bit_num = 0
      elseif x == size - 1 then
        byte_acc = byte_acc << (8 - bit_num)
        sum = sum ~ byte_acc
        byte_acc = 0
        bit_num = 0
      end
      x = x + 1
    end
    y = y + 1
  end
  return sum
end

local bench = {name = "Mandelbrot"}

function bench:inner_benchmark(inner)
  return mandelbrot(inner)
end

function bench:verify_inner(result, inner)
  if inner == 500 then
    return result == 191
  elseif inner == 750 then
    return result == 50
  elseif inner == 1 then
    return result == 128
  end
  print(("No verification result for %d found"):format(inner))
  print(("Result is: %d"):format(result))
  return false
end

function bench:checksum(result)
  return result
end

awfy.run(bench, arg)
