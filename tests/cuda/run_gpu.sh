#!/usr/bin/env bash
# run_gpu.sh — the CUDA backend's checks on a machine WITH a GPU.
#
#   tests/cuda/run_gpu.sh [--no-build] [BUILD_DIR] [PHASE...]
#
# BUILD_DIR (default build-gpu/) is configured with -Dcuda=enabled and built,
# unless --no-build (a build made elsewhere and carried here: see
# tools/gpu-session.sh).  PHASEs, in this order (default: all of them):
#   tests     test_cuda — every GPU test must PASS, none may SKIP; the tensor
#             unit tests with the CUDA module loaded
#   numerics  tests/numerics/test_*.py with NUMERICS_DEVICE=cuda: the CPU
#             suites' cases and torch references, inputs on the GPU
#   sanitize  test_cuda under compute-sanitizer memcheck, then racecheck
#   dist      tests/dist/run_gpu_dist.sh (NCCL world 1, GPU workers on ring)
#   demo      examples/digits.nbl (trains on the GPU when one is present)
#   bench     bench_cuda + bench/cuda/bench_torch.py, bench/cuda/gpt2.nbl +
#             gpt2_torch.py; writes bench/results/<date>-cuda-<gpu>.md
# Under tools/run-tests.sh (NABLA_BUILD set) it only runs memcheck on that
# build, and prints "SKIP: ..." when there is no usable GPU.
# Output follows the test contract: PASS:/FAIL:/SKIP: lines.  Exit status 1
# when any phase failed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
SAN=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
PY=${PYTHON:-/usr/bin/python3}
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

gpu_reason() {  # empty when a GPU is usable
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "no NVIDIA driver/GPU (nvidia-smi -L failed)"; return
  fi
  [ -x "$1/tests/cuda/test_cuda" ] || { echo "$1/tests/cuda/test_cuda is not built"; return; }
  local r
  r=$("$1/tests/cuda/test_cuda" 2>/dev/null | sed -n 's/^# cuda: //p' | head -n 1)
  [ "$r" = available ] || echo "${r:-test_cuda printed no status}"
}

memcheck() {  # BUILD_DIR [racecheck too]
  local b=$1 log
  if [ ! -x "$SAN" ]; then echo "SKIP: cuda_memcheck: compute-sanitizer not found at $SAN"; return 0; fi
  log=$(mktemp)
  # (no --leak-check: the caching allocator keeps its segments until exit, by design)
  if "$SAN" --tool memcheck --error-exitcode 99 "$b/tests/cuda/test_cuda" >"$log" 2>&1; then
    echo "PASS: cuda_memcheck"
  else
    fail "cuda_memcheck: compute-sanitizer reported errors (last lines below)"
    tail -n 30 "$log" | sed 's/^\(PASS\|FAIL\|SKIP\):/  \1 -/'
  fi
  if [ "${2:-}" != racecheck ]; then rm -f "$log"; return 0; fi
  if "$SAN" --tool racecheck --error-exitcode 99 "$b/tests/cuda/test_cuda" >"$log" 2>&1; then
    echo "PASS: cuda_racecheck"
  else
    fail "cuda_racecheck: shared-memory races reported (last lines below)"
    tail -n 30 "$log" | sed 's/^\(PASS\|FAIL\|SKIP\):/  \1 -/'
  fi
  rm -f "$log"
}

if [ -n "${NABLA_BUILD:-}" ]; then        # inside tools/run-tests.sh
  why=$(gpu_reason "$NABLA_BUILD")
  if [ -n "$why" ]; then echo "SKIP: cuda_memcheck: cuda: $why"; exit 0; fi
  memcheck "$NABLA_BUILD"
  exit $FAILED
fi

BUILD=1
if [ "${1:-}" = --no-build ]; then BUILD=0; shift; fi
B=${1:-build-gpu}
[ $# -gt 0 ] && shift
PHASES=${*:-tests numerics sanitize dist demo bench}
B=$(cd "$B" 2>/dev/null && pwd || echo "$B")

if [ $BUILD = 1 ]; then
  if [ ! -f "$B/build.ninja" ]; then meson setup "$B" -Dcuda=enabled || { echo "FAIL: gpu_build: meson setup failed"; exit 1; }; fi
  if ninja -C "$B"; then echo "PASS: gpu_build"; else echo "FAIL: gpu_build: ninja failed"; exit 1; fi
fi
why=$(gpu_reason "$B")
if [ -n "$why" ]; then echo "SKIP: gpu_tests: cuda: $why"; exit 0; fi
export NABLA="$B/nabla" NABLA_STDLIB="$ROOT/stdlib" NO_COLOR=1
echo "# gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1)"

has() { case " $PHASES " in *" $1 "*) return 0;; esac; return 1; }

if has tests; then
  out=$("$B/tests/cuda/test_cuda" 2>&1); rc=$?
  echo "$out"
  [ $rc -eq 0 ] || fail "test_cuda: exit status $rc"
  if echo "$out" | grep -q '^SKIP: '; then fail "gpu_tests_all_ran: some GPU tests were skipped on a GPU machine"; fi
  for t in "$B"/tests/tensor/test_tensor "$B"/tests/tensor_nn/test_tensor_nn; do
    [ -x "$t" ] || continue
    if "$t" >/tmp/gpu_unit.log 2>&1; then echo "PASS: $(basename "$t") (CUDA module loaded)"; else fail "$(basename "$t"): $(grep '^FAIL' /tmp/gpu_unit.log | head -n 5 | tr '\n' ' ')"; fi
  done
fi

if has numerics; then
  # gemm:SCRIPT runs SCRIPT again with the cuBLAS attention path forced (the suite's shapes
  # are small, so the default rule picks the fused kernels there)
  for s in tests/numerics/test_*.py gemm:tests/numerics/test_attention.py; do
    mode=auto; case $s in *:*) mode=${s%%:*}; s=${s#*:} ;; esac
    name=$(basename "$s"); [ $mode = auto ] || name="$name (NABLA_CUDA_ATTENTION=$mode)"
    log=$(mktemp)
    NABLA_CUDA_ATTENTION=$mode NUMERICS_DEVICE=cuda timeout 900 "$PY" "$s" >"$log" 2>&1; rc=$?
    grep -E '^(FAIL|SKIP):' "$log" | head -n 60
    p=$(grep -c '^PASS:' "$log"); f=$(grep -c '^FAIL:' "$log")
    if [ $rc -eq 0 ] && [ "$f" -eq 0 ]; then echo "PASS: numerics_cuda $name: $p cases";
    else fail "numerics_cuda $name: $f of $((p + f)) cases failed (exit $rc): $(tail -n 3 "$log" | tr '\n' ' ')"; fi
    rm -f "$log"
  done
fi

has sanitize && memcheck "$B" racecheck

if has dist; then
  if [ -x tests/dist/run_gpu_dist.sh ]; then tests/dist/run_gpu_dist.sh "$B" || FAILED=1
  else echo "SKIP: gpu_dist: tests/dist/run_gpu_dist.sh does not exist yet"; fi
fi

if has demo; then
  out=$(timeout 300 "$NABLA" examples/digits.nbl 2>&1); rc=$?
  echo "$out" | tail -n 5
  if [ $rc -eq 0 ] && echo "$out" | grep -q "on cuda"; then echo "PASS: demo_on_gpu"; else fail "demo_on_gpu: exit $rc, or it did not say it ran on cuda"; fi
fi

if has bench; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | tr ' ' '-')
  res="bench/results/$(date +%Y-%m-%d)-cuda-${gpu}.md"
  mkdir -p bench/results
  nab=$("$B/tests/cuda/bench_cuda" 2>&1)
  tor=$("$PY" bench/cuda/bench_torch.py 2>&1 || true)
  g_nab=$(timeout 600 "$NABLA" bench/cuda/gpt2.nbl 2>&1)
  g_tor=$(timeout 600 "$PY" bench/cuda/gpt2_torch.py 2>&1)
  {
    echo "# CUDA backend benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), $gpu"
    echo
    echo "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo "| benchmark | nabla | torch |"
    echo "|---|---|---|"
    printf '%s\n%s\n' "$nab" "$g_nab" | sed -n 's/^bench: //p' | while read -r name val unit; do
      t=$(printf '%s\n%s\n' "$tor" "$g_tor" | sed -n "s/^bench: $name //p" | head -n 1)
      echo "| $name | $val $unit | ${t:-n/a} |"
    done
    echo
    echo '```'
    printf '%s\n%s\n%s\n%s\n' "$nab" "$tor" "$g_nab" "$g_tor"
    echo '```'
  } >"$res"
  cat "$res"
  echo "$nab" | grep -q '^bench: ' && echo "PASS: gpu_bench (results in $res)" || fail "gpu_bench: bench_cuda printed no results"
  echo "$g_nab" | grep -q '^bench: gpt2_step_ms' && echo "PASS: gpt2_bench" || fail "gpt2_bench: $(echo "$g_nab" | tail -n 3 | tr '\n' ' ')"
fi
exit $FAILED
