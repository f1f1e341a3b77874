"""awfy.py — the harness of the CPython versions of the Are We Fast Yet
benchmarks here (README.md in this folder has the convention all three
languages follow), and the suite's shared Random.  A benchmark file ends with
    if __name__ == "__main__": awfy.run(Bench(), sys.argv)
where Bench has name, benchmark, verify_result, checksum (or inner_benchmark
and verify_inner)."""
import sys


class Random:
    """The suite's deterministic pseudo-random generator (som/random.py)."""

    def __init__(self):
        self._seed = 74755

    def next(self):
        self._seed = ((self._seed * 1309) + 13849) & 65535
        return self._seed


def _count_arg(args, i, what):
    if len(args) <= i:
        return 1
    try:
        n = int(args[i])
    except ValueError:
        n = -1
    if n < 0:
        sys.exit(f"{what} must be a non-negative integer, got '{args[i]}'")
    return n


def run(bench, args):
    """Runs bench as the suite's harness does (see awfy.nbl) and prints the report."""
    iterations = _count_arg(args, 1, "ITERATIONS")
    inner = _count_arg(args, 2, "INNER")
    ok, result = True, None
    for _ in range(iterations):
        if hasattr(bench, "inner_benchmark"):
            result = bench.inner_benchmark(inner)
            ok = bench.verify_inner(result, inner)
        else:
            for _ in range(inner):
                result = bench.benchmark()
                if not bench.verify_result(result):
                    ok = False
                    break
        if not ok:
            break
    c = bench.checksum(result)
    if isinstance(c, float):
        if c != int(c):
            sys.exit(f"{bench.name}: checksum {c} is not an integer")
        c = int(c)
    print(f"{bench.name}: iterations={iterations} inner={inner} "
          f"verified={'true' if ok else 'false'} checksum={c}")
    if not ok:
        sys.exit(1)
