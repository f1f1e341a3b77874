#!/usr/bin/python3
"""Tied weights (one tensor at several places of a model, as GPT-2's token
embedding and output projection) vs torch, in f64 on fresh random inputs.

A tied tensor is ONE parameter: grad() gives its total gradient at every
place, optimizers (AdamW, Adam, SGD with momentum; through grad() trees and
through .grad) update it once with one state, clip_grad_norm and the loss
scaler's unscale count and scale it once, nn.parameters / nn.num_params list
and count it once.  The torch reference ties the same way (lm_head.weight =
wte.weight) and uses torch.optim / clip_grad_norm_.

Run: NABLA=build/nabla /usr/bin/python3 tests/numerics/test_ties.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import TMP, Batch, T, check, finish, rng, torch, np  # noqa: E402
import json, struct  # noqa: E402,E401

V, D, N = 7, 5, 6   # vocabulary, width, tokens


def data():
    W = rng.standard_normal((V, D))
    H = rng.standard_normal((D, D)) * 0.5
    idx = rng.integers(0, V, size=N)
    y = rng.integers(0, V, size=N)
    return W, H, idx, y


def torch_model(W, H):
    w = T(W.copy(), requires_grad=True)
    h = T(H.copy(), requires_grad=True)
    return w, h


def torch_loss(w, h, idx, y):
    e = w[torch.from_numpy(idx)]                       # embedding
    logits = torch.tanh(e @ h) @ w.T                  # tied output projection
    return torch.nn.functional.cross_entropy(logits, torch.from_numpy(y))


NB_MODEL = """
W = clone({W})
m = {{wte: W, mid: {{h: clone({H})}}, lm_head: W}}
fn loss_fn(m) = cross_entropy(tanh(embedding(m.wte, {idx}) @ m.mid.h) @ m.lm_head.T, {y})
"""


def model_code(b, W, H, idx, y):
    return NB_MODEL.format(W=b.inp(W), H=b.inp(H), idx=b.inp(idx), y=b.inp(y)).strip() + "\n"


def cases(b):
    # ---- the gradient at every place is the total one
    W, H, idx, y = data()
    w, h = torch_model(W, H)
    torch_loss(w, h, idx, y).backward()
    pre = model_code(b, W, H, idx, y)
    b.case("grad_tied_is_total", pre + "g = grad(loss_fn)(m)\nlist(g.wte, g.lm_head, g.mid.h)",
           [w.grad, w.grad, h.grad], rtol=1e-9, atol=1e-11)
    b.case("grad_tied_same_tensor_and_untied_after", pre + "g = grad(loss_fn)(m)\nlist(len(tree_tensors(g)), len(tree_tensors(m)))",
           [2, 2], dtype=False)
    b.case("value_and_grad_tied", pre + "r = value_and_grad(loss_fn)(m)\nlist(r[0], r[1].lm_head)",
           [torch_loss(*torch_model(W, H), idx, y).detach(), w.grad], rtol=1e-9, atol=1e-11)

    # ---- parameters and counts
    b.case("parameters_once", "import nn\n" + pre + "list(len(nn.parameters(m)), nn.num_params(m))",
           [2, V * D + D * D], dtype=False)
    b.case("map_tree_keeps_ties", "import nn\n" + pre + "z = nn.map_tree(m, zeros_like)\nlist(len(tree_tensors(z)), z.wte.shape == z.lm_head.shape)",
           [2, True], dtype=False)

    # ---- optimizers over several steps: grad() trees and .grad
    for opt_name, nb_opt, torch_opt in (
        ("adamw", "optim.adamw(m, lr=0.05, weight_decay=0.1)", lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1)),
        ("adam", "optim.adam(m, lr=0.05, weight_decay=0.1)", lambda ps: torch.optim.Adam(ps, lr=0.05, weight_decay=0.1)),
        ("sgd_momentum", "optim.sgd(m, 0.1, momentum=0.9)", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
    ):
        W, H, idx, y = data()
        w, h = torch_model(W, H)
        topt = torch_opt([w, h])
        for _ in range(3):
            topt.zero_grad()
            torch_loss(w, h, idx, y).backward()
            topt.step()
        pre = "import optim\n" + model_code(b, W, H, idx, y)
        b.case(f"{opt_name}_grad_tree_3_steps",
               pre + f"opt = {nb_opt}\nfor s in 0..3 {{ opt.step(grad(loss_fn)(m)) }}\nlist(m.wte, m.lm_head, m.mid.h)",
               [w.detach(), w.detach(), h.detach()], rtol=1e-8, atol=1e-10)
        b.case(f"{opt_name}_dot_grad_3_steps",
               pre + "m.wte.requires_grad = true\nm.mid.h.requires_grad = true\n"
               f"opt = {nb_opt}\nfor s in 0..3 {{ opt.zero_grad(); backward(loss_fn(m)); opt.step() }}\n"
               "list(detach(m.wte), detach(m.lm_head), detach(m.mid.h))",
               [w.detach(), w.detach(), h.detach()], rtol=1e-8, atol=1e-10)

    # ---- clipping counts a tied gradient once and scales it once
    W, H, idx, y = data()
    w, h = torch_model(W, H)
    (torch_loss(w, h, idx, y) * 40).backward()
    norm = torch.nn.utils.clip_grad_norm_([w, h], 0.5)
    pre = model_code(b, W, H, idx, y)
    b.case("clip_grad_norm_tied_tree",
           pre + "g = grad(fn(m) loss_fn(m) * 40)(m)\nn = clip_grad_norm(g, 0.5)\nlist(n, g.wte, g.lm_head, g.mid.h)",
           [norm.item(), w.grad, w.grad, h.grad], rtol=1e-8, atol=1e-10, dtype=False)
    b.case("clip_grad_norm_tied_dot_grad",
           pre + "m.wte.requires_grad = true\nm.mid.h.requires_grad = true\nbackward(loss_fn(m) * 40)\n"
           "n = clip_grad_norm(m, 0.5)\nlist(n, m.wte.grad, m.lm_head.grad)",
           [norm.item(), w.grad, w.grad], rtol=1e-8, atol=1e-10, dtype=False)

    # ---- the loss scaler's unscale divides a tied gradient once
    W, H, idx, y = data()
    w, h = torch_model(W, H)
    torch_loss(w, h, idx, y).backward()
    pre = model_code(b, W, H, idx, y)
    b.case("unscale_tied_once",
           pre + "g = grad(fn(m) loss_fn(m) * 1024)(m)\nok = unscale_grads(g, 1 / 1024)\nlist(ok, g.wte, g.lm_head)",
           [True, w.grad, w.grad], rtol=1e-9, atol=1e-11, dtype=False)


def files(b):
    """Checkpoints: a tie is saved once (the other place an alias in the
    metadata) and loaded back as one tensor; a file with one copy of a tie
    (as torch's safetensors helpers write it) loads strictly into a tied model;
    a model's functions are not written to the metadata."""
    W, H, idx, y = data()
    path = os.path.join(TMP, "tied.safetensors")
    pre = model_code(b, W, H, idx, y) + f'm.__call = fn(self, x) x\nsave("{path}", m)\nl = load("{path}")\n'
    b.case("save_load_keeps_tie", pre + "list(same(l.wte, l.lm_head), l.wte, l.mid.h)", [True, T(W), T(H)], rtol=0, atol=0, dtype=False)
    one = os.path.join(TMP, "one_copy.safetensors")
    header = {"wte": {"dtype": "F64", "shape": [V, D], "data_offsets": [0, V * D * 8]},
              "mid.h": {"dtype": "F64", "shape": [D, D], "data_offsets": [V * D * 8, V * D * 8 + D * D * 8]}}
    hb = json.dumps(header).encode()
    with open(one, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + W.astype("<f8").tobytes() + H.astype("<f8").tobytes())
    b.case("load_state_one_copy_of_tie",
           "import nn\nZ = zeros(7, 5, dtype=\"f64\")\nm = {wte: Z, mid: {h: zeros(5, 5, dtype=\"f64\")}, lm_head: Z}\n"
           f'nn.load_state(m, load("{one}"))\nlist(same(m.wte, m.lm_head), m.lm_head, m.mid.h)', [True, T(W), T(H)], rtol=0, atol=0, dtype=False)
    b.run()
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    hdr = json.loads(blob[8:8 + n])
    meta = hdr.get("__metadata__", {})
    tensors = sorted(k for k in hdr if k != "__metadata__")
    check("ties.file_has_one_copy", tensors == ["mid.h", "wte"] and meta.get("nabla:alias:lm_head") == "wte", f"{tensors} {meta}")
    check("ties.file_has_no_functions", not any("fn" in v or "__call" in k for k, v in meta.items()), f"{meta}")


def main():
    b = Batch("ties")
    cases(b)
    b.run()
    files(Batch("ties_files"))
    finish()


if __name__ == "__main__":
    main()
