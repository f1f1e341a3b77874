#!/usr/bin/python3
"""lstm, gru and rnn (tanh/relu) against torch.nn.LSTM/GRU/RNN with the same
weights: outputs, final states and the gradients of the input, every weight
and the initial states, on fresh random data for every option (layers,
bidirectional, batch_first, bias, initial states or zeros, lengths with
packed-sequence semantics, an empty sequence mid-batch, unbatched input,
non-contiguous input, hidden sizes past the CPU cell's vector width), f32 and
f64, on the CPU and on the emulated CUDA device (cuda/rnn.cu;
NABLA_CUDA_EMULATE=force).  Then the nn layers (state-dict names, dropout
and train/eval), an LSTM language model trained for 3 SGD steps against
torch's from the same weights, and the argument errors.

One nabla process per device evaluates every case and saves the results
(safetensors, read back here).  Seeded; the seed is printed with every
failure (NUMERICS_SEED=<seed> repeats a run).

Run with /usr/bin/python3; env NABLA = the interpreter (build/nabla).
"""
import os
import shutil
import sys

import numpy as np
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# NABLA_ASAN=1: also run under the ASan build by tools/run-tests.sh (torchcmp reads it)
import torchcmp  # noqa: E402
from torchcmp import NABLA, ASAN, SUFFIX, SEED, rng, TMP, report, read_safetensors, run_nabla  # noqa: E402

torch.manual_seed(SEED)
torch.set_num_threads(1)


EMU = {"NABLA_CUDA_EMULATE": "force", "NABLA_EMU_SMS": "2"}
TORCH = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN, "rnn_relu": torch.nn.RNN}
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def torch_module(c, dtype):
    kw = dict(num_layers=c["L"], bias=c["bias"], batch_first=c["bf"], bidirectional=c["bi"])
    if c["mode"].startswith("rnn"):
        kw["nonlinearity"] = c["mode"][4:]
    m = TORCH[c["mode"]](c["I"], c["H"], **kw).to(dtype)
    with torch.no_grad():
        for name, w in zip(c["names"], c["weights"]):
            getattr(m, name).copy_(torch.tensor(w))
    return m


def make_case(k, mode, dt, L=1, bi=False, bf=False, bias=True, h0=True, lengths=False, unbatched=False, permuted=False,
              T=None, B=None, I=None, H=None, zero_len=False, wstd=0.6):
    npdt = np.float32 if dt == "f32" else np.float64
    T = T or int(rng.integers(1, 7))
    B = B or int(rng.integers(1, 5))
    I = I or int(rng.integers(1, 6))
    H = H or int(rng.integers(1, 6))
    D = 2 if bi else 1
    c = {"id": f"c{k}", "mode": mode, "dt": dt, "L": L, "bi": bi, "bf": bf, "bias": bias, "T": T, "B": B, "I": I, "H": H,
         "unbatched": unbatched, "permuted": permuted}
    names, weights = [], []
    G = GATES[mode]
    for layer in range(L):
        for d in range(D):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            isz = I if layer == 0 else H * D
            ps = [("weight_ih" + sfx, (G * H, isz)), ("weight_hh" + sfx, (G * H, H))]
            if bias:
                ps += [("bias_ih" + sfx, (G * H,)), ("bias_hh" + sfx, (G * H,))]
            for name, shape in ps:
                names.append(name)
                weights.append((rng.standard_normal(shape) * wstd).astype(npdt))
    c["names"], c["weights"] = names, weights
    xshape = (T, I) if unbatched else ((B, T, I) if bf else (T, B, I))
    c["x"] = rng.standard_normal(xshape).astype(npdt)
    sshape = (L * D, H) if unbatched else (L * D, B, H)
    c["h0"] = rng.standard_normal(sshape).astype(npdt) if h0 else None
    c["c0"] = rng.standard_normal(sshape).astype(npdt) if h0 and mode == "lstm" else None
    if lengths:
        ln = rng.integers(1, T + 1, B)
        ln[rng.integers(0, B)] = T            # pad_packed_sequence pads to the longest; total_length=T keeps T
        if zero_len:                          # an empty sequence between others (torch_ref: one sequence at a time)
            ln[:] = rng.integers(1, T + 1, B)
            ln[0], ln[B // 2] = T, 0
        c["lengths"] = ln.astype(np.int64)
    else:
        c["lengths"] = None
    oshape = xshape[:-1] + (D * H,)
    c["gy"] = rng.standard_normal(oshape).astype(npdt)
    c["gh"] = rng.standard_normal(sshape).astype(npdt)
    c["gc"] = rng.standard_normal(sshape).astype(npdt) if mode == "lstm" else None
    return c


def make_cases():
    cases, k = [], 0
    for mode in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        for dt in ("f32", "f64"):
            opts = [dict(), dict(L=2), dict(bi=True), dict(L=2, bi=True, bf=True), dict(bias=False, h0=False),
                    dict(lengths=True), dict(lengths=True, bi=True, L=2), dict(unbatched=True), dict(permuted=True, bf=True),
                    dict(lengths=True, bf=True, bi=True, h0=False)]
            for o in opts:
                cases.append(make_case(k, mode, dt, **o))
                k += 1
    # one larger case per mode (more rows than the CPU kernels' thread cut-over is not needed: values only)
    for mode in ("lstm", "gru"):
        cases.append(make_case(k, mode, "f64", L=2, bi=True, lengths=True, T=9, B=6, I=7, H=8))
        k += 1
    # hidden sizes past the vector width (the CPU cell's sigmoid/tanh run whole
    # SIMD vectors, then a tail), longer sequences (every step's GEMMs and cell
    # backward feed dW_hh, dW_ih, db and dh0), and an empty sequence mid-batch;
    # weights ~ 1/sqrt(H) as torch's init (larger ones make a chaotic RNN whose
    # f32 gradients no tolerance bounds)
    for mode in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        for dt in ("f32", "f64"):
            cases.append(make_case(k, mode, dt, L=2, bi=dt == "f64", T=11, B=5, I=19, H=37, wstd=37 ** -0.5))
            cases.append(make_case(k + 1, mode, dt, L=2, bi=True, lengths=True, zero_len=True, T=6, B=5, I=5, H=21,
                                   wstd=21 ** -0.5))
            k += 2
    return cases


def save_inputs(cases):
    arrays = {}
    for c in cases:
        i = c["id"]
        x = c["x"]
        if c["permuted"]:   # stored transposed; nabla transposes it back: a non-contiguous input
            arrays[f"{i}_x"] = np.ascontiguousarray(np.swapaxes(x, 0, 1))
        else:
            arrays[f"{i}_x"] = x
        for j, w in enumerate(c["weights"]):
            arrays[f"{i}_w{j}"] = w
        for k in ("h0", "c0", "lengths", "gy", "gh", "gc"):
            if c[k] is not None:
                arrays[f"{i}_{k}"] = c[k]
    np.savez(os.path.join(TMP, "in.npz"), **arrays)


def nabla_code(cases, dev):
    lines = [f'd = load_npz("{TMP}/in.npz")', "res = {}", f'dev = "{dev}"',
             "fn opt(name) = if has(d, name) { d[name].to(dev) } else { nil }"]
    for c in cases:
        i = c["id"]
        mode = c["mode"]
        xs = f"transpose(d.{i}_x.to(dev), 0, 1)" if c["permuted"] else f"d.{i}_x.to(dev)"
        ws = "list(" + ", ".join(f"d.{i}_w{j}.to(dev)" for j in range(len(c["weights"]))) + ")"
        common = (f'num_layers={c["L"]}, bidirectional={str(c["bi"]).lower()}, batch_first={str(c["bf"]).lower()}, '
                  f'lengths=opt("{i}_lengths")')
        if mode == "lstm":
            call = f"lstm(x, ws, h0, c0, {common})"
        elif mode == "gru":
            call = f"gru(x, ws, h0, {common})"
        else:
            call = f'rnn(x, ws, h0, nonlinearity="{mode[4:]}", {common})'
        loss = "sum(r[0] * gy) + sum(r[1] * gh)" + (" + sum(r[2] * gc)" if mode == "lstm" else "")
        lines.append(f'''
fn case_{i}() {{
  x = {xs}; ws = {ws}; h0 = opt("{i}_h0"); c0 = opt("{i}_c0"); gy = opt("{i}_gy"); gh = opt("{i}_gh"); gc = opt("{i}_gc")
  out = {{}}
  f = fn(x, ws, h0, c0) {{ r = {call}; out.r = r; {loss} }}
  g = grad(f, argnums=[0, 1, 2, 3])(x, ws, h0, c0)
  o = {{y: out.r[0], hn: out.r[1], gx: g[0]}}
  if {str(mode == "lstm").lower()} {{ o.cn = out.r[2] }}
  for j in 0..len(ws) {{ o["gw" + str(j)] = g[1][j] }}
  if h0 != nil {{ o.gh0 = g[2] }}
  if c0 != nil {{ o.gc0 = g[3] }}
  res["{i}"] = o
}}
case_{i}()''')
    lines.append(f'save("{TMP}/out_{dev}.safetensors", res)')
    return "\n".join(lines)


def per_sequence(m, x, h0, c0, c):
    """torch's module on each sequence alone, x[:lengths[b], b] (torch refuses
    an empty sequence in a packed batch): outputs zero-padded to T, the final
    state h0's (c0's) row for an empty sequence; batched x, f64."""
    lstm, bf, T = c["mode"] == "lstm", c["bf"], c["T"]
    LD = c["L"] * (2 if c["bi"] else 1)
    zeros = torch.zeros(LD, c["B"], c["H"], dtype=torch.float64)
    h0 = zeros if h0 is None else h0
    c0 = zeros if c0 is None and lstm else c0
    ys, hs, cs = [], [], []
    for b, n in enumerate(c["lengths"]):
        hb, cb = h0[:, b:b + 1], c0[:, b:b + 1] if lstm else None
        if n == 0:
            ys.append(torch.zeros(T, 1, c["H"] * LD // c["L"], dtype=torch.float64))
            hs.append(hb)
            cs.append(cb)
            continue
        xb = x[b:b + 1, :n].transpose(0, 1) if bf else x[:n, b:b + 1]
        m.batch_first = False
        yb, st = m(xb, (hb, cb) if lstm else hb)
        m.batch_first = bf
        ys.append(torch.cat([yb, torch.zeros(T - n, 1, yb.shape[2], dtype=torch.float64)]))
        hs.append(st[0] if lstm else st)
        cs.append(st[1] if lstm else None)
    y = torch.cat(ys, 1)
    return (y.transpose(0, 1) if bf else y), torch.cat(hs, 1), (torch.cat(cs, 1) if lstm else None)


def torch_ref(c):
    """torch's module in f64 from the same values (torch's f32 LSTM rounds
    differently; the tolerance covers f32's own rounding)"""
    dtype = torch.float64
    m = torch_module(c, dtype)
    t = lambda a, rg=False: torch.tensor(a.astype(np.float64), requires_grad=rg)
    x = t(c["x"], True)
    h0 = t(c["h0"], True) if c["h0"] is not None else None
    c0 = t(c["c0"], True) if c["c0"] is not None else None
    hx = (h0, c0) if c["mode"] == "lstm" and h0 is not None else h0
    if c["lengths"] is not None and c["lengths"].min() == 0:
        y, hn, cn = per_sequence(m, x, h0, c0, c)
    elif c["lengths"] is not None:
        packed = pack_padded_sequence(x, torch.tensor(c["lengths"]), batch_first=c["bf"], enforce_sorted=False)
        po, st = m(packed, hx)
        y, _ = pad_packed_sequence(po, batch_first=c["bf"], total_length=c["T"])
    else:
        y, st = m(x, hx)
    if c["lengths"] is None or c["lengths"].min() > 0:
        hn, cn = st if c["mode"] == "lstm" else (st, None)
    loss = (y * t(c["gy"])).sum() + (hn * t(c["gh"])).sum() + ((cn * t(c["gc"])).sum() if cn is not None else 0)
    loss.backward()
    ref = {"y": y, "hn": hn, "gx": x.grad}
    if cn is not None:
        ref["cn"] = cn
    for j, name in enumerate(c["names"]):
        ref[f"gw{j}"] = getattr(m, name).grad
    if h0 is not None:
        ref["gh0"] = h0.grad
    if c0 is not None:
        ref["gc0"] = c0.grad
    npdt = np.float32 if c["dt"] == "f32" else np.float64
    return {k: v.detach().numpy().astype(npdt) for k, v in ref.items()}


def compare(got, prefix, ref, dt):
    tol = 1e-11 if dt == "f64" else 3e-5
    bad = []
    for k, want in ref.items():
        g = got.get(f"{prefix}.{k}")
        if g is None:
            bad.append(f"{k} missing")
            continue
        if g.shape != want.shape or g.dtype != want.dtype:
            bad.append(f"{k}: {g.dtype}{list(g.shape)} vs torch {want.dtype}{list(want.shape)}")
            continue
        scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
        err = float(np.max(np.abs(g.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
        if not err <= tol * scale:
            bad.append(f"{k}: max |diff| {err:.3g} (scale {scale:.3g})")
    return bad


def check_values(cases, dev, env_extra):
    r = run_nabla(nabla_code(cases, dev), env_extra)
    if r.returncode != 0:
        report(f"rnn values on {dev}", False, f"nabla failed: {r.stderr.strip()[-1500:]}")
        return
    got = read_safetensors(f"{TMP}/out_{dev}.safetensors")
    for c in cases:
        bad = compare(got, c["id"], torch_ref(c), c["dt"])
        opts = [f"layers={c['L']}"] + [k for k in ("bi", "bf", "unbatched", "permuted") if c[k]]
        opts += ["no bias"] if not c["bias"] else []
        opts += ["lengths" + (" (one 0)" if c["lengths"].min() == 0 else "")] if c["lengths"] is not None else []
        opts += ["h0" if c["h0"] is not None else "zero state"]
        report(f"{c['mode']} {dev} {c['dt']} T={c['T']} B={c['B']} I={c['I']} H={c['H']} {' '.join(opts)}", not bad, "; ".join(bad))


def check_layers():
    """nn.lstm/nn.gru/nn.rnn: torch's parameter names and shapes; with the
    same weights the layer equals torch's module; dropout between layers is
    active while training (outputs differ from eval, stay finite) and off
    after nn.eval (equal to torch's eval)."""
    I, H, T, B = 3, 4, 5, 2
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    np.save(os.path.join(TMP, "lx.npy"), x)
    code = f'''import nn
x = load_npy("{TMP}/lx.npy")
res = {{}}
specs = list(list("lstm", nn.lstm({I}, {H}, num_layers=2, dropout=0.5, bidirectional=true)),
             list("gru", nn.gru({I}, {H}, num_layers=2, dropout=0.5)),
             list("rnn", nn.rnn({I}, {H}, num_layers=2, nonlinearity="relu", dropout=0.5, bidirectional=true)))
for s in specs {{
  m = s[1]
  y_train = m(x)[0]
  nn.eval(m)
  y_eval = m(x)[0]
  r = {{y_train: y_train, y_eval: y_eval}}
  for k in m._flat_names {{ r[k] = m[k] }}
  res[s[0]] = r
  print(s[0], join(m._flat_names, ","), len(nn.parameters(m)))
}}
save("{TMP}/layers.safetensors", res)'''
    r = run_nabla(code, {})
    if r.returncode != 0:
        report("nn.lstm/nn.gru/nn.rnn layers", False, r.stderr.strip()[-1500:])
        return
    got = read_safetensors(os.path.join(TMP, "layers.safetensors"))
    lines = {ln.split()[0]: ln.split()[1:] for ln in r.stdout.strip().splitlines()}
    for name, mod in (("lstm", torch.nn.LSTM(I, H, num_layers=2, dropout=0.5, bidirectional=True)),
                      ("gru", torch.nn.GRU(I, H, num_layers=2, dropout=0.5)),
                      ("rnn", torch.nn.RNN(I, H, num_layers=2, nonlinearity="relu", dropout=0.5, bidirectional=True))):
        sd = mod.state_dict()
        names = lines[name][0].split(",")
        bad = []
        if names != list(sd.keys()):
            bad.append(f"parameter names {names} vs torch {list(sd.keys())}")
        if int(lines[name][1]) != len(sd):
            bad.append(f"nn.parameters has {lines[name][1]} tensors, torch {len(sd)}")
        for k, v in sd.items():
            if got.get(f"{name}.{k}") is None or got[f"{name}.{k}"].shape != tuple(v.shape):
                bad.append(f"{k} shape")
        if not bad:
            with torch.no_grad():
                for k in sd:
                    getattr(mod, k).copy_(torch.tensor(got[f"{name}.{k}"]))
            mod.eval()
            want = mod(torch.tensor(x))[0].detach().numpy()
            ye, yt = got[f"{name}.y_eval"], got[f"{name}.y_train"]
            if not np.allclose(ye, want, rtol=1e-5, atol=1e-5):
                bad.append(f"eval output differs from torch by {np.max(np.abs(ye - want)):.3g}")
            if not np.all(np.isfinite(yt)) or np.allclose(yt, ye):
                bad.append("training output (dropout between layers) is not finite or equals the eval output")
        report(f"nn.{name}: torch's parameter names and shapes, eval equal to torch, dropout while training", not bad, "; ".join(bad))


def check_language_model(dev, env_extra):
    """an LSTM language model (embedding, 2-layer LSTM, linear head, cross
    entropy), 3 SGD steps from the same weights: losses and final weights
    equal to torch's in f64"""
    V, E, H, T, B, lr = 11, 6, 8, 7, 3, 0.5
    tok = rng.integers(0, V, (B, T + 1)).astype(np.int64)
    emb = rng.standard_normal((V, E))
    tm = torch.nn.LSTM(E, H, num_layers=2, batch_first=True).double()
    head = torch.nn.Linear(H, V).double()
    arrays = {"tok": tok, "emb": emb, "hw": head.weight.detach().numpy(), "hb": head.bias.detach().numpy()}
    for k, v in tm.state_dict().items():
        arrays[k] = v.numpy()
    np.savez(os.path.join(TMP, "lm.npz"), **arrays)
    code = f'''import nn
d = load_npz("{TMP}/lm.npz")
dev = "{dev}"
m = {{emb: d.emb.to(dev), lstm: nn.lstm({E}, {H}, num_layers=2, batch_first=true), hw: d.hw.to(dev), hb: d.hb.to(dev)}}
m.lstm = nn.to(m.lstm, "f64")
for k in m.lstm._flat_names {{ m.lstm[k] = d[k].to(dev) }}
tok = d.tok.to(dev)
fn loss_fn(m) {{
  x = embedding(m.emb, tok[:, 0:{T}])
  y = m.lstm(x)[0]
  logits = linear(y, m.hw, m.hb)
  cross_entropy(reshape(logits, [{B * T}, {V}]), reshape(tok[:, 1:{T + 1}], [{B * T}]))
}}
losses = list()
for step in 0..3 {{
  vg = value_and_grad(loss_fn)(m)
  push(losses, vg[0].item())
  m = tree_map2(m, vg[1])
}}
print(join(map(losses, fn(l) str(l)), " "))
r = {{emb: m.emb, hw: m.hw}}
for k in m.lstm._flat_names {{ r[k] = m.lstm[k] }}
save("{TMP}/lm_out.safetensors", r)'''
    code = code.replace("m = tree_map2(m, vg[1])", f'''no_grad {{
    m.emb = m.emb - vg[1].emb * {lr}; m.hw = m.hw - vg[1].hw * {lr}; m.hb = m.hb - vg[1].hb * {lr}
    for k in m.lstm._flat_names {{ m.lstm[k] = m.lstm[k] - vg[1].lstm[k] * {lr} }}
  }}''')
    r = run_nabla(code, env_extra)
    if r.returncode != 0:
        report(f"LSTM language model, 3 SGD steps on {dev}", False, r.stderr.strip()[-1500:])
        return
    try:
        losses = [float(v) for v in r.stdout.strip().splitlines()[-1].split()]
    except ValueError:
        report(f"LSTM language model, 3 SGD steps on {dev}", False, f"unexpected output: {r.stdout[-500:]}")
        return
    got = read_safetensors(os.path.join(TMP, "lm_out.safetensors"))
    E_t = torch.nn.Embedding(V, E).double()
    with torch.no_grad():
        E_t.weight.copy_(torch.tensor(emb))
    params = list(E_t.parameters()) + list(tm.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=lr)
    want = []
    tt = torch.tensor(tok)
    for _ in range(3):
        opt.zero_grad()
        y = tm(E_t(tt[:, :T]))[0]
        loss = torch.nn.functional.cross_entropy(head(y).reshape(B * T, V), tt[:, 1:].reshape(B * T))
        loss.backward()
        want.append(loss.item())
        opt.step()
    bad = []
    if not np.allclose(losses, want, rtol=1e-10, atol=1e-12):
        bad.append(f"losses {losses} vs torch {want}")
    for k, v in list(tm.state_dict().items()) + [("emb", E_t.weight), ("hw", head.weight)]:
        if not np.allclose(got[k], v.detach().numpy(), rtol=1e-10, atol=1e-11):
            bad.append(f"{k} after 3 steps differs by {np.max(np.abs(got[k] - v.detach().numpy())):.3g}")
    report(f"LSTM language model, 3 SGD steps on {dev}: losses and weights equal torch's (f64)", not bad, "; ".join(bad))


def check_half_and_autocast():
    """a bf16 input computes in f32 and comes back bf16 (weights any float
    dtype); inside autocast("bf16") the layer runs in its inputs' dtype (f32
    here), gradients included: equal to the plain run"""
    T, B, I, H = 4, 3, 5, 6
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    ws = [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in ((4 * H, I), (4 * H, H), (4 * H,), (4 * H,))]
    np.savez(os.path.join(TMP, "half.npz"), x=x, **{f"w{j}": w for j, w in enumerate(ws)})
    code = f'''d = load_npz("{TMP}/half.npz")
ws = list(d.w0, d.w1, d.w2, d.w3)
yb = lstm(d.x.to("bf16"), ws)[0]
if yb.dtype != "bf16" {{ error("dtype " + yb.dtype) }}
f = fn(ws) sum(lstm(d.x, ws)[0])
g_plain = grad(f)(ws)
y_ac = nil; g_ac = nil
autocast("bf16") {{ y_ac = lstm(d.x, ws)[0]; g_ac = grad(f)(ws) }}
save("{TMP}/half.safetensors", {{yb: yb.to("f32"), y: lstm(d.x, ws)[0], y_ac: y_ac, g: g_plain[0], g_ac: g_ac[0]}})'''
    r = run_nabla(code, {})
    if r.returncode != 0:
        report("lstm of a bf16 input and under autocast", False, r.stderr.strip()[-800:])
        return
    got = read_safetensors(os.path.join(TMP, "half.safetensors"))
    m = torch.nn.LSTM(I, H)
    with torch.no_grad():
        for name, w in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"), ws):
            getattr(m, name).copy_(torch.tensor(w))
    want = m(torch.tensor(x).to(torch.bfloat16).float())[0].detach().numpy()
    bad = []
    if not np.allclose(got["yb"], want, rtol=2e-2, atol=2e-2):
        bad.append(f"bf16 output differs from torch's f32 on the rounded input by {np.max(np.abs(got['yb'] - want)):.3g}")
    if got["y_ac"].dtype != np.float32 or not np.array_equal(got["y_ac"], got["y"]) or not np.array_equal(got["g_ac"], got["g"]):
        bad.append("under autocast the output or gradient differs from the plain f32 run")
    report("lstm of a bf16 input (computed in f32) and under autocast (runs in the input dtype)", not bad, "; ".join(bad))


def check_gru_seq2seq():
    """a GRU encoder-decoder (bidirectional 2-layer encoder over lengths,
    its last layer's final states summed into the decoder's h0, teacher-forced
    decoder, linear head, cross entropy), 3 SGD steps on the CPU from the same
    weights: losses and every weight equal to torch's in f64"""
    V, E, H, Ts, Tt, B, lr = 9, 5, 6, 6, 5, 3, 0.3
    src = rng.standard_normal((B, Ts, E))
    ln = rng.integers(1, Ts + 1, B); ln[0] = Ts
    tgt_in = rng.standard_normal((B, Tt, E))
    tgt = rng.integers(0, V, (B, Tt)).astype(np.int64)
    enc = torch.nn.GRU(E, H, num_layers=2, batch_first=True, bidirectional=True).double()
    dec = torch.nn.GRU(E, H, batch_first=True).double()
    head = torch.nn.Linear(H, V).double()
    arrays = {"src": src, "ln": ln.astype(np.int64), "tgt_in": tgt_in, "tgt": tgt, "hw": head.weight.detach().numpy(),
              "hb": head.bias.detach().numpy()}
    for k, v in enc.state_dict().items():
        arrays["enc_" + k] = v.numpy()
    for k, v in dec.state_dict().items():
        arrays["dec_" + k] = v.numpy()
    np.savez(os.path.join(TMP, "s2s.npz"), **arrays)
    code = f'''import nn
d = load_npz("{TMP}/s2s.npz")
m = {{enc: nn.to(nn.gru({E}, {H}, num_layers=2, batch_first=true, bidirectional=true), "f64"), dec: nn.to(nn.gru({E}, {H}, batch_first=true), "f64"), hw: d.hw, hb: d.hb}}
for k in m.enc._flat_names {{ m.enc[k] = d["enc_" + k] }}
for k in m.dec._flat_names {{ m.dec[k] = d["dec_" + k] }}
fn loss_fn(m) {{
  hn = m.enc(d.src, nil, d.ln)[1]
  h0 = reshape(hn[2] + hn[3], [1, {B}, {H}])
  y = m.dec(d.tgt_in, h0)[0]
  cross_entropy(reshape(linear(y, m.hw, m.hb), [{B * Tt}, {V}]), reshape(d.tgt, [{B * Tt}]))
}}
losses = list()
for step in 0..3 {{
  vg = value_and_grad(loss_fn)(m)
  push(losses, vg[0].item())
  no_grad {{
    m.hw = m.hw - vg[1].hw * {lr}; m.hb = m.hb - vg[1].hb * {lr}
    for k in m.enc._flat_names {{ m.enc[k] = m.enc[k] - vg[1].enc[k] * {lr} }}
    for k in m.dec._flat_names {{ m.dec[k] = m.dec[k] - vg[1].dec[k] * {lr} }}
  }}
}}
print(join(map(losses, fn(l) str(l)), " "))
r = {{hw: m.hw}}
for k in m.enc._flat_names {{ r["enc_" + k] = m.enc[k] }}
for k in m.dec._flat_names {{ r["dec_" + k] = m.dec[k] }}
save("{TMP}/s2s_out.safetensors", r)'''
    r = run_nabla(code, {})
    name = "GRU seq2seq (bidirectional encoder over lengths), 3 SGD steps: losses and weights equal torch's (f64)"
    if r.returncode != 0:
        report(name, False, r.stderr.strip()[-1500:])
        return
    losses = [float(v) for v in r.stdout.strip().splitlines()[-1].split()]
    got = read_safetensors(os.path.join(TMP, "s2s_out.safetensors"))
    params = list(enc.parameters()) + list(dec.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=lr)
    want = []
    for _ in range(3):
        opt.zero_grad()
        packed = pack_padded_sequence(torch.tensor(src), torch.tensor(ln), batch_first=True, enforce_sorted=False)
        hn = enc(packed)[1]
        y = dec(torch.tensor(tgt_in), (hn[2] + hn[3]).unsqueeze(0))[0]
        loss = torch.nn.functional.cross_entropy(head(y).reshape(B * Tt, V), torch.tensor(tgt).reshape(B * Tt))
        loss.backward()
        want.append(loss.item())
        opt.step()
    bad = []
    if not np.allclose(losses, want, rtol=1e-10, atol=1e-12):
        bad.append(f"losses {losses} vs torch {want}")
    for k, v in [("enc_" + k, v) for k, v in enc.state_dict().items()] + [("dec_" + k, v) for k, v in dec.state_dict().items()] + [("hw", head.weight)]:
        if not np.allclose(got[k], v.detach().numpy(), rtol=1e-10, atol=1e-11):
            bad.append(f"{k} after 3 steps differs by {np.max(np.abs(got[k] - v.detach().numpy())):.3g}")
    report(name, not bad, "; ".join(bad))


ERRORS = [
    ("lstm(ones(3, 2, 4), list(ones(8, 3), ones(8, 2)))", "lstm: weight_ih_l0 must have shape [8, 4], got [8, 3]"),
    ("lstm(ones(3, 2, 4), list(ones(8, 4), ones(8, 2), ones(8)))", "weights must hold 4 tensors per layer and direction"),
    ("gru(ones(3, 2, 4), list(ones(6, 4), ones(6, 2), ones(6), ones(5)))", "gru: bias_hh_l0 must have shape [6]"),
    ("gru(ones(3, 2, 4), list(ones(6, 4), ones(6, 2)), ones(1, 3, 2))", "gru: h0 must have shape [1, 2, 2]"),
    ("rnn(ones(3, 2, 4), list(ones(2, 4), ones(2, 2)), nonlinearity=\"sigmoid\")", "nonlinearity must be \"tanh\" or \"relu\""),
    ("rnn(ones(3, 2, 4), list(ones(2, 4), ones(2, 2)), lengths=tensor(list(1, 4)))", "lengths[1] = 4 is outside [0, 3]"),
    ("rnn(ones(3, 2, 4), list(ones(2, 4), ones(2, 2)), lengths=tensor(list(1, 2, 3)))", "lengths must be an integer tensor of shape [2]"),
    ("rnn(ones(3, 2, 4), list(ones(2, 4), ones(2, 2)), num_layers=0)", "num_layers must be in [1, 1024]"),
    ("rnn(ones(3, 2, 4), list(ones(2, 4), ones(2, 2)), dropout=2)", "dropout must be in [0, 1]"),
    ("rnn(ones(3, 2, 4), list(ones(2, 4), ones(2, 2), ones(2, 3), ones(2, 2)), bidirectional=true)", "weight_ih_l0_reverse must have shape [2, 4]"),
    ("lstm(ones(3, 2, 2, 4), list(ones(8, 4), ones(8, 2)))", "input must be [T, B, input_size]"),
    ("lstm(ones(3, 2, 4, dtype=\"i64\"), list(ones(8, 4), ones(8, 2)))", "input must be a floating tensor"),
    ("lstm(ones(3, 2, 4), list(ones(8, 4), 5))", "weights[1] must be a tensor"),
    ("import nn\nnn.lstm(0, 3)", "nn.lstm: input_size must be a positive integer"),
    ("import nn\nnn.rnn(2, 3, nonlinearity=\"gelu\")", "nn.rnn: nonlinearity must be"),
]


def main():
    try:
        cases = make_cases()
        save_inputs(cases)
        check_values(cases, "cpu", {})
        emu = os.path.join(os.path.dirname(NABLA), "cuda", "emu", "nabla_cuda_emu.so")
        have_emu = os.path.exists(emu)
        if have_emu:
            check_values(cases if not ASAN else cases[::3], "cuda", EMU)
        else:
            print(f"SKIP: rnn on the emulated CUDA device{SUFFIX}: {emu} is not built")
        check_layers()
        check_half_and_autocast()
        check_gru_seq2seq()
        check_language_model("cpu", {})
        if have_emu:
            check_language_model("cuda", EMU)
        torchcmp.check_errors(ERRORS, "rnn")
    finally:
        shutil.rmtree(TMP, True)
    sys.exit(1 if torchcmp.fails else 0)


main()
