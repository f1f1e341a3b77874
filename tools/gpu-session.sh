#!/usr/bin/env bash
# gpu-session.sh — everything a session lent a GPU machine (the `device` tool)
# needs, so that its scarce minutes go to the GPU and nothing is lost.
#
# Here (a dev machine, with the Debian packages and a package registry):
#     tools/gpu-session.sh prepare
#   builds build-gpu/ (release, -Dcuda=enabled; GPUKIT_BUILD=DIR packs another
#   build that has cuda/nabla_cuda.so) and packs .gpukit/ (GPUKIT=DIR elsewhere;
#   ignored by git, ~20 MB): the binaries (build.tar.xz, laid out like a build
#   dir) and the Debian runtime .debs of the libraries nabla links against.
# On the device machine (carry [".gpukit"]; no registry, no meson or ninja,
# nvcc/CUDA 13 libraries, compute-sanitizer, python3 with torch):
#     tools/gpu-session.sh device [PHASE...]
#   unpacks the kit, takes from the carried .debs only the libraries the
#   device lacks, finds its cuBLAS/NCCL, and runs tests/cuda/run_gpu.sh
#   --no-build on the kit's build dir.  PHASEs as in run_gpu.sh (default:
#   tests); each call is bounded to 540 s (GPU_CALL_BUDGET) and ends with a
#   summary and the next command to run.  Everything is written into $OUT as
#   it happens (gpu-kit.log: this script; gpu-session.log and <suite>.log:
#   run_gpu.sh; bench results), so a call killed at the limit returns what it
#   had.  A GPU that nvidia-smi lists but CUDA cannot use fails loudly with
#   the reason; a machine with no GPU at all is a SKIP (exit 0).
#   PHASE `profile` (run alone, after gpt2: it is this script's own, not
#   run_gpu.sh's) traces nabla's and torch's GPT-2-small step kernel by kernel
#   with the CUPTI tracer that prepare copied from ../shared/gpu-profile/
#   (CUDA_INJECTION64_PATH; built here when CUPTI is, else on the device with
#   its gcc), splits the traces into steps (cupti_report.py), and writes the
#   per-kind breakdown side by side (GEMM, attention, reduction, elementwise,
#   copies, idle, ...) with the date, device and commit to
#   $OUT/bench/results/DATE-gpt2-profile-GPU.md; then sdpa_backends.py (torch's
#   attention backends at the GPT-2 shape).  Every device call exports
#   NABLA_CUDNN_LIBRARY from PyTorch's environment when it has cuDNN 9.
#   PHASE `compile` (run alone; this script's own): bench/cuda/compile_steps.py,
#   nabla eager vs compile(step) vs torch eager vs torch.compile(reduce-overhead)
#   for a d=256 4-layer transformer, a 3-layer MLP and GPT-2 small, the table
#   in $OUT/bench/results/DATE-compile-GPU.md.
# The whole path is tested on the CPU by tests/cuda/test_gpu_kit.py.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
KIT=${GPUKIT:-.gpukit}
ARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
ORDER="tests numerics memcheck racecheck dist distbench zero demo bench gpt2 profile"
# the CUPTI tracer and its report (README there); GPUKIT_PROFILE_SRC elsewhere
PROFILE_SRC=${GPUKIT_PROFILE_SRC:-$ROOT/../shared/gpu-profile}

# libraries nabla links against that a CUDA image may lack (libzmq's deps included)
DEBS="libzmq5 libsodium23 libsleef3 libpgm-5.3-0 libnorm1 libjansson4 libreadline8 libtinfo6 libopenblas0-openmp
      libgfortran5 libquadmath0 libgomp1 libbsd0 libmd0 libpng16-16 zlib1g libssl3
      libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libkissfft-float131"
# the binaries run_gpu.sh runs, relative to the build dir
KIT_FILES="nabla cuda/nabla_cuda.so tests/cuda/test_cuda tests/cuda/bench_cuda tests/tensor/test_tensor tests/tensor_nn/test_tensor_nn"

prepare() {
  local b=${GPUKIT_BUILD:-build-gpu} f files=() cache
  if [ "$b" = build-gpu ]; then
    [ -f build-gpu/build.ninja ] || meson setup build-gpu --buildtype=release -Dcuda=enabled || exit 1
    ninja -C build-gpu || exit 1
  fi
  for f in $KIT_FILES; do
    [ -e "$b/$f" ] || { echo "FAIL: gpu_kit: $b/$f is missing (is $b configured with -Dcuda=enabled and built?)"; exit 1; }
    files+=("$f")
  done
  rm -rf "$KIT"
  mkdir -p "$KIT/debs"
  # xz: the CUDA module's cubins for two architectures are ~40 MB raw, ~4 MB
  # packed; a carry is limited to 64 MiB together with the working tree
  tar -C "$b" -cf - "${files[@]}" | xz -T0 -6 >"$KIT/build.tar.xz" || exit 1
  # the .debs, downloaded once into a cache (they change only with Debian)
  cache=${GPUKIT_DEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nabla/gpukit-debs}
  mkdir -p "$cache"
  local missing=()
  for f in $DEBS; do ls "$cache/${f}_"*.deb >/dev/null 2>&1 || missing+=("$f"); done
  if [ ${#missing[@]} -gt 0 ]; then
    (cd "$cache" && { apt-get download "${missing[@]}" 2>/dev/null || { apt-get update >/dev/null && apt-get download "${missing[@]}"; }; }) ||
      { echo "FAIL: gpu_kit: apt-get download ${missing[*]} failed"; exit 1; }
  fi
  for f in $DEBS; do cp "$(ls -t "$cache/${f}_"*.deb | head -n 1)" "$KIT/debs/"; done
  # the commit the kit was built from (the device's copy of the tree has no .git)
  { git rev-parse --short HEAD 2>/dev/null || echo '?'; } | tr -d '\n' >"$KIT/commit"
  git diff --quiet HEAD 2>/dev/null || echo -n "+dirty" >>"$KIT/commit"
  # the profile phase's tracer: its sources travel in the kit; built here when
  # this machine has CUPTI, else on the device (which has gcc and CUPTI)
  if [ -f "$PROFILE_SRC/cupti_trace.c" ] && [ -f "$PROFILE_SRC/cupti_report.py" ]; then
    mkdir -p "$KIT/gpu-profile" && cp "$PROFILE_SRC"/cupti_trace.c "$PROFILE_SRC"/cupti_report.py "$PROFILE_SRC"/sdpa_backends.py "$PROFILE_SRC"/README.md "$KIT/gpu-profile/" 2>/dev/null
    build_tracer "$KIT/gpu-profile" >/dev/null 2>&1 && echo "profile: tracer built here ($KIT/gpu-profile/libcupti_trace.so)" ||
      echo "profile: tracer sources packed (built on the device: no CUPTI here)"
  else
    echo "note: $PROFILE_SRC has no cupti_trace.c / cupti_report.py: the profile phase will not run"
  fi
  du -sh "$KIT"
  echo "next: the device tool's run with carry [\"$KIT\"] and command \"tools/gpu-session.sh device tests\" (then the phase it prints as next; in order: $ORDER)"
}

# The sonames util/dynload.h loads on first use (NABLA_*_LIB defaults in the
# sources), but OpenBLAS, which has its own search (tensor/tblas.c).
# (oneDNN is left out: it only speeds up the CPU's bf16 matmul, which takes
# the f32 path without it, and its .deb is 7 MB of the carry's 64 MiB)
lazy_sonames() {
  grep -rhoE '"lib[A-Za-z0-9_+-]+\.so\.[0-9]+"' --include='*.c' --include='*.h' repl wire tensor lang dist kernel util 2>/dev/null |
    tr -d '"' | grep -vE '^(libopenblas|libdnnl)' | sort -u
}

# Puts in $RT/lib only the libraries the loader cannot find for FILE.
missing_libs() {
  ldd "$1" 2>/dev/null | awk '/not found/ {print $1}' | while read -r so; do
    p=$(find "$RT/x" -name "$so" 2>/dev/null | head -n 1)
    if [ -n "$p" ]; then ln -sf "$(readlink -f "$p")" "$RT/lib/$so"; echo "  $so <- $(basename "$(dirname "$p")") (carried)"
    else echo "  $so: NOT FOUND (carried debs lack it)"; fi
  done
}

# build_tracer DIR: DIR/libcupti_trace.so from DIR/cupti_trace.c, with the
# CUPTI of the CUDA toolkit or of PyTorch's environment (nvidia.cuda_cupti)
build_tracer() {
  local d=$1 inc lib c
  [ -f "$d/libcupti_trace.so" ] && [ "$d/libcupti_trace.so" -nt "$d/cupti_trace.c" ] && return 0
  for c in /usr/local/cuda/extras/CUPTI /usr/local/cuda*/extras/CUPTI \
           $("${PYTHON:-python3}" -c 'import importlib.util as u; s = u.find_spec("nvidia.cuda_cupti"); print(list(s.submodule_search_locations)[0])' 2>/dev/null); do
    [ -f "$c/include/cupti.h" ] || continue
    inc=$c/include
    lib=$c/lib64; [ -d "$lib" ] || lib=$c/lib
    [ -d "$lib" ] || continue
    gcc -O2 -shared -fPIC -I/usr/local/cuda/include -I"$inc" "$d/cupti_trace.c" -o "$d/libcupti_trace.so" \
      -L/usr/local/cuda/lib64 -L"$lib" -lcupti -Wl,-rpath,"$lib":/usr/local/cuda/lib64 && return 0
  done
  return 1
}

# NABLA_CUDNN_LIBRARY: PyTorch's cuDNN 9 (its wheel's nvidia.cudnn, or torch/lib),
# for nabla's cuDNN attention (issue 27); an explicit setting wins
export_cudnn() {
  local d f
  [ -n "${NABLA_CUDNN_LIBRARY:-}" ] && { echo "# NABLA_CUDNN_LIBRARY=$NABLA_CUDNN_LIBRARY (given)"; return; }
  # (find_spec: where the packages are, without importing torch, which takes seconds)
  for d in $("$PYTHON" -c 'import importlib.util as u
for m in ("nvidia.cudnn", "torch"):
    try: s = u.find_spec(m)
    except Exception: s = None
    if s and s.submodule_search_locations: print(list(s.submodule_search_locations)[0] + "/lib")' 2>/dev/null); do
    f=$d/libcudnn.so.9
    if [ -f "$f" ]; then export NABLA_CUDNN_LIBRARY=$f; echo "# NABLA_CUDNN_LIBRARY=$f (PyTorch's)"; return; fi
  done
  echo "# NABLA_CUDNN_LIBRARY: PyTorch's environment has no libcudnn.so.9"
}

# The profile phase (see the top): one call, bounded by GPU_CALL_BUDGET.
profile_phase() {
  local start=$SECONDS budget=${GPU_CALL_BUDGET:-540} nabla=${GPUKIT_NABLA:-$KIT/build/nabla} failed=0
  local logs=$OUT prof=$OUT/profile lib listed why res tag day commit gpu rc
  left() { echo $((start + budget - SECONDS - 15)); }
  tmo() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
  fail() { echo "FAIL: $*"; failed=1; }
  # logged NAME TIMEOUT CMD...: CMD's output streamed to stdout and $OUT/NAME.log
  logged() {
    local name=$1 t=$2; shift 2
    if [ "$t" -lt 20 ]; then echo "# $name: not run, the call's budget is spent" | tee "$logs/$name.log"; return 125; fi
    PYTHONUNBUFFERED=1 timeout -k 5 "$t" stdbuf -oL -eL "$@" 2>&1 | tee "$logs/$name.log"
    return "${PIPESTATUS[0]}"
  }
  smi() { local v; v=$(timeout 30 nvidia-smi --query-gpu="$1" --format=csv,noheader 2>/dev/null | head -n 1); echo "${v:-none}"; }
  psummary() {
    echo
    echo "==== summary ($(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - start)) s) ===="
    echo "device:  $(smi name,memory.total)"
    echo "driver:  $(smi driver_version)"
    [ -n "${res:-}" ] && [ -f "$res" ] && echo "profile: $res"
    echo "next: nothing left: every phase has run"
    echo "result: $([ $failed = 0 ] && echo ok || echo FAILED)"
  }
  exec > >(stdbuf -oL tee -a "$OUT/gpu-session.log") 2>&1
  echo "# profile phase ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget ${budget}s, logs in $OUT)"
  if ! command -v nvidia-smi >/dev/null 2>&1; then echo "SKIP: gpu_profile: no NVIDIA driver (nvidia-smi not found)"; psummary; return 0; fi
  listed=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -m1 '^GPU ')
  if [ -z "$listed" ]; then echo "SKIP: gpu_profile: nvidia-smi lists no GPU"; psummary; return 0; fi
  why=$(timeout 60 "$nabla" -e 'print(if cuda.available() { "" } else { cuda.unavailable_reason() })' 2>&1)
  if [ -n "$why" ]; then fail "gpu_usable: nvidia-smi lists '$listed' but CUDA cannot be used: $why"; psummary; return 1; fi
  echo "PASS: gpu_usable"
  lib=${CUPTI_TRACE_LIB:-$KIT/gpu-profile/libcupti_trace.so}
  if [ -z "${CUPTI_TRACE_LIB:-}" ]; then
    if [ ! -f "$KIT/gpu-profile/cupti_trace.c" ]; then fail "gpu_profile_tracer: $KIT/gpu-profile/cupti_trace.c missing (prepare copies it from ../shared/gpu-profile)"; psummary; return 1; fi
    build_tracer "$KIT/gpu-profile" || { fail "gpu_profile_tracer: cannot build libcupti_trace.so (no CUPTI headers and library found)"; psummary; return 1; }
  fi
  lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
  echo "PASS: gpu_profile_tracer ($lib)"
  rm -rf "$prof"; mkdir -p "$prof" "$OUT/bench/results" bench/results
  # the traced steps: GPT2_STEPS (+2 warm-up, skipped by the report)
  local steps=${PROFILE_STEPS:-6} who marker prog
  for who in nabla torch; do
    if [ $who = nabla ]; then prog=("$nabla" bench/cuda/gpt2.nbl); else prog=("$PYTHON" bench/cuda/gpt2_torch.py); fi
    CUDA_INJECTION64_PATH=$lib CUPTI_TRACE_OUT="$prof/$who-%p.csv" GPT2_STEPS=$steps \
      logged "profile_$who" "$(tmo 200)" "${prog[@]}" >/dev/null; rc=$?
    [ $rc -eq 0 ] || fail "profile_$who: exit $rc (124: timed out): $(tail -n 2 "$logs/profile_$who.log" | tr '\n' ' ' | cut -c1-200)"
  done
  for who in nabla torch; do
    if [ $who = nabla ]; then marker=xent_total; else marker=nll_loss_forward; fi
    local trace
    trace=$(ls -S "$prof/$who"-*.csv 2>/dev/null | head -n 1)   # the largest: the training process
    if [ -z "$trace" ]; then fail "profile_${who}_trace: no trace written (CUDA_INJECTION64_PATH not honoured?)"; continue; fi
    logged "profile_report_$who" "$(tmo 90)" "$PYTHON" "$KIT/gpu-profile/cupti_report.py" "$trace" "$marker" 2 >/dev/null
    if grep -q '^steps measured:' "$logs/profile_report_$who.log"; then echo "PASS: profile_report_$who"
    else fail "profile_report_$who: $(tail -n 2 "$logs/profile_report_$who.log" | tr '\n' ' ' | cut -c1-200)"; fi
    xz -T0 -6 "$trace" 2>/dev/null   # what comes back from the machine: the traces packed
  done
  logged sdpa_backends "$(tmo 120)" "$PYTHON" "$KIT/gpu-profile/sdpa_backends.py" >/dev/null ||
    fail "sdpa_backends: exit $? : $(tail -n 2 "$logs/sdpa_backends.log" | tr '\n' ' ' | cut -c1-200)"
  gpu=$(smi name); tag=$(echo "$gpu" | tr ' ' '-'); day=$(date -u +%Y-%m-%d)
  commit=$(git rev-parse --short HEAD 2>/dev/null || cat "$KIT/commit" 2>/dev/null || echo '?')
  res=$OUT/bench/results/$day-gpt2-profile-$tag.md
  "$PYTHON" - "$res" "$gpu" "$commit" "$(smi driver_version)" "$logs" <<'PYEOF' || fail "profile_markdown: could not write $res"
import os, re, sys, datetime
res, gpu, commit, driver, logs = sys.argv[1:6]
# the coarse kinds the issue asks for, from cupti_report.py's finer ones
COARSE = [("GEMM", ("gemm",)), ("attention", ("attention",)),
          ("reduction", ("reduction", "cross-entropy", "layer norm", "optimizer", "embedding")),
          ("elementwise", ("elementwise", "gelu", "convert")), ("copies", ("memcpy", "memset")), ("other", ("other",))]
def parse(name):
    p = os.path.join(logs, name + ".log")
    text = open(p, errors="replace").read() if os.path.exists(p) else ""
    m = re.search(r"median step ([\d.]+) ms .*GPU busy ([\d.]+) ms, idle ([-\d.]+) ms", text)
    kinds = {}
    sect = text.split("top kernels")[0]
    for line in sect.splitlines():
        k = re.match(r"^(.+?)\s+([\d.]+)\s+(\d+)\s+([\d.]+)%$", line)
        if k and not line.startswith("kind"): kinds[k.group(1).strip()] = (float(k.group(2)), int(k.group(3)))
    return text, (float(m.group(1)), float(m.group(2)), float(m.group(3))) if m else None, kinds
rep = {w: parse("profile_report_" + w) for w in ("nabla", "torch")}
def coarse(kinds, step):
    out = {}
    for name, keys in COARSE:
        ms = sum(v[0] for k, v in kinds.items() if any(k.startswith(x) for x in keys))
        n = sum(v[1] for k, v in kinds.items() if any(k.startswith(x) for x in keys))
        out[name] = (ms, n)
    out["idle"] = (step[2], 0) if step else (0.0, 0)
    return out
def cell(v, step):
    if not step: return "n/a"
    return "%.2f ms (%d, %.1f%%)" % (v[0], v[1], 100 * v[0] / step[0]) if v[1] else "%.2f ms (%.1f%%)" % (v[0], 100 * v[0] / step[0])
lines = ["# GPT-2-small step, kernel by kernel (CUPTI), %s, %s" % (datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), gpu), "",
         "driver %s, commit %s; bench/cuda/gpt2.nbl vs bench/cuda/gpt2_torch.py, median step of the traced ones "
         "(tools/gpu-session.sh device profile; ms, kernels, share of the step)" % (driver, commit), "",
         "| kind | nabla | torch |", "|---|---|---|"]
st = {w: rep[w][1] for w in rep}
lines.append("| step (wall) | %s | %s |" % tuple("%.2f ms" % st[w][0] if st[w] else "n/a" for w in ("nabla", "torch")))
lines.append("| GPU busy | %s | %s |" % tuple("%.2f ms" % st[w][1] if st[w] else "n/a" for w in ("nabla", "torch")))
co = {w: coarse(rep[w][2], st[w]) for w in rep}
for name, _ in COARSE + [("idle", ())]:
    lines.append("| %s | %s | %s |" % (name, cell(co["nabla"][name], st["nabla"]), cell(co["torch"][name], st["torch"])))
lines += ["", "reduction: sums, layer norm, cross-entropy/softmax, optimizer, embedding/sort kernels; elementwise: "
          "binary/unary/fill, gelu, casts and copy kernels; copies: memcpy and memset; idle: the step's time with no "
          "kernel, copy or memset running.", "", "Finer kinds (cupti_report.py):", ""]
for w in ("nabla", "torch"):
    lines += ["## %s" % w, "", "```", rep[w][0].rstrip() or "(no report)", "```", ""]
p = os.path.join(logs, "sdpa_backends.log")
lines += ["## torch's attention backends (sdpa_backends.py, B=8 H=12 T=1024 D=64 bf16, causal)", "", "```",
          (open(p, errors="replace").read().rstrip() if os.path.exists(p) else "(not run)"), "```", ""]
os.makedirs(os.path.dirname(res), exist_ok=True)
open(res, "w").write("\n".join(lines))
PYEOF
  if [ -f "$res" ]; then cp "$res" bench/results/; cat "$res"; echo "PASS: gpu_profile_markdown"; fi
  psummary
  return $failed
}

device() {
  local out=${OUT:-$ROOT/$KIT/out}
  mkdir -p "$out"
  export OUT=$out
  # this script's own account streams into $OUT from the first line
  exec > >(stdbuf -oL tee -a "$OUT/gpu-kit.log") 2>&1
  echo "# gpu-session.sh device ${*:-tests} ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname))"
  if [ ! -f "$KIT/build.tar.xz" ]; then
    echo "FAIL: gpu_kit: $KIT/build.tar.xz missing (run 'tools/gpu-session.sh prepare' here and carry $KIT)"; exit 1
  fi
  # unpack once per kit (a warm machine keeps it between calls)
  if [ ! -x "$KIT/build/nabla" ] || [ "$KIT/build.tar.xz" -nt "$KIT/build/.unpacked" ]; then
    rm -rf "$KIT/build" && mkdir -p "$KIT/build" && xz -dc "$KIT/build.tar.xz" | tar -C "$KIT/build" -xf - &&
      touch "$KIT/build/.unpacked" || { echo "FAIL: gpu_kit: cannot unpack $KIT/build.tar.xz"; exit 1; }
  fi
  echo "# nvidia-smi -L: $(timeout 30 nvidia-smi -L 2>&1 | head -n 4 | tr '\n' ' ')"
  RT=$(cd "$KIT" && pwd)/rt
  mkdir -p "$RT/x" "$RT/lib"
  local f so p cudadirs=""
  for f in "$KIT"/debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" "$RT/x"; done
  # CUDA runtime, cuBLAS and NCCL: wherever this image keeps them
  for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    p=$(find /usr/local/cuda/ /usr/local/cuda*/ /usr/lib /opt -maxdepth 6 -name "$so*" 2>/dev/null | head -n 1)
    echo "# $so: ${p:-not found}"
    [ -n "$p" ] && case ":$cudadirs:" in *":$(dirname "$p"):"*) ;; *) cudadirs="$cudadirs:$(dirname "$p")";; esac
  done
  export LD_LIBRARY_PATH="$RT/lib${cudadirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "# libraries taken from the carried debs:"
  for f in $KIT_FILES; do [ -f "$KIT/build/$f" ] && missing_libs "$KIT/build/$f"; done
  # Libraries nabla loads on first use (util/dynload.h: readline, SLEEF, zlib,
  # jansson, libpng, ZeroMQ, libcrypto) are not in any binary's ldd list: each
  # one the image's loader cannot find is taken from the carried debs.  The
  # sonames come from the sources carried with the kit, so a new one cannot be
  # forgotten here.
  local ldc
  ldc=$(command -v ldconfig || echo /sbin/ldconfig)
  for so in $(lazy_sonames); do
    "$ldc" -p 2>/dev/null | grep -q "^[[:space:]]*$so " && continue
    p=$(find "$RT/x" -name "$so" 2>/dev/null | head -n 1)
    if [ -n "$p" ]; then ln -sf "$(readlink -f "$p")" "$RT/lib/$so"; echo "  $so <- carried (loaded on first use)"; missing_libs "$p"
    else echo "  $so: NOT FOUND (carried debs lack it)"; fi
  done
  # OpenBLAS is dlopened on first use (tensor/tblas.h), so ldd does not list it:
  # the image's own when it has one, else the carried deb's (and what it needs)
  if [ ! -e "/usr/lib/$ARCH/openblas-openmp/libopenblas.so.0" ]; then
    p=$(find "$RT/x" -name libopenblas.so.0 -path '*openblas-openmp*' 2>/dev/null | head -n 1)
    if [ -n "$p" ]; then export NABLA_OPENBLAS=$p; echo "  libopenblas.so.0 <- carried ($p)"; missing_libs "$p"
    else echo "  libopenblas.so.0: NOT FOUND (carried debs lack it)"; fi
  fi
  if ldd "$KIT/build/nabla" | grep 'not found'; then echo "FAIL: gpu_kit: nabla still lacks libraries"; exit 1; fi
  export PYTHON=${PYTHON:-$(command -v python3)}
  export_cudnn
  case " $* " in
    *" profile "*)
      [ "$*" = profile ] || { echo "FAIL: gpu_kit: the profile phase runs alone (tools/gpu-session.sh device profile)"; exit 2; }
      profile_phase; exit $? ;;
    *" compile "*)   # issue 28's bench: nabla eager/compile(step) vs torch eager/torch.compile, one run
      [ "$*" = compile ] || { echo "FAIL: gpu_kit: the compile phase runs alone (tools/gpu-session.sh device compile)"; exit 2; }
      mkdir -p "$OUT/bench/results"
      PYTHONUNBUFFERED=1 timeout -k 5 "${GPU_CALL_BUDGET:-540}" "$PYTHON" bench/cuda/compile_steps.py --nabla "${GPUKIT_NABLA:-$KIT/build/nabla}" \
        --out "$OUT/bench/results/$(date -u +%Y-%m-%d)-compile-GPU.md" 2>&1 | tee "$OUT/compile.log"
      exit "${PIPESTATUS[0]}" ;;
  esac
  tests/cuda/run_gpu.sh --no-build "$KIT/build" "${@:-tests}"
}

case "${1:-}" in
  prepare) prepare ;;
  device) shift; device "$@" ;;
  *) sed -n '2,37p' "$0"; exit 2 ;;
esac
