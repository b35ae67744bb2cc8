#!/bin/bash
# The drop-in's address space follows what the program uses (issue 24,
# item 7): real programs run with it under `ulimit -v` set to twice what
# they need under plain jemalloc (their VmPeak there), with the same output
# and nothing on stderr.  It reserved 16 GiB up front for the allocator of
# code inside verbs calls (VmSize 16.9 GB for `true`) and 128 MiB for its
# auto map: under any address-space limit below that, programs failed or
# ld.so could not map the drop-in.
#   address-space.sh PRELOAD_LIB
set -u
lib=$1
je=$(ls /usr/lib/*-linux-gnu/libjemalloc.so.2 2>/dev/null | head -1)
[ -n "$je" ] || { echo "SKIP: no libjemalloc.so.2 (Debian package libjemalloc2) to compare with"; exit 77; }
passed=0 failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'import json; s = json.dumps(list(range(100000))); print(len(s))\n' >"$tmp/prog.py"
seq 200000 | sort -R >"$tmp/numbers"
# What a program needs is measured as the smallest `ulimit -v` it runs
# under (a search in 4 MiB steps): VmPeak polled from /proc would be racy.
runs() { # runs LIMIT PRELOAD CMD...: succeeds with the expected output and a clean stderr
	local limit=$1 pre=$2
	shift 2
	# (the outer 2>: the shell's "Segmentation fault" of plain jemalloc,
	# which crashes under some limits where the drop-in fails cleanly)
	( ulimit -v "$limit" && LD_PRELOAD=$pre "$@" >"$tmp/out" 2>"$tmp/err" ) 2>/dev/null &&
		cmp -s "$tmp/out" "$tmp/want" && [ ! -s "$tmp/err" ]
}
least() { # least PRELOAD CMD...: the smallest limit in KiB it runs under
	local lo=4096 hi=1048576 mid
	runs $hi "$@" || { echo 0; return; }
	while [ $((hi - lo)) -gt 4096 ]; do
		mid=$(((lo + hi) / 2))
		if runs $mid "$@"; then hi=$mid; else lo=$mid; fi
	done
	echo $hi
}
for name in python3 sort awk sqlite3; do
	case $name in
	python3) cmd=(python3 "$tmp/prog.py") ;;
	sort) cmd=(sort -n "$tmp/numbers") ;;
	awk) cmd=(awk '{s+=$1} END{print s}' "$tmp/numbers") ;;
	sqlite3) cmd=(sqlite3 :memory: "create table t(x); insert into t select value from generate_series(1,100000); select sum(x) from t;") ;;
	esac
	if ! command -v "$name" >/dev/null; then echo "# $name: not installed, skipped"; continue; fi
	"${cmd[@]}" >"$tmp/want" 2>/dev/null || { echo "FAIL ${cmd[0]} does not run plainly"; failed=$((failed + 1)); continue; }
	jl=$(least "$je" "${cmd[@]}")
	limit=$((2 * jl))
	if runs $limit "$lib" "${cmd[@]}"; then
		echo "ok ${cmd[0]}: runs under ulimit -v $limit (plain jemalloc needs $jl KiB; the drop-in $(least "$lib" "${cmd[@]}") KiB)"
		passed=$((passed + 1))
	else
		echo "FAIL ${cmd[0]} under the drop-in and ulimit -v $limit (plain jemalloc needs $jl KiB):"
		sed 's/^/#   /' "$tmp/err" | head -5
		failed=$((failed + 1))
	fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
