#!/usr/bin/env bash
# run_golden.sh — golden-file tests of the interpreter.
#
# For every tests/lang/X.nbl that has a sibling X.out:
#   runs  $NABLA X.nbl  from tests/lang/ with NO_COLOR=1 and stdin from /dev/null,
#   expects stdout == X.out; if X.err exists, stderr == X.err; exit status
#   == the number in X.status if that exists, else 0.
# Prints "PASS: lang/X" or "FAIL: lang/X: why" followed by the first lines of
# the diff (indented).  .nbl files without a .out are helpers (e.g. modules
# imported by tests) and are not run.
#
# Environment (set by tools/run-tests.sh):
#   NABLA           the interpreter to test (absolute path; default build/nabla)
#   NABLA_ASAN=1    sanitizer pass: run $NABLA_ASAN_BIN instead, names get
#                   " [asan]", and any sanitizer report on stderr is a failure
#   NABLA_ASAN_BIN  the ASan/UBSan build of the interpreter
#   GOLDEN_TIMEOUT  seconds per test (default 20, 120 under NABLA_ASAN)
# Arguments: optional test names (X or X.nbl) to run only those.
# Regenerate expected output with tools/update-golden.sh.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${NABLA:-$ROOT/build/nabla}
SUFFIX=""
TMO=${GOLDEN_TIMEOUT:-20}
if [ "${NABLA_ASAN:-0}" = 1 ]; then
  BIN=${NABLA_ASAN_BIN:-$BIN}
  SUFFIX=" [asan]"
  TMO=${GOLDEN_TIMEOUT:-120}
fi
case "$BIN" in /*) ;; *) BIN=$PWD/$BIN ;; esac

cd "$HERE"
shopt -s nullglob
if [ $# -gt 0 ]; then
  tests=(); for t in "$@"; do tests+=("${t%.nbl}.nbl"); done
else
  tests=(*.nbl)
fi

if [ ! -x "$BIN" ]; then
  echo "FAIL: lang/golden$SUFFIX: interpreter '$BIN' not found or not executable"
  exit 1
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/nabla-golden.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

failed=0
for t in "${tests[@]}"; do
  base=${t%.nbl}
  name="lang/$base$SUFFIX"
  [ -f "$base.out" ] || continue
  want_status=0
  [ -f "$base.status" ] && want_status=$(tr -d ' \t\r\n' <"$base.status")

  status=0
  NO_COLOR=1 timeout -k 5 "$TMO" "$BIN" "$t" </dev/null >"$TMP/out" 2>"$TMP/err" || status=$?

  why="" detail=""
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    why="timed out after ${TMO}s"
  elif grep -qE 'ERROR: (Address|Leak|Memory|Thread)Sanitizer|runtime error: |SUMMARY: UndefinedBehaviorSanitizer' "$TMP/err"; then
    why="sanitizer report"
    detail=$(grep -m1 -A12 -E 'ERROR: |runtime error: ' "$TMP/err")
  elif ! diff -q "$base.out" "$TMP/out" >/dev/null; then
    why="stdout differs from $base.out"
    detail=$(diff -u --label "$base.out" --label "actual stdout" "$base.out" "$TMP/out" | head -n 20)
  elif [ -f "$base.err" ] && ! diff -q "$base.err" "$TMP/err" >/dev/null; then
    why="stderr differs from $base.err"
    detail=$(diff -u --label "$base.err" --label "actual stderr" "$base.err" "$TMP/err" | head -n 20)
  elif [ "$status" != "$want_status" ]; then
    why="exit status $status, expected $want_status"
    detail=$(head -n 10 "$TMP/err")
  fi

  if [ -z "$why" ]; then
    echo "PASS: $name"
  else
    failed=$((failed + 1))
    echo "FAIL: $name: $why"
    [ -n "$detail" ] && printf '%s\n' "$detail" | sed 's/^/    /'
  fi
done

[ "$failed" -eq 0 ]
