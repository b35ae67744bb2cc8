#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest (tools/rdmalloc-vm --hosts 2): the
# end-to-end RDMA suite, then real clients and engines nobody on this
# project wrote.
#   guest-suite.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: guest-suite.sh BUILD_DIR}
here=$(dirname "$0")
passed=0
failed=0
failures=()
logs=$(mktemp -d "${TMPDIR:-/tmp}/rdmalloc-guest-suite.XXXXXX")
# Each verdict with its seconds: where the guest's share of CI's time goes.
# Each step's output is kept as well as shown: a failure's own lines are
# printed again at the very end, where a CI log cut to its last lines
# still shows them (the engines' and real programs' hundred lines come
# last and would push them out).  No pipe: a step may be a function of
# this shell (real_programs waits for a child of it).
run() {
	local name=$1 t0=$SECONDS log rc out tee_pid
	shift
	log=$logs/$((passed + failed + 1)).log
	echo "--- $name"
	exec {out}> >(tee "$log")
	tee_pid=$!
	# The step's own descriptor closed in it ({out}>&-): only its output
	# holds the pipe, not a server it leaves behind with its output sent
	# elsewhere.
	"$@" >&"$out" 2>&1 {out}>&-
	rc=$?
	exec {out}>&-
	# tee has the step's last lines once the pipe is closed; a child the
	# step left behind with its output still here holds it open, so tee
	# is waited for while it still writes (the log grows), then killed
	# after 10 s without a byte, or after 2 minutes.
	local i idle=0 size=-1 now
	for ((i = 0; i < 1200 && idle < 100; i++)); do
		kill -0 "$tee_pid" 2>/dev/null || break
		now=$(stat -c %s "$log" 2>/dev/null || echo 0)
		if [ "$now" = "$size" ]; then idle=$((idle + 1)); else idle=0 size=$now; fi
		sleep 0.1
	done
	kill "$tee_pid" 2>/dev/null
	wait "$tee_pid" 2>/dev/null
	if ((rc == 0)); then
		passed=$((passed + 1))
		echo "--- ok $name ($((SECONDS - t0)) s)"
	else
		failed=$((failed + 1))
		failures+=("$name|$log")
		echo "--- FAIL $name ($((SECONDS - t0)) s, exit status $rc$( ((rc > 128)) && echo ": signal $((rc - 128))"))"
	fi
}
run "device is up" ibv_devinfo -d rxe0
run "end-to-end RDMA suite" "$build/tests/e2e/rdmalloc-e2e" --jobs 1 --verbose
# rdmalloc info (rdmalloc(1)) sees the device the library would use.
info_has_rxe0() {
	"$build/tools/info/rdmalloc-info" --json | python3 -c '
import json, sys
d = {x["name"]: x for x in json.load(sys.stdin)["devices"]}
assert d["rxe0"]["default_pd"], d
p = d["rxe0"]["ports"][0]
assert p["state"] == "active" and p["link_layer"] == "Ethernet" and p["gid0"].startswith("fe80"), p
assert d["rxe0"]["memory_windows"] in (True, False)
print("rdmalloc info: rxe0 port 1", p["state"], p["gid0"])'
}
run "rdmalloc info lists rxe0, its active port and GID, as the default PD's device" info_has_rxe0
run "example prints keys" "$build/examples/rdmalloc-keys"
run "real clients (ibv_rc_pingpong, perftest)" "$here/smoke.sh"
# The LD_PRELOAD drop-in: the whole allocation ABI at random (lookups must
# now return real keys), then real clients under `rdmalloc run`, their own
# ibv_reg_mr calls elided where the heap's access flags allow.
run "allocation ABI at random under the drop-in" env LD_PRELOAD="$build/preload/librdmalloc-preload.so" \
	RDMALLOC_LOG_LEVEL=error "$build/tests/preload/abi_random" 300000 4
run "drop-in: RDMA up on first need, the default PD's keys from a malloc'd block" env \
	LD_PRELOAD="$build/preload/librdmalloc-preload.so" RDMALLOC_LOG_LEVEL=error "$build/tests/preload/lazy_rdma" guest
run "real clients under the drop-in (elision)" "$build/tests/preload/guest-clients.sh" "$build"
run "drop-in heap shrinking and growing between phases of RDMA traffic" env \
	LD_PRELOAD="$build/preload/librdmalloc-preload.so" RDMALLOC_PRELOAD_ACCESS=LOCAL_WRITE,REMOTE_WRITE \
	RDMALLOC_LOG_LEVEL=error "$build/tests/preload/phases_traffic"
run "elision: rereg in place moves bytes, PDs detached with their last region, the 9th PD" env \
	LD_PRELOAD="$build/preload/librdmalloc-preload.so" RDMALLOC_PRELOAD_ACCESS=LOCAL_WRITE,REMOTE_WRITE \
	RDMALLOC_LOG_LEVEL=error "$build/tests/preload/elide_rdma"
# RDMALLOC_LOG_LEVEL=debug names each elided ibv_reg_mr, each one passed
# on to libibverbs with its reason, and each chunk registered on first use
# (rdmalloc(7)).
debug_decisions() {
	local log
	log=$(env LD_PRELOAD="$build/preload/librdmalloc-preload.so" RDMALLOC_PRELOAD_ACCESS=LOCAL_WRITE,REMOTE_WRITE \
		RDMALLOC_LOG_LEVEL=debug "$build/tests/preload/elide_rdma" 2>&1 >/dev/null) || return 1
	printf '%s\n' "$log" | grep -m1 'debug: ibv_reg_mr(.*) elided: the keys of chunk' &&
		printf '%s\n' "$log" | grep -m1 'debug: chunk .* registered on first use' &&
		printf '%s\n' "$log" | grep -m1 "debug: ibv_reg_mr(.*) goes to libibverbs: not rdmalloc's memory" ||
		{ printf '%s\n' "$log" | tail -20; return 1; }
}
run "debug log: elisions, registrations passed on and on first use, named" debug_decisions
# fork() while threads grow heaps, attach and detach a second PD, change a
# heap's access and look keys up, with real registrations; API and drop-in.
run "fork torture (API)" "$build/tests/preload/fork_torture" api 40
run "fork torture (drop-in)" env LD_PRELOAD="$build/preload/librdmalloc-preload.so" \
	RDMALLOC_LOG_LEVEL=error "$build/tests/preload/fork_torture" malloc 40
# The real programs run one process at a time, and most of the engines'
# time is start-up and waiting: the guest's emulated CPUs each take one host
# core, so the two run side by side (minutes less of CI).  The programs
# compare output and time nothing; the engines' clients have 120 s each,
# and took at most 38 s this way.  The programs' lines come after the
# engines' (they have 20 minutes: the guest's whole budget is 40).
real=$(mktemp "${TMPDIR:-/tmp}/rdmalloc-real-programs.XXXXXX")
real_t0=$SECONDS
# --foreground: at the deadline only the script is stopped, not the process
# group, so that what its programs were doing can still be shown (below);
# by SIGKILL (status 137), so that its EXIT trap does not delete the copy
# of the drop-in those programs run, which gdb then reads.
timeout --foreground -s KILL 1200 "$build/tests/preload/memlock-user.sh" "$build" >"$real" 2>&1 &
real_pid=$!
# The engines RDMA users run (UCX, Open MPI, MPICH, libfabric, rdma_cm),
# between the guest's two hosts (tools/rdmalloc-vm --hosts 2), under the
# drop-in (plain as the control of a failure).
run "engines between two hosts under the drop-in (plain as the control of a failure)" "$build/tests/middleware/run.sh" "$build"
real_programs() { # the verdict of the run started before the engines
	wait "$real_pid"
	local rc=$?
	cat "$real"
	if ((rc == 137)); then # the deadline's SIGKILL, or the kernel's (OOM)
		echo "(killed after $((SECONDS - real_t0)) s, the deadline 1200; what its user's processes were doing:)"
		"$here/stacks.sh" $(pgrep -u 65534) | sed 's/^/#   /'
		pkill -KILL -u 65534
		rm -rf /tmp/rdmalloc-memlock.* # its copies, the trap's job
	fi
	echo "(started with the engines, $((SECONDS - real_t0)) s ago)"
	rm -f "$real"
	return $rc
}
run "real programs under the drop-in as a user with an 8 MiB and a 64 KiB RLIMIT_MEMLOCK" real_programs
for f in "${failures[@]}"; do
	echo "--- again, the failed guest step \"${f%%|*}\": its failure lines, then its end"
	grep -E -A2 '\[FAIL\]|Assertion Failed|^FAIL |CRASH|TIMEOUT|timed out|rdmalloc.*(fatal|error)' "${f#*|}" | head -30
	echo "..."
	tail -n 25 "${f#*|}"
done
rm -rf "$logs"
echo "guest: $passed passed, $failed failed"
[ "$failed" = 0 ]
