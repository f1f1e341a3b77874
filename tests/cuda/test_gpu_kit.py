#!/usr/bin/python3
"""The GPU session's path, end to end, on the CPU: the contract that the first
real GPU run works.

tools/gpu-session.sh prepare packs a kit from the build under test; the kit is
unpacked into a temporary folder laid out as the device tool lays it out (a
copy of the working tree, no build tree, meson and ninja absent) and
`tools/gpu-session.sh device` runs there with OUT set to a temporary folder:

  kit_module_found_*   every kit binary (nabla, test_cuda, test_tensor,
                       test_tensor_nn) dlopens the kit's own nabla_cuda.so,
                       not the build machine's, and the module then reports
                       the device count (cudart loads; there is no driver here)
  kit_gpu_listed_unusable
                       with a stand-in nvidia-smi that lists an H100: exit
                       non-zero (a hang past 480 s fails), a FAIL line saying a GPU was
                       listed but CUDA cannot be used (with the reason), the
                       log in $OUT, the summary as the last lines
  kit_no_gpu_skips     without nvidia-smi: one SKIP line and exit 0, log in $OUT
  kit_lazy_libraries_* with a stand-in ldconfig whose cache is empty: every
                       library the sources load on first use (dlopen, which
                       ldd cannot list) is linked from the carried debs, and
                       the kit's nabla loads SLEEF, jansson and zlib from there
  kit_phase_budget     an unknown phase is refused; a budget too small for a
                       phase leaves it for the next command, which is printed
  kit_profile_*        `device profile` with a stand-in tracer: stand-ins for
                       nabla and torch's gpt2 scripts write CUPTI-style traces
                       (fresh random kernel durations, several steps) where
                       CUDA_INJECTION64_PATH's tracer would; the phase feeds
                       them through the real cupti_report.py and writes the
                       markdown to $OUT/bench/results/ with the device, the
                       kit's commit and the per-kind milliseconds the traces
                       hold; NABLA_CUDNN_LIBRARY comes from PyTorch's
                       environment; the phase runs alone; summary last
Run: NABLA_BUILD=build /usr/bin/python3 tests/cuda/test_gpu_kit.py
"""
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("NABLA_BUILD") or os.path.join(ROOT, "build")
FAILED = False


def report(name, ok, why=""):
    global FAILED
    if ok:
        print(f"PASS: {name}", flush=True)
    else:
        FAILED = True
        print(f"FAIL: {name}: {why}".replace("\n", " | ")[:1500], flush=True)


def shim_dir(base, name, tools):
    """A folder of stand-in commands: {name: shell body}."""
    d = os.path.join(base, name)
    os.makedirs(d)
    for tool, body in tools.items():
        p = os.path.join(d, tool)
        with open(p, "w") as f:
            f.write("#!/bin/sh\n" + body + "\n")
        os.chmod(p, 0o755)
    return d


NVIDIA_SMI = r'''case "$*" in
  *-L*) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-1111-2222-3333-444444444444)" ;;
  *driver_version*) echo "580.65.06" ;;
  *memory.total*) echo "NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB" ;;
  *name*) echo "NVIDIA H100 80GB HBM3" ;;
  *) echo "stand-in nvidia-smi" ;;
esac'''
ABSENT = 'echo "$(basename "$0"): not on the device machine (gpu-session.sh must not need it)" >&2; exit 127'


def base_path():
    """PATH without any real nvidia-smi, meson or ninja."""
    keep = []
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(":"):
        if d and not any(os.path.exists(os.path.join(d, t)) for t in ("nvidia-smi",)):
            keep.append(d)
    return ":".join(keep)


def main():
    if not os.path.exists(os.path.join(BUILD, "cuda", "nabla_cuda.so")):
        print(f"SKIP: gpu_kit: {BUILD} has no CUDA module (nvcc was not found when it was configured)")
        return
    tmp = tempfile.mkdtemp(prefix="nabla-gpukit-")
    try:
        run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(tmp):
    # ---- here: prepare the kit from the build under test
    kit_here = os.path.join(tmp, "kit")
    env = dict(os.environ, GPUKIT=kit_here, GPUKIT_BUILD=BUILD)
    p = subprocess.run(["tools/gpu-session.sh", "prepare"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0 or not os.path.exists(os.path.join(kit_here, "build.tar.xz")):
        report("kit_prepare", False, f"exit {p.returncode}: {(p.stdout + p.stderr)[-800:]}")
        return
    report("kit_prepare", "next: the device tool" in p.stdout, p.stdout[-400:])

    # ---- the device: a copy of the working tree (tracked and untracked,
    # not ignored) with the kit in it, and no build tree
    dev = os.path.join(tmp, "device")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        src = os.path.join(ROOT.encode(), f)
        if not os.path.isfile(src):
            continue
        dst = os.path.join(dev.encode(), f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)
    shutil.copytree(kit_here, os.path.join(dev, ".gpukit"))
    report("kit_device_has_no_build_tree", not os.path.exists(os.path.join(dev, "build")), "build/ was copied")

    no_tools = shim_dir(tmp, "absent", {"meson": ABSENT, "ninja": ABSENT})
    with_gpu = shim_dir(tmp, "gpu", {"nvidia-smi": NVIDIA_SMI})
    path = base_path()

    # ---- case 1: a GPU is listed but CUDA cannot be used here
    out1 = os.path.join(tmp, "out1")
    os.makedirs(out1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NABLA", "GPUKIT", "LD_"))}
    env.update(PATH=f"{with_gpu}:{no_tools}:{path}", OUT=out1, PYTHON="/usr/bin/python3")
    t0 = time.time()
    try:
        p = subprocess.run(["tools/gpu-session.sh", "device"], cwd=dev, env=env,
                           capture_output=True, text=True, timeout=480)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = "timeout", (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
    took = time.time() - t0
    lines = [l for l in text.splitlines() if l.strip()]
    # (a hang is the failure to catch; how long the unpacking takes depends on the machine's load)
    report("kit_gpu_listed_unusable_fails", rc not in (0, "timeout"),
           f"exit {rc} after {took:.0f} s (expected a non-zero exit, not a hang past 480 s): {text[-600:]}")
    fails = [l for l in lines if l.startswith("FAIL: ")]
    report("kit_gpu_listed_unusable_says_why",
           any("H100" in l and "CUDA cannot be used" in l and "device count 0" in l for l in fails)
           and not any(l.startswith("SKIP: ") for l in lines),
           f"FAIL lines {fails}; last lines {lines[-5:]}")
    report("kit_gpu_listed_unusable_summary_last",
           len(lines) >= 2 and lines[-1] == "result: FAILED" and lines[-2].startswith("next: tools/gpu-session.sh device tests"),
           f"last lines {lines[-3:]}")
    log = os.path.join(out1, "gpu-session.log")
    logtext = open(log).read() if os.path.exists(log) else ""
    report("kit_log_in_out", "CUDA cannot be used" in logtext and "==== summary" in logtext
           and os.path.exists(os.path.join(out1, "gpu-kit.log")),
           f"{sorted(os.listdir(out1))}: {logtext[-300:]}")
    report("kit_no_missing_libraries", "NOT FOUND" not in text and "still lacks" not in text, text[-400:])

    # ---- every kit binary finds the kit's own module (the loader's search
    # from the binary's own layout), and the module loads
    kit_build = os.path.join(dev, ".gpukit", "build")
    mod = os.path.join(kit_build, "cuda", "nabla_cuda.so")
    benv = dict(env, LD_DEBUG="files")
    probes = {
        "nabla": [os.path.join(kit_build, "nabla"), "-e", "print(\"# cuda: \", cuda.unavailable_reason())"],
        "test_cuda": [os.path.join(kit_build, "tests", "cuda", "test_cuda")],
        "test_tensor": [os.path.join(kit_build, "tests", "tensor", "test_tensor")],
        "test_tensor_nn": [os.path.join(kit_build, "tests", "tensor_nn", "test_tensor_nn"), "no-test-has-this-name"],
    }
    for name, argv in probes.items():
        p = subprocess.run(argv, cwd=dev, env=benv, capture_output=True, text=True, timeout=300)
        loaded = [l for l in p.stderr.splitlines() if "nabla_cuda.so" in l and "file=" in l]
        reason = [l for l in p.stdout.splitlines() if l.startswith("# cuda:")]
        report(f"kit_module_found_{name}",
               any(f"file={mod} " in l for l in loaded) and reason and "device count 0" in reason[0],
               f"loaded {loaded[:2]}; status {reason[:1]}; exit {p.returncode}")

    # ---- case 2: no GPU at all: a clean SKIP
    out2 = os.path.join(tmp, "out2")
    os.makedirs(out2)
    env2 = dict(env, PATH=f"{no_tools}:{path}", OUT=out2)
    p = subprocess.run(["tools/gpu-session.sh", "device"], cwd=dev, env=env2,
                       capture_output=True, text=True, timeout=150)
    skips = [l for l in p.stdout.splitlines() if l.startswith("SKIP: ")]
    report("kit_no_gpu_skips", p.returncode == 0 and len(skips) == 1 and "no NVIDIA driver" in skips[0]
           and not any(l.startswith("FAIL: ") for l in p.stdout.splitlines())
           and os.path.exists(os.path.join(out2, "gpu-session.log")),
           f"exit {p.returncode}: {p.stdout[-500:]}")

    # ---- case 3: an image whose loader knows none of the libraries nabla loads
    # on first use (util/dynload.h: dlopen, so ldd does not list them): each
    # is linked from the carried debs, and the kit's nabla then loads it from
    # there (SLEEF for exp, jansson for a safetensors header, zlib for .npz)
    lazy = sorted({m.decode() for f in files if f.endswith((b".c", b".h")) and f.split(b"/")[0] in
                   (b"repl", b"wire", b"tensor", b"lang", b"dist", b"kernel", b"util")
                   for m in re.findall(rb'"(lib[A-Za-z0-9_+-]+\.so\.[0-9]+)"', open(os.path.join(ROOT.encode(), f), "rb").read())
                   if not m.startswith((b"libopenblas", b"libdnnl"))})   # oneDNN: optional, not carried (gpu-session.sh)
    bare = shim_dir(tmp, "bare", {"ldconfig": 'echo "0 libs found in cache \\`/etc/ld.so.cache\'"'})
    out4 = os.path.join(tmp, "out4")
    os.makedirs(out4)
    env4 = dict(env, PATH=f"{bare}:{no_tools}:{path}", OUT=out4)
    p = subprocess.run(["tools/gpu-session.sh", "device"], cwd=dev, env=env4,
                       capture_output=True, text=True, timeout=150)
    carried = set(re.findall(r"^  (\S+) <- carried \(loaded on first use\)$", p.stdout, re.M))
    report("kit_lazy_libraries_carried", len(lazy) >= 7 and carried == set(lazy) and "NOT FOUND" not in p.stdout
           and p.returncode == 0, f"exit {p.returncode}; sources load {lazy}, carried {sorted(carried)}: {p.stdout[-600:]}")
    rtlib = os.path.join(dev, ".gpukit", "rt", "lib")
    x = random.uniform(-2, 2)
    numpy.savez_compressed(os.path.join(tmp, "t.npz"), a=numpy.array([x, 0.5]))
    probe = (f'x = tensor(list({x!r}, 0.5)); print("# exp", exp(x)[0].item()); '
             f'save("{tmp}/t.safetensors", {{a: x}}); print("# st", load("{tmp}/t.safetensors").a[0].item()); '
             f'print("# npz", load_npz("{tmp}/t.npz").a[0].item())')
    p = subprocess.run([os.path.join(kit_build, "nabla"), "-e", probe], cwd=dev, capture_output=True, text=True, timeout=120,
                       env=dict(env4, LD_LIBRARY_PATH=rtlib, LD_DEBUG="files"))
    loaded = {l.split("calling init: ")[1].split()[0] for l in p.stderr.splitlines() if "calling init: " in l}
    from_kit = {os.path.basename(f) for f in loaded if f.startswith(rtlib)}
    vals = dict(re.findall(r"^# (\w+) (\S+)$", p.stdout, re.M))
    ok = (p.returncode == 0 and {"libsleef.so.3", "libjansson.so.4", "libz.so.1"} <= from_kit
          and abs(float(vals.get("exp", "nan")) - math.exp(x)) <= 1e-6 * math.exp(x)
          and abs(float(vals.get("st", "nan")) - x) <= 1e-6 and abs(float(vals.get("npz", "nan")) - x) <= 1e-6)
    report("kit_lazy_libraries_load_from_kit", ok, f"exit {p.returncode}; from the kit {sorted(from_kit)}; values {vals} (x={x}); {p.stderr[-300:]}")

    # ---- phases: an unknown one is refused; one that does not fit the budget
    # is left for the next call, which is printed
    p = subprocess.run(["tests/cuda/run_gpu.sh", "--no-build", ".gpukit/build", "bogus"], cwd=dev, env=env,
                       capture_output=True, text=True, timeout=60)
    report("kit_unknown_phase_refused", p.returncode == 2 and "unknown phase 'bogus'" in p.stdout, p.stdout[-300:])
    fake_ok = shim_dir(tmp, "usable", {"nvidia-smi": NVIDIA_SMI})
    # a stand-in nabla that says CUDA is usable, so the phase loop runs
    fake_build = os.path.join(tmp, "fakebuild")
    shim_dir(tmp, "fakebuild", {"nabla": "exit 0"})
    out3 = os.path.join(tmp, "out3")
    os.makedirs(out3)
    env3 = dict(env, PATH=f"{fake_ok}:{no_tools}:{path}", OUT=out3, GPU_CALL_BUDGET="50")
    p = subprocess.run(["tests/cuda/run_gpu.sh", "--no-build", fake_build, "demo", "bench"], cwd=dev, env=env3,
                       capture_output=True, text=True, timeout=60)
    last = [l for l in p.stdout.splitlines() if l.strip()][-2:]
    report("kit_phase_budget_next", last[:1] == ["next: tools/gpu-session.sh device demo bench"],
           f"exit {p.returncode}: last lines {last}")


    profile_case(tmp, dev, env, no_tools, path)


# One step of a stand-in trace: (name, ms) kernels back to back, then a copy,
# then the marker kernel, then an idle gap (cupti_trace.c's CSV lines)
def fake_trace(path, kernels, marker, copy_ms, idle_ms, steps=6):
    t = 1_000_000_000
    lines = []
    for _ in range(steps):
        for name, ms in kernels:
            d = int(round(ms * 1e6))
            lines.append(f"K,{t},{t + d},7,80,1,1,256,1,1,0,32,{name}")
            t += d
        d = int(round(copy_ms * 1e6))
        lines.append(f"C,{t},{t + d},7,8,1048576")
        t += d
        lines.append(f"K,{t},{t + 20000},7,1,1,1,256,1,1,0,32,{marker}")
        t += 20000 + int(round(idle_ms * 1e6))
    lines.append("N,211,cudaLaunchKernel_v7000")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


STAND_NABLA = '''case "$1" in
  -e) exit 0 ;;
  bench/cuda/gpt2.nbl) FAKE_TRACE=@TMP@/nabla.csv; @WRITE@
     echo "# steps=$GPT2_STEPS inject=$CUDA_INJECTION64_PATH cudnn=$NABLA_CUDNN_LIBRARY"; echo "bench: gpt2_step_ms 160.0 ms" ;;
  *) echo "stand-in nabla: unexpected $*" >&2; exit 3 ;;
esac'''
STAND_PYTHON = '''case "$1" in
  bench/cuda/gpt2_torch.py) FAKE_TRACE=@TMP@/torch.csv; @WRITE@; echo "bench: gpt2_step_ms 32.0 ms" ;;
  *sdpa_backends.py) echo "bench: sdpa_flash_fwd_ms 0.900 (300 TFLOP/s)  fwd_bwd_ms 3.000 (315 TFLOP/s)" ;;
  -c) case "$2" in *nvidia.cudnn*) echo @CUDNN@/lib ;; *) exec /usr/bin/python3 "$@" ;; esac ;;
  *) exec /usr/bin/python3 "$@" ;;
esac'''


def profile_case(tmp, dev, env, no_tools, path):
    kit_prof = os.path.join(dev, ".gpukit", "gpu-profile")
    if not os.path.exists(os.path.join(kit_prof, "cupti_report.py")):
        print("SKIP: kit_profile: the kit has no gpu-profile/ (../shared/gpu-profile is not next to this checkout)")
        return
    report("kit_profile_packed", os.path.exists(os.path.join(kit_prof, "cupti_trace.c")), sorted(os.listdir(kit_prof)))
    r = random.Random()
    ms = {k: round(r.uniform(0.5, 9.0), 2) for k in ("gemm", "red", "elem", "attn", "copy", "idle", "tgemm", "tattn", "telem", "tidle")}
    fake_trace(os.path.join(tmp, "nabla.csv"),
               [("sm90_xmma_gemm_bf16bf16_bf16f32_f32", ms["gemm"]), ("reduce_cols", ms["red"]),
                ("binary_strided", ms["elem"]), ("sdpa_fwd", ms["attn"])], "xent_total", ms["copy"], ms["idle"])
    fake_trace(os.path.join(tmp, "torch.csv"),
               [("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", ms["tgemm"]), ("flash_fwd_kernel", ms["tattn"]),
                ("vectorized_elementwise_kernel", ms["telem"])], "nll_loss_forward_reduce_cuda_kernel_2d", 0.5, ms["tidle"])
    cudnn = os.path.join(tmp, "venv", "cudnn")
    os.makedirs(os.path.join(cudnn, "lib"))
    open(os.path.join(cudnn, "lib", "libcudnn.so.9"), "w").close()
    write_trace = 'f=$(echo "$CUPTI_TRACE_OUT" | sed "s/%p/$$/"); cp "$FAKE_TRACE" "$f"'

    def fill(t):
        return t.replace("@TMP@", tmp).replace("@WRITE@", write_trace).replace("@CUDNN@", cudnn)

    stand = shim_dir(tmp, "profstand", {"nabla": fill(STAND_NABLA), "python": fill(STAND_PYTHON)})
    gpu = shim_dir(tmp, "profgpu", {"nvidia-smi": NVIDIA_SMI})
    out = os.path.join(tmp, "outp")
    os.makedirs(out)
    envp = dict(env, PATH=f"{gpu}:{no_tools}:{path}", OUT=out, PYTHON=os.path.join(stand, "python"),
                GPUKIT_NABLA=os.path.join(stand, "nabla"), CUPTI_TRACE_LIB=os.path.join(stand, "nabla"), PROFILE_STEPS="4")
    p = subprocess.run(["tools/gpu-session.sh", "device", "profile"], cwd=dev, env=envp, capture_output=True, text=True, timeout=300)
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    report("kit_profile_runs", p.returncode == 0 and lines[-1:] == ["result: ok"] and not any(l.startswith("FAIL: ") for l in lines),
           f"exit {p.returncode}: {p.stdout[-1200:]} {p.stderr[-300:]}")
    nlog_path = os.path.join(out, "profile_nabla.log")
    nlog = open(nlog_path).read() if os.path.exists(nlog_path) else ""
    report("kit_profile_env", f"steps=4 inject={os.path.join(stand, 'nabla')} cudnn={cudnn}/lib/libcudnn.so.9" in nlog,
           f"the stand-in nabla saw: {nlog[-300:]}")
    res_dir = os.path.join(out, "bench", "results")
    mds = sorted(os.listdir(res_dir)) if os.path.isdir(res_dir) else []
    if len(mds) != 1 or not re.match(r"^\d{4}-\d\d-\d\d-gpt2-profile-NVIDIA-H100-80GB-HBM3\.md$", mds[0]):
        report("kit_profile_markdown", False, f"results {mds}; {p.stdout[-600:]}")
        return
    md = open(os.path.join(res_dir, mds[0])).read()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    head = md.splitlines()[:4]
    report("kit_profile_markdown_header", "NVIDIA H100 80GB HBM3" in head[0] and re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", head[0])
           and commit and f"commit {commit}" in md, f"header {head}; commit {commit}")

    def cell(kind, col):
        m = re.search(r"^\| " + re.escape(kind) + r" \| ([^|]*) \| ([^|]*) \|$", md, re.M)
        return m.group(1 + col).strip() if m else ""

    def ms_of(c):
        m = re.match(r"^([\d.]+) ms", c)
        return float(m.group(1)) if m else None

    marker = 0.02
    step_n = ms["gemm"] + ms["red"] + ms["elem"] + ms["attn"] + ms["copy"] + marker + ms["idle"]
    step_t = ms["tgemm"] + ms["tattn"] + ms["telem"] + 0.5 + marker + ms["tidle"]
    # (the marker kernel is a cross-entropy kernel: the report's reductions)
    want = {("GEMM", 0): ms["gemm"], ("attention", 0): ms["attn"], ("reduction", 0): ms["red"] + marker,
            ("elementwise", 0): ms["elem"], ("copies", 0): ms["copy"], ("idle", 0): ms["idle"], ("step (wall)", 0): step_n,
            ("GEMM", 1): ms["tgemm"], ("attention", 1): ms["tattn"], ("elementwise", 1): ms["telem"], ("copies", 1): 0.5,
            ("idle", 1): ms["tidle"], ("step (wall)", 1): step_t, ("reduction", 1): marker}
    got = {k: ms_of(cell(*k)) for k in want}
    bad = {k: (got[k], round(v, 2)) for k, v in want.items() if got[k] is None or abs(got[k] - v) > 0.011}
    report("kit_profile_markdown_kinds", not bad, f"(kind, column): (markdown, trace) {bad}; table {md[:1500]}")
    report("kit_profile_markdown_sdpa", "sdpa_flash_fwd_ms 0.900" in md, md[-400:])
    back = os.listdir(os.path.join(out, "profile")) if os.path.isdir(os.path.join(out, "profile")) else []
    report("kit_profile_traces_back", sorted(f.split("-")[0] for f in back if f.endswith(".csv.xz")) == ["nabla", "torch"], back)
    # with other phases: refused, saying why
    p = subprocess.run(["tools/gpu-session.sh", "device", "gpt2", "profile"], cwd=dev, env=envp, capture_output=True, text=True, timeout=120)
    report("kit_profile_alone", p.returncode == 2 and "the profile phase runs alone" in p.stdout, p.stdout[-300:])


main()
sys.exit(1 if FAILED else 0)
