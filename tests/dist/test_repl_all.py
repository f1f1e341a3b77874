#!/usr/bin/python3
"""%%all cells, %all EXPR and keyword dist.push through the REPL (piped mode).
Prints PASS:/FAIL: lines; exit 1 on failure."""
import os, subprocess, sys

NABLA = os.environ.get("NABLA", "build/nabla")
failed = 0

def check(name, ok, why=""):
    global failed
    print(f"PASS: {name}" if ok else f"FAIL: {name}: {why}", flush=True)
    failed += not ok

def repl(src):
    p = subprocess.run([NABLA], input=src, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, NO_COLOR="1"))
    return p.returncode, p.stdout, p.stderr

src = """import dist
dist.start(3)
%%all
x = dist.rank() * 10
print("hello", dist.rank())

%all x + 1
dist.push(y=5, name="s")
%all [y, name]
%%all
z = all_reduce(tensor([dist.rank() + 1.0]))

%all z.item()
dist.stop()
"""
rc, out, err = repl(src)
lines = out.splitlines()
check("exit status 0", rc == 0, f"rc={rc} stderr={err[-300:]}")
check("cell output prefixed by rank", all(f"[rank {r}] hello {r}" in lines for r in range(3)), out)
check("%all shows one value per rank", "[1, 11, 21]" in lines, out)
check("dist.push with keywords", '[[5, "s"], [5, "s"], [5, "s"]]' in lines, out)
check("collective inside a %%all cell", "[6.0, 6.0, 6.0]" in lines, out)

rc, out, err = repl("import dist\ndist.start(2)\n%%all\nerror(\"boom {dist.rank()}\")\n\nprint(\"still here\")\ndist.stop()\n")
check("an error in a cell is reported with its rank", "boom" in err and "rank" in err, err[-400:])
check("the session continues after a failing cell", "still here" in out, out)
check("exit status 1 after an error", rc == 1, f"rc={rc}")

rc, out, err = repl("%all 1 + 1\n")
check("%all without workers is a clear error", rc == 1 and "dist" in err, err)
sys.exit(1 if failed else 0)
