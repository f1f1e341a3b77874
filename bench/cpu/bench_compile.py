#!/usr/bin/python3
"""compile(f) on the CPU (issue 28): the char-GPT (d 128, 4 layers, T 64,
batch 16, V 96, bf16 autocast) and 3-layer MLP (784-512-512-10, batch 128,
f32) training steps of bench/cuda/compile.nbl, eager and as compile(step), on
the CPU.  There compile has no graphs: it runs f eagerly after its signature
walk (lang/lib/lcompile.c), so compiled/eager measures that walk's overhead
(the elementwise fusion of tensor/tfuse.c is the same in both).  The script
runs ROUNDS times; the table keeps each variant's best median step time
(the machine is shared: the best is the least disturbed).
    NABLA=build/nabla /usr/bin/python3 bench/cpu/bench_compile.py
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
NABLA = os.environ.get("NABLA") or os.path.join(ROOT, "build", "nabla")
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 3)
STEPS = os.environ.get("COMPILE_STEPS", "8")


def main():
    best = {}
    env = dict(os.environ, COMPILE_DEVICE="cpu", COMPILE_MODELS="char_gpt,mlp3", COMPILE_STEPS=STEPS,
               NABLA_STDLIB=os.path.join(ROOT, "stdlib"))
    for _ in range(ROUNDS):
        p = subprocess.run([NABLA, os.path.join(ROOT, "bench", "cuda", "compile.nbl")], capture_output=True, text=True, env=env)
        if p.returncode:
            print(p.stderr[-800:])
            return 1
        for m in re.finditer(r"bench: compile_(\w+?)_(eager|compiled)_ms ([\d.]+) ms", p.stdout):
            k = (m.group(1), m.group(2))
            best[k] = min(best.get(k, float("inf")), float(m.group(3)))
    print("| model | eager ms | compiled ms | compiled/eager |")
    print("|---|---|---|---|")
    for name in ("char_gpt", "mlp3"):
        e, c = best[(name, "eager")], best[(name, "compiled")]
        print(f"| {name} | {e:.1f} | {c:.1f} | {c / e:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
