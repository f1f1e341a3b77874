#!/usr/bin/python3
"""tests/dist: process meshes/groups, tensor parallelism, pipeline parallelism,
hybrid dp x pp, gradient compression (docs/parallelism.md).

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_parallel.py
One line per test ("PASS: name" / "FAIL: name: why"); exit 1 on any failure.
2-4 CPU workers on loopback; every process has a timeout.
"""
import os, re, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dutil  # noqa: E402
from dutil import NABLA, TMP, report, sanitizer_check, test  # noqa: E402


def run(src, timeout=60):
    path = os.path.join(TMP, "t.nbl")
    with open(path, "w") as f:
        f.write(src)
    p = subprocess.run([NABLA, path], capture_output=True, text=True, timeout=timeout)
    sanitizer_check(p.stderr)
    return p.returncode, p.stdout, p.stderr


def results(out):
    """lines 'R name value...' -> {name: [values]} (a one-element tensor prints as tensor(v): v)"""
    r = {}
    for l in out.splitlines():
        if l.startswith("R "):
            parts = l.split()
            r[parts[1]] = [re.sub(r"^tensor\((.*)\)$", r"\1", x) for x in parts[2:]]
    return r


@test
def test_mesh_groups(name):
    rc, out, err = run("""
import dist
print("R bad", try { dist.mesh(dp=3, tp=2, world=4) } catch e { e.message == "dist.mesh: dp*tp*pp = 3*2*1 = 6 does not equal the world size 4" })
dist.start(4)
print("R badw", try { dist.mesh(dp=3, tp=1) } catch e { e.message })
r = dist.run(fn() {
  m = dist.mesh(dp=2, tp=2)
  x = ones(2) * dist.rank()
  list(m.coord.dp, m.coord.tp, all_reduce(x, group=m.tp)[0].item(), all_reduce(x, group=m.dp)[0].item(),
       all_gather(tensor(list(dist.rank())), group=m.tp).tolist(), broadcast(x, src=1, group=m.dp)[0].item(),
       reduce_scatter(arange(4.0), group=m.dp).tolist())
})
for i in 0..4 { print("R r{i}", join(map(r[i], fn(v) str(v)), "|")) }
# point to point inside a group (group ranks), and a group this rank is not in
p = dist.run(fn() {
  g = dist.new_group(list(3, 1))
  if dist.rank() == 3 { send(ones(2) * 7, 1, group=g); 0 } else if dist.rank() == 1 { recv(0, group=g)[0].item() }
  else { try { all_reduce(ones(1), group=g) } catch e { if e.message == "all_reduce: rank {dist.rank()} is not a member of the group (ranks 3..1, size 2)" { -1 } else { e.message } } }
})
print("R p2p", join(map(p, fn(v) str(v)), "|"))
""")
    r = results(out)
    exp = {
        "r0": "0|0|1.0|2.0|[0, 1]|2.0|[0.0, 2.0]",   # rank 0: dp 0 tp 0; tp group {0,1}; dp group {0,2}
        "r1": "0|1|1.0|4.0|[0, 1]|3.0|[0.0, 2.0]",
        "r2": "1|0|5.0|2.0|[2, 3]|2.0|[4.0, 6.0]",
        "r3": "1|1|5.0|4.0|[2, 3]|3.0|[4.0, 6.0]",
    }
    ok = rc == 0 and r.get("bad") == ["true"] and all(" ".join(r.get(k, [])) == v for k, v in exp.items())
    ok = ok and "does not equal the world size 4" in out and r.get("p2p") == ["-1|7.0|-1|0"]
    report(name, ok, f"rc={rc} out={out[-1500:]!r} err={err[-1500:]!r}")


TP_BODY = """
r = dist.run(fn(tpn) {
  import nn
  import tp
  fn maxdiff(a, b) {
    pa = nn.parameters(a); pb = nn.parameters(b)
    if len(pa) != len(pb) { error("tree mismatch {len(pa)} vs {len(pb)}") }
    d = 0
    for i in 0..len(pa) { d = max(d, max(abs(pa[i] - pb[i])).item()) }
    d
  }
  fn check(name, single, par, x) {
    r = randn(single(x).shape)
    lf = fn(m, x) sum(m(x) * r)
    ys = single(x); yp = par(x)
    gs = grad(lf)(single, x); gp = tp.unshard(par, grad(lf)(par, x))
    npar = len(nn.parameters(gp))
    [name, max(abs(ys - yp)).item(), maxdiff(tp.unshard(par), single), maxdiff(gp, gs), npar]
  }
  m = if tpn == 2 { dist.mesh(dp=dist.world_size() / 2, tp=2) } else { dist.mesh(tp=4) }
  g = m.tp
  seed(1)
  x = randn(2, 5, 16)
  out = list()
  l = nn.linear(16, 8); push(out, check("column_linear", l, tp.column_from(l, g, true), x))
  l = nn.linear(16, 12); push(out, check("row_linear", l, tp.row_from(l, g, false), x))
  fc = nn.linear(16, 64); pr = nn.linear(64, 16)
  single = {fc: fc, proj: pr, __call: fn(self, x) self.proj(gelu(self.fc(x)))}
  push(out, check("mlp", single, tp.mlp_from(fc, pr, g), x))
  a = nn.causal_self_attention(16, 4); push(out, check("attention", a, tp.attention_from(a, g), x))
  b = nn.transformer_block(16, 4); push(out, check("transformer_block", b, tp.block_from(b, g), x))
  e = nn.embedding(12, 16); idx = tensor(list(0, 3, 11, 5, 7, 8))
  push(out, check("vocab_embedding", e, tp.embedding_from(e, g), idx))
  logits = randn(6, 12); logits.requires_grad = true
  tg = tensor(list(0, 3, 11, 5, 7, 8))
  ls = cross_entropy(logits, tg); backward(ls)
  lp = dist.shard(detach(logits), -1, g); lp.requires_grad = true
  lpp = tp.cross_entropy(lp, tg, g); backward(lpp)
  push(out, ["vocab_cross_entropy", abs(ls - lpp).item(), 0, max(abs(dist.unshard(lp.grad, -1, g) - logits.grad)).item(), 1])
  # a TP block built directly (local shards only) runs and its checkpoint is whole
  blk = tp.transformer_block(16, 4, g)
  st = tp.unshard(blk)
  push(out, ["checkpoint_shapes", 0, 0, 0, if st.attn.qkv.weight.shape == list(48, 16) and st.fc.weight.shape == list(64, 16) and st.proj.weight.shape == list(16, 64) { 1 } else { 0 }])
  out
}, TPN)
for row in r[dist.size() - 1] { print("R", row[0], row[1], row[2], row[3], row[4]) }
"""


def tp_check(name, world, tpn):
    rc, out, err = run(f"import dist\ndist.start({world})\n" + TP_BODY.replace("TPN", str(tpn)), timeout=60)
    r = results(out)
    layers = ["column_linear", "row_linear", "mlp", "attention", "transformer_block", "vocab_embedding", "vocab_cross_entropy"]
    bad = []
    for l in layers:
        v = r.get(l)
        if not v:
            bad.append(f"{l}: missing")
            continue
        fwd, par, gr, npar = float(v[0]), float(v[1]), float(v[2]), int(v[3])
        if not (fwd < 1e-5 and par == 0 and gr < 1e-5 and npar > 0):
            bad.append(f"{l}: fwd={fwd} params={par} grads={gr}")
    if r.get("checkpoint_shapes", [0, 0, 0, "0"])[3] != "1":
        bad.append("checkpoint shapes")
    report(name, rc == 0 and not bad, f"rc={rc} bad={bad} out={out[-800:]!r} err={err[-1500:]!r}")


@test
def test_tp2_layers_equal_single_device(name):
    tp_check(name, 2, 2)


@test
def test_tp4_layers_equal_single_device(name):
    tp_check(name, 4, 4)


@test
def test_schedules(name):
    rc, out, err = run("""
import dist
for p in list(2, 4) {
  for m in list(4, 8) {
    for k in list("gpipe", "1f1b") {
      r = dist.simulate(dist.schedule(k, stages=p, microbatches=m))
      print("R {k}_{p}_{m}", r.bubble, (p - 1) / (m + p - 1), max(r.in_flight), len(dist.schedule(k, stages=p, microbatches=m)[0]))
    }
  }
}
r = dist.simulate(dist.schedule("interleaved", stages=2, microbatches=4, virtual=2))
print("R inter", r.bubble, 1 / 9)
print("R show", dist.schedule("1f1b", stages=2, microbatches=3)[0])
print("R e1", try { dist.schedule("1f1b", stages=4, microbatches=2) } catch e { "err:" + e.message })
print("R e2", try { dist.schedule("interleaved", stages=2, microbatches=3, virtual=2) } catch e { "err:" + e.message })
print("R e3", try { dist.schedule("zigzag") } catch e { "err:" + e.message })
print("R e4", try { dist.split_layers(nn.mlp(list(4, 4, 4, 4)), 2) } catch e { "err:" + e.message })
print("R e5", try { dist.simulate([[["B", 0, 0], ["F", 0, 0]], [["F", 0, 1], ["B", 0, 1]]]) } catch e { "err:" + e.message })
""".replace("nn.mlp", "(fn() { import nn; nn.mlp })()"))
    r = results(out)
    bad = []
    for p in (2, 4):
        for m in (4, 8):
            for k in ("gpipe", "1f1b"):
                v = r.get(f"{k}_{p}_{m}")
                if not v or abs(float(v[0]) - float(v[1])) > 1e-12 or int(v[3]) != 2 * m:
                    bad.append((k, p, m, v))
                # 1F1B never has more than p micro-batches in flight; GPipe has all m
                elif float(v[2]) != (min(p, m) if k == "1f1b" else m):
                    bad.append(("in_flight", k, p, m, v))
    if not r.get("inter") or abs(float(r["inter"][0]) - float(r["inter"][1])) > 1e-12:
        bad.append(("inter", r.get("inter")))
    if " ".join(r.get("show", [])) != '[["F", 0, 0], ["F", 1, 0], ["B", 0, 0], ["F", 2, 0], ["B", 1, 0], ["B", 2, 0]]':
        bad.append(("show", r.get("show")))
    for k, want in (("e1", "1f1b needs microbatches >= stages"), ("e2", "multiple of stages"), ("e3", "unknown kind"),
                    ("e4", "3 layers do not split into 2"), ("e5", "deadlocks")):
        if want not in " ".join(r.get(k, [])):
            bad.append((k, r.get(k)))
    report(name, rc == 0 and not bad, f"rc={rc} bad={bad} err={err[-800:]!r}")


PIPE = """
import dist
dist.start(P)
r = dist.run(fn(kind, v) {
  import nn
  seed(3)
  model = nn.mlp(list(8, 16, 16, 16, 16, 16, 16, 16, 4))
  x = randn(8, 8); y = randn(8, 4)
  lf = fn(out, y) mean((out - y) ** 2)
  gs = grad(fn(mm, x, y) lf(mm(x), y))(model, x, y)
  stages = dist.split_layers(model, dist.world_size() * v)
  pipe = dist.pipeline(stages, microbatches=4, schedule=kind, loss=lf, virtual=v)
  d = 0; n = 0
  for it in 0..2 {                      # two steps: grads accumulate (x2)
    l = pipe.step(x, y)
  }
  for i in 0..8 {
    for f in list("weight", "bias") {
      t = model.layers[i][f]
      if t.grad != nil { d = max(d, max(abs(t.grad - 2 * gs.layers[i][f])).item()); n += 1 }
    }
  }
  list(abs(l - lf(model(x), y).item()), d, n, pipe.stats.schedule_bubble, pipe.stats.bubble)
}, KIND, V)
tot = 0
for i in 0..len(r) { tot += r[i][2] }
print("R res", max(map(r, fn(a) a[0])), max(map(r, fn(a) a[1])), tot, r[0][3], r[0][4])
"""


def pipe_check(name, p, kind, v=1):
    src = PIPE.replace("P)", f"{p})").replace("KIND", f'"{kind}"').replace(", V)", f", {v})")
    rc, out, err = run(src, timeout=60)
    v_ = results(out).get("res")
    ok = rc == 0 and v_ is not None and float(v_[0]) < 1e-5 and float(v_[1]) < 1e-5 and int(v_[2]) == 16
    if ok:
        print(f"  {kind} p={p} v={v}: schedule bubble {float(v_[3]):.3f}, measured (rank 0) {float(v_[4]):.3f}")
    report(name, ok, f"rc={rc} res={v_} out={out[-500:]!r} err={err[-1500:]!r}")


@test
def test_pipeline_gpipe_p2(name):
    pipe_check(name, 2, "gpipe")


@test
def test_pipeline_1f1b_p2(name):
    pipe_check(name, 2, "1f1b")


@test
def test_pipeline_interleaved_p2(name):
    pipe_check(name, 2, "interleaved", 2)


@test
def test_pipeline_1f1b_p4(name):
    pipe_check(name, 4, "1f1b")


@test
def test_pipeline_gpipe_p4(name):
    pipe_check(name, 4, "gpipe")


@test
def test_pipeline_bad_input(name):
    rc, out, err = run("""
import dist
dist.start(2)
r = dist.run(fn() {
  import nn
  seed(0)
  lf = fn(o, y) mean((o - y) ** 2)
  x = randn(8, 8); y = randn(8, 4)
  b0 = dist.bytes()[0]
  e1 = try { dist.split_layers(nn.mlp(list(8, 8, 8, 4)), 2); "no" } catch e { e.message }
  # stage 1 expects 5 features, stage 0 makes 16
  st = list(nn.linear(8, 16), nn.linear(5, 4))
  e2 = try { dist.pipeline(st, microbatches=2, loss=lf).step(x, y); "no" } catch e { e.message }
  e3 = try { dist.pipeline(list(nn.linear(8, 4), nn.linear(4, 4)), microbatches=1, schedule="1f1b", loss=lf); "no" } catch e { e.message }
  e4 = try { dist.pipeline(list(nn.linear(8, 4), nn.linear(4, 4)), microbatches=3, loss=lf).step(x, y); "no" } catch e { e.message }
  e5 = try { dist.pipeline([nn.linear(8, 4)], microbatches=2, loss=lf); "no" } catch e { e.message }
  list(e1, e2, e3, e4, e5, dist.bytes()[0] - b0)
})
for i in 0..5 { print("R e{i + 1}", r[0][i]) }
print("R bytes", r[0][5], r[1][5])
""")
    r = results(out)
    bad = []
    for k, want in (("e1", "3 layers do not split into 2"), ("e2", "stage 1 cannot take the output of stage 0 (shape [4, 16])"),
                    ("e3", "1f1b needs microbatches >= stages"), ("e4", "does not split into 3 equal micro-batches"),
                    ("e5", "1 stages for 2 pipeline ranks")):
        if want not in " ".join(r.get(k, [])):
            bad.append((k, r.get(k)))
    if r.get("bytes") != ["0", "0"]:
        bad.append(("communicated before the error", r.get("bytes")))
    report(name, rc == 0 and not bad, f"rc={rc} bad={bad} out={out[-800:]!r} err={err[-800:]!r}")


@test
def test_isend_irecv_and_pipeline_large_activations(name):
    # 1F1B on 2 stages with 32 MB activations (> the 4 MB socket buffers): with blocking sends
    # rank 0's forward send and rank 1's backward send stall each other until the timeout
    rc, out, err = run("""
import dist
dist.start(2, timeout=30)
r = dist.run(fn() {
  rk = dist.rank(); o = 1 - rk
  h = dist.isend(ones(3000000) * (rk + 1), o); h2 = dist.isend(tensor(list(7.0 + rk)), o)
  a = dist.irecv(o); b = dist.irecv(o)
  vb = b.wait(); va = a.wait(); h.wait(); h2.wait()
  n = 4000000
  stages = list({s: ones(n), __call: fn(self, x) x * self.s}, {s: ones(n) * 2, __call: fn(self, x) x * self.s})
  pipe = dist.pipeline(stages, microbatches=4, schedule="1f1b", loss=fn(o, y) mean(o) + sum(y), check=false)
  l = pipe.step(ones(8, n), zeros(8))
  g = sum(pipe.mine[0].s.grad).item()
  list(sum(va).item(), vb.item(), l, g)
})
print("R res", join(map(r, fn(v) join(map(v, fn(x) str(x)), ",")), "|"))
""", timeout=180)
    v = results(out).get("res")
    # rank 0: received 3e6 twos, 8; loss mean(2x) = 2; d loss / d s0 = sum over the batch of 2/n per element * n = 2 (summed)
    ok = rc == 0 and v is not None and v[0].startswith("6000000.0,8.0,2.0,") and v[0].split("|")[1].startswith("3000000.0,7.0,2.0,")
    report(name, ok, f"rc={rc} res={v} out={out[-800:]!r} err={err[-1500:]!r}")


@test
def test_hybrid_dp2_pp2(name):
    rc, out, err = run("""
import dist
dist.start(4)
r = dist.run(fn() {
  import nn
  import optim
  m = dist.mesh(dp=2, pp=2)
  seed(5)
  model = nn.mlp(list(8, 16, 16, 4))
  ref = nn.mlp(list(8, 16, 16, 4)); nn.load_state(ref, model)
  X = randn(16, 8); Y = randn(16, 4)
  lf = fn(o, y) mean((o - y) ** 2)
  # single device: the whole batch
  gs = grad(fn(mm) lf(mm(X), Y))(ref)
  # hybrid: dp shards the batch, pp splits the layers (3 linear layers + 1 identity stage: 4 stages of a list)
  lay = dist.split_layers(model, 1)[0].layers
  stages = list(nn.sequential(list(lay[0], lay[1])), nn.sequential([lay[2]]))
  pipe = dist.pipeline(stages, microbatches=2, schedule="1f1b", loss=lf, group=m.pp)
  i = m.coord.dp
  pipe.step(X[i * 8:(i + 1) * 8], Y[i * 8:(i + 1) * 8])
  dist.average_param_grads(pipe.mine, group=m.dp)
  d = 0; n = 0
  for j in 0..3 {
    for f in list("weight", "bias") {
      t = model.layers[j][f]
      if t.grad != nil { d = max(d, max(abs(t.grad - gs.layers[j][f])).item()); n += 1 }
    }
  }
  list(d, n)
})
print("R res", max(map(r, fn(a) a[0])), sum(map(r, fn(a) a[1])))
""", timeout=60)
    v = results(out).get("res")
    ok = rc == 0 and v is not None and float(v[0]) < 1e-5 and int(v[1]) == 12
    report(name, ok, f"rc={rc} res={v} err={err[-1500:]!r}")


@test
def test_hybrid_dp2_tp2(name):
    rc, out, err = run("""
import dist
dist.start(4)
r = dist.run(fn() {
  import nn
  import tp
  m = dist.mesh(dp=2, tp=2)
  seed(7)
  blk = nn.transformer_block(16, 4)
  X = randn(4, 3, 16); R = randn(4, 3, 16)
  lf = fn(mm, x, r) mean(mm(x) * r)
  gs = grad(lf)(blk, X, R)
  par = tp.block_from(blk, m.tp)
  i = m.coord.dp
  g = grad(lf)(par, X[i * 2:(i + 1) * 2], R[i * 2:(i + 1) * 2])
  g = tp.unshard(par, dist.average_grads(g, group=m.dp))
  pa = nn.parameters(g); pb = nn.parameters(gs)
  d = 0
  for j in 0..len(pa) { d = max(d, max(abs(pa[j] - pb[j])).item()) }
  list(d, len(pa))
})
print("R res", max(map(r, fn(a) a[0])), r[0][1])
""", timeout=60)
    v = results(out).get("res")
    ok = rc == 0 and v is not None and float(v[0]) < 1e-5 and int(v[1]) == 12
    report(name, ok, f"rc={rc} res={v} err={err[-1500:]!r}")


@test
def test_hybrid_dp2_tp2_pp2_8ranks(name):
    # tests/dist/hybrid8.nbl: 8 workers, 3 SGD steps of two TP transformer blocks in a 2-stage pipeline
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hybrid8.nbl")
    p = subprocess.run([NABLA, script], capture_output=True, text=True, timeout=300)
    sanitizer_check(p.stderr)
    v = results(p.stdout).get("res")
    ok = p.returncode == 0 and v is not None and float(v[0]) < 1e-5 and float(v[1]) < 1e-5 and int(float(v[2])) == 96 and float(v[3]) > 1e-3
    report(name, ok, f"rc={p.returncode} res={v} err={p.stderr[-1500:]!r}")


@test
def test_compression(name):
    rc, out, err = run("""
import dist
dist.start(2)
r = dist.run(fn() {
  seed(dist.rank())
  out = list()
  for kind in list("bf16", "fp16", "topk", "powersgd") {
    st = dist.compressor(kind, ratio=0.1)
    g1 = {w: randn(64, 32), b: randn(32)}
    dist.average_grads(g1, compression=st)
    r1 = map(st.residual, fn(t) clone(t))
    g2 = {w: randn(64, 32), b: randn(32)}
    a2 = dist.average_grads(g2, compression=st)
    # exact carry: what step 2 compressed was g2 + r1; what it did not transmit is the new residual
    c = g2.w + r1[0]
    carry = if kind == "bf16" or kind == "fp16" {
      max(abs(st.residual[0] - (c - c.to(if kind == "bf16" { "bf16" } else { "f16" }).to("f32")))).item()
    } else if kind == "topk" {
      k = ceil(0.1 * (64 * 32 + 32))
      # transmitted + residual = input exactly, and exactly k entries were transmitted in all
      tr = concat(list(reshape(c, list(-1)), reshape(g2.b + r1[1], list(-1)))) - concat(list(reshape(st.residual[0], list(-1)), reshape(st.residual[1], list(-1))))
      max(abs(tr)).item() * 0 + abs(sum(tr != 0).item() - k)
    } else {
      # residual = input - the averaged rank-2 approximation
      max(abs(st.residual[0] - (c - a2.w))).item()
    }
    exact = all_reduce(g2.w, op="avg")
    push(out, list(kind, carry, st.bytes_sent / st.bytes_dense, max(abs(a2.w - exact)).item()))
  }
  # dense group= path unchanged
  push(out, list("dense", 0, 1, max(abs(dist.average_grads({w: ones(3) * dist.rank()}).w - 0.5)).item()))
  out
})
for row in r[0] { print("R", row[0], row[1], row[2], row[3]) }
""", timeout=60)
    r = results(out)
    bad = []
    for k, lo, hi, err_max in (("bf16", 0.49, 0.51, 0.05), ("fp16", 0.49, 0.51, 0.01), ("topk", 0.15, 0.25, 10), ("powersgd", 0.05, 0.15, 10), ("dense", 1, 1, 0)):
        v = r.get(k)
        if not v or float(v[0]) != 0 or not (lo <= float(v[1]) <= hi) or float(v[2]) > err_max:
            bad.append((k, v))
    for k in ("bf16", "fp16", "topk", "powersgd"):
        if k in r:
            print(f"  {k}: bytes sent / uncompressed = {float(r[k][1]):.3f}")
    report(name, rc == 0 and not bad, f"rc={rc} bad={bad} out={out[-800:]!r} err={err[-1500:]!r}")


dutil.finish()
