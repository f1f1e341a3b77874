-- awfy.lua — the harness of the Lua 5.4 versions of the Are We Fast Yet
-- benchmarks here (README.md in this folder has the convention all three
-- languages follow), and the suite's shared Random.  A benchmark file ends with
--   awfy.run(bench, arg)
-- where bench is a table with the methods benchmark, verify_result, checksum
-- (or inner_benchmark and verify_inner) and a field name.
local awfy = {}

-- The suite's deterministic pseudo-random generator (som.Random).
local Random = {}
Random.__index = Random

function awfy.Random()
  return setmetatable({seed = 74755}, Random)
end

function Random:next()
  self.seed = ((self.seed * 1309) + 13849) & 65535
  return self.seed
end

local function count_arg(arg, i, what)
  if arg[i] == nil then return 1 end
  local n = math.tointeger(tonumber(arg[i]))
  if n == nil or n < 0 then
    error(("%s must be a non-negative integer, got '%s'"):format(what, arg[i]))
  end
  return n
end

-- Runs bench as the suite's harness does (see awfy.nbl) and prints the report.
function awfy.run(bench, arg)
  local iterations = count_arg(arg, 1, "ITERATIONS")
  local inner = count_arg(arg, 2, "INNER")
  local ok, result = true, nil
  for _ = 1, iterations do
    if bench.inner_benchmark then
      result = bench:inner_benchmark(inner)
      ok = bench:verify_inner(result, inner)
    else
      for _ = 1, inner do
        result = bench:benchmark()
        if not bench:verify_result(result) then
          ok = false
          break
        end
      end
    end
    if not ok then break end
  end
  local c = bench:checksum(result)
  if type(c) == "number" then
    c = math.tointeger(c) or error(bench.name .. ": checksum " .. c .. " is not an integer")
  end
  print(("%s: iterations=%d inner=%d verified=%s checksum=%s"):format(
    bench.name, iterations, inner, tostring(ok), tostring(c)))
  if not ok then os.exit(1) end
end

return awfy
