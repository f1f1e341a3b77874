-- deltablue.lua — Are We Fast Yet's DeltaBlue for Lua 5.4 (the same program
-- as deltablue.nbl / deltablue.py; README.md: the harness): the incremental
-- dataflow constraint solver.  Classes are tables used as metatables (a
-- subclass's table has its superclass's as __index); collections are the
-- suite's own (som.lua).  The inner count is the problem size.
local dir = arg[0]:match("^(.*)/") or "."
package.path = dir .. "/?.lua;" .. package.path
local awfy = require("awfy")
local som = require("som")

local Vector = som.Vector

-- ------------------------------------------------------------ strengths

local Sym = {}
Sym.__index = Sym

function Sym.new(hash)
  return setmetatable({hash = hash}, Sym)
end

function Sym:custom_hash()
  return self.hash
end

local ABSOLUTE_STRONGEST = Sym.new(0)
local REQUIRED = Sym.new(1)
local STRONG_PREFERRED = Sym.new(2)
local PREFERRED = Sym.new(3)
local STRONG_DEFAULT = Sym.new(4)
local DEFAULT = Sym.new(5)
local WEAK_DEFAULT = Sym.new(6)
local ABSOLUTE_WEAKEST = Sym.new(7)

local function create_strength_table()
  local table = som.IdentityDictionary()
  table:at_put(ABSOLUTE_STRONGEST, -10000)
  table:at_put(REQUIRED, -800)
  table:at_put(STRONG_PREFERRED, -600)
  table:at_put(PREFERRED, -400)
  table:at_put(STRONG_DEFAULT, -200)
  table:at_put(DEFAULT, 0)
  table:at_put(WEAK_DEFAULT, 500)
  table:at_put(ABSOLUTE_WEAKEST, 10000)
  return table
end

local STRENGTH_TABLE = create_strength_table()

local Strength = {}
Strength.__index = Strength

function Strength.new(strength_sym)
  return setmetatable({symbolic_value = strength_sym,
                       arithmetic_value = STRENGTH_TABLE:at(strength_sym)}, Strength)
end

local function create_strength_constants()
  local constants = som.IdentityDictionary()
  STRENGTH_TABLE:keys():for_each(function(key)
    constants:at_put(key, Strength.new(key))
  end)
  return constants
end

local STRENGTH_CONSTANTS = create_strength_constants()

function Strength.of(sym)
  return STRENGTH_CONSTANTS:at(sym)
end

function Strength:same_as(s)
  return self.arithmetic_value == s.arithmetic_value
end

function Strength:stronger(s)
  return self.arithmetic_value < s.arithmetic_value
end

function Strength:weaker(s)
  return self.arithmetic_value > s.arithmetic_value
end

function Strength:strongest(s)
  if s:stronger(self) then return s end
  return self
end

function Strength:weakest(s)
  if s:weaker(self) then return s end
  return self
end

local ABSOLUTE_WEAKEST_STRENGTH = Strength.of(ABSOLUTE_WEAKEST)
local REQUIRED_STRENGTH = Strength.of(REQUIRED)

-- A binary constraint's direction; nil while it is not satisfied.
local FORWARD = 1
local BACKWARD = 2

-- ------------------------------------------------------------ variables

local Variable = {}
Variable.__index = Variable

function Variable.new(value)
  return setmetatable({
    value = value or 0,
    constraints = Vector.new(2),     -- the constraints that reference it
    determined_by = nil,             -- the constraint that determines its value
    mark = 0,                        -- the planner's mark
    walk_strength = ABSOLUTE_WEAKEST_STRENGTH,
    stay = true,                     -- a planning-time constant
  }, Variable)
end

function Variable:add_constraint(c)
  self.constraints:append(c)
end

function Variable:remove_constraint(c)
  self.constraints:remove(c)
  if self.determined_by == c then
    self.determined_by = nil
  end
end

-- ------------------------------------------------------------ constraints

local AbstractConstraint = {}
AbstractConstraint.__index = AbstractConstraint

function AbstractConstraint:is_input()
  return false
end

-- Activate the constraint and attempt to satisfy it.
function AbstractConstraint:add_constraint(planner)
  self:add_to_graph()
  planner:incremental_add(self)
end

-- Deactivate it, remove it from the graph and destroy it.
function AbstractConstraint:destroy_constraint(planner)
  if self:is_satisfied() then
    planner:incremental_remove(self)
  end
  self:remove_from_graph()
end

-- Whether all its current inputs are known.  Assumes satisfied.
function AbstractConstraint:inputs_known(mark)
  return not self:inputs_has_one(function(v)
    return not (v.mark == mark or v.stay or v.determined_by == nil)
  end)
end

-- Attempt to enforce the constraint; the constraint it overrides, or nil.
function AbstractConstraint:satisfy(mark, planner)
  self:choose_method(mark)
  if not self:is_satisfied() then
    if self.strength:same_as(REQUIRED_STRENGTH) then
      error("Could not satisfy a required constraint")
    end
    return nil
  end
  -- mark the inputs, for cycle detection in add_propagate
  self:inputs_do(function(input)
    input.mark = mark
  end)
  local out = self:get_output()
  local overridden = out.determined_by
  if overridden ~= nil then
    overridden:mark_unsatisfied()
  end
  out.determined_by = self
  if not planner:add_propagate(self, mark) then
    error("Cycle encountered")
  end
  out.mark = mark
  return overridden
end

-- UnaryConstraint: one possible output variable.
local UnaryConstraint = setmetatable({}, AbstractConstraint)
UnaryConstraint.__index = UnaryConstraint

function UnaryConstraint.init(cls, v, strength, planner)
  local c = setmetatable({strength = Strength.of(strength), output = v, satisfied = false}, cls)
  c:add_constraint(planner)
  return c
end

function UnaryConstraint:is_satisfied()
  return self.satisfied
end

function UnaryConstraint:add_to_graph()
  self.output:add_constraint(self)
  self.satisfied = false
end

function UnaryConstraint:remove_from_graph()
  if self.output ~= nil then
    self.output:remove_constraint(self)
  end
  self.satisfied = false
end

function UnaryConstraint:choose_method(mark)
  self.satisfied = self.output.mark ~= mark and self.strength:stronger(self.output.walk_strength)
end

function UnaryConstraint:execute()
end

function UnaryConstraint:inputs_do(_)
  -- no inputs
end

function UnaryConstraint:inputs_has_one(_)
  return false
end

function UnaryConstraint:mark_unsatisfied()
  self.satisfied = false
end

function UnaryConstraint:get_output()
  return self.output
end

function UnaryConstraint:recalculate()
  self.output.walk_strength = self.strength
  self.output.stay = not self:is_input()
  if self.output.stay then
    self:execute()    -- stay optimization
  end
end

-- EditConstraint: marks a variable that the client wants to change.
local EditConstraint = setmetatable({}, UnaryConstraint)
EditConstraint.__index = EditConstraint

function EditConstraint.new(v, strength, planner)
  return UnaryConstraint.init(EditConstraint, v, strength, planner)
end

function EditConstraint:is_input()
  return true
end

-- StayConstraint: a variable that should, with some strength, stay the same.
local StayConstraint = setmetatable({}, UnaryConstraint)
StayConstraint.__index = StayConstraint

function StayConstraint.new(v, strength, planner)
  return UnaryConstraint.init(StayConstraint, v, strength, planner)
end

-- BinaryConstraint: two possible output variables.
local BinaryConstraint = setmetatable({}, UnaryConstraint)
BinaryConstraint.__index = BinaryConstraint

function BinaryConstraint:is_satisfied()
  return self.direction ~= nil
end

function BinaryConstraint:add_to_graph()
  self.v1:add_constraint(self)
  self.v2:add_constraint(self)
  self.direction = nil
end

function BinaryConstraint:remove_from_graph()
  if self.v1 ~= nil then self.v1:remove_constraint(self) end
  if self.v2 ~= nil then self.v2:remove_constraint(self) end
  self.direction = nil
end

-- Decide whether the constraint can be satisfied and which way it flows.
function BinaryConstraint:choose_method(mark)
  if self.v1.mark == mark then
    if self.v2.mark ~= mark and self.strength:stronger(self.v2.walk_strength) then
      self.direction = FORWARD
    else
      self.direction = nil
    end
    return self.direction
  end
  if self.v2.mark == mark then
    if self.v1.mark ~= mark and self.strength:stronger(self.v1.walk_strength) then
      self.direction = BACKWARD
    else
      self.direction = nil
    end
    return self.direction
  end
  -- neither variable is marked: a choice
  if self.v1.walk_strength:weaker(self.v2.walk_strength) then
    if self.strength:stronger(self.v1.walk_strength) then
      self.direction = BACKWARD
    else
      self.direction = nil
    end
    return self.direction
  end
  if self.strength:stronger(self.v2.walk_strength) then
    self.direction = FORWARD
  else
    self.direction = nil
  end
  return self.direction
end

function BinaryConstraint:inputs_do(fn)
  if self.direction == FORWARD then fn(self.v1) else fn(self.v2) end
end

function BinaryConstraint:inputs_has_one(fn)
  if self.direction == FORWARD then return fn(self.v1) end
  return fn(self.v2)
end

function BinaryConstraint:mark_unsatisfied()
  self.direction = nil
end

function BinaryConstraint:get_output()
  if self.direction == FORWARD then return self.v2 end
  return self.v1
end

function BinaryConstraint:recalculate()
  local input, output = self.v1, self.v2
  if self.direction ~= FORWARD then
    input, output = self.v2, self.v1
  end
  output.walk_strength = self.strength:weakest(input.walk_strength)
  output.stay = input.stay
  if output.stay then
    self:execute()
  end
end

-- EqualityConstraint: v1 = v2.
local EqualityConstraint = setmetatable({}, BinaryConstraint)
EqualityConstraint.__index = EqualityConstraint

function EqualityConstraint.new(v1, v2, strength, planner)
  local c = setmetatable({strength = Strength.of(strength), v1 = v1, v2 = v2, direction = nil},
                         EqualityConstraint)
  c:add_constraint(planner)
  return c
end

function EqualityConstraint:execute()
  if self.direction == FORWARD then
    self.v2.value = self.v1.value
  else
    self.v1.value = self.v2.value
  end
end

-- ScaleConstraint: v2 = v1 * scale + offset.
local ScaleConstraint = setmetatable({}, BinaryConstraint)
ScaleConstraint.__index = ScaleConstraint

function ScaleConstraint.new(src, scale, offset, dest, strength, planner)
  local c = setmetatable({strength = Strength.of(strength), v1 = src, v2 = dest, direction = nil,
                          scale = scale, offset = offset}, ScaleConstraint)
  c:add_constraint(planner)
  return c
end

function ScaleConstraint:add_to_graph()
  self.v1:add_constraint(self)
  self.v2:add_constraint(self)
  self.scale:add_constraint(self)
  self.offset:add_constraint(self)
  self.direction = nil
end

function ScaleConstraint:remove_from_graph()
  if self.v1 ~= nil then self.v1:remove_constraint(self) end
  if self.v2 ~= nil then self.v2:remove_constraint(self) end
  if self.scale ~= nil then self.scale:remove_constraint(self) end
  if self.offset ~= nil then self.offset:remove_constraint(self) end
  self.direction = nil
end

function ScaleConstraint:execute()
  if self.direction == FORWARD then
    self.v2.value = self.v1.value * self.scale.value + self.offset.value
  else
    self.v1.value = (self.v2.value - self.offset.value) // self.scale.value
  end
end

function ScaleConstraint:inputs_do(fn)
  if self.direction == FORWARD then
    fn(self.v1)
    fn(self.scale)
    fn(self.offset)
  else
    fn(self.v2)
    fn(self.scale)
    fn(self.offset)
  end
end

function ScaleConstraint:recalculate()
  local input, output = self.v1, self.v2
  if self.direction ~= FORWARD then
    output, input = self.v1, self.v2
  end
  output.walk_strength = self.strength:weakest(input.walk_strength)
  output.stay = input.stay and self.scale.stay and self.offset.stay
  if output.stay then
    self:execute()    -- stay optimization
  end
end

-- ------------------------------------------------------------ plans

local Plan = setmetatable({}, Vector)
Plan.__index = Plan

function Plan.new()
  return setmetatable(Vector.new(15), Plan)
end

function Plan:execute()
  self:for_each(function(c)
    c:execute()
  end)
end

-- ------------------------------------------------------------ the planner

local Planner = {}
Planner.__index = Planner

function Planner.new()
  return setmetatable({current_mark = 1}, Planner)
end

-- Attempt to satisfy c and incrementally update the dataflow graph.
function Planner:incremental_add(c)
  local mark = self:new_mark()
  local overridden = c:satisfy(mark, self)
  while overridden ~= nil do
    overridden = overridden:satisfy(mark, self)
  end
end

-- Retract c and resatisfy what it leaves unsatisfied, strongest first.
function Planner:incremental_remove(c)
  local out = c:get_output()
  c:mark_unsatisfied()
  c:remove_from_graph()
  local unsatisfied = self:remove_propagate_from(out)
  unsatisfied:for_each(function(u)
    self:incremental_add(u)
  end)
end

function Planner:extract_plan_from_constraints(constraints)
  local sources = Vector.new()
  constraints:for_each(function(c)
    if c:is_input() and c:is_satisfied() then
      sources:append(c)
    end
  end)
  return self:make_plan(sources)
end

function Planner:make_plan(sources)
  local mark = self:new_mark()
  local plan = Plan.new()
  local todo = sources
  while not todo:is_empty() do
    local c = todo:remove_first()
    if c:get_output().mark ~= mark and c:inputs_known(mark) then
      -- not in the plan yet, and eligible
      plan:append(c)
      c:get_output().mark = mark
      self:add_constraints_consuming_to(c:get_output(), todo)
    end
  end
  return plan
end

function Planner:propagate_from(v)
  local todo = Vector.new()
  self:add_constraints_consuming_to(v, todo)
  while not todo:is_empty() do
    local c = todo:remove_first()
    c:execute()
    self:add_constraints_consuming_to(c:get_output(), todo)
  end
end

function Planner:add_constraints_consuming_to(v, coll)
  local determining_c = v.determined_by
  v.constraints:for_each(function(c)
    if c ~= determining_c and c:is_satisfied() then
      coll:append(c)
    end
  end)
end

function Planner:add_propagate(c, mark)
  local todo = Vector.with(c)
  while not todo:is_empty() do
    local d = todo:remove_first()
    if d:get_output().mark == mark then
      self:incremental_remove(c)
      return false
    end
    d:recalculate()
    self:add_constraints_consuming_to(d:get_output(), todo)
  end
  return true
end

function Planner:change(v, new_value)
  local edit_c = EditConstraint.new(v, PREFERRED, self)
  local plan = self:extract_plan_from_constraints(Vector.with(edit_c))
  for _ = 1, 10 do
    v.value = new_value
    plan:execute()
  end
  edit_c:destroy_constraint(self)
end

function Planner:constraints_consuming(v, fn)
  local determining_c = v.determined_by
  v.constraints:for_each(function(c)
    if c ~= determining_c and c:is_satisfied() then
      fn(c)
    end
  end)
end

function Planner:new_mark()
  self.current_mark = self.current_mark + 1
  return self.current_mark
end

function Planner:remove_propagate_from(out)
  local unsatisfied = Vector.new()
  out.determined_by = nil
  out.walk_strength = ABSOLUTE_WEAKEST_STRENGTH
  out.stay = true
  local todo = Vector.with(out)
  while not todo:is_empty() do
    local v = todo:remove_first()
    v.constraints:for_each(function(c)
      if not c:is_satisfied() then
        unsatisfied:append(c)
      end
    end)
    self:constraints_consuming(v, function(c)
      c:recalculate()
      todo:append(c:get_output())
    end)
  end
  unsatisfied:sort(function(c1, c2)
    if c1.strength:stronger(c2.strength) then return -1 end
    return 1
  end)
  return unsatisfied
end

-- ------------------------------------------------------------ the tests

-- The chain test; the planner's last mark, for the checksum.
local function chain_test(n)
  local planner = Planner.new()
  local vars = {}
  for i = 1, n + 1 do
    vars[i] = Variable.new()
  end
  -- build the chain
  for i = 1, n do
    EqualityConstraint.new(vars[i], vars[i + 1], REQUIRED, planner)
  end
  StayConstraint.new(vars[n + 1], STRONG_DEFAULT, planner)
  local edit_c = EditConstraint.new(vars[1], PREFERRED, planner)
  local plan = planner:extract_plan_from_constraints(Vector.with(edit_c))
  for i = 0, 99 do
    vars[1].value = i
    plan:execute()
    if vars[n + 1].value ~= i then
      error("Chain test failed!")
    end
  end
  edit_c:destroy_constraint(planner)
  return planner.current_mark
end

-- The projection test; the planner's last mark, for the checksum.
local function projection_test(n)
  local planner = Planner.new()
  local dests = Vector.new()
  local scale = Variable.new(10)
  local offset = Variable.new(1000)
  local src, dst = nil, nil
  for i = 1, n do
    src = Variable.new(i)
    dst = Variable.new(i)
    dests:append(dst)
    StayConstraint.new(src, DEFAULT, planner)
    ScaleConstraint.new(src, scale, offset, dst, REQUIRED, planner)
  end
  planner:change(src, 17)
  if dst.value ~= 1170 then error("Projection test 1 failed!") end
  planner:change(dst, 1050)
  if src.value ~= 5 then error("Projection test 2 failed!") end
  planner:change(scale, 5)
  for i = 1, n - 1 do
    if dests:at(i).value ~= i * 5 + 1000 then error("Projection test 3 failed!") end
  end
  planner:change(offset, 2000)
  for i = 1, n - 1 do
    if dests:at(i).value ~= i * 5 + 2000 then error("Projection test 4 failed!") end
  end
  return planner.current_mark
end

local bench = {name = "DeltaBlue"}

-- The suite's DeltaBlue overrides the inner loop: both tests of size inner,
-- which raise on a wrong answer.
function bench:inner_benchmark(inner)
  return {chain_test(inner), projection_test(inner)}
end

function bench:verify_inner(_, _)
  return true
end

function bench:checksum(result)
  return result[1] .. "/" .. result[2]
end

awfy.run(bench, arg)
