#!/bin/sh
# Benchmark runner; see bench/run.py for options (-n REPEAT, --record, FILTER...).
exec /usr/bin/python3 "$(dirname "$0")/run.py" "$@"
