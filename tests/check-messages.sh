#!/bin/sh
# Messages that every process of a job would print are printed once per
# job (doc/preload.md, "Messages"): the no-device warning (and only by
# processes that use RDMA), and the warning about an RDMALLOC_* name that
# is no option, which names the nearest one.
#   check-messages.sh PRELOAD_LIB API_PROGRAM
# Prints ok/FAIL per check and "N passed, M failed".
set -u
lib=$1 prog=$2
passed=0 failed=0
check() { # check NAME EXPECTED ACTUAL [OUTPUT]
	if [ "$2" = "$3" ]; then
		echo "ok $1"
		passed=$((passed + 1))
	else
		echo "FAIL $1: expected $2, got $3"
		[ -n "${4:-}" ] && printf '%s\n' "$4" | sed 's/^/#   /'
		failed=$((failed + 1))
	fi
}
# A device that exists nowhere, so that the host and the guest agree.
# job [VAR=VALUE...] COMMAND...: under the drop-in, with what the job was
# told (RDMALLOC_JOB_NOTED) only if given; stderr only.
job() { env -u RDMALLOC_JOB_NOTED RDMALLOC_DEVICE=rdmalloc_none0 LD_PRELOAD="$lib" "$@" 2>&1 >/dev/null; }
# A shell and five processes.
five='/bin/true; /bin/true; ls / >/dev/null; sh -c "/bin/true"'
nodev='memory is allocated but not registered'

# RDMA comes up on first need (src/api/init.h): processes that never use
# it never look for a device, so they say nothing about one.
out=$(job sh -c "$five")
check "no-device: no warning from a shell and 5 processes that do not use RDMA" 0 "$(printf '%s\n' "$out" | grep -c "$nodev")" "$out"
out=$(job sh -c "$prog")
check "no-device: one warning from a process that uses RDMA" 1 "$(printf '%s\n' "$out" | grep -c "warning: .*$nodev")" "$out"
out=$(job RDMALLOC_JOB_NOTED=no-device sh -c "$prog; $prog")
check "no-device: none when the job was told (rdmalloc run --quiet)" 0 "$(printf '%s\n' "$out" | grep -c "$nodev")" "$out"
out=$(job RDMALLOC_JOB_NOTED=no-device RDMALLOC_LOG_LEVEL=info sh -c "$prog; $prog")
check "no-device: at info level then, in each of the 2 processes that use RDMA" 2 "$(printf '%s\n' "$out" | grep -c "info: .*$nodev")" "$out"

out=$(job RDMALLOC_STAT=1 RDMALLOC_LOGLEVEL=debug RDMALLOC_LOG_LEVEL=warn sh -c "$five")
check "RDMALLOC_STAT: warned once per job, RDMALLOC_STATS named" 1 \
	"$(printf '%s\n' "$out" | grep -c 'warning: RDMALLOC_STAT is not an rdmalloc option and is ignored; did you mean RDMALLOC_STATS?')" "$out"
check "RDMALLOC_LOGLEVEL: warned once per job, RDMALLOC_LOG_LEVEL named" 1 \
	"$(printf '%s\n' "$out" | grep -c 'warning: RDMALLOC_LOGLEVEL is not an rdmalloc option and is ignored; did you mean RDMALLOC_LOG_LEVEL?')" "$out"
out=$(env RDMALLOC_PRELOAD_ACESS=REMOTE_READ RDMALLOC_LOG_LEVEL=warn "$prog" 2>&1 >/dev/null)
check "RDMALLOC_PRELOAD_ACESS (librdmalloc.so): RDMALLOC_PRELOAD_ACCESS named" 1 \
	"$(printf '%s\n' "$out" | grep -c 'RDMALLOC_PRELOAD_ACESS is not an rdmalloc option and is ignored; did you mean RDMALLOC_PRELOAD_ACCESS?')" "$out"
out=$(job RDMALLOC_JOB_NOTED=no-device RDMALLOC_VM_HOSTS=2 RDMALLOC_PRELOAD_LIB=/x RDMALLOC_E2E_CHILD=1 RDMALLOC_STATS=0 sh -c /bin/true)
check "the names of rdmalloc's commands and tests, and real options, are not warned about" 0 \
	"$(printf '%s\n' "$out" | grep -c 'not an rdmalloc option')" "$out"
# RDMALLOC_LOG_LEVEL=debug logs the decisions worth knowing: a chunk made
# (and how: reserve hit or miss, unregistered until RDMA needs it), a
# big block's chunk given back.  The example makes and frees an rdma_malloc
# buffer of 1 MiB (a big block).
out=$(job RDMALLOC_LOG_LEVEL=debug RDMALLOC_JOB_NOTED=no-device sh -c "$prog")
check "debug: a chunk made, and how" 1 \
	"$(printf '%s\n' "$out" | grep -q 'debug: chunk 0x[0-9a-f]* of [0-9]* bytes: \(made\|reserve\)' && echo 1 || echo 0)" "$out"
out=$(job RDMALLOC_LOG_LEVEL=warn RDMALLOC_JOB_NOTED=no-device sh -c "$prog")
check "debug lines only at debug" 0 "$(printf '%s\n' "$out" | grep -c 'debug:')" "$out"
# The options rdmalloc's jemalloc keeps whatever MALLOC_CONF says
# (src/heap/jemalloc.h) are named once each, at info level only.
out=$(env MALLOC_CONF=narenas:2,retain:false,oversize_threshold:8388608 RDMALLOC_LOG_LEVEL=info "$prog" 2>&1 >/dev/null)
check "MALLOC_CONF: retain and oversize_threshold said not taken, once each, not narenas" "1 1 0" \
	"$(for o in retain:false oversize_threshold:8388608 narenas:2; do printf '%s ' "$(printf '%s\n' "$out" | grep -c "info: MALLOC_CONF's $o is not taken")"; done | sed 's/ $//')" "$out"
out=$(env MALLOC_CONF=retain:false RDMALLOC_LOG_LEVEL=warn "$prog" 2>&1 >/dev/null)
check "MALLOC_CONF: nothing said at warn" 0 "$(printf '%s\n' "$out" | grep -c "MALLOC_CONF")" "$out"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
