#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest: the end-to-end suite against deliberately
# broken libraries must fail.  Each argument is a mutant build directory.
# The first failing test catches a mutant (--fail-fast): the rest of the
# suite would only add minutes of emulated CPU.
set -uo pipefail
caught=0
missed=0
for b in "$@"; do
	echo "--- mutant $(basename "$b")"
	if [ ! -x "$b/tests/e2e/rdmalloc-e2e" ]; then # it must fail for what it tests
		missed=$((missed + 1))
		echo "--- NOT TRIED: $(basename "$b") has no end-to-end suite built"
		continue
	fi
	if "$b/tests/e2e/rdmalloc-e2e" --jobs 1 --fail-fast >"/tmp/mutant.log" 2>&1; then
		missed=$((missed + 1))
		echo "--- NOT CAUGHT: the end-to-end suite passed against $(basename "$b")"
	else
		caught=$((caught + 1))
		grep -E "^\[FAIL\]|Synthesis" /tmp/mutant.log | head -20
		echo "--- caught $(basename "$b")"
	fi
done
echo "mutants: $caught caught, $missed missed"
[ "$missed" = 0 ]
