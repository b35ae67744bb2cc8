#!/bin/sh
# A program whose standard error has no reader left (`prog 2>&1 | head`, a
# log collector gone) is not killed by SIGPIPE for what rdmalloc writes on
# its own: its messages, the stats at exit (src/sys/sigpipe.h).  It exits
# with its own status, as it does without rdmalloc.
#   check-sigpipe.sh PRELOAD_LIB API_PROGRAM
# Prints ok/FAIL per check and "N passed, M failed".
set -u
lib=$1 prog=$2
passed=0 failed=0
# status COMMAND...: the exit status of COMMAND run with stderr a pipe whose
# read end is closed (128+N for a death by signal N); SIGPIPE's default
# action in the child, as a shell gives it.
status() {
	python3 -c 'import os, subprocess, sys
r, w = os.pipe()
os.close(r)
rc = subprocess.run(sys.argv[1:], stderr=w, stdout=subprocess.DEVNULL, restore_signals=True).returncode
print(128 - rc if rc < 0 else rc)' "$@"
}
check() { # check NAME WANT GOT
	if [ "$2" = "$3" ]; then
		echo "ok $1"
		passed=$((passed + 1))
	else
		echo "FAIL $1: exit status $3, want $2"
		failed=$((failed + 1))
	fi
}
# The pipe has no reader: the program's own message kills it.
check "control: a shell's own message to it dies of SIGPIPE" 141 "$(status sh -c 'echo x >&2; exit 0')"
check "the drop-in's warning at start (RDMALLOC_STAT=1)" 0 \
	"$(status env -u RDMALLOC_JOB_NOTED RDMALLOC_STAT=1 LD_PRELOAD="$lib" /bin/true)"
check "the drop-in's stats at exit (RDMALLOC_STATS=1)" 0 "$(status env RDMALLOC_STATS=1 LD_PRELOAD="$lib" /bin/true)"
check "the drop-in's stats at exit, a shell and the commands it runs" 0 \
	"$(status env RDMALLOC_STATS=json LD_PRELOAD="$lib" sh -c '/bin/true && ls / && exit 0')"
check "librdmalloc.so's stats at exit and its no-device warning" 0 \
	"$(status env -u RDMALLOC_JOB_NOTED RDMALLOC_STATS=1 RDMALLOC_DEVICE=rdmalloc_none0 RDMALLOC_LOG_LEVEL=warn "$prog")"
check "the program's own status still comes through" 3 "$(status env RDMALLOC_STATS=1 LD_PRELOAD="$lib" sh -c 'exit 3')"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
