#!/usr/bin/python3
"""test_cudnn_graph.py — attention through cuDNN (cuda/cudnn.cu), checked on the
emulated device with the stand-in libcudnn.so.9 (tests/cuda/cudnn_standin/):

  * the graph nabla builds, from the stand-in's log of every descriptor and
    attribute: the ops in order (matmul, scale, the causal gen_index/compare/
    select, softmax as max/sub/exp/sum/log/add/div with f32 Stats, matmul; and
    the backward's dO.O row sum, P recomputed from Stats, the reshape transposes,
    the four matmuls), the tensors' uids, dims, strides, dtypes, virtual and
    by-value flags, the scale value, forward and backward at several shapes,
    f16 and bf16, causal and not;
  * the values: the stand-in INTERPRETS the graph on the host pointers, so the
    outputs and gradients (against torch, NABLA_CUDA_ATTENTION=cudnn so nothing
    falls back) check what the graph computes, not just its shape;
  * the heads of a packed [B, T, 3C] qkv (chunk, reshape, permute) reach the
    graph as strided views with the packed strides, O and the gradients laid
    out [B, T, H, hd]; values and gradients vs torch; a declined graph (no
    engine) retried with contiguous copies;
  * attention_qkv (the model's op): Q, K, V with the packed strides, O and dO
    as [B, T, C], dQ/dK/dV straight into ONE packed [B, T, 3C] gradient
    (uids, dims, strides, dtypes), and its values and gradient vs torch;
  * an additive mask (float, or bool made 0/-inf), [T, S] broadcast over batch
    and heads or one per batch matrix: the bias tensor (uid 13, the io dtype,
    dims/strides) ADDed after the scale in both graphs, values and gradients vs
    torch; where cuDNN cannot run the masked graph the forward composes public
    ops (values still right, the reason kept), a backward it cannot run after a
    cuDNN forward is an error naming the op; the stand-in rejects what cuDNN
    would (operands that do not broadcast, NULL pointers);
  * the plan cache (one plan per shape and direction, reused; the mask's
    broadcast is part of the key);
  * dropout in the graph: the RNG node (BERNOULLI, probability 1-p, seed and
    offset as device INT64 scalars, uids 14/15) and the 1/(1-p) and (1-p)
    scales in both graphs (causal or not, with the additive mask, packed
    heads); O and dQ/dK/dV vs torch applying the stand-in's own mask
    (reproduced in NumPy from the seed/offset it logged); forward and backward
    drawing the same seed/offset, the next call a new offset; the kept
    fraction on 32768 elements within 6 sigma of 1-p; the fallbacks (f32, a
    head dim, no engine, a mask that requires grad; forced cudnn is an error),
    the planted graphs without (or not using) the RNG node refused, p in the
    plan cache's key;
  * (runs under NABLA_ASAN=1 too, on the ASan build)
  * the reasons: no library, a library too old, no engine for the graph,
    execution failure (an error naming the op, never a fallback), f32 (cuDNN's
    fused engine takes f16/bf16), a bad NABLA_CUDA_ATTENTION, deterministic
    engines preferred.
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import emuutil  # noqa: E402
from emuutil import ENV, NABLA, BUILD, ROOT, TMPDIR, out  # noqa: E402

STANDIN = os.path.join(BUILD, "tests", "cuda", "libcudnn.so.9")
HEADER = "/usr/local/cuda/include/cudnn_graph.h"
if not os.path.exists(emuutil.MODULE) or not os.path.exists(STANDIN) or not os.path.exists(HEADER):
    out("SKIP", "cudnn_graph", f"needs the emulated module, the stand-in and {HEADER} (built with the CUDA headers)")
    sys.exit(0)


def enums():
    """name maps of cudnn_graph.h's enums: {enum type name: {value: NAME}}"""
    src = open(HEADER).read()
    res = {}
    for body, name in re.findall(r"typedef enum\s*\{(.*?)\}\s*(\w+)\s*;", src, re.S):
        vals = {}
        for n, v in re.findall(r"(CUDNN_\w+)\s*(?:CUDNN_DEPRECATED_ENUM)?\s*=\s*(\d+)", body):
            vals.setdefault(int(v), n)
        res[name] = vals
    return res


E = enums()
ATTR, DTYPE, DESC = E["cudnnBackendAttributeName_t"], E["cudnnDataType_t"], E["cudnnBackendDescriptorType_t"]
PWMODE = E["cudnnPointwiseMode_t"]


def parse_log(path):
    """descriptors {id: {"type": NAME, "attrs": {ATTR_NAME: [values]}}} and the log's events"""
    descs, events = {}, []
    for line in open(path):
        w = line.split()
        if not w:
            continue
        events.append(w)
        if w[0] == "create":
            descs[int(w[1][1:])] = {"type": DESC[int(w[2])], "attrs": {}}
        elif w[0] == "set":
            d = descs[int(w[1][1:])]
            vals = [int(x[1:]) if x.startswith("#") else x for x in w[5:]]
            d["attrs"][ATTR[int(w[2])]] = vals
    return descs, events


def tensor(descs, i):
    a = descs[i]["attrs"]
    return {"uid": int(a["CUDNN_ATTR_TENSOR_UNIQUE_ID"][0]),
            "dims": [int(x) for x in a["CUDNN_ATTR_TENSOR_DIMENSIONS"]],
            "strides": [int(x) for x in a["CUDNN_ATTR_TENSOR_STRIDES"]],
            "dtype": DTYPE[int(a["CUDNN_ATTR_TENSOR_DATA_TYPE"][0])].replace("CUDNN_DATA_", ""),
            "virtual": a.get("CUDNN_ATTR_TENSOR_IS_VIRTUAL", ["0"])[0] == "1",
            "by_value": a.get("CUDNN_ATTR_TENSOR_IS_BY_VALUE", ["0"])[0] == "1"}


def op_of(descs, i):
    """one operation: its kind and its tensors by role"""
    d = descs[i]
    a, t = d["attrs"], d["type"]
    pre = t.replace("CUDNN_BACKEND_OPERATION_", "").replace("_DESCRIPTOR", "")
    roles = {k.replace(f"CUDNN_ATTR_OPERATION_{pre}_", ""): tensor(descs, v[0])
             for k, v in a.items() if descs.get(v[0] if v and isinstance(v[0], int) else -1, {}).get("type") == "CUDNN_BACKEND_TENSOR_DESCRIPTOR"}
    if pre == "POINTWISE":
        pw = descs[a["CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR"][0]]["attrs"]
        kind = PWMODE[int(pw["CUDNN_ATTR_POINTWISE_MODE"][0])].replace("CUDNN_POINTWISE_", "")
        if "CUDNN_ATTR_POINTWISE_AXIS" in pw:
            kind += f"@{pw['CUDNN_ATTR_POINTWISE_AXIS'][0]}"
    elif pre == "REDUCTION":
        rd = descs[a["CUDNN_ATTR_OPERATION_REDUCTION_DESC"][0]]["attrs"]
        kind = "reduce_" + {"0": "ADD", "3": "MAX"}.get(rd["CUDNN_ATTR_REDUCTION_OPERATOR"][0], "?")
    else:
        kind = pre.lower()
    return kind, roles


def graphs(descs):
    """every operation graph, in order: [(ops as (kind, roles))]"""
    res = []
    for i, d in sorted(descs.items()):
        if d["type"] == "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR" and "CUDNN_ATTR_OPERATIONGRAPH_OPS" in d["attrs"]:
            res.append([op_of(descs, j) for j in d["attrs"]["CUDNN_ATTR_OPERATIONGRAPH_OPS"]])
    return res


def env(**kw):
    e = dict(ENV, NABLA_CUDNN_LIBRARY=STANDIN)
    for k in ("NABLA_CUDA_ATTENTION", "NABLA_CUDNN_STANDIN_VERSION", "NABLA_CUDNN_STANDIN_ENGINES", "NABLA_CUDNN_STANDIN_FAIL_EXECUTE",
              "NABLA_CUDNN_STANDIN_NO_BACKWARD", "NABLA_CUDNN_STANDIN_NO_RNG", "NABLA_CUDNN_TEST_PLANT"):
        e.pop(k, None)
    for k, v in kw.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def run(code, timeout=300, **kw):
    return emuutil.run([NABLA, "-e", code], timeout, env(**kw))


FIELDS = ["backend", "reason", "last_fallback", "cudnn_version", "nondeterministic", "plans"]
# prints cuda.attention_backend() one field a line after a marker (parsed by fields())
SHOW = "b = cuda.attention_backend()\nprint(\"@@\")\n" + "\n".join(f"print(b.{f})" for f in FIELDS)


def fields(so):
    if "@@" not in so:
        return {}
    lines = so.split("@@\n", 1)[1].splitlines()[:len(FIELDS)]
    conv = lambda x: None if x == "nil" else True if x == "true" else False if x == "false" else int(x) if x.isdigit() else x  # noqa: E731
    return dict(zip(FIELDS, map(conv, lines)))


def backend(**kw):
    rc, so, se = run(SHOW, **kw)
    return fields(so) or {"error": (so + se).strip()[-400:]}


ROW = "q = randn({B}, {H}, {T}, {D}).to(\"{dt}\").cuda()\nk = randn({B}, {H}, {S}, {D}).to(\"{dt}\").cuda()\n" \
      "v = randn({B}, {H}, {S}, {D}).to(\"{dt}\").cuda()\n"


def two_graphs(name, code):
    """runs code (which prints "ok") with cuDNN forced and the stand-in's log;
    (the forward and backward graphs, the log's events), or None after
    reporting why not"""
    log = os.path.join(TMPDIR, f"{name}.log")
    rc, so, se = run(code, NABLA_CUDNN_STANDIN_LOG=log, NABLA_CUDA_ATTENTION="cudnn")
    if rc != 0 or "ok" not in so:
        out("FAIL", f"cudnn_graph.{name}", f"rc={rc}: {(so + se)[-600:]}")
        return None
    descs, events = parse_log(log)
    gs = graphs(descs)
    if len(gs) != 2:
        out("FAIL", f"cudnn_graph.{name}", f"expected a forward and a backward graph, got {len(gs)}")
        return None
    return gs, events


def graph_case(name, B, H, T, S, D, dt, causal):
    c = "true" if causal else "false"
    code = ROW.format(B=B, H=H, T=T, S=S, D=D, dt=dt) + (
        f"f = fn(q, k, v) sum(scaled_dot_product_attention(q, k, v, causal={c}).to(\"f32\"))\n"
        "g = grad(f, argnums=list(0, 1, 2))(q, k, v)\ncuda.synchronize()\nprint(\"ok\")")
    got = two_graphs(name, code)
    if got is None:
        return
    gs, events = got
    errs = []
    io = {"bf16": "BFLOAT16", "f16": "HALF"}[dt]
    mask = ["GEN_INDEX@2", "GEN_INDEX@3", "CMP_GE", "BINARY_SELECT"] if causal else []
    fwd_k = ["matmul", "MUL"] + mask + ["reduce_MAX", "SUB", "EXP", "reduce_ADD", "LOG", "ADD", "DIV", "matmul"]
    bwd_k = ["matmul", "MUL"] + mask + ["MUL", "reduce_ADD", "SUB", "EXP", "reshape", "matmul", "matmul", "SUB", "MUL", "MUL",
                                        "matmul", "reshape", "matmul"]
    fwd, bwd = gs
    if [k for k, _ in fwd] != fwd_k:
        errs.append(f"forward ops {[k for k, _ in fwd]}")
    if [k for k, _ in bwd] != bwd_k:
        errs.append(f"backward ops {[k for k, _ in bwd]}")

    def want(what, t, uid, dims, strides, dtype, virtual=False, by_value=False):
        exp = {"uid": uid, "dims": dims, "strides": strides, "dtype": dtype, "virtual": virtual, "by_value": by_value}
        got = {k: t[k] for k in exp if exp[k] is not None}
        if got != {k: v for k, v in exp.items() if v is not None}:
            errs.append(f"{what}: got {t}, expected {exp}")

    cont = lambda r, c_: [H * r * c_, r * c_, c_, 1]  # noqa: E731  (a contiguous [B, H, rows, cols])
    if not errs:
        mm0, mul = fwd[0][1], fwd[1][1]
        want("fwd Q", mm0["ADESC"], 1, [B, H, T, D], cont(T, D), io)
        want("fwd K^T", mm0["BDESC"], 2, [B, H, D, S], [H * S * D, S * D, 1, D], io)
        want("fwd scores", mm0["CDESC"], None, [B, H, T, S], [H * T * S, T * S, S, 1], "FLOAT", virtual=True)
        want("fwd scale", mul["BDESC"], 6, [1, 1, 1, 1], None, "FLOAT", by_value=True)
        if causal:
            want("fwd row index", fwd[2][1]["YDESC"], None, [B, H, T, S], None, "INT32", virtual=True)
            want("fwd keep", fwd[4][1]["YDESC"], None, [B, H, T, S], None, "BOOLEAN", virtual=True)
            want("fwd -inf", fwd[5][1]["BDESC"], 7, [1, 1, 1, 1], None, "FLOAT", by_value=True)
        stats = fwd[-3][1]["YDESC"]
        want("fwd Stats", stats, 5, [B, H, T, 1], [H * T, T, 1, 1], "FLOAT")
        want("fwd V", fwd[-1][1]["BDESC"], 3, [B, H, S, D], cont(S, D), io)
        want("fwd O", fwd[-1][1]["CDESC"], 4, [B, H, T, D], cont(T, D), io)
        for kind, roles in fwd + bwd:   # every intermediate is virtual, every uid < 100 is not
            for r, t in roles.items():
                if (t["uid"] >= 100) != t["virtual"]:
                    errs.append(f"{kind}.{r}: uid {t['uid']} virtual={t['virtual']}")
        want("bwd Q", bwd[0][1]["ADESC"], 1, [B, H, T, D], cont(T, D), io)
        want("bwd K^T", bwd[0][1]["BDESC"], 2, [B, H, D, S], [H * S * D, S * D, 1, D], io)
        o = 2 + len(mask)
        want("bwd dO", bwd[o][1]["XDESC"], 8, [B, H, T, D], cont(T, D), io)
        want("bwd O", bwd[o][1]["BDESC"], 4, [B, H, T, D], cont(T, D), io)
        want("bwd Dsum", bwd[o + 1][1]["YDESC"], 12, [B, H, T, 1], [H * T, T, 1, 1], "FLOAT")
        want("bwd Stats", bwd[o + 2][1]["BDESC"], 5, [B, H, T, 1], [H * T, T, 1, 1], "FLOAT")
        want("bwd P^T", bwd[o + 4][1]["YDESC"], None, [B, H, S, T], [H * T * S, T * S, 1, S], "FLOAT", virtual=True)
        want("bwd dV", bwd[o + 5][1]["CDESC"], 11, [B, H, S, D], cont(S, D), io)
        want("bwd V^T", bwd[o + 6][1]["BDESC"], 3, [B, H, D, S], [H * S * D, S * D, 1, D], io)
        want("bwd scale", bwd[o + 9][1]["BDESC"], 6, [1, 1, 1, 1], None, "FLOAT", by_value=True)
        want("bwd K", bwd[o + 10][1]["BDESC"], 2, [B, H, S, D], cont(S, D), io)
        want("bwd dQ", bwd[o + 10][1]["CDESC"], 9, [B, H, T, D], cont(T, D), io)
        want("bwd dS^T", bwd[o + 11][1]["YDESC"], None, [B, H, S, T], [H * T * S, T * S, 1, S], "FLOAT", virtual=True)
        want("bwd dK", bwd[o + 12][1]["CDESC"], 10, [B, H, S, D], cont(S, D), io)
    scales = [float(w[2]) for w in events if w[0] == "by_value" and w[1] == "6"]
    if not scales or any(abs(s - D ** -0.5) > 1e-6 for s in scales):
        errs.append(f"the by-value scale {scales} is not 1/sqrt({D})")
    execs = [w for w in events if w[0] == "execute"]
    if [len(w) - 2 for w in execs] != [7, 12]:
        errs.append(f"executions with {[len(w) - 2 for w in execs]} pointers, expected a forward (7) then a backward (12)")
    out("FAIL" if errs else "PASS", f"cudnn_graph.{name}", "; ".join(errs))


PACKED = ("qkv = randn({B}, {T}, {C3}).to(\"{dt}\").cuda()\n"
          "fn att(qkv) {{\n  p = chunk(qkv, 3, axis=-1)\n"
          "  fn heads_of(z) = permute(reshape(z, [{B}, {T}, {H}, {hd}]), [0, 2, 1, 3])\n"
          "  y = scaled_dot_product_attention(heads_of(p[0]), heads_of(p[1]), heads_of(p[2]), causal={causal})\n"
          "  reshape(permute(y, [0, 2, 1, 3]), [{B}, {T}, {C}])\n}}\n")


def mask_graph_case(name, B, H, T, S, D, dt, mshape):
    """the masked graph: the bias (uid 13, io dtype) added to the scaled scores, in the
    forward and the backward; [1, 1, T, S] when the mask broadcasts, else [B, H, T, S]"""
    code = ROW.format(B=B, H=H, T=T, S=S, D=D, dt=dt) + (
        f"m = randn({', '.join(map(str, mshape))}).cuda()\n"
        "f = fn(q, k, v) sum(scaled_dot_product_attention(q, k, v, mask=m).to(\"f32\"))\n"
        "g = grad(f, argnums=list(0, 1, 2))(q, k, v)\ncuda.synchronize()\nprint(\"ok\")")
    got = two_graphs(name, code)
    if got is None:
        return
    gs, events = got
    io = {"bf16": "BFLOAT16", "f16": "HALF"}[dt]
    errs = []
    fwd_k = ["matmul", "MUL", "ADD", "reduce_MAX", "SUB", "EXP", "reduce_ADD", "LOG", "ADD", "DIV", "matmul"]
    bwd_k = ["matmul", "MUL", "ADD", "MUL", "reduce_ADD", "SUB", "EXP", "reshape", "matmul", "matmul", "SUB", "MUL", "MUL",
             "matmul", "reshape", "matmul"]
    for what, ops, want in (("forward", gs[0], fwd_k), ("backward", gs[1], bwd_k)):
        if [k for k, _ in ops] != want:
            errs.append(f"{what} ops {[k for k, _ in ops]}")
            continue
        add = ops[2][1]
        # [B, H, T, D] operands reach the masked graph as contiguous [B*H, T, D] ([B*H, 1, T, D]):
        # the bias is [1, 1, T, S] when the mask broadcasts, else one [T, S] per batch matrix
        one = len(mshape) <= 2
        dims = [1, 1, T, S] if one else [B * H, 1, T, S]
        strides = [T * S, T * S, S, 1]
        exp_bias = {"uid": 13, "dims": dims, "strides": strides, "dtype": io, "virtual": False, "by_value": False}
        if add["BDESC"] != exp_bias:
            errs.append(f"{what} bias: got {add['BDESC']}, expected {exp_bias}")
        if add["XDESC"]["uid"] != ops[1][1]["YDESC"]["uid"] or not add["YDESC"]["virtual"] or add["YDESC"]["dtype"] != "FLOAT":
            errs.append(f"{what}: the bias is not added to the scaled scores into a virtual f32 tensor: {add}")
        reader = ops[3] if what == "forward" else ops[5]   # reduce_max / s - Stats
        if reader[1]["XDESC"]["uid"] != add["YDESC"]["uid"]:
            errs.append(f"{what}: {reader[0]} does not read the biased scores")
    execs = [w for w in events if w[0] == "execute"]
    if [sorted(map(int, w[2:])) for w in execs] != [[1, 2, 3, 4, 5, 6, 7, 13], list(range(1, 14))]:
        errs.append(f"executions with uids {[w[2:] for w in execs]}, expected the forward's 8 and the backward's 13")
    out("FAIL" if errs else "PASS", f"cudnn_graph.{name}", "; ".join(errs))


def packed_case(name, B, T, H, hd, dt, causal):
    """the heads of a packed [B, T, 3C] qkv go to cuDNN as strided views (no copy): Q, K, V
    with the packed strides, O laid out [B, T, H, hd], dQ/dK/dV likewise"""
    C = H * hd
    code = PACKED.format(B=B, T=T, C3=3 * C, C=C, H=H, hd=hd, dt=dt, causal="true" if causal else "false") + (
        "g = grad(fn(z) sum(att(z).to(\"f32\")))(qkv)\ncuda.synchronize()\nprint(\"ok\")")
    got = two_graphs(name, code)
    if got is None:
        return
    gs = got[0]
    packed = [T * 3 * C, hd, 3 * C, 1]
    packed_t = [T * 3 * C, hd, 1, 3 * C]
    bthd = [T * C, hd, C, 1]
    seen = {}
    for ops in gs:
        for _, roles in ops:
            for t in roles.values():
                if t["uid"] < 100 and t["uid"] not in (5, 6, 7, 12):
                    seen.setdefault(t["uid"], set()).add((tuple(t["dims"]), tuple(t["strides"])))
    exp = {1: {((B, H, T, hd), tuple(packed))}, 2: {((B, H, T, hd), tuple(packed)), ((B, H, hd, T), tuple(packed_t))},
           3: {((B, H, T, hd), tuple(packed)), ((B, H, hd, T), tuple(packed_t))}, 4: {((B, H, T, hd), tuple(bthd))},
           8: {((B, H, T, hd), (H * T * hd, T * hd, hd, 1))},   # dO: as autograd hands it over
           # dQ, dK, dV: laid out like [B, T, H, hd] each (not yet into one packed [B, T, 3C]: docs/cuda.md)
           9: {((B, H, T, hd), tuple(bthd))}, 10: {((B, H, T, hd), tuple(bthd))}, 11: {((B, H, T, hd), tuple(bthd))}}
    errs = [f"uid {u}: {sorted(seen.get(u, []))}, expected {sorted(e)}" for u, e in exp.items() if seen.get(u) != e]
    out("FAIL" if errs else "PASS", f"cudnn_graph.{name}", "; ".join(errs))


def qkv_case(name, B, T, H, hd, dt, causal):
    """attention_qkv (the model's op): Q, K, V read from the packed [B, T, 3C] qkv, O
    written as [B, T, C], dO read as autograd hands over the [B, T, C] gradient, and
    dQ, dK, dV written straight into ONE packed [B, T, 3C] gradient (each with the
    packed strides, at its third's offset); the values of that gradient vs torch"""
    log = os.path.join(TMPDIR, f"{name}.log")
    C = H * hd
    cz = "true" if causal else "false"
    code = (f"qkv = randn({B}, {T}, {3 * C}).to(\"{dt}\").cuda()\nr = randn({B}, {T}, {C}).cuda()\n"
            f"y = attention_qkv(qkv, {H}, causal={cz})\n"
            f"g = grad(fn(z) sum(attention_qkv(z, {H}, causal={cz}).to(\"f32\") * r))(qkv)\n"
            "cuda.synchronize()\nsave(OUT, {qkv: qkv.to(\"f32\").cpu(), r: r.cpu(), y: y.to(\"f32\").cpu(), g: g.to(\"f32\").cpu()})\n"
            "print(\"ok\")")
    npz = os.path.join(TMPDIR, f"{name}.safetensors")
    rc, so, se = run(f"OUT = \"{npz}\"\n" + code, NABLA_CUDNN_STANDIN_LOG=log, NABLA_CUDA_ATTENTION="cudnn")
    if rc != 0 or "ok" not in so:
        return out("FAIL", f"cudnn_graph.{name}", f"rc={rc}: {(so + se)[-600:]}")
    gs = graphs(parse_log(log)[0])
    packed = (T * 3 * C, hd, 3 * C, 1)
    packed_t = (T * 3 * C, hd, 1, 3 * C)
    btc = (T * C, hd, C, 1)
    seen = {}
    for ops in gs:
        for _, roles in ops:
            for t in roles.values():
                if t["uid"] < 100 and t["uid"] not in (5, 6, 7, 12):
                    seen.setdefault(t["uid"], set()).add((tuple(t["dims"]), tuple(t["strides"]), t["dtype"]))
    want_dt = "BFLOAT16" if dt == "bf16" else "HALF"
    qk = {((B, H, T, hd), packed, want_dt), ((B, H, hd, T), packed_t, want_dt)}
    exp = {1: {((B, H, T, hd), packed, want_dt)}, 2: qk, 3: qk, 4: {((B, H, T, hd), btc, want_dt)},
           8: {((B, H, T, hd), btc, want_dt)},
           9: {((B, H, T, hd), packed, want_dt)}, 10: {((B, H, T, hd), packed, want_dt)},
           11: {((B, H, T, hd), packed, want_dt)}}
    errs = [f"uid {u}: {sorted(seen.get(u, []))}, expected {sorted(e)}" for u, e in exp.items() if seen.get(u) != e]
    if errs:
        return out("FAIL", f"cudnn_graph.{name}", "; ".join(errs))
    # the values the interpreted graph computed, against torch in f64 on the values held
    import numpy as np
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "numerics"))
    from harness import st_read
    t, _ = st_read(npz)
    X = torch.tensor(np.asarray(t["qkv"])).double().requires_grad_()
    R = torch.tensor(np.asarray(t["r"])).double()
    q, k, v = X.split(C, dim=-1)
    h = lambda z: z.reshape(B, T, H, hd).permute(0, 2, 1, 3)  # noqa: E731
    s_ = h(q) @ h(k).transpose(-1, -2) / hd ** 0.5
    if causal:
        s_ = s_.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    Y = (torch.softmax(s_, -1) @ h(v)).permute(0, 2, 1, 3).reshape(B, T, C)
    (Y * R).sum().backward()
    tol = 3e-2 if dt == "bf16" else 5e-3
    bad = [n for n, got, want in (("y", t["y"], Y.detach()), ("dqkv", t["g"], X.grad))
           if not np.allclose(np.asarray(got, dtype=np.float64), want.numpy(), rtol=tol, atol=tol)]
    out("FAIL" if bad else "PASS", f"cudnn_graph.{name}", f"values differ from torch: {bad}" if bad else "")


def values():
    """outputs and gradients through the interpreted graph vs torch (forced cudnn: no fallback)"""
    os.environ.update(env(NABLA_CUDA_ATTENTION="cudnn", NUMERICS_DEVICE="cuda"))
    os.environ["NABLA"] = NABLA
    sys.path.insert(0, os.path.join(ROOT, "tests", "numerics"))
    import harness  # noqa: E402
    import test_attention as ta  # noqa: E402
    # harness reads NUMERICS_DEVICE when first imported, and qkv_case imported it
    # before (st_read): without this the batches below ran on the CPU, never the graph
    harness.DEVICE = "cuda"
    np = harness.np
    shapes = {"odd_T": [(2, 3, 7, 8), (2, 3, 7, 8), (2, 3, 7, 8)], "T_gt_S": [(1, 2, 9, 16), (1, 2, 5, 16), (1, 2, 5, 16)],
              "T_lt_S": [(3, 5, 8), (3, 11, 8), (3, 11, 8)], "d64": [(1, 2, 33, 64), (1, 2, 33, 64), (1, 2, 33, 64)]}
    for dt in ("bf16", "f16"):
        b = harness.Batch(f"cudnn_standin_{dt}")
        for name, sh in shapes.items():
            for causal in (False, True):
                tag = f"{name}{'_causal' if causal else ''}"
                ta.value_case(b, f"value_{tag}", sh, dt, causal)
                ta.grad_case(b, f"grad_{tag}", sh, dt, causal)
        for (B, T, H, hd) in ((2, 5, 3, 8), (1, 9, 2, 16)):   # the heads of a packed qkv, read in place
            qkv = ta.rnd((B, T, 3 * H * hd))
            qe, qt = ta.nb_input(b, qkv, dt)
            W = ta.rng.standard_normal((B, T, H * hd))
            we = b.inp(W.astype(np.float32))
            for causal in (False, True):
                src = PACKED.format(B=B, T=T, C3=3 * H * hd, C=H * hd, H=H, hd=hd, dt=dt, causal="true" if causal else "false")
                src = src.replace(f"qkv = randn({B}, {T}, {3 * H * hd}).to(\"{dt}\").cuda()\n", "")
                x = qt.clone().requires_grad_(True)
                q, k, v = (z.reshape(B, T, H, hd).permute(0, 2, 1, 3) for z in x.chunk(3, -1))
                y = ta.ref(q, k, v, causal).permute(0, 2, 1, 3).reshape(B, T, H * hd)
                (y * harness.T(W)).sum().backward()
                tag = f"packed_{B}x{T}x{H}x{hd}{'_causal' if causal else ''}"
                b.case(f"value_{tag}", src + f"att({qe})", y.detach().to(ta.TORCH_DT[dt]), **ta.FWD_TOL[dt])
                b.case(f"grad_{tag}", src + f"grad(fn(z) sum(att(z).to(\"f32\") * {we}))({qe})",
                       x.grad.to(ta.TORCH_DT[dt]), **ta.GRAD_TOL[dt])
        mask_values(b, dt)
        ta.value_case(b, "value_scale0.3", shapes["odd_T"], dt, True, 0.3)
        ta.grad_case(b, "grad_scale0.3", shapes["odd_T"], dt, False, 0.3)
        b.run()
    emuutil.n_fail += harness._results["fail"]


def mask_values(b, dt):
    """masked attention through the interpreted graph vs torch in f64: the mask is
    rounded to the io dtype as nabla stores the bias (a bool one is exactly 0/-inf)"""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "numerics"))
    import test_attention as ta  # noqa: E402
    np = ta.np
    q_s, k_s, v_s = (2, 3, 7, 8), (2, 3, 11, 8), (2, 3, 11, 8)
    for mname, mshape in (("TS", (7, 11)), ("B1TS", (2, 1, 7, 11)), ("BHTS", (2, 3, 7, 11)), ("S", (11,))):
        for kind in ("bool", "float"):
            (qe, qt), (ke, kt), (ve, vt) = (ta.nb_input(b, ta.rnd(sh), dt) for sh in (q_s, k_s, v_s))
            if kind == "bool":
                m = ta.rng.random(mshape) > 0.4
                m[..., 0] = True   # no row fully masked
                add = torch.zeros(mshape, dtype=torch.float64).masked_fill(~torch.from_numpy(m), float("-inf"))
                me = f"({b.inp(m.astype(np.float32))} > 0.5)"
            else:
                m = ta.rng.standard_normal(mshape)
                me, add = ta.nb_input(b, m, dt)   # rounded as the bias is stored
                me = f"{me}.to(\"f32\")"        # the op casts it to the io dtype
            for t in (qt, kt, vt):
                t.requires_grad_(True)
            y = torch.softmax(qt @ kt.transpose(-2, -1) / 8 ** 0.5 + add, -1) @ vt
            W = ta.rng.standard_normal(tuple(y.shape))
            (y * harness_T(W)).sum().backward()
            we = b.inp(W.astype(np.float32))
            b.case(f"mask_{kind}_{mname}_value", f"scaled_dot_product_attention({qe}, {ke}, {ve}, mask={me})",
                   y.detach().to(ta.TORCH_DT[dt]), **ta.FWD_TOL[dt])
            b.case(f"mask_{kind}_{mname}_grads",
                   f"grad(fn(q, k, v) sum(scaled_dot_product_attention(q, k, v, mask={me}).to(\"f32\") * {we}), "
                   f"argnums=list(0, 1, 2))({qe}, {ke}, {ve})",
                   [t.grad.to(ta.TORCH_DT[dt]) for t in (qt, kt, vt)], **ta.GRAD_TOL[dt])


def harness_T(a):
    import harness
    return harness.T(a)


def mask_fallbacks():
    """no engine for the masked graph: the forward composes public ops (right values, the
    reason kept); forced cudnn there is an error; a backward with no engine after a
    cuDNN forward is an error naming the op, never a gradient without the mask"""
    def chk(name, ok, why):
        out("PASS" if ok else "FAIL", f"cudnn_graph.{name}", "" if ok else why)
    code = ("q = randn(2, 5, 8).to(\"bf16\").cuda()\nm = randn(5, 5).cuda()\n"
            "o = scaled_dot_product_attention(q, q, q, mask=m)\n"
            "r = scaled_dot_product_attention(q.cpu().to(\"f32\"), q.cpu().to(\"f32\"), q.cpu().to(\"f32\"), mask=m.cpu().to(\"bf16\").to(\"f32\"))\n"
            "print(max(abs(o.cpu().to(\"f32\") - r)).item() < 0.05)\n" + SHOW)
    rc, so, se = run(code, NABLA_CUDNN_STANDIN_ENGINES="")
    b = fields(so)
    chk("mask_no_engine_composes", rc == 0 and so.startswith("true") and "no engine" in (b.get("last_fallback") or ""),
        f"rc={rc} {so[:200]} {se[-300:]}")
    rc, so, se = run(code, NABLA_CUDNN_STANDIN_ENGINES="", NABLA_CUDA_ATTENTION="cudnn")
    chk("mask_no_engine_forced", rc != 0 and "NABLA_CUDA_ATTENTION=cudnn, but cuDNN cannot run it" in se and "no engine" in se, se[-400:])
    bwd = ("q = randn(2, 5, 8).to(\"bf16\").cuda()\nm = randn(5, 5).cuda()\n"
           "g = grad(fn(q) sum(scaled_dot_product_attention(q, q, q, mask=m).to(\"f32\")))(q)\ncuda.synchronize()\nprint(\"ran\")")
    rc, so, se = run(bwd, NABLA_CUDNN_STANDIN_NO_BACKWARD="1")
    chk("mask_backward_no_engine_is_error", rc != 0 and "ran" not in so and "scaled_dot_product_attention_backward" in se
        and "masked forward ran on cuDNN" in se and "no engine" in se, f"rc={rc} {so[:200]} {se[-400:]}")
    # the plan cache keys the mask's broadcast: [T, S] and [B, T, S] masks are two plans
    code = ("q = randn(2, 5, 8).to(\"bf16\").cuda()\n"
            "fn att(m) scaled_dot_product_attention(q, q, q, mask=m)\n"
            "att(randn(5, 5).cuda())\natt(randn(5, 5).cuda())\natt(randn(2, 5, 5).cuda())\natt(nil)\n"
            "print(cuda.attention_backend().plans)")
    rc, so, se = run(code)
    chk("mask_plan_cache", rc == 0 and so.split()[-1:] == ["3"], f"rc={rc} {so[-100:]} {se[-300:]}")


def plan_cache():
    log = os.path.join(TMPDIR, "cache.log")
    code = ("fn att(T) { q = randn(2, T, 8).to(\"bf16\").cuda()\nscaled_dot_product_attention(q, q, q, causal=true) }\n"
            "att(5)\natt(5)\natt(5)\na = cuda.attention_backend().plans\natt(6)\natt(5)\nprint(a, cuda.attention_backend().plans)")
    rc, so, se = run(code, NABLA_CUDNN_STANDIN_LOG=log)
    got = so.split()
    heur = sum(1 for w in parse_log(log)[1] if w[0] == "heuristics") if os.path.exists(log) else -1
    ok = rc == 0 and got[-2:] == ["1", "2"] and heur == 2
    out("PASS" if ok else "FAIL", "cudnn_graph.plan_cache", "" if ok else f"rc={rc} plans {got[-2:]} heuristics {heur}: {se[-300:]}")


def reasons():
    def chk(name, ok, why):
        out("PASS" if ok else "FAIL", f"cudnn_graph.{name}", "" if ok else why)

    b = backend(NABLA_CUDNN_LIBRARY=None)
    chk("reason_not_emulated", b.get("backend") == "fallback" and "not emulated" in (b.get("reason") or ""), str(b))
    b = backend(NABLA_CUDNN_LIBRARY=os.path.join(TMPDIR, "no", "libcudnn.so.9"))
    chk("reason_absent", b.get("backend") == "fallback" and "cuDNN is not available" in b.get("reason", "")
        and "libcudnn.so.9" in b.get("reason", ""), str(b))
    b = backend(NABLA_CUDNN_STANDIN_VERSION="8907")
    chk("reason_too_old", b.get("backend") == "fallback" and "8.9.7 is too old" in b.get("reason", "")
        and b.get("cudnn_version") == 8907, str(b))
    b = backend()
    chk("ready", b.get("backend") == "cudnn" and b.get("reason") is None and b.get("cudnn_version") == 91900, str(b))
    b = backend(NABLA_CUDA_ATTENTION="gemm")
    chk("forced_gemm", b.get("backend") == "gemm", str(b))
    rc, so, se = run(SHOW, NABLA_CUDA_ATTENTION="cuDNN")
    chk("bad_env", rc != 0 and "NABLA_CUDA_ATTENTION must be cudnn, fused, gemm or auto" in se, se[-300:])

    att = ("q = randn(2, 5, 8).to(\"{dt}\").cuda()\no = scaled_dot_product_attention(q, q, q, causal=true)\n"
           "cuda.synchronize()\n" + SHOW)
    # forcing cudnn where it cannot run is an error that says why; auto falls back and says why
    for name, kw, why in [("too_old", dict(NABLA_CUDNN_STANDIN_VERSION="8907"), "too old"),
                          ("no_engine", dict(NABLA_CUDNN_STANDIN_ENGINES=""), "no engine"),
                          ("f32", {}, "f16/bf16")]:
        dt = "f32" if name == "f32" else "bf16"
        rc, so, se = run(att.format(dt=dt), NABLA_CUDA_ATTENTION="cudnn", **kw)
        chk(f"forced_{name}", rc != 0 and "NABLA_CUDA_ATTENTION=cudnn, but cuDNN cannot run it" in se and why in se, se[-400:])
        rc, so, se = run(att.format(dt=dt), **kw)
        b = fields(so)
        last = b.get("last_fallback") or ""
        chk(f"fallback_{name}", rc == 0 and (why in last or why in (b.get("reason") or "")), f"rc={rc} {b} {se[-300:]}")
    # strided views cuDNN declines (no engine) are retried with contiguous copies (auto)
    code = PACKED.format(B=2, T=5, C3=72, C=24, H=3, hd=8, dt="bf16", causal="true") + (
        "w = randn(2, 5, 24).cuda()\nf = fn(z, w) sum(att(z).to(\"f32\") * w)\n"
        "d1 = max(abs(att(qkv).cpu().to(\"f32\") - att(qkv.cpu()).to(\"f32\"))).item()\n"
        "d2 = max(abs(grad(f)(qkv, w).cpu().to(\"f32\") - grad(f)(qkv.cpu(), w.cpu()).to(\"f32\"))).item()\n"
        "print(d1 < 0.05, d2 < 0.1)\n" + SHOW)
    for name, kw in (("views_declined_retried", dict(NABLA_CUDNN_STANDIN_ENGINES="")),
                     ("views_backward_declined_retried", dict(NABLA_CUDNN_STANDIN_NO_BACKWARD="1"))):
        rc, so, se = run(code, **kw)
        b = fields(so)
        chk(name, rc == 0 and so.startswith("true true") and "no engine" in (b.get("last_fallback") or ""),
            f"rc={rc} {so[:200]} {se[-300:]}")
    # an execution failure is an error naming the op, never a fallback
    rc, so, se = run(att.format(dt="bf16"), NABLA_CUDNN_STANDIN_FAIL_EXECUTE="1")
    chk("execute_failure", rc != 0 and "scaled_dot_product_attention: cuDNN execution failed" in se
        and "CUDNN_STATUS_EXECUTION_FAILED" in se and "NABLA_CUDNN_STANDIN_FAIL_EXECUTE" in se, se[-400:])
    # deterministic engines first; a non-deterministic one only when nothing else finalizes, and said
    bwd = ("q = randn(2, 5, 8).to(\"bf16\").cuda()\n"
           "g = grad(fn(q) sum(scaled_dot_product_attention(q, q, q).to(\"f32\")))(q)\ncuda.synchronize()\n"
           + SHOW)
    for engines, nondet in (("nondet,det", False), ("nondet", True)):
        rc, so, se = run(bwd, NABLA_CUDNN_STANDIN_ENGINES=engines)
        b = fields(so)
        chk(f"engines_{engines.replace(',', '_')}", rc == 0 and b.get("nondeterministic") is nondet, f"rc={rc} {b} {se[-300:]}")


# ---- dropout in the graph (cuDNN's RNG node) -------------------------------------------------
def standin_mask(seed, offset, keep, shape):
    """the stand-in's keep mask (standin.c's header: splitmix64's mix over (seed, offset,
    row-major index over the RNG node's dims)), reproduced in NumPy"""
    import numpy as np

    def mix(z):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))
    n = 1
    for d in shape:
        n *= d
    with np.errstate(over="ignore"):
        base = mix(np.array([seed], dtype=np.uint64) ^ mix(np.array([offset], dtype=np.uint64)))
        u = (mix(base + np.arange(n, dtype=np.uint64)) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    return (u < keep).reshape(shape)


def rng_ops(descs):
    """every RNG operation in creation order: {dist, prob, seed, offset, y} (tensors as tensor())"""
    res = []
    for i, d in sorted(descs.items()):
        if d["type"] != "CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR":
            continue
        a = d["attrs"]
        rd = descs[a["CUDNN_ATTR_OPERATION_RNG_DESC"][0]]["attrs"]
        res.append({"dist": E["cudnnRngDistribution_t"].get(int(rd["CUDNN_ATTR_RNG_DISTRIBUTION"][0])),
                    "prob": float(rd["CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY"][0]),
                    "seed": tensor(descs, a["CUDNN_ATTR_OPERATION_RNG_SEED"][0]),
                    "offset": tensor(descs, a["CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC"][0]),
                    "y": tensor(descs, a["CUDNN_ATTR_OPERATION_RNG_YDESC"][0])})
    return res


DROP_BODY = ("seed(5)\no = att({args})\nseed(5)\ng = grad(fn({args}) sum(att({args}).to(\"f32\") * w){argnums})({args})\n"
             "o2 = att({args})\ncuda.synchronize()\n")


def dropout_case(name, B, H, T, S, D, dt, causal, p, mask=False, packed=False):
    """dropout in the graph, forward and backward: the RNG node (BERNOULLI, probability 1-p,
    seed uid 14 and offset uid 15 as device INT64 [1,1,1,1]) after softmax, P * M then
    * 1/(1-p) (uid 16) before P V; in the backward the same RNG node, Dsum * (1-p) (uid 17),
    P * M * 1/(1-p) for dV, dP * M, dS * 1/(1-p); the seed and offset the stand-in read (the
    forward and its backward the same; the next call a new offset); the values: O and
    dQ/dK/dV (or the packed dqkv) against torch in f64 applying the stand-in's mask"""
    import numpy as np
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "numerics"))
    from harness import st_read
    log = os.path.join(TMPDIR, f"{name}.log")
    npz = os.path.join(TMPDIR, f"{name}.safetensors")
    cz = "true" if causal else "false"
    if packed:
        C = H * D
        code = PACKED.format(B=B, T=T, C3=3 * C, C=C, H=H, hd=D, dt=dt, causal=cz).replace(
            f"causal={cz})", f"causal={cz}, dropout={p})") + f"w = randn({B}, {T}, {C}).cuda()\n"
        code += DROP_BODY.format(args="qkv", argnums="")
        code += ("save(OUT, {qkv: qkv.to(\"f32\").cpu(), w: w.cpu(), o: o.to(\"f32\").cpu(), o2: o2.to(\"f32\").cpu(), "
                 "g: g.to(\"f32\").cpu()})\nprint(\"ok\")")
    else:
        ma = ", mask=m" if mask else ""
        code = ROW.format(B=B, H=H, T=T, S=S, D=D, dt=dt) + f"w = randn({B}, {H}, {T}, {D}).cuda()\nm = randn({T}, {S}).cuda()\n"
        code += f"fn att(q, k, v) scaled_dot_product_attention(q, k, v, causal={cz}, dropout={p}{ma})\n"
        code += DROP_BODY.format(args="q, k, v", argnums=", argnums=list(0, 1, 2)")
        code += ("save(OUT, {q: q.to(\"f32\").cpu(), k: k.to(\"f32\").cpu(), v: v.to(\"f32\").cpu(), w: w.cpu(), "
                 f"m: m.to(\"{dt}\").to(\"f32\").cpu(), o: o.to(\"f32\").cpu(), o2: o2.to(\"f32\").cpu(), "
                 "dq: g[0].to(\"f32\").cpu(), dk: g[1].to(\"f32\").cpu(), dv: g[2].to(\"f32\").cpu()})\nprint(\"ok\")")
    rc, so, se = run(f"OUT = \"{npz}\"\n" + code, NABLA_CUDNN_STANDIN_LOG=log, NABLA_CUDA_ATTENTION="cudnn")
    if rc != 0 or "ok" not in so:
        return out("FAIL", f"cudnn_graph.{name}", f"rc={rc}: {(so + se)[-600:]}")
    descs, events = parse_log(log)
    gs = graphs(descs)
    if len(gs) != 2:
        return out("FAIL", f"cudnn_graph.{name}", f"expected one forward and one backward graph (plans cached), got {len(gs)}")
    errs = []
    cmask = ["GEN_INDEX@2", "GEN_INDEX@3", "CMP_GE", "BINARY_SELECT"] if causal else []
    pre = ["matmul", "MUL"] + (["ADD"] if mask else []) + cmask
    fwd_k = pre + ["reduce_MAX", "SUB", "EXP", "reduce_ADD", "LOG", "ADD", "DIV", "rng", "MUL", "MUL", "matmul"]
    bwd_k = pre + ["MUL", "reduce_ADD", "MUL", "SUB", "EXP", "rng", "MUL", "MUL", "reshape", "matmul", "matmul", "MUL", "SUB",
                   "MUL", "MUL", "MUL", "matmul", "reshape", "matmul"]
    fwd, bwd = gs
    for what, ops, want in (("forward", fwd, fwd_k), ("backward", bwd, bwd_k)):
        if [k for k, _ in ops] != want:
            errs.append(f"{what} ops {[k for k, _ in ops]}, expected {want}")
    bh = [B, H] if packed or not mask else [B * H, 1]   # a masked problem reaches cuDNN as contiguous [B*H, T, D]
    scalar = {"dims": [1, 1, 1, 1], "strides": [1, 1, 1, 1], "dtype": "INT64", "virtual": False, "by_value": False}
    rngs = rng_ops(descs)
    if len(rngs) != 2:
        errs.append(f"{len(rngs)} RNG nodes, expected one per graph")
    for r in rngs:
        if r["dist"] != "CUDNN_RNG_DISTRIBUTION_BERNOULLI" or abs(r["prob"] - (1 - p)) > 1e-12:
            errs.append(f"RNG node {r['dist']} probability {r['prob']}, expected BERNOULLI {1 - p}")
        for role, uid in (("seed", 14), ("offset", 15)):
            got = {k: r[role][k] for k in ("uid", *scalar)}
            if got != dict(scalar, uid=uid):
                errs.append(f"RNG {role}: {got}, expected uid {uid} {scalar}")
        if r["y"]["dims"] != bh + [T, S] or r["y"]["dtype"] != "FLOAT" or not r["y"]["virtual"]:
            errs.append(f"RNG y {r['y']}, expected a virtual FLOAT {bh + [T, S]}")
    if not errs:
        def chk(what, ops, i, kind, **roles):
            k, ro = ops[i]
            for role, uid in roles.items():
                if k != kind or ro.get(role, {}).get("uid") != uid:
                    errs.append(f"{what}: op {i} {k} {role}={ro.get(role, {}).get('uid')}, expected {kind} {role}={uid}")
        uid = lambda ops, i, role: ops[i][1][role]["uid"]  # noqa: E731
        r = fwd_k.index("rng")
        m_uid = uid(fwd, r, "YDESC")
        chk("fwd P*M", fwd, r + 1, "MUL", XDESC=uid(fwd, r - 1, "YDESC"), BDESC=m_uid)
        chk("fwd *1/(1-p)", fwd, r + 2, "MUL", XDESC=uid(fwd, r + 1, "YDESC"), BDESC=16)
        chk("fwd (P*M/(1-p)) V", fwd, r + 3, "matmul", ADESC=uid(fwd, r + 2, "YDESC"), CDESC=4)
        if not fwd[r + 2][1]["BDESC"]["by_value"] or fwd[r + 2][1]["BDESC"]["dtype"] != "FLOAT":
            errs.append(f"fwd dropout scale {fwd[r + 2][1]['BDESC']}: expected a by-value FLOAT")
        r = bwd_k.index("rng")
        m_uid, red = uid(bwd, r, "YDESC"), len(pre) + 1
        chk("bwd Dsum*(1-p)", bwd, red + 1, "MUL", XDESC=uid(bwd, red, "YDESC"), BDESC=17, YDESC=12)
        chk("bwd P*M", bwd, r + 1, "MUL", XDESC=uid(bwd, r - 1, "YDESC"), BDESC=m_uid)
        chk("bwd *1/(1-p)", bwd, r + 2, "MUL", XDESC=uid(bwd, r + 1, "YDESC"), BDESC=16)
        chk("bwd reshape", bwd, r + 3, "reshape", XDESC=uid(bwd, r + 2, "YDESC"))
        chk("bwd dV", bwd, r + 4, "matmul", CDESC=11)
        chk("bwd dP*M", bwd, r + 6, "MUL", XDESC=uid(bwd, r + 5, "CDESC"), BDESC=m_uid)
        chk("bwd dP-Dsum", bwd, r + 7, "SUB", XDESC=uid(bwd, r + 6, "YDESC"), BDESC=12)
        chk("bwd P*(..)", bwd, r + 8, "MUL", XDESC=uid(bwd, r - 1, "YDESC"), BDESC=uid(bwd, r + 7, "YDESC"))
        chk("bwd dS*1/(1-p)", bwd, r + 9, "MUL", XDESC=uid(bwd, r + 8, "YDESC"), BDESC=16)
        chk("bwd dS*scale", bwd, r + 10, "MUL", XDESC=uid(bwd, r + 9, "YDESC"), BDESC=6)
    execs = [sorted(map(int, w[2:])) for w in events if w[0] == "execute"]
    base_f, base_b = [1, 2, 3, 4, 5, 6, 7] + ([13] if mask else []), list(range(1, 13)) + ([13] if mask else [])
    want_ex = [base_f + [14, 15, 16]] * 2 + [base_b + [14, 15, 16, 17]] + [base_f + [14, 15, 16]]
    if execs != want_ex:
        errs.append(f"executions with uids {execs}, expected {want_ex}")
    bv = {u: [float(w[2]) for w in events if w[0] == "by_value" and w[1] == u] for u in ("16", "17")}
    if len(bv["16"]) != 4 or any(abs(x - 1 / (1 - p)) > 1e-6 for x in bv["16"]) or len(bv["17"]) != 1 or \
            abs(bv["17"][0] - (1 - p)) > 1e-6:
        errs.append(f"by-value dropout scales {bv}, expected 1/(1-p) x4 and (1-p) once")
    # the stand-in's rng lines: forward, grad's forward, its backward, the next call
    drawn = [(int(w[2]), int(w[3]), float(w[4])) for w in events if w[0] == "rng"]
    nxt = (B * H * T * S + 3) // 4
    if [(s_, o_) for s_, o_, _ in drawn] != [(5, 0), (5, 0), (5, 0), (5, nxt)]:
        errs.append(f"seeds/offsets drawn {drawn}, expected (5, 0) three times (forward, grad's forward, its backward) "
                    f"then (5, {nxt})")
    if errs:
        return out("FAIL", f"cudnn_graph.{name}", "; ".join(errs))
    # values: torch in f64 on the stored inputs, the stand-in's masks
    t, _ = st_read(npz)
    f64 = lambda n: torch.tensor(np.asarray(t[n], dtype=np.float64))  # noqa: E731
    M0 = torch.from_numpy(standin_mask(5, 0, 1 - p, (B, H, T, S))).double()
    M1 = torch.from_numpy(standin_mask(5, nxt, 1 - p, (B, H, T, S))).double()

    def att(q, k, v, M):
        s_ = q @ k.transpose(-1, -2) / D ** 0.5
        if mask:
            s_ = s_ + f64("m")
        if causal:
            s_ = s_.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
        return (torch.softmax(s_, -1) * M / (1 - p)) @ v
    if packed:
        X = f64("qkv").requires_grad_()
        h = lambda z: z.reshape(B, T, H, D).permute(0, 2, 1, 3)  # noqa: E731
        fo = lambda M: att(*(h(z) for z in X.split(H * D, dim=-1)), M).permute(0, 2, 1, 3).reshape(B, T, H * D)  # noqa: E731
        ins, names = [X], ["g"]
    else:
        ins = [f64(n).requires_grad_() for n in ("q", "k", "v")]
        fo = lambda M: att(*ins, M)  # noqa: E731
        names = ["dq", "dk", "dv"]
    Y = fo(M0)
    (Y * f64("w")).sum().backward()
    tol = 3e-2 if dt == "bf16" else 5e-3
    pairs = [("o", t["o"], Y.detach()), ("o2", t["o2"], fo(M1).detach())] + [(n, t[n], x.grad) for n, x in zip(names, ins)]
    bad = [n for n, got, want in pairs if not np.allclose(np.asarray(got, dtype=np.float64), want.numpy(), rtol=tol, atol=tol)]
    if (M0 == M1).all():
        bad.append("the two calls' masks are equal")
    out("FAIL" if bad else "PASS", f"cudnn_graph.{name}", f"values differ from torch with the stand-in's mask: {bad}" if bad else "")


def dropout_stats():
    """q = 0 makes P uniform (1/S) and v = I (S = D) makes O the mask itself: O = M / ((1-p) S).
    The kept set read back from O equals the stand-in's mask for the seed and offset it logged
    (so nabla passed p as the keep probability 1-p and scaled by 1/(1-p)), and the fraction kept
    over B*H*T*S = 32768 elements is 1-p within 6 binomial sigmas"""
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "tests", "numerics"))
    from harness import st_read
    B, H, T, S, p = 2, 4, 64, 64, 0.3
    log, npz = os.path.join(TMPDIR, "dropout_stats.log"), os.path.join(TMPDIR, "dropout_stats.safetensors")
    code = (f"OUT = \"{npz}\"\nq = zeros({B}, {H}, {T}, {S}).to(\"bf16\").cuda()\nv = eye({S}).to(\"bf16\").cuda()\n"
            f"o = scaled_dot_product_attention(q, q, v, dropout={p})\ncuda.synchronize()\n"
            "save(OUT, {o: o.to(\"f32\").cpu()})\nprint(\"ok\")")
    rc, so, se = run(code, NABLA_CUDNN_STANDIN_LOG=log, NABLA_CUDA_ATTENTION="cudnn")
    if rc != 0 or "ok" not in so:
        return out("FAIL", "cudnn_graph.dropout_stats", f"rc={rc}: {(so + se)[-600:]}")
    drawn = [(int(w[2]), int(w[3])) for w in parse_log(log)[1] if w[0] == "rng"]
    o = np.asarray(st_read(npz)[0]["o"], dtype=np.float64).reshape(B, H, T, S)
    errs = []
    if len(drawn) != 1:
        errs.append(f"rng draws {drawn}")
    else:
        kept = standin_mask(*drawn[0], 1 - p, (B, H, T, S))
        if not (o[kept] == np.float32(1 / ((1 - p) * S))).all() and not np.allclose(o[kept], 1 / ((1 - p) * S), rtol=4e-3):
            errs.append(f"kept values {np.unique(o[kept])[:5]}, expected 1/((1-p) S) = {1 / ((1 - p) * S)}")
        if (o > 0).tolist() != kept.tolist():
            errs.append(f"the kept set differs from the stand-in's mask at {int(((o > 0) != kept).sum())} elements")
        n = o.size
        frac, sigma = float((o > 0).mean()), (p * (1 - p) / n) ** 0.5
        if abs(frac - (1 - p)) > 6 * sigma:
            errs.append(f"fraction kept {frac:.4f}, expected {1 - p} within 6 sigma = {6 * sigma:.4f}")
    out("FAIL" if errs else "PASS", "cudnn_graph.dropout_stats", "; ".join(errs))


def dropout_fallbacks():
    """where cuDNN cannot run the dropout graph the op composes public ops (dropout() on the
    same random stream: the declined call drew nothing) and cuda.attention_backend() says why;
    forcing cudnn there is the error saying why; a backward cuDNN cannot run after a dropout
    forward that ran on it is an error naming the op; a planted graph without (or not using)
    the RNG node is an internal error, never executed; p is in the plan cache's key"""
    def chk(name, ok, why):
        out("PASS" if ok else "FAIL", f"cudnn_graph.{name}", "" if ok else why)
    same = ("q = randn(2, 5, {d}).to(\"{dt}\").cuda()\nseed(3)\na = scaled_dot_product_attention(q, q, q, dropout=0.4)\n"
            "seed(3)\ne = dropout(softmax(q @ transpose(q, -2, -1) * {sc}, -1), 0.4, true) @ q\n"
            "print(max(abs(a.to(\"f32\") - e.to(\"f32\"))).item() < 1e-2)\n" + SHOW)
    for name, dt, d, kw, why in (("f32", "f32", 8, {}, "f16/bf16"), ("head_dim", "bf16", 12, {}, "head dims"),
                                 ("no_engine", "bf16", 8, dict(NABLA_CUDNN_STANDIN_NO_RNG="1"), "no engine")):
        code = same.format(d=d, dt=dt, sc=d ** -0.5)
        rc, so, se = run(code, **kw)
        b = fields(so)
        chk(f"dropout_fallback_{name}", rc == 0 and so.startswith("true") and why in (b.get("last_fallback") or ""),
            f"rc={rc} {so[:300]} {se[-300:]}")
        rc, so, se = run(code, NABLA_CUDA_ATTENTION="cudnn", **kw)
        chk(f"dropout_forced_{name}", rc != 0 and "NABLA_CUDA_ATTENTION=cudnn, but cuDNN cannot run it" in se and why in se,
            f"rc={rc} {se[-400:]}")
    # a mask that requires grad: no dBias in the graph, so the composed ops (its gradient), the reason kept
    mg = ("q = randn(2, 5, 8).to(\"bf16\").cuda()\nm0 = randn(5, 5).cuda()\n"
          "g = grad(fn(m) sum(scaled_dot_product_attention(q, q, q, mask=m, dropout=0.4).to(\"f32\")))(m0)\n"
          "print(g.shape, max(abs(g)).item() > 0)\n" + SHOW)
    rc, so, se = run(mg)
    chk("dropout_mask_requires_grad_composes", rc == 0 and so.startswith("[5, 5] true")
        and "requires grad" in (fields(so).get("last_fallback") or ""), f"rc={rc} {so[:300]} {se[-300:]}")
    rc, so, se = run(mg, NABLA_CUDA_ATTENTION="cudnn")
    chk("dropout_mask_requires_grad_forced", rc != 0 and "cuDNN cannot run it: the mask requires grad" in se, f"rc={rc} {se[-300:]}")
    bwd = ("q = randn(2, 5, 8).to(\"bf16\").cuda()\n"
           "g = grad(fn(q) sum(scaled_dot_product_attention(q, q, q, dropout=0.25).to(\"f32\")))(q)\ncuda.synchronize()\n"
           "print(\"ran\")")
    rc, so, se = run(bwd, NABLA_CUDNN_STANDIN_NO_BACKWARD="1")
    chk("dropout_backward_no_engine_is_error", rc != 0 and "ran" not in so and "scaled_dot_product_attention_backward" in se
        and "dropout forward ran on cuDNN" in se and "no engine" in se, f"rc={rc} {so[:200]} {se[-400:]}")
    for plant in ("no_rng", "rng_unused"):
        log = os.path.join(TMPDIR, f"plant_{plant}.log")
        rc, so, se = run("q = randn(2, 5, 8).to(\"bf16\").cuda()\no = scaled_dot_product_attention(q, q, q, dropout=0.25)\n"
                         "cuda.synchronize()\nprint(\"ran\")", NABLA_CUDNN_STANDIN_LOG=log, NABLA_CUDNN_TEST_PLANT=plant)
        ev = parse_log(log)[1] if os.path.exists(log) else []
        chk(f"dropout_planted_{plant}", rc != 0 and "internal error" in se and "RNG node" in se and "silently skip dropout" in se
            and not any(w[0] == "execute" for w in ev), f"rc={rc} {so[:200]} {se[-400:]}")
    code = ("q = randn(2, 5, 8).to(\"bf16\").cuda()\nfn att(p) scaled_dot_product_attention(q, q, q, dropout=p)\n"
            "att(0.2)\natt(0.2)\natt(0.3)\natt(0)\nprint(cuda.attention_backend().plans)")
    rc, so, se = run(code)
    chk("dropout_plan_cache", rc == 0 and so.split()[-1:] == ["3"], f"rc={rc} {so[-100:]} {se[-300:]}")


if __name__ == "__main__":
    reasons()
    graph_case("fwd_bwd_bf16_causal", 2, 3, 5, 5, 8, "bf16", True)
    graph_case("fwd_bwd_f16", 1, 2, 7, 7, 16, "f16", False)
    graph_case("fwd_bwd_bf16_T_gt_S_causal", 2, 1, 9, 4, 8, "bf16", True)
    graph_case("fwd_bwd_bf16_d64", 1, 1, 3, 6, 64, "bf16", False)
    mask_graph_case("mask_TS_bf16", 2, 3, 5, 7, 8, "bf16", (5, 7))
    mask_graph_case("mask_BHTS_f16", 2, 3, 6, 4, 16, "f16", (2, 3, 6, 4))
    mask_graph_case("mask_S_bf16", 1, 2, 9, 9, 8, "bf16", (9,))
    mask_fallbacks()
    packed_case("packed_bf16_causal", 2, 5, 3, 8, "bf16", True)
    packed_case("packed_f16", 1, 7, 2, 16, "f16", False)
    qkv_case("qkv_bf16_causal", 2, 5, 3, 8, "bf16", True)
    qkv_case("qkv_f16", 1, 7, 2, 16, "f16", False)
    plan_cache()
    dropout_case("dropout_bf16_causal", 2, 3, 5, 5, 8, "bf16", True, 0.3)
    dropout_case("dropout_f16_mask", 2, 2, 6, 9, 16, "f16", False, 0.5, mask=True)
    dropout_case("dropout_packed_bf16", B=2, H=3, T=5, S=5, D=8, dt="bf16", causal=False, p=0.2, packed=True)
    dropout_case("dropout_packed_f16_causal", B=1, H=2, T=7, S=7, D=16, dt="f16", causal=True, p=0.1, packed=True)
    dropout_stats()
    dropout_fallbacks()
    values()
    sys.exit(1 if emuutil.n_fail else 0)
