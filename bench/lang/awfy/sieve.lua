-- sieve.lua — Are We Fast Yet's Sieve for Lua 5.4 (the same program as
-- sieve.nbl / sieve.py; README.md: the harness).
local dir = arg[0]:match("^(.*)/") or "."
package.path = dir .. "/?.lua;" .. package.path
local awfy = require("awfy")

local bench = {name = "Sieve"}

local function sieve(flags, size)
  local prime_count = 0
  for i = 2, size do
    if flags[i - 1] then
      prime_count = prime_count + 1
      local k = i + i
      while k <= size do
        flags[k - 1] = false
        k = k + i
      end
    end
  end
  return prime_count
end

function bench:benchmark()
  local flags = {}
  for i = 1, 5000 do
    flags[i] = true
  end
  return sieve(flags, 5000)
end

function bench:verify_result(result)
  return result == 669
end

function bench:checksum(result)
  return result
end

awfy.run(bench, arg)
