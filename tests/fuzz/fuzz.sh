#!/usr/bin/env bash
# fuzz.sh SRC OUT [SECONDS] - build tests/fuzz/fuzz_options with clang and
# libFuzzer (+ASan+UBSan) and run it for SECONDS (default 60) on 2 jobs,
# from the committed seed corpus.  New inputs it finds go to OUT/corpus (not
# committed); a finding leaves OUT/crash-* and fails.  Prints how many inputs
# were tried.
set -euo pipefail
src=$(cd "${1:?usage: fuzz.sh SRC OUT [SECONDS]}" && pwd -P)
out=${2:?usage: fuzz.sh SRC OUT [SECONDS]}
secs=${3:-60}
cc=$(command -v clang-14 || command -v clang || true)
if [ -z "$cc" ] || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
	# clang with libFuzzer (Debian 12: clang-14 + libclang-rt-14-dev), like
	# tools/setup-deps does for the rest: root installs, anyone else is told.
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang libclang-rt-14-dev >/dev/null ||
			{ echo "fuzz.sh: apt-get install clang libclang-rt-14-dev failed" >&2; exit 1; }
		cc=$(command -v clang-14 || command -v clang)
	else
		echo "fuzz.sh: needs clang and libFuzzer: apt-get install clang libclang-rt-14-dev" >&2
		exit 2
	fi
fi
mkdir -p "$out/corpus"
"$cc" -g -O1 -std=gnu11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-include "$src/tests/fuzz/quiet_write.h" -I"$src/include" -I"$src/src/sys" \
	"$src/tests/fuzz/fuzz_options.c" "$src/src/sys/options.c" "$src/src/sys/log.c" "$src/src/sys/sigpipe.c" -o "$out/fuzz_options"
cd "$out"
rm -f crash-* leak-* timeout-* oom-* fuzz-*.log
# -fork: independent jobs on both cores, each restarted after a finding is
# written (the run still fails on it).
status=0
"$out/fuzz_options" -max_total_time="$secs" -fork=2 -ignore_crashes=0 -timeout=10 -rss_limit_mb=1024 \
	-max_len=512 -dict="$src/tests/fuzz/options.dict" -print_final_stats=1 \
	"$out/corpus" "$src/tests/fuzz/corpus" >fuzz.log 2>&1 || status=$?
tail -5 fuzz.log

execs=$(grep -oE '#[0-9]+' fuzz.log | tail -1 | tr -d '#' || true)
if ls crash-* leak-* timeout-* oom-* >/dev/null 2>&1 || [ "$status" != 0 ]; then
	echo "fuzz.sh: FINDING (status $status); inputs left in $out:"
	ls -1 "$out" | grep -E '^(crash|leak|timeout|oom)-' || true
	for f in crash-* leak-* timeout-* oom-*; do
		[ -f "$f" ] || continue
		echo "--- replay of $f:"
		"$out/fuzz_options" "$f" 2>&1 | head -40 || true
	done
	exit 1
fi
echo "fuzz.sh: ${execs:-?} inputs tried in ${secs} s, corpus $(ls "$out/corpus" | wc -l) files, no finding"
