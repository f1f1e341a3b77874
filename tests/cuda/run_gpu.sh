#!/usr/bin/env bash
# run_gpu.sh — the CUDA backend's checks on a machine WITH a GPU.
#
#   tests/cuda/run_gpu.sh [--no-build] [BUILD_DIR] [PHASE...]
#
# BUILD_DIR (default build-gpu/) is configured with -Dcuda=enabled and built,
# unless --no-build (a build made elsewhere and carried here: see
# tools/gpu-session.sh).  PHASEs, in the order a GPU session runs them (each
# call is bounded by GPU_CALL_BUDGET seconds, default 540, so that one call
# fits the device tool's 10-minute limit; default PHASE: tests):
#   tests      the probe (a GPU listed by nvidia-smi that CUDA cannot use is a
#              FAIL naming the reason), test_cuda (every GPU test must PASS,
#              none may SKIP), the tensor unit tests with the CUDA module
#   numerics   tests/numerics/test_*.py with NUMERICS_DEVICE=cuda, then
#              test_attention.py with the cuBLAS attention path forced;
#              numerics:test_a.py,test_b.py runs only those (what did not fit
#              the budget is printed as the next command)
#   memcheck   test_cuda under compute-sanitizer memcheck
#   racecheck  test_cuda under compute-sanitizer racecheck
#   dist       tests/dist/test_gpu_dist.py (NCCL world 1, GPU workers on the ring)
#   distbench  tests/dist/run_gpu_dist.sh's benchmarks (all_reduce, tp_mlp, pipeline)
#   zero       ZeRO on GPU workers: tests/dist/test_zero_cuda.py on the real GPU
#              (2 workers sharing it on the ring; NCCL with one worker per
#              GPU: there test_cuda_stage3_nccl_prefetch checks stage 3's
#              asynchronous NCCL prefetch, prefetch="nccl", against data
#              parallelism and the ring's prefetch, at world 1 too), then bench/dist/zero_gpu.nbl (stage 2, 3 and offload — per-bucket copies during backward and the old after-backward copies — vs
#              data parallelism, same run) at world 1..N on NCCL and 2 on the
#              ring, recorded in bench/results/DATE-zero-gpu-GPU.md
#   demo       examples/digits.nbl must say it trained on cuda
#   bench      bench_cuda vs bench/cuda/bench_torch.py
#   gpt2       bench/cuda/gpt2.nbl vs gpt2_torch.py (GPT-2-small training step)
# Every line is streamed as it is written into $OUT (or BUILD_DIR/gpu-logs):
# gpu-session.log has everything, <suite>.log each command's own output,
# and bench results are copied there as soon as they exist, so a command
# killed at its limit still returns everything up to the kill.  The last lines
# of every call are a summary (device, driver, CUDA runtime, counts per suite,
# first failures) and the next command to run.
# Under tools/run-tests.sh (NABLA_BUILD set) it only runs memcheck on that
# build, and prints "SKIP: ..." when there is no GPU.
# Output follows the test contract: PASS:/FAIL:/SKIP: lines.  Exit status 1
# when anything failed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
SAN=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
PY=${PYTHON:-/usr/bin/python3}
ORDER="tests numerics memcheck racecheck dist distbench zero demo bench gpt2"
FAILED=0
START=$SECONDS
BUDGET=${GPU_CALL_BUDGET:-540}
fail() { echo "FAIL: $*"; FAILED=1; }

# seconds left in this call's budget (15 s kept back for the summary)
left() { echo $((START + BUDGET - SECONDS - 15)); }
# tmo N: N, or what is left of the budget when that is less
tmo() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }

# A GPU listed by the driver but unusable by CUDA is a failure with the
# reason; no GPU listed at all is a plain "not here".  Prints nothing when
# a GPU is usable, else "skip: WHY" or "fail: WHY".
gpu_state() {  # BUILD_DIR
  local listed why
  if ! command -v nvidia-smi >/dev/null 2>&1; then echo "skip: no NVIDIA driver (nvidia-smi not found)"; return; fi
  listed=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -m1 '^GPU ')
  if [ -z "$listed" ]; then echo "skip: nvidia-smi lists no GPU"; return; fi
  [ -x "$1/nabla" ] || { echo "fail: $1/nabla is not built"; return; }
  why=$(timeout 60 "$1/nabla" -e 'print(if cuda.available() { "" } else { cuda.unavailable_reason() })' 2>&1)
  [ -n "$why" ] && echo "fail: nvidia-smi lists '$listed' but CUDA cannot be used: $why"
}

# logged NAME TIMEOUT CMD...: runs CMD with its output streamed both to
# stdout and to $LOGS/NAME.log; returns CMD's exit status (124: timed out)
logged() {
  local name=$1 t=$2; shift 2
  if [ "$t" -lt 20 ]; then echo "# $name: not run, the call's budget is spent" >"$LOGS/$name.log"; return 125; fi
  PYTHONUNBUFFERED=1 timeout -k 5 "$t" stdbuf -oL -eL "$@" 2>&1 | tee "$LOGS/$name.log"
  return "${PIPESTATUS[0]}"
}

memcheck() {  # BUILD_DIR TOOL
  local b=$1 tool=$2 rc
  if [ ! -x "$SAN" ]; then echo "SKIP: cuda_$tool: compute-sanitizer not found at $SAN"; return 0; fi
  # (no --leak-check: the caching allocator keeps its segments until exit, by
  # design; the OOM test fills the whole GPU, far too slow under the sanitizer)
  NABLA_CUDA_TESTS_SKIP=allocator_oom_recovery logged "cuda_$tool" "$(tmo 480)" \
    "$SAN" --tool "$tool" --error-exitcode 99 "$b/tests/cuda/test_cuda" >/dev/null
  rc=$?
  if [ $rc -eq 0 ]; then echo "PASS: cuda_$tool"
  else fail "cuda_$tool: exit $rc (99: errors reported); last lines:"; tail -n 30 "$LOGS/cuda_$tool.log" | sed 's/^\(PASS\|FAIL\|SKIP\):/  \1 -/'; fi
}

if [ -n "${NABLA_BUILD:-}" ]; then        # inside tools/run-tests.sh
  state=$(gpu_state "$NABLA_BUILD")
  case $state in
    skip:*) echo "SKIP: cuda_memcheck: ${state#skip: }"; exit 0 ;;
    fail:*) echo "FAIL: cuda_memcheck: ${state#fail: }"; exit 1 ;;
  esac
  LOGS=$(mktemp -d); memcheck "$NABLA_BUILD" memcheck; rm -rf "$LOGS"
  exit $FAILED
fi

BUILD=1
if [ "${1:-}" = --no-build ]; then BUILD=0; shift; fi
B=${1:-build-gpu}
[ $# -gt 0 ] && shift
PHASES=${*:-tests}
B=$(cd "$B" 2>/dev/null && pwd || echo "$B")
LOGS=${OUT:-$B/gpu-logs}
mkdir -p "$LOGS"
for p in $PHASES; do
  case " $ORDER " in *" ${p%%:*} "*) ;; *) echo "FAIL: run_gpu: unknown phase '$p' (phases: $ORDER)"; exit 2 ;; esac
done

smi() {  # FIELDS: nvidia-smi's first GPU's fields, or "none"
  local v; v=$(timeout 30 nvidia-smi --query-gpu="$1" --format=csv,noheader 2>/dev/null | head -n 1); echo "${v:-none}"
}

# A compact account of this call: the last lines it prints.
summary() {
  local f n p s fl
  echo
  echo "==== summary ($(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - START)) s) ===="
  echo "device:  $(smi name,memory.total)"
  echo "driver:  $(smi driver_version)"
  f=$(for d in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }} /usr/local/cuda/lib64; do ls "$d"/libcudart.so.* 2>/dev/null; done | head -n 1)
  echo "runtime: ${f:+$(readlink -f "$f")}"
  for f in "$LOGS"/*.log; do
    n=$(basename "$f" .log); case $n in gpu-session|gpu-kit) continue ;; esac
    p=$(grep -c '^PASS: ' "$f"); fl=$(grep -c '^FAIL: ' "$f"); s=$(grep -c '^SKIP: ' "$f")
    [ $((p + fl + s)) -gt 0 ] && printf '  %-28s %4d passed, %d failed, %d skipped\n' "$n" "$p" "$fl" "$s"
  done
  echo "first failures:"
  tail -n +"$LOG_FROM" "$LOGS/gpu-session.log" 2>/dev/null | grep '^FAIL: ' | head -n 10 | sed 's/^/  /' | cut -c1-300
  [ -n "${NEXT:-}" ] && echo "next: tools/gpu-session.sh device $NEXT" || echo "next: nothing left: every phase has run"
  echo "result: $([ $FAILED = 0 ] && echo ok || echo FAILED)"
}

# Everything this call prints also goes to gpu-session.log, line by line
# (appended: the summary reads this call's lines, from LOG_FROM on).
LOG_FROM=$(( $(cat "$LOGS/gpu-session.log" 2>/dev/null | wc -l) + 1 ))
exec > >(stdbuf -oL tee -a "$LOGS/gpu-session.log") 2>&1
echo "# run_gpu.sh $PHASES ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget ${BUDGET}s, logs in $LOGS)"

if [ $BUILD = 1 ]; then
  if [ ! -f "$B/build.ninja" ]; then meson setup "$B" -Dcuda=enabled || { echo "FAIL: gpu_build: meson setup failed"; exit 1; }; fi
  if ninja -C "$B"; then echo "PASS: gpu_build"; else echo "FAIL: gpu_build: ninja failed"; exit 1; fi
fi
state=$(gpu_state "$B")
case $state in
  skip:*) echo "SKIP: gpu_tests: ${state#skip: }"; NEXT=""; summary; exit 0 ;;
  fail:*) fail "gpu_usable: ${state#fail: }"; NEXT="$PHASES"; summary; exit 1 ;;
esac
echo "PASS: gpu_usable"
export NABLA="$B/nabla" NABLA_STDLIB="$ROOT/stdlib" NO_COLOR=1
echo "# gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1)"

# the phases after the last one asked for, in ORDER (what the next call runs)
after() {
  local last=$1 seen=0 out="" p
  for p in $ORDER; do [ $seen = 1 ] && out="$out $p"; [ "$p" = "$last" ] && seen=1; done
  echo "${out# }"
}

phase_tests() {
  logged test_cuda "$(tmo 300)" "$B/tests/cuda/test_cuda" >/dev/null; local rc=$?
  [ $rc -eq 0 ] || fail "test_cuda: exit status $rc"
  grep -q '^SKIP: ' "$LOGS/test_cuda.log" && fail "gpu_tests_all_ran: $(grep -c '^SKIP: ' "$LOGS/test_cuda.log") GPU tests were skipped on a GPU machine"
  local t name
  for t in "$B"/tests/tensor/test_tensor "$B"/tests/tensor_nn/test_tensor_nn; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    logged "$name" "$(tmo 90)" "$t" >/dev/null; rc=$?
    if ! grep -q '^# cuda: available' "$LOGS/$name.log"; then fail "$name: does not see the GPU: $(grep -m1 '^# cuda:' "$LOGS/$name.log")"
    elif [ $rc -eq 0 ]; then echo "PASS: $name (CUDA module loaded)"
    else fail "$name: exit $rc: $(grep '^FAIL' "$LOGS/$name.log" | head -n 5 | tr '\n' ' ')"; fi
  done
}

# numerics [SUITE,...]: each suite with the inputs on the GPU; a suite that
# skips or runs no case is a failure here
phase_numerics() {
  local want=$1 s mode name log rc p f k todo=""
  local all
  all=$(cd tests/numerics && ls test_*.py; echo gemm:test_attention.py)
  [ -n "$want" ] && all=${want//,/ }
  for s in $all; do
    mode=auto; case $s in *:*) mode=${s%%:*}; s=${s#*:} ;; esac
    name=numerics_${s%.py}; [ $mode = auto ] || name=${name}_$mode
    if [ "$(left)" -lt 60 ]; then todo="$todo,$([ $mode = auto ] || echo "$mode:")$s"; continue; fi
    NABLA_CUDA_ATTENTION=$mode NUMERICS_DEVICE=cuda logged "$name" "$(tmo 150)" "$PY" "tests/numerics/$s" >/dev/null; rc=$?
    log="$LOGS/$name.log"
    grep -E '^(FAIL|SKIP):' "$log" | head -n 40
    p=$(grep -c '^PASS:' "$log"); f=$(grep -c '^FAIL:' "$log"); k=$(grep -c '^SKIP:' "$log")
    if [ $rc -eq 0 ] && [ "$f" -eq 0 ] && [ "$k" -eq 0 ] && [ "$p" -gt 0 ]; then echo "PASS: $name: $p cases on cuda"
    else fail "$name: $p passed, $f failed, $k skipped, exit $rc (124: timed out): $(tail -n 2 "$log" | tr '\n' ' ' | cut -c1-200)"; fi
  done
  [ -n "$todo" ] && NUMERICS_LEFT="numerics:${todo#,}"
}

phase_dist() {
  logged gpu_dist "$(tmo 420)" env NABLA="$NABLA" "$PY" tests/dist/test_gpu_dist.py >/dev/null; local rc=$?
  [ $rc -eq 0 ] || fail "gpu_dist: exit $rc (124: timed out)"
}

phase_distbench() {
  logged gpu_distbench "$(tmo 480)" env DIST_CALL_BUDGET="$(tmo 470)" tests/dist/run_gpu_dist.sh "$B" bench >/dev/null; local rc=$?
  [ $rc -eq 0 ] || fail "gpu_distbench: exit $rc"
  cp bench/results/*-dist-gpu-*.md "$LOGS/" 2>/dev/null
}

# ZeRO on GPU workers: correctness first (the suite the emulated device runs on
# every commit, here on the real GPU and on NCCL), then the speed of stage 2
# against data parallelism in the same run, world 1..N (N GPUs, at most 8);
# ZERO_BENCH_ARGS="B STEPS D LAYERS" overrides the benchmark's sizes
phase_zero() {
  local ngpu rc w res log
  ngpu=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  [ "$ngpu" -gt 8 ] && ngpu=8
  logged zero_cuda_ring "$(tmo 150)" env ZERO_CUDA=real ZERO_BACKEND=ring ZERO_WORLD=2 "$PY" tests/dist/test_zero_cuda.py >/dev/null; rc=$?
  [ $rc -eq 0 ] || fail "zero_cuda_ring: exit $rc (124: timed out)"
  logged zero_cuda_nccl "$(tmo 150)" env ZERO_CUDA=real ZERO_BACKEND=nccl ZERO_WORLD="$ngpu" "$PY" tests/dist/test_zero_cuda.py >/dev/null; rc=$?
  [ $rc -eq 0 ] || fail "zero_cuda_nccl: exit $rc (124: timed out)"
  mkdir -p bench/results
  res=bench/results/$(date +%Y-%m-%d)-zero-gpu-$(gpu_tag).md
  {
    echo "# ZeRO on GPU workers vs data parallelism (bench/dist/zero_gpu.nbl), $(date -u '+%Y-%m-%d %H:%M UTC'), $(smi name) x $ngpu"
    echo
    echo "driver $(smi driver_version), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); ratios are against dp in the same run"
    echo
    echo '```'
  } >"$res"
  for w in $(seq 1 "$ngpu") ring; do
    if [ "$(left)" -lt 90 ]; then echo "# zero bench world $w: not run, the call's budget is spent" >>"$res"; continue; fi
    if [ "$w" = ring ]; then log=zero_bench_w2_ring; logged "$log" "$(tmo 240)" "$NABLA" bench/dist/zero_gpu.nbl 2 ring ${ZERO_BENCH_ARGS:-} >/dev/null
    else log=zero_bench_w${w}_nccl; logged "$log" "$(tmo 240)" "$NABLA" bench/dist/zero_gpu.nbl "$w" nccl ${ZERO_BENCH_ARGS:-} >/dev/null; fi
    grep -v '^bench: ' "$LOGS/$log.log" >>"$res"
  done
  echo '```' >>"$res"
  cp "$res" "$LOGS/"
  cat "$res"
  if grep -q '^bench: zero_zero2_w1_nccl_vs_dp' "$LOGS/zero_bench_w1_nccl.log" 2>/dev/null; then echo "PASS: zero_gpu_bench"
  else fail "zero_gpu_bench: $(tail -n 3 "$LOGS/zero_bench_w1_nccl.log" 2>/dev/null | tr '\n' ' ' | cut -c1-200)"; fi
}

phase_demo() {
  logged demo "$(tmo 150)" "$NABLA" examples/digits.nbl >/dev/null; local rc=$?
  if [ $rc -eq 0 ] && grep -q "on cuda" "$LOGS/demo.log"; then echo "PASS: demo_on_gpu"
  else fail "demo_on_gpu: exit $rc, or it did not say it ran on cuda"; fi
}

# bench_table FILE TITLE NABLA_LOG TORCH_LOG: the two programs' "bench: NAME VALUE UNIT" lines side by side
bench_table() {
  local res=$1 gpu
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
  {
    echo "# $2, $(date -u '+%Y-%m-%d %H:%M UTC'), $gpu"
    echo
    echo "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo "| benchmark | nabla | torch |"
    echo "|---|---|---|"
    sed -n 's/^bench: //p' "$3" | while read -r name val unit; do
      t=$(sed -n "s/^bench: $name //p" "$4" | head -n 1)
      echo "| $name | $val $unit | ${t:-n/a} |"
    done
    echo
    echo '```'; cat "$3" "$4"; echo '```'
  } >"$res"
  cp "$res" "$LOGS/"
  cat "$res"
}

gpu_tag() { nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | tr ' ' '-'; }

phase_bench() {
  mkdir -p bench/results
  logged bench_cuda "$(tmo 240)" "$B/tests/cuda/bench_cuda" >/dev/null
  logged bench_torch "$(tmo 240)" "$PY" bench/cuda/bench_torch.py >/dev/null
  bench_table "bench/results/$(date +%Y-%m-%d)-cuda-$(gpu_tag).md" "CUDA backend benchmarks" "$LOGS/bench_cuda.log" "$LOGS/bench_torch.log"
  grep -q '^bench: ' "$LOGS/bench_cuda.log" && echo "PASS: gpu_bench" || fail "gpu_bench: bench_cuda printed no results"
}

phase_gpt2() {
  mkdir -p bench/results
  logged gpt2_nabla "$(tmo 240)" "$NABLA" bench/cuda/gpt2.nbl >/dev/null
  logged gpt2_torch "$(tmo 240)" "$PY" bench/cuda/gpt2_torch.py >/dev/null
  bench_table "bench/results/$(date +%Y-%m-%d)-cuda-gpt2-$(gpu_tag).md" "GPT-2-small training step" "$LOGS/gpt2_nabla.log" "$LOGS/gpt2_torch.log"
  grep -q '^bench: gpt2_step_ms' "$LOGS/gpt2_nabla.log" && echo "PASS: gpt2_bench" || fail "gpt2_bench: $(tail -n 3 "$LOGS/gpt2_nabla.log" | tr '\n' ' ')"
}

NEXT=""
NUMERICS_LEFT=""
last=""
for p in $PHASES; do
  if [ "$(left)" -lt 45 ]; then NEXT="$NEXT $p"; continue; fi
  echo "# ---- phase $p ($(left) s left in this call)"
  case $p in
    tests) phase_tests ;;
    numerics) phase_numerics "" ;;
    numerics:*) phase_numerics "${p#numerics:}" ;;
    memcheck|racecheck) memcheck "$B" "$p" ;;
    dist) phase_dist ;;
    distbench) phase_distbench ;;
    zero) phase_zero ;;
    demo) phase_demo ;;
    bench) phase_bench ;;
    gpt2) phase_gpt2 ;;
  esac
  last=${p%%:*}
done
rest=${NEXT# }
[ -n "$rest" ] || rest=$(after "$last")
NEXT="${NUMERICS_LEFT:+$NUMERICS_LEFT }$rest"
NEXT="${NEXT% }"
summary
exit $FAILED
