#!/usr/bin/env bash
# update-golden.sh — (re)writes the expected output of golden tests from what
# the interpreter does now.  For authors; tests never run this.  Review the
# result with `git diff tests/lang` before committing.
#
# Usage: tools/update-golden.sh [TEST...]     TEST = tests/lang/X.nbl or X
#   With no arguments: every tests/lang/*.nbl that already has a .out file.
#   Naming a test that has no .out yet creates it.
# Writes, in tests/lang/:  X.out  (stdout)
#   X.err    stderr, when it is non-empty or X.err already exists
#   X.status exit status, when non-zero (removed when it is 0)
# NABLA selects the interpreter (default build/nabla).
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${NABLA:-$ROOT/build/nabla}
case "$BIN" in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "update-golden: $BIN not built (run make)" >&2; exit 1; }

cd "$ROOT/tests/lang"
tests=()
if [ $# -gt 0 ]; then
  for t in "$@"; do t=${t##*/}; tests+=("${t%.nbl}"); done
else
  for f in *.nbl; do [ -f "${f%.nbl}.out" ] && tests+=("${f%.nbl}"); done
fi
[ ${#tests[@]} -gt 0 ] || { echo "update-golden: no tests"; exit 0; }

for b in "${tests[@]}"; do
  [ -f "$b.nbl" ] || { echo "update-golden: tests/lang/$b.nbl not found" >&2; exit 1; }
  status=0
  NO_COLOR=1 timeout -k 5 60 "$BIN" "$b.nbl" </dev/null >"$b.out" 2>"$b.err.new" || status=$?
  if [ -s "$b.err.new" ] || [ -f "$b.err" ]; then mv "$b.err.new" "$b.err"; else rm -f "$b.err.new"; fi
  if [ "$status" -ne 0 ]; then echo "$status" >"$b.status"; else rm -f "$b.status"; fi
  echo "updated tests/lang/$b (exit $status)"
done
