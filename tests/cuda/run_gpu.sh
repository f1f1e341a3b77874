#!/usr/bin/env bash
# run_gpu.sh — the CUDA backend's checks on a machine WITH a GPU.
#
# Run directly (the GPU session):   tests/cuda/run_gpu.sh [BUILD_DIR]
#   1. configures/builds BUILD_DIR (default build-gpu/) with -Dcuda=enabled;
#   2. runs test_cuda (every GPU test must PASS: none may SKIP there);
#   3. runs test_cuda under compute-sanitizer --tool memcheck, then racecheck
#      (the block reductions' shared memory);
#   4. runs the benchmarks (bench_cuda and, if torch is installed,
#      bench/cuda/bench_torch.py) and writes bench/results/<date>-cuda-<gpu>.md.
# Under tools/run-tests.sh (NABLA_BUILD set) it only runs memcheck on that
# build, and prints "SKIP: ..." when there is no usable GPU.
# Output follows the test contract: PASS:/FAIL:/SKIP: lines.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
SAN=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}

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
    echo "FAIL: cuda_memcheck: compute-sanitizer reported errors (last lines below)"
    tail -n 30 "$log" | sed 's/^\(PASS\|FAIL\|SKIP\):/  \1 -/'
  fi
  if [ "${2:-}" != racecheck ]; then rm -f "$log"; return 0; fi
  if "$SAN" --tool racecheck --error-exitcode 99 "$b/tests/cuda/test_cuda" >"$log" 2>&1; then
    echo "PASS: cuda_racecheck"
  else
    echo "FAIL: cuda_racecheck: shared-memory races reported (last lines below)"
    tail -n 30 "$log" | sed 's/^\(PASS\|FAIL\|SKIP\):/  \1 -/'
  fi
  rm -f "$log"
}

if [ -n "${NABLA_BUILD:-}" ]; then        # inside tools/run-tests.sh
  why=$(gpu_reason "$NABLA_BUILD")
  if [ -n "$why" ]; then echo "SKIP: cuda_memcheck: cuda: $why"; exit 0; fi
  memcheck "$NABLA_BUILD"
  exit 0
fi

B=${1:-build-gpu}
if [ ! -f "$B/build.ninja" ]; then meson setup "$B" -Dcuda=enabled || { echo "FAIL: gpu_build: meson setup failed"; exit 1; }; fi
if ninja -C "$B"; then echo "PASS: gpu_build"; else echo "FAIL: gpu_build: ninja failed"; exit 1; fi
why=$(gpu_reason "$B")
if [ -n "$why" ]; then echo "SKIP: gpu_tests: cuda: $why"; exit 0; fi

out=$("$B/tests/cuda/test_cuda" 2>&1); rc=$?
echo "$out"
if echo "$out" | grep -q '^SKIP: '; then echo "FAIL: gpu_tests_all_ran: some GPU tests were skipped on a GPU machine"; fi
memcheck "$B" racecheck

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | tr ' ' '-')
res="bench/results/$(date +%Y-%m-%d)-cuda-${gpu}.md"
mkdir -p bench/results
nab=$("$B/tests/cuda/bench_cuda" 2>&1)
tor=$(/usr/bin/python3 bench/cuda/bench_torch.py 2>&1 || true)
{
  echo "# CUDA backend benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), $gpu"
  echo
  echo "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1), commit $(git rev-parse --short HEAD 2>/dev/null)"
  echo
  echo "| benchmark | nabla | torch |"
  echo "|---|---|---|"
  echo "$nab" | sed -n 's/^bench: //p' | while read -r name val unit; do
    t=$(echo "$tor" | sed -n "s/^bench: $name //p")
    echo "| $name | $val $unit | ${t:-n/a} |"
  done
  echo
  echo '```'
  echo "$nab"
  echo "$tor"
  echo '```'
} >"$res"
cat "$res"
echo "$nab" | grep -q '^bench: ' && echo "PASS: gpu_bench (results in $res)" || echo "FAIL: gpu_bench: bench_cuda printed no results"
[ $rc -eq 0 ]
