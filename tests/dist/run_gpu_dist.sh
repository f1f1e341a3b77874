#!/usr/bin/env bash
# run_gpu_dist.sh — distributed checks on a machine WITH a GPU (called by
# tests/cuda/run_gpu.sh; runs anywhere, printing SKIP: lines without a GPU).
#
#   tests/dist/run_gpu_dist.sh BUILD_DIR [tests|bench|all]
#
# tests = (a)-(c), bench = (d)-(e), all (default) = both.  Everything is
# bounded by DIST_CALL_BUDGET seconds (default 500: one device-tool call).
#   (a) NCCL world 1: every collective on CUDA tensors vs NumPy, gradients,
#       average_grads, a sub-group; 2 workers on one GPU refused by "nccl",
#       "auto" falls back to the ring (with 2+ GPUs: NCCL world 2, timeout+abort)
#   (b) 2-4 GPU workers sharing the GPU through the ring backend (pinned
#       staging): every collective, results on cuda
#   (c) data-parallel training with CUDA tensors equals one process (1e-5)
#   (d) the all_reduce bench with GPU tensors (ring world 2; NCCL world 1,
#       and world 2 with 2+ GPUs): tests/dist/bench_allreduce.nbl, written to
#       bench/results/<date>-dist-gpu-<gpu>.md
#   (e) bench/dist/tp_mlp.nbl and bench/dist/pipeline.nbl with GPU workers
#       through the ring, appended to the same file
# (a)-(c) are tests/dist/test_gpu_dist.py.  Output: PASS:/FAIL:/SKIP: lines;
# exit status 1 when anything failed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${1:-${NABLA_BUILD:-build-gpu}}   # under tools/run-tests.sh: the build being tested
WHAT=${2:-all}
END=$((SECONDS + ${DIST_CALL_BUDGET:-500}))
tmo() { local l=$((END - SECONDS)); [ "$l" -lt "$1" ] && echo "$((l > 1 ? l : 1))" || echo "$1"; }
NABLA=$(cd "$B" 2>/dev/null && pwd)/nabla
PY=${PYTHON:-/usr/bin/python3}
FAILED=0
if [ ! -x "$NABLA" ]; then echo "FAIL: gpu_dist: $B/nabla is not built"; exit 1; fi

if [ "$WHAT" != bench ]; then
  NABLA="$NABLA" PYTHONUNBUFFERED=1 timeout -k 5 "$(tmo 420)" "$PY" tests/dist/test_gpu_dist.py || FAILED=1
fi
[ "$WHAT" = tests ] && exit $FAILED

why=$("$NABLA" -e 'print(if cuda.available() { "" } else { cuda.unavailable_reason() })' 2>&1)
if [ -n "$why" ]; then
  echo "SKIP: gpu_dist_bench: no usable GPU ($why)"
  exit $FAILED
fi
ngpu=$("$NABLA" -e 'print(cuda.device_count())')
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 | tr ' ' '-')
res="bench/results/$(date +%Y-%m-%d)-dist-gpu-${gpu:-unknown}.md"
runs=("2 cuda ring" "1 cuda nccl" "2 cpu ring")
[ "$ngpu" -ge 2 ] && runs+=("2 cuda nccl")
lines=()
for r in "${runs[@]}"; do
  # shellcheck disable=SC2086
  out=$(timeout -k 5 "$(tmo 120)" "$NABLA" tests/dist/bench_allreduce.nbl $r 2>&1); rc=$?
  line=$(echo "$out" | grep '^world ' | tail -n 1)
  if [ $rc -eq 0 ] && echo "$line" | grep -q 'correct true'; then
    echo "PASS: gpu_dist_bench $r: $line"; lines+=("$line")
  else
    echo "FAIL: gpu_dist_bench $r: exit $rc: $(echo "$out" | tail -n 3 | tr '\n' ' ')"; FAILED=1
  fi
done
mkdir -p bench/results
{
  echo "# dist all_reduce with GPU tensors, $(date -u '+%Y-%m-%d %H:%M UTC'), ${gpu:-unknown} x$ngpu"
  echo
  echo "tests/dist/bench_allreduce.nbl WORLD DEVICE BACKEND (f32; 64 MB mean of 10, 4 KB mean of 1000);"
  echo "ring + cuda = CUDA tensors staged through pinned host memory over TCP/shared memory;"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo
  for l in "${lines[@]}"; do echo "- $l"; done
} > "$res"
# (e) tensor-parallel MLP and pipeline schedules with GPU workers through the ring
for cmd in "bench/dist/tp_mlp.nbl 2 1024 cuda ring" "bench/dist/pipeline.nbl 2 8 cuda ring" "bench/dist/pipeline.nbl 4 16 cuda ring"; do
  # shellcheck disable=SC2086
  out=$(timeout -k 5 "$(tmo 120)" "$NABLA" $cmd 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "PASS: gpu_dist_bench $cmd"; else echo "FAIL: gpu_dist_bench $cmd: exit $rc: $(echo "$out" | tail -n 3 | tr '\n' ' ')"; FAILED=1; fi
  { echo; echo "## $cmd"; echo; echo '```'; echo "$out"; echo '```'; } >> "$res"
done
echo "# results written to $res"
exit $FAILED
