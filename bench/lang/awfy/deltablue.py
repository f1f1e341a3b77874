"""deltablue.py — Are We Fast Yet's DeltaBlue for CPython (the same program
as deltablue.nbl / deltablue.lua; README.md: the harness): the incremental
dataflow constraint solver.  Collections are the suite's own (som.py).  The
inner count is the problem size."""
import sys

import awfy
from som import Vector, identity_dictionary

# ------------------------------------------------------------ strengths


class Sym:
    def __init__(self, hash_):
        self._hash = hash_

    def custom_hash(self):
        return self._hash


ABSOLUTE_STRONGEST = Sym(0)
REQUIRED = Sym(1)
STRONG_PREFERRED = Sym(2)
PREFERRED = Sym(3)
STRONG_DEFAULT = Sym(4)
DEFAULT = Sym(5)
WEAK_DEFAULT = Sym(6)
ABSOLUTE_WEAKEST = Sym(7)


def create_strength_table():
    table = identity_dictionary()
    table.at_put(ABSOLUTE_STRONGEST, -10000)
    table.at_put(REQUIRED, -800)
    table.at_put(STRONG_PREFERRED, -600)
    table.at_put(PREFERRED, -400)
    table.at_put(STRONG_DEFAULT, -200)
    table.at_put(DEFAULT, 0)
    table.at_put(WEAK_DEFAULT, 500)
    table.at_put(ABSOLUTE_WEAKEST, 10000)
    return table


STRENGTH_TABLE = create_strength_table()


class Strength:
    def __init__(self, strength_sym):
        self.symbolic_value = strength_sym
        self.arithmetic_value = STRENGTH_TABLE.at(strength_sym)

    def same_as(self, s):
        return self.arithmetic_value == s.arithmetic_value

    def stronger(self, s):
        return self.arithmetic_value < s.arithmetic_value

    def weaker(self, s):
        return self.arithmetic_value > s.arithmetic_value

    def strongest(self, s):
        return s if s.stronger(self) else self

    def weakest(self, s):
        return s if s.weaker(self) else self

    @staticmethod
    def of(sym):
        return STRENGTH_CONSTANTS.at(sym)


def create_strength_constants():
    constants = identity_dictionary()
    STRENGTH_TABLE.keys().for_each(lambda key: constants.at_put(key, Strength(key)))
    return constants


STRENGTH_CONSTANTS = create_strength_constants()

ABSOLUTE_WEAKEST_STRENGTH = Strength.of(ABSOLUTE_WEAKEST)
REQUIRED_STRENGTH = Strength.of(REQUIRED)

# A binary constraint's direction; None while it is not satisfied.
FORWARD = 1
BACKWARD = 2

# ------------------------------------------------------------ variables


class Variable:
    def __init__(self, value=0):
        self.value = value
        self.constraints = Vector(2)  # the constraints that reference it
        self.determined_by = None  # the constraint that determines its value
        self.mark = 0  # the planner's mark
        self.walk_strength = ABSOLUTE_WEAKEST_STRENGTH
        self.stay = True  # a planning-time constant

    def add_constraint(self, c):
        self.constraints.append(c)

    def remove_constraint(self, c):
        self.constraints.remove(c)
        if self.determined_by is c:
            self.determined_by = None


# ------------------------------------------------------------ constraints


class AbstractConstraint:
    def __init__(self, strength):
        self.strength = Strength.of(strength)

    def is_input(self):
        return False

    def add_constraint(self, planner):
        """Activate the constraint and attempt to satisfy it."""
        self.add_to_graph()
        planner.incremental_add(self)

    def destroy_constraint(self, planner):
        """Deactivate it, remove it from the graph and destroy it."""
        if self.is_satisfied():
            planner.incremental_remove(self)
        self.remove_from_graph()

    def inputs_known(self, mark):
        """Whether all its current inputs are known.  Assumes satisfied."""
        return not self.inputs_has_one(
            lambda v: not (v.mark == mark or v.stay or v.determined_by is None))

    def satisfy(self, mark, planner):
        """Attempt to enforce the constraint; the constraint it overrides, or None."""
        self.choose_method(mark)
        if not self.is_satisfied():
            if self.strength.same_as(REQUIRED_STRENGTH):
                raise RuntimeError("Could not satisfy a required constraint")
            return None

        # mark the inputs, for cycle detection in add_propagate
        def each(input_):
            input_.mark = mark

        self.inputs_do(each)
        out = self.get_output()
        overridden = out.determined_by
        if overridden is not None:
            overridden.mark_unsatisfied()
        out.determined_by = self
        if not planner.add_propagate(self, mark):
            raise RuntimeError("Cycle encountered")
        out.mark = mark
        return overridden


class UnaryConstraint(AbstractConstraint):
    """One possible output variable."""

    def __init__(self, v, strength, planner):
        super().__init__(strength)
        self.output = v
        self.satisfied = False
        self.add_constraint(planner)

    def is_satisfied(self):
        return self.satisfied

    def add_to_graph(self):
        self.output.add_constraint(self)
        self.satisfied = False

    def remove_from_graph(self):
        if self.output is not None:
            self.output.remove_constraint(self)
        self.satisfied = False

    def choose_method(self, mark):
        self.satisfied = self.output.mark != mark and self.strength.stronger(self.output.walk_strength)

    def execute(self):
        pass

    def inputs_do(self, fn):
        pass  # no inputs

    def inputs_has_one(self, fn):
        return False

    def mark_unsatisfied(self):
        self.satisfied = False

    def get_output(self):
        return self.output

    def recalculate(self):
        self.output.walk_strength = self.strength
        self.output.stay = not self.is_input()
        if self.output.stay:
            self.execute()  # stay optimization


class EditConstraint(UnaryConstraint):
    """Marks a variable that the client wants to change."""

    def is_input(self):
        return True


class StayConstraint(UnaryConstraint):
    """A variable that should, with some strength, stay the same."""


class BinaryConstraint(AbstractConstraint):
    """Two possible output variables."""

    def __init__(self, v1, v2, strength):
        super().__init__(strength)
        self.v1 = v1
        self.v2 = v2
        self.direction = None

    def is_satisfied(self):
        return self.direction is not None

    def add_to_graph(self):
        self.v1.add_constraint(self)
        self.v2.add_constraint(self)
        self.direction = None

    def remove_from_graph(self):
        if self.v1 is not None:
            self.v1.remove_constraint(self)
        if self.v2 is not None:
            self.v2.remove_constraint(self)
        self.direction = None

    def choose_method(self, mark):
        """Whether it can be satisfied and which way it flows."""
        if self.v1.mark == mark:
            if self.v2.mark != mark and self.strength.stronger(self.v2.walk_strength):
                self.direction = FORWARD
            else:
                self.direction = None
            return self.direction
        if self.v2.mark == mark:
            if self.v1.mark != mark and self.strength.stronger(self.v1.walk_strength):
                self.direction = BACKWARD
            else:
                self.direction = None
            return self.direction
        # neither variable is marked: a choice
        if self.v1.walk_strength.weaker(self.v2.walk_strength):
            if self.strength.stronger(self.v1.walk_strength):
                self.direction = BACKWARD
            else:
                self.direction = None
            return self.direction
        if self.strength.stronger(self.v2.walk_strength):
            self.direction = FORWARD
        else:
            self.direction = None
        return self.direction

    def inputs_do(self, fn):
        if self.direction == FORWARD:
            fn(self.v1)
        else:
            fn(self.v2)

    def inputs_has_one(self, fn):
        if self.direction == FORWARD:
            return fn(self.v1)
        return fn(self.v2)

    def mark_unsatisfied(self):
        self.direction = None

    def get_output(self):
        return self.v2 if self.direction == FORWARD else self.v1

    def recalculate(self):
        input_, output = self.v1, self.v2
        if self.direction != FORWARD:
            input_, output = self.v2, self.v1
        output.walk_strength = self.strength.weakest(input_.walk_strength)
        output.stay = input_.stay
        if output.stay:
            self.execute()


class EqualityConstraint(BinaryConstraint):
    """v1 = v2."""

    def __init__(self, v1, v2, strength, planner):
        super().__init__(v1, v2, strength)
        self.add_constraint(planner)

    def execute(self):
        if self.direction == FORWARD:
            self.v2.value = self.v1.value
        else:
            self.v1.value = self.v2.value


class ScaleConstraint(BinaryConstraint):
    """v2 = v1 * scale + offset; scale and offset are read-only inputs."""

    def __init__(self, src, scale, offset, dest, strength, planner):
        super().__init__(src, dest, strength)
        self.scale = scale
        self.offset = offset
        self.add_constraint(planner)

    def add_to_graph(self):
        self.v1.add_constraint(self)
        self.v2.add_constraint(self)
        self.scale.add_constraint(self)
        self.offset.add_constraint(self)
        self.direction = None

    def remove_from_graph(self):
        if self.v1 is not None:
            self.v1.remove_constraint(self)
        if self.v2 is not None:
            self.v2.remove_constraint(self)
        if self.scale is not None:
            self.scale.remove_constraint(self)
        if self.offset is not None:
            self.offset.remove_constraint(self)
        self.direction = None

    def execute(self):
        if self.direction == FORWARD:
            self.v2.value = self.v1.value * self.scale.value + self.offset.value
        else:
            self.v1.value = (self.v2.value - self.offset.value) // self.scale.value

    def inputs_do(self, fn):
        if self.direction == FORWARD:
            fn(self.v1)
            fn(self.scale)
            fn(self.offset)
        else:
            fn(self.v2)
            fn(self.scale)
            fn(self.offset)

    def recalculate(self):
        input_, output = self.v1, self.v2
        if self.direction != FORWARD:
            output, input_ = self.v1, self.v2
        output.walk_strength = self.strength.weakest(input_.walk_strength)
        output.stay = input_.stay and self.scale.stay and self.offset.stay
        if output.stay:
            self.execute()  # stay optimization


# ------------------------------------------------------------ plans


class Plan(Vector):
    def __init__(self):
        super().__init__(15)

    def execute(self):
        self.for_each(lambda c: c.execute())


# ------------------------------------------------------------ the planner


class Planner:
    def __init__(self):
        self.current_mark = 1

    def incremental_add(self, c):
        """Attempt to satisfy c and incrementally update the dataflow graph."""
        mark = self.new_mark()
        overridden = c.satisfy(mark, self)
        while overridden is not None:
            overridden = overridden.satisfy(mark, self)

    def incremental_remove(self, c):
        """Retract c and resatisfy what it leaves unsatisfied, strongest first."""
        out = c.get_output()
        c.mark_unsatisfied()
        c.remove_from_graph()
        unsatisfied = self.remove_propagate_from(out)
        unsatisfied.for_each(self.incremental_add)

    def extract_plan_from_constraints(self, constraints):
        sources = Vector()

        def each(c):
            if c.is_input() and c.is_satisfied():
                sources.append(c)

        constraints.for_each(each)
        return self.make_plan(sources)

    def make_plan(self, sources):
        mark = self.new_mark()
        plan = Plan()
        todo = sources
        while not todo.is_empty():
            c = todo.remove_first()
            if c.get_output().mark != mark and c.inputs_known(mark):
                # not in the plan yet, and eligible
                plan.append(c)
                c.get_output().mark = mark
                self.add_constraints_consuming_to(c.get_output(), todo)
        return plan

    def propagate_from(self, v):
        todo = Vector()
        self.add_constraints_consuming_to(v, todo)
        while not todo.is_empty():
            c = todo.remove_first()
            c.execute()
            self.add_constraints_consuming_to(c.get_output(), todo)

    @staticmethod
    def add_constraints_consuming_to(v, coll):
        determining_c = v.determined_by

        def each(c):
            if c is not determining_c and c.is_satisfied():
                coll.append(c)

        v.constraints.for_each(each)

    def add_propagate(self, c, mark):
        todo = Vector.with_(c)
        while not todo.is_empty():
            d = todo.remove_first()
            if d.get_output().mark == mark:
                self.incremental_remove(c)
                return False
            d.recalculate()
            self.add_constraints_consuming_to(d.get_output(), todo)
        return True

    def change(self, v, new_value):
        edit_c = EditConstraint(v, PREFERRED, self)
        plan = self.extract_plan_from_constraints(Vector.with_(edit_c))
        for _ in range(10):
            v.value = new_value
            plan.execute()
        edit_c.destroy_constraint(self)

    @staticmethod
    def constraints_consuming(v, fn):
        determining_c = v.determined_by

        def each(c):
            if c is not determining_c and c.is_satisfied():
                fn(c)

        v.constraints.for_each(each)

    def new_mark(self):
        self.current_mark += 1
        return self.current_mark

    def remove_propagate_from(self, out):
        unsatisfied = Vector()
        out.determined_by = None
        out.walk_strength = ABSOLUTE_WEAKEST_STRENGTH
        out.stay = True
        todo = Vector.with_(out)
        while not todo.is_empty():
            v = todo.remove_first()

            def each(c):
                if not c.is_satisfied():
                    unsatisfied.append(c)

            v.constraints.for_each(each)

            def recalc(c):
                c.recalculate()
                todo.append(c.get_output())

            self.constraints_consuming(v, recalc)
        unsatisfied.sort(lambda c1, c2: -1 if c1.strength.stronger(c2.strength) else 1)
        return unsatisfied


# ------------------------------------------------------------ the tests


def chain_test(n):
    """The chain test; the planner's last mark, for the checksum."""
    planner = Planner()
    variables = [Variable() for _ in range(n + 1)]
    # build the chain
    for i in range(n):
        EqualityConstraint(variables[i], variables[i + 1], REQUIRED, planner)
    StayConstraint(variables[n], STRONG_DEFAULT, planner)
    edit_c = EditConstraint(variables[0], PREFERRED, planner)
    plan = planner.extract_plan_from_constraints(Vector.with_(edit_c))
    for i in range(100):
        variables[0].value = i
        plan.execute()
        if variables[n].value != i:
            raise RuntimeError("Chain test failed!")
    edit_c.destroy_constraint(planner)
    return planner.current_mark


def projection_test(n):
    """The projection test; the planner's last mark, for the checksum."""
    planner = Planner()
    dests = Vector()
    scale = Variable(10)
    offset = Variable(1000)
    src = dst = None
    for i in range(1, n + 1):
        src = Variable(i)
        dst = Variable(i)
        dests.append(dst)
        StayConstraint(src, DEFAULT, planner)
        ScaleConstraint(src, scale, offset, dst, REQUIRED, planner)
    planner.change(src, 17)
    if dst.value != 1170:
        raise RuntimeError("Projection test 1 failed!")
    planner.change(dst, 1050)
    if src.value != 5:
        raise RuntimeError("Projection test 2 failed!")
    planner.change(scale, 5)
    for i in range(n - 1):
        if dests.at(i).value != (i + 1) * 5 + 1000:
            raise RuntimeError("Projection test 3 failed!")
    planner.change(offset, 2000)
    for i in range(n - 1):
        if dests.at(i).value != (i + 1) * 5 + 2000:
            raise RuntimeError("Projection test 4 failed!")
    return planner.current_mark


class DeltaBlue:
    name = "DeltaBlue"

    def inner_benchmark(self, inner):
        """The suite's DeltaBlue overrides the inner loop: both tests of size
        inner, which raise on a wrong answer."""
        return chain_test(inner), projection_test(inner)

    def verify_inner(self, _result, _inner):
        return True

    def checksum(self, result):
        return f"{result[0]}/{result[1]}"


if __name__ == "__main__":
    awfy.run(DeltaBlue(), sys.argv)
