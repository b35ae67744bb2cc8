#!/bin/sh
# The drop-in's address space follows what the program uses (issue 24,
# item 7): what it reserves up front is small, so a program still runs
# under `ulimit -v` a little above what plain jemalloc needs.  It reserved
# 16 GiB up front for the allocator of code inside verbs calls (VmSize
# 16.9 GB for `true`), and 128 MiB for its auto map: under any address-space
# limit below that, programs failed.
#   address-space.sh PRELOAD_LIB
set -u
lib=$1
passed=0 failed=0
check() { # check NAME OK [DETAIL]
	if [ "$2" = 1 ]; then echo "ok $1"; passed=$((passed + 1)); else
		echo "FAIL $1${3:+: $3}"; failed=$((failed + 1)); fi
}
plain=$(awk '/^VmPeak/ {print $2}' /proc/self/status)
dropin=$(LD_PRELOAD=$lib awk '/^VmPeak/ {print $2}' /proc/self/status)
echo "# VmPeak of awk: plain $plain KiB, under the drop-in $dropin KiB"
extra=$((dropin - plain))
check "the drop-in adds at most 64 MiB of address space to awk ($extra KiB)" $([ "$extra" -le 65536 ] && echo 1 || echo 0)

# A real program under a limit: python3 builds and prints a 700 KB string.
# Plain jemalloc needs about 45 MB here; the limit leaves the drop-in
# 35 MB more, and nothing may be printed but the result.
prog='import json; print("ok", len(json.dumps(list(range(100000)))))'
if command -v python3 >/dev/null; then
	out=$( (ulimit -v 80000 && LD_PRELOAD=$lib python3 -c "$prog") 2>&1)
	check "python3 under ulimit -v 80000 runs, with nothing on stderr" \
		$([ "$out" = "ok 688890" ] && echo 1 || echo 0) "$out"
fi
out=$( (ulimit -v 80000 && LD_PRELOAD=$lib sh -c 'ls / | sort | wc -l') 2>&1)
check "a pipeline under ulimit -v 80000 runs, with nothing on stderr" \
	$(echo "$out" | grep -qx '[0-9][0-9]*' && [ "$(echo "$out" | wc -l)" = 1 ] && echo 1 || echo 0) "$out"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
