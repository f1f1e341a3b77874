#!/usr/bin/python3
"""test_emu_gpt2_budget.py — the GPU training step's budget (issue 26), on the
emulated device, counted by cuda.stats() (the same counts as on a GPU).

bench/cuda/gpt2.nbl runs at a small size that takes GPT-2 small's kernel
paths (4C >= 1024, bf16 autocast, tied embedding, AdamW) with GPT2_STATS=1,
which prints, per step, the counters of value_and_grad + opt.step and then
those of the loss.item() after them.  After the two warm-up steps, per step:
  * syncs = 0 inside the step, and the loss read is the step's only host
    wait (read_syncs <= 1);
  * memcpy_h2d = 0; memcpy_d2h <= 1 (the loss);
  * mallocs = 0 (the caching allocator serves every request);
  * GPU operations (launches + GEMMs + device copies + memsets) per layer,
    measured as the difference between a GPT2_LAYERS=2 and a GPT2_LAYERS=1
    run (what one more transformer block costs), at most OPS_PER_LAYER;
  * the losses equal the CPU run's (same script, GPT2_DEVICE=cpu).
A threshold not met prints FAIL with the measured number.  An INFO line per
run lists the per-step counts and the per-layer operations by op name.

OPS_PER_LAYER is today's count (27; 106 before issue 26's kernels, 76 before
attention_qkv, 34 before the bf16-output norms, 28 before the residual
gradient's cast went), held so that nothing adds work to a layer unnoticed;
issue 26 asks for 40.  What the 27 are: 12 GEMMs
(linear 4 forward, linear_backward 8: dX and dW, each counted once),
attention 1 + 3, the two norms 2 + 6 (add_layer_norm's kernels: ln1 is the
same kernel without the add; each backward one row kernel + dweight/dbias
partial sums + one pass), gelu 1 + 1 (unary_grad) and the residual add (f32 +
bf16 in one kernel).  The norms write bf16 under autocast (no cast before the
qkv and fc linears, none of their gradients after), ln1's backward adds the
residual gradient in its own kernel (no accumulation), add_layer_norm's
backward writes the attention projection's bf16 gradient in the same kernel
as the f32 one, and the next norm's backward (ln1 of the next block, or lnf)
writes the MLP projection's bf16 gradient likewise (the residual add's
backward takes it: nt_node_offer_half_grad).  No cast, fill or layout copy
is left in a block.

OPS_WHOLE_STEP holds the 2-layer step's total (85 = 2 x 27 + 31 outside the
blocks: embeddings, the final norm, the logits GEMM, the classifier, AdamW
and 5 copy kernels; 89 before the final norm wrote bf16 under autocast, which
took the cast before the logits GEMM and the one of its gradient, and before
the residual gradient's cast went).

Also a smoke run of bench/cuda/suspects.nbl at a tiny size: every kernel it
times runs and prints its `bench:` line."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emuutil import ENV, NABLA, ROOT, out, run  # noqa: E402
import emuutil  # noqa: E402

SIZE = {"GPT2_D": "256", "GPT2_HEADS": "4", "GPT2_T": "64", "GPT2_B": "2", "GPT2_V": "512", "GPT2_STEPS": "1",
        "GPT2_AMP": "bf16", "GPT2_STATS": "1"}
WARMUP = 2
OPS_PER_LAYER = 27   # issue 26's target was 40 (see above)
OPS_WHOLE_STEP = 85  # the 2-layer step (see above)
FIELDS = ["launches", "gemms", "memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memsets", "syncs", "mallocs", "frees",
          "alloc_requests"]
TIMEOUT = 1200 if emuutil.ASAN else 600


def gpt2(layers, device):
    env = dict(ENV, GPT2_LAYERS=str(layers), GPT2_DEVICE=device, **SIZE)
    rc, so, se = run([NABLA, os.path.join(ROOT, "bench", "cuda", "gpt2.nbl")], TIMEOUT, env=env)
    if rc != 0:
        return None, f"rc={rc}: {se[-1200:]}"
    steps = []
    for line in so.splitlines():
        if not line.startswith("stats: "):
            continue
        rec = {}
        head, _, by_op = line[len("stats: "):].partition(" by_op=")
        for kv in head.split():
            k, _, v = kv.partition("=")
            rec[k] = float(v) if k == "loss" else int(v)
        rec["by_op"] = {}
        for item in filter(None, by_op.split(",")):
            name, _, n = item.rpartition(":")
            rec["by_op"][name] = int(n)
        steps.append(rec)
    if len(steps) != int(SIZE["GPT2_STEPS"]) + WARMUP:
        return None, f"expected {int(SIZE['GPT2_STEPS']) + WARMUP} stats lines, got {len(steps)}: {so[-800:]}"
    return steps, ""


def gpu_ops(rec):
    return rec["launches"] + rec["gemms"] + rec["memcpy_d2d"] + rec["memsets"]


def check(name, ok, measured):
    if ok:
        out("PASS", name)
    else:
        out("FAIL", name, measured)


def main():
    two, why = gpt2(2, "cuda")
    if two is None:
        out("FAIL", "gpt2_budget.runs", why)
        return
    one, why = gpt2(1, "cuda")
    if one is None:
        out("FAIL", "gpt2_budget.runs_one_layer", why)
        return
    cpu, why = gpt2(2, "cpu")
    if cpu is None:
        out("FAIL", "gpt2_budget.runs_cpu", why)
        return
    timed = two[WARMUP:]
    for rec in two:
        print("INFO: gpt2_budget step %d: %s" % (rec["step"], " ".join(f"{k}={rec[k]}" for k in FIELDS + ["read_syncs", "read_d2h"])))
    worst = lambda k: max(r[k] for r in timed)  # noqa: E731
    check("gpt2_budget.syncs_in_step", worst("syncs") == 0, f"syncs per step inside value_and_grad + opt.step: {worst('syncs')} (want 0)")
    check("gpt2_budget.loss_read_only_wait", worst("read_syncs") <= 1, f"host waits reading the loss: {worst('read_syncs')} (want <= 1)")
    check("gpt2_budget.memcpy_h2d", worst("memcpy_h2d") == 0, f"host-to-device copies per step: {worst('memcpy_h2d')} (want 0)")
    d2h = max(r["memcpy_d2h"] + r["read_d2h"] for r in timed)
    check("gpt2_budget.memcpy_d2h", d2h <= 1, f"device-to-host copies per step with the loss: {d2h} (want <= 1)")
    check("gpt2_budget.mallocs_after_warmup", worst("mallocs") == 0, f"cudaMalloc per step after warm-up: {worst('mallocs')} (want 0)")
    # one more block's GPU operations, by op name
    per_layer = gpu_ops(two[-1]) - gpu_ops(one[-1])
    names = sorted(set(two[-1]["by_op"]) | set(one[-1]["by_op"]))
    diff = {n: two[-1]["by_op"].get(n, 0) - one[-1]["by_op"].get(n, 0) for n in names}
    diff = {n: d for n, d in sorted(diff.items(), key=lambda kv: -kv[1]) if d}
    print("INFO: gpt2_budget per layer: %d GPU operations: %s" % (per_layer, " ".join(f"{n}={d}" for n, d in diff.items())))
    print("INFO: gpt2_budget whole step (2 layers): %d GPU operations: %s" % (
        gpu_ops(two[-1]), " ".join(f"{n}={d}" for n, d in sorted(two[-1]["by_op"].items(), key=lambda kv: -kv[1]))))
    check("gpt2_budget.ops_per_layer", per_layer <= OPS_PER_LAYER,
          f"GPU operations per layer: {per_layer} (want <= {OPS_PER_LAYER}): " + " ".join(f"{n}={d}" for n, d in diff.items()))
    check("gpt2_budget.ops_whole_step", gpu_ops(two[-1]) <= OPS_WHOLE_STEP,
          f"GPU operations in the 2-layer step: {gpu_ops(two[-1])} (want <= {OPS_WHOLE_STEP}): " +
          " ".join(f"{n}={d}" for n, d in sorted(two[-1]["by_op"].items(), key=lambda kv: -kv[1])))
    # the same losses as the CPU (bf16 autocast on both: f32 accumulation
    # orders differ: 1e-3 relative; measured ~3e-5)
    print("INFO: gpt2_budget losses cuda %s cpu %s" % ([a["loss"] for a in two], [b["loss"] for b in cpu]))
    bad = [(a["step"], a["loss"], b["loss"]) for a, b in zip(two, cpu) if abs(a["loss"] - b["loss"]) > 1e-3 * abs(b["loss"])]
    check("gpt2_budget.losses_equal_cpu", not bad and len(cpu) == len(two),
          f"(step, cuda loss, cpu loss) beyond 0.1%: {bad}")
    if all(a["loss"] == two[0]["loss"] for a in two):
        out("FAIL", "gpt2_budget.loss_moves", f"the loss did not change over {len(two)} steps: {two[0]['loss']}")
    else:
        out("PASS", "gpt2_budget.loss_moves")
    suspects()


def suspects():
    env = dict(ENV, SUSPECTS_SMALL="1")
    rc, so, se = run([NABLA, os.path.join(ROOT, "bench", "cuda", "suspects.nbl")], TIMEOUT, env=env)
    lines = [l for l in so.splitlines() if l.startswith("bench: ")]
    bad = [l for l in lines if not re.match(r"bench: \S+ [0-9.]+(e[+-]?\d+)? \S+$", l)]
    if rc != 0 or not lines or bad:
        out("FAIL", "suspects_smoke", f"rc={rc} bench lines={len(lines)} malformed={bad[:3]}: {se[-800:]}")
    else:
        out("PASS", "suspects_smoke")


if __name__ == "__main__":
    main()
    sys.exit(1 if emuutil.n_fail else 0)
