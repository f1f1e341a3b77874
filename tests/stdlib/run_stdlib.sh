#!/usr/bin/env bash
# Runs the stdlib tests: every tests/stdlib/test_*.nbl script (each prints
# "PASS: name" / "FAIL: name: why" lines through check.nbl), a check of the
# progress bar's output, and the digits demo (examples/digits.nbl must reach
# >= 95% test accuracy).
#
#   NABLA=build/nabla tests/stdlib/run_stdlib.sh
#
# Output: one line per test, PASS: name or FAIL: name: why; exit 1 on failure.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NABLA=${NABLA:-$ROOT/build/nabla}
export NABLA_STDLIB=$ROOT/stdlib     # test this checkout's stdlib
TMP=$(mktemp -d "${TMPDIR:-/tmp}/nabla-stdlib.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
fails=0 passes=0

report() {  # report LINE
  case "$1" in
    PASS:*) passes=$((passes + 1)) ;;
    FAIL:*) fails=$((fails + 1)) ;;
  esac
  printf '%s\n' "$1"
}

if [ ! -x "$NABLA" ]; then
  report "FAIL: stdlib: interpreter $NABLA not found (set NABLA)"
  exit 1
fi

# ---- the test scripts
for t in "$HERE"/test_*.nbl; do
  name=$(basename "$t" .nbl)
  out=$("$NABLA" "$t" "$TMP/$name.safetensors" 2>"$TMP/$name.err")
  rc=$?
  n=0
  while IFS= read -r line; do
    case "$line" in
      PASS:*|FAIL:*) report "$line"; n=$((n + 1)) ;;
    esac
  done < <(printf '%s\n' "$out" | tr '\r' '\n')
  if [ "$rc" -ne 0 ]; then
    report "FAIL: $name: exited with status $rc: $(head -c 600 "$TMP/$name.err" | tr '\n' ' ')"
  elif [ "$n" -eq 0 ]; then
    report "FAIL: $name: ran no tests"
  fi
done

# ---- the progress bar redraws one line with \r and ends it (or erases it)
got=$("$NABLA" -e 'import data; data.progress(1, 4, "a", width=4); data.progress(4, 4, "b", width=4); data.progress(2, 2, "c", width=2, keep=false); write("|")' 2>&1 | od -An -c | tr -s ' \n' ' ')
want=$(printf '\r[#...] 1/4 a\r[####] 4/4 b\n\r[##] 2/2 c\r            \r|' | od -An -c | tr -s ' \n' ' ')
if [ "$got" = "$want" ]; then report "PASS: data.progress output"; else report "FAIL: data.progress output: got '$got', expected '$want'"; fi

# ---- the demo: examples/digits.nbl reaches >= 95% test accuracy
start=$(date +%s%N)
demo_out=$("$NABLA" "$ROOT/examples/digits.nbl" "$TMP/digits.safetensors" 2>&1)
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
acc=$(printf '%s\n' "$demo_out" | tr '\r' '\n' | sed -n 's/^test accuracy: \([0-9.]*\)$/\1/p' | tail -1)
if [ "$rc" -ne 0 ]; then
  report "FAIL: digits demo: exited with status $rc: $(printf '%s' "$demo_out" | tail -c 600 | tr '\n' ' ')"
elif [ -z "$acc" ]; then
  report "FAIL: digits demo: no 'test accuracy: ...' line in its output"
elif awk -v a="$acc" 'BEGIN { exit !(a >= 0.95) }'; then
  report "PASS: digits demo reaches >= 95% test accuracy ($acc, ${ms} ms)"
else
  report "FAIL: digits demo: test accuracy $acc < 0.95"
fi
if [ "$rc" -eq 0 ] && [ ! -s "$TMP/digits.safetensors" ]; then
  report "FAIL: digits demo checkpoint: $TMP/digits.safetensors was not written"
elif [ "$rc" -eq 0 ]; then
  report "PASS: digits demo checkpoint written to the path given in argv"
fi

echo "stdlib: $passes passed, $fails failed" >&2
[ "$fails" -eq 0 ]
