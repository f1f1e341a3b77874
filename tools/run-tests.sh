#!/usr/bin/env bash
# run-tests.sh — runs every Nabla test suite and sums the results.
#
# Contract for every test program/script: one stdout line per test,
#     PASS: name
#     FAIL: name: why          (any further lines must not start with PASS:/FAIL:/SKIP:)
#     SKIP: name: why
# and exit status 0 unless something failed.  A suite that crashes or exits
# non-zero without printing any FAIL line counts as one failure named after
# the suite.  Exit status 77 with no result lines means "this whole suite does
# not apply here" (nothing is counted).  Each suite's stdout+stderr goes to
# build/test-logs/<suite>.log; FAIL lines and a one-line summary per suite are
# echoed.  The last line is always "N passed, N failed, N skipped"; the exit
# status is 1 when anything failed.
#
# Suites (each skipped with a note when not built/written yet):
#   C tests     every executable build/tests/**/test_*, run from the repo root;
#               then the same from build-asan/ with suffix " [asan]".
#   scripts     tests/*/run_*.sh (bash) and tests/*/test_*.py (/usr/bin/python3),
#               run from the repo root with NABLA=<abs path of build/nabla>
#               and NABLA_BUILD=<abs path of build/>.  A script whose text
#               mentions NABLA_ASAN is run a second time (suffix " [asan]")
#               with NABLA_ASAN=1, NABLA=NABLA_ASAN_BIN=<abs build-asan/nabla>
#               and NABLA_BUILD=<abs build-asan/>; it may trim its work
#               there, or exit 77 to opt out.
#   fuzz        every build-fuzz/tests/fuzz/fuzz_NAME for its share of FUZZ_BUDGET on a
#               temporary copy of tests/fuzz/corpus_NAME/ (fuzz_eval: corpus/).
#
# Usage: tools/run-tests.sh [SUBSTRING...]   only suites whose name contains one
# Environment: BUILD_DIR (build), ASAN_BUILD_DIR (build-asan),
#   FUZZ_BUILD_DIR (build-fuzz), FUZZ_BUDGET (80 s for all fuzz targets
#   together, split evenly) or FUZZ_TIME (s per target), SUITE_TIMEOUT (900 s per
#   suite), NO_ASAN=1, NO_FUZZ=1 to leave those passes out, TEST_LANES (2
#   where there are 2 or more CPUs: tests/{dist,kernel,repl}/* and the fuzzers run in a
#   second lane beside the rest; 1 runs everything in order).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

BUILD_DIR=${BUILD_DIR:-build}
ASAN_BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
FUZZ_TIME_SET=${FUZZ_TIME:-}
FUZZ_BUDGET=${FUZZ_BUDGET:-80}
FUZZ_TIME=${FUZZ_TIME:-60}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-900}
TEST_LANES=${TEST_LANES:-$( [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ] && echo 2 || echo 1 )}
PYTHON=/usr/bin/python3
LOGDIR=$ROOT/$BUILD_DIR/test-logs

# (not detect_stack_use_after_return: its fake stack frames break the
# interpreter's address-based native-stack depth guard)
ASAN_ENV=(ASAN_OPTIONS=detect_leaks=1
          UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1)

TOTAL_PASS=0 TOTAL_FAIL=0 TOTAL_SKIP=0
SUITE_TIMES=()   # "seconds name" per suite, for the slowest-suites list at the end
FILTERS=("$@")

note() { echo "note: $*"; }

selected() {
  [ ${#FILTERS[@]} -eq 0 ] && return 0
  local f
  for f in "${FILTERS[@]}"; do
    case "$1" in *"$f"*) return 0 ;; esac
  done
  return 1
}

count() { grep -c "^$1: " "$2" 2>/dev/null || true; }

# run_suite NAME COMMAND... : runs COMMAND (from the repo root, with stdin
# from /dev/null) with a time limit, logs, counts and reports.
run_suite() {
  local name=$1; shift
  selected "$name" || return 0
  mkdir -p "$LOGDIR"
  local log="$LOGDIR/$(printf '%s' "$name" | tr -c 'A-Za-z0-9._-' '_').log"
  local rc=0 t0=$SECONDS
  if [ "$(type -t "$1")" = function ]; then   # bounds its own time
    "$@" </dev/null >"$log" 2>&1 || rc=$?
  else
    # (in a subshell so that bash's "Segmentation fault" notice lands in the log)
    ( timeout -k 10 "$SUITE_TIMEOUT" "$@"; exit $? ) </dev/null >"$log" 2>&1 || rc=$?
  fi
  local p f s
  p=$(count PASS "$log"); f=$(count FAIL "$log"); s=$(count SKIP "$log")
  if [ "$rc" -eq 77 ] && [ $((p + f + s)) -eq 0 ]; then
    note "$name: does not apply here (exit 77); nothing counted"
    return 0
  fi
  grep "^FAIL: " "$log" | sed 's/^/  /'
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    local why="exited with status $rc"
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && why="timed out after ${SUITE_TIMEOUT}s (status $rc)"
    [ "$rc" -gt 128 ] && [ "$rc" -ne 137 ] && why="killed by signal $((rc - 128))"
    echo "FAIL: $name: $why without a FAIL line" >>"$log"
    echo "  FAIL: $name: $why without a FAIL line; see ${log#$ROOT/}"
    f=1
  elif [ $((p + f + s)) -eq 0 ]; then
    note "$name: printed no PASS/FAIL/SKIP lines"
  fi
  TOTAL_PASS=$((TOTAL_PASS + p)); TOTAL_FAIL=$((TOTAL_FAIL + f)); TOTAL_SKIP=$((TOTAL_SKIP + s))
  printf '%-48s %4d passed, %d failed, %d skipped %5ds  (%s)\n' "$name" "$p" "$f" "$s" $((SECONDS - t0)) "${log#$ROOT/}"
  SUITE_TIMES+=("$((SECONDS - t0)) $name")
}

# ---- C test programs -------------------------------------------------------
c_tests() {  # DIR -> executables test_* under DIR/tests, sorted
  [ -d "$1/tests" ] || return 0
  find "$1/tests" -type f -name 'test_*' ! -name '*.*' -perm -u+x ! -path '*.p/*' | sort
}

c_suites() {
  local dir=$1 suffix=$2; shift 2
  if [ ! -d "$dir" ]; then
    note "$dir/ not configured; C tests${suffix} not run"
    return 0
  fi
  local exes
  exes=$(c_tests "$dir")
  if [ -z "$exes" ]; then
    note "no test_* executables under $dir/tests yet"
    return 0
  fi
  local exe
  for exe in $exes; do
    run_suite "${exe#$dir/}$suffix" env "$@" "$ROOT/$exe"
  done
}


# ---- scripts ---------------------------------------------------------------
NABLA_BIN=$ROOT/$BUILD_DIR/nabla
NABLA_ASAN_BIN=$ROOT/$ASAN_BUILD_DIR/nabla
shopt -s nullglob
scripts=(tests/*/run_*.sh tests/*/test_*.py)
shopt -u nullglob

# The suites of the second lane (see "Lanes" below): the distributed ones and
# the front ends' (kernel, REPL), which spend most of their time waiting on
# other processes, sockets and ssh.  (In a loaded full run lane 1 had 2112 s
# of suites and lane 2 1179 s with tests/dist alone; tests/kernel was 237.)
in_second_lane() { case "$1" in tests/dist/*|tests/kernel/*|tests/repl/*) return 0 ;; esac; return 1; }

script_suites() {  # LANE (1|2): the scripts of that lane, release then ASan
  local lane=$1 sc runner
  if [ ${#scripts[@]} -eq 0 ]; then
    [ "$lane" = 1 ] && note "no test scripts (tests/*/run_*.sh, tests/*/test_*.py) yet"
    return 0
  elif [ ! -x "$NABLA_BIN" ]; then
    [ "$lane" = 1 ] && note "$BUILD_DIR/nabla not built; ${#scripts[@]} test script(s) not run"
    return 0
  fi
  for sc in "${scripts[@]}"; do
    if in_second_lane "$sc"; then [ "$lane" = 2 ] || continue; else [ "$lane" = 1 ] || continue; fi
    case "$sc" in
      *.py) runner=("$PYTHON" "$ROOT/$sc") ;;
      *)    runner=(bash "$ROOT/$sc") ;;
    esac
    run_suite "$sc" env NABLA="$NABLA_BIN" NABLA_BUILD="$ROOT/$BUILD_DIR" NO_COLOR=1 "${runner[@]}"
    if grep -q NABLA_ASAN "$sc"; then
      if [ "${NO_ASAN:-0}" = 1 ]; then
        :
      elif [ -x "$NABLA_ASAN_BIN" ]; then
        run_suite "$sc [asan]" env NABLA="$NABLA_ASAN_BIN" NABLA_ASAN=1 NABLA_ASAN_BIN="$NABLA_ASAN_BIN" \
          NABLA_BUILD="$ROOT/$ASAN_BUILD_DIR" \
          NO_COLOR=1 "${ASAN_ENV[@]}" "${runner[@]}"
      else
        selected "$sc [asan]" && note "$ASAN_BUILD_DIR/nabla not built; $sc [asan] not run"
      fi
    fi
  done
}

# ---- fuzzers ---------------------------------------------------------------
# Every build-fuzz/tests/fuzz/fuzz_NAME runs FUZZ_TIME seconds on a temporary
# copy of tests/fuzz/corpus_NAME/ (fuzz_eval: tests/fuzz/corpus/).
fuzz_suite() {  # prints the PASS/FAIL line itself (libFuzzer's output is not in the contract)
  local exe=$1 artifacts=$2 seeds=$3 name corpus
  name=$(basename "$exe")
  corpus=$(mktemp -d "${TMPDIR:-/tmp}/nabla-fuzz-corpus.XXXXXX") || return 1
  [ -d "$seeds" ] && cp -R "$seeds"/. "$corpus"/
  rm -rf "$artifacts"; mkdir -p "$artifacts"
  local rc=0
  env "${ASAN_ENV[@]}" "$exe" -max_total_time="$FUZZ_TIME" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus" 2>&1 || rc=$?
  rm -rf "$corpus"
  if [ "$rc" -eq 0 ]; then
    echo "PASS: $name (${FUZZ_TIME}s)"
  else
    local art
    art=$(ls -t "$artifacts"/* 2>/dev/null | head -n 1)
    echo "FAIL: $name: exit status $rc; artifact: ${art:-none}; reproduce: $exe ${art:-}"
  fi
  return "$rc"
}

fuzz_suites() {
  [ "${NO_FUZZ:-0}" != 1 ] || return 0
  local exe name seeds found=0 ntargets=0
  # FUZZ_BUDGET seconds in all, split evenly between the targets (at least
  # 10 s each), unless FUZZ_TIME fixes the time of each
  for exe in "$FUZZ_BUILD_DIR"/tests/fuzz/fuzz_*; do [ -x "$exe" ] && [ -f "$exe" ] && ntargets=$((ntargets + 1)); done
  if [ -z "${FUZZ_TIME_SET:-}" ] && [ "$ntargets" -gt 0 ]; then
    FUZZ_TIME=$((FUZZ_BUDGET / ntargets)); [ "$FUZZ_TIME" -lt 10 ] && FUZZ_TIME=10
  fi
  for exe in "$FUZZ_BUILD_DIR"/tests/fuzz/fuzz_*; do
    [ -x "$exe" ] && [ -f "$exe" ] || continue
    found=1
    name=$(basename "$exe")
    seeds=tests/fuzz/corpus_${name#fuzz_}
    [ "$name" = fuzz_eval ] && seeds=tests/fuzz/corpus
    case $exe in /*) ;; *) exe=$ROOT/$exe ;; esac
    run_suite "fuzz/$name" fuzz_suite "$exe" "$LOGDIR/fuzz-artifacts-${name#fuzz_}" "$ROOT/$seeds"
  done
  [ "$found" = 1 ] || { selected "fuzz" && note "no fuzz targets in $FUZZ_BUILD_DIR/tests/fuzz (needs clang); fuzzers not run"; }
}

# ---- lanes -----------------------------------------------------------------
# Lane 1 runs the C tests and the scripts; lane 2 (in the background, when
# TEST_LANES >= 2) runs the distributed, kernel and REPL scripts and then the fuzzers, whose
# time is mostly spent waiting (other processes, sockets, ssh) or fixed
# (libFuzzer's -max_total_time).  Lane 2's report is printed after lane 1's.
run_second_lane() {
  script_suites 2
  fuzz_suites
  echo "LANE_TOTALS $TOTAL_PASS $TOTAL_FAIL $TOTAL_SKIP"
  local t
  for t in "${SUITE_TIMES[@]}"; do echo "LANE_TIME $t"; done
}

lane_pid=
if [ "$TEST_LANES" -ge 2 ]; then
  mkdir -p "$LOGDIR"
  lane_out=$LOGDIR/lane-2.out
  ( TOTAL_PASS=0 TOTAL_FAIL=0 TOTAL_SKIP=0; SUITE_TIMES=(); run_second_lane ) >"$lane_out" 2>&1 &
  lane_pid=$!
  trap 'pkill -TERM -P "$lane_pid" 2>/dev/null; kill "$lane_pid" 2>/dev/null; exit 130' INT TERM
fi

c_suites "$BUILD_DIR" ""
if [ "${NO_ASAN:-0}" != 1 ]; then
  c_suites "$ASAN_BUILD_DIR" " [asan]" "${ASAN_ENV[@]}"
fi
script_suites 1

if [ -n "$lane_pid" ]; then
  wait "$lane_pid"
  trap - INT TERM
  grep -v '^LANE_' "$lane_out"
  read -r _ p f sk < <(grep '^LANE_TOTALS ' "$lane_out" || echo "LANE_TOTALS 0 1 0")
  grep -q '^LANE_TOTALS ' "$lane_out" || echo "FAIL: the second test lane ended without its totals (see $lane_out)"
  TOTAL_PASS=$((TOTAL_PASS + p)); TOTAL_FAIL=$((TOTAL_FAIL + f)); TOTAL_SKIP=$((TOTAL_SKIP + sk))
  while read -r _ t; do SUITE_TIMES+=("$t"); done < <(grep '^LANE_TIME ' "$lane_out")
else
  script_suites 2
  fuzz_suites
fi

# make test has a time budget (CI): say where the time went
if [ ${#SUITE_TIMES[@]} -gt 0 ]; then
  echo "slowest suites (of ${SECONDS}s in all):"
  printf '%s\n' "${SUITE_TIMES[@]}" | sort -rn | head -12 | awk '{t=$1; $1=""; printf "  %5ds %s\n", t, $0}'
fi
echo "$TOTAL_PASS passed, $TOTAL_FAIL failed, $TOTAL_SKIP skipped"
[ "$TOTAL_FAIL" -eq 0 ]
