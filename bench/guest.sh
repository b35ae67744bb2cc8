#!/usr/bin/env bash
# bench/guest.sh - the benchmarks that need a real verbs device, run by
# bench/run inside ONE boot of the Soft-RoCE guest (tools/rdmalloc-vm):
#
#   guest.sh BUILD_DIR quick|full [ALLOCATOR=LIBRARY ...]
#
# The guest cannot write to the host, so results come back on stdout:
# "@@CSV FILE ROW" for every CSV row, "@@RESULT NAME STATUS" for every
# program; everything else is progress.
set -uo pipefail
build=${1:?usage: guest.sh BUILD_DIR quick|full [ALLOCATOR=LIBRARY ...]}
mode=${2:?usage: guest.sh BUILD_DIR quick|full [ALLOCATOR=LIBRARY ...]}
shift 2
b=$build/bench
nproc=$(nproc)
t0=$SECONDS

# run NAME FILE COMMAND...: CSV rows of stdout go back as "@@CSV FILE ROW".
run() {
	local name=$1 file=$2
	shift 2
	printf '[guest %3ds] %s\n' $((SECONDS - t0)) "$name"
	# stdout to a file first: the program's progress (stderr) shares the
	# console, and two writers would interleave mid-line.
	"$@" >/tmp/bench-rows.csv
	local rc=$?
	sed "s|^|@@CSV $file |" /tmp/bench-rows.csv
	echo "@@RESULT $name $rc"
}

if [ $mode = quick ]; then
	keys_args=(--ptrs 4096 --lookups 50000 --reps 3 --regmr-iters 50)
	msg_args=(--sizes 64,64K,1M --reps 2 --min-ms 20 --min-msgs 3)
	alloc_reps=1 alloc_scale=0.01 alloc_workloads=(small large)
	fp_live=32M fp_configs=(0:4k 0:huge)
	fork_heap=64M fork_reps=3
	phases_args=(--long 16M --burst 64M --phases 2)
	startup_reps=3 startup_methods=exec,verbs,rdmalloc,rdmalloc-nodev
	growth_reps=1 growth_args=(--total 48M)
else
	keys_args=(--ptrs 16384 --lookups 200000 --reps 7 --regmr-iters 300)
	msg_args=(--reps 5 --min-ms 100 --min-msgs 5)
	alloc_reps=3 alloc_scale=0.06 alloc_workloads=(small mixed prodcons realloc large xthread)
	fp_live=256M fp_configs=(0:4k 2M:4k 8M:4k 32M:4k 128M:4k 0:huge 8M:huge)
	fork_heap=512M fork_reps=5
	phases_args=(--long 64M --burst 384M --phases 3)
	startup_reps=15 startup_methods=exec,malloc,devices,verbs,rdmalloc,rdmalloc-nodev
	growth_reps=5 growth_args=(--total 256M)
fi
threads="1,$nproc"

ibv_devinfo -d rxe0 | grep -E 'hca_id|state|active_mtu' | sed 's/^/[guest] /'

run keys-guest keys.csv "$b/rdmalloc-bench-keys" --header --env guest --threads "$threads" "${keys_args[@]}"
run msg-guest msg.csv "$b/rdmalloc-bench-msg" --header --env guest "${msg_args[@]}"

# Start-up with the device and, interleaved, without one (rdmalloc-nodev: a
# device name that does not exist; rdmalloc falls back to unregistered memory).
run startup-guest startup.csv env RDMALLOC_LOG_LEVEL=none "$b/rdmalloc-bench-startup" --header \
	--env guest-rxe0 --reps $startup_reps --methods "$startup_methods"

for cfg in "${fp_configs[@]}"; do
	c=${cfg%%:*} pm=${cfg#*:}
	run "footprint-guest-$c-$pm" footprint.csv env RDMALLOC_CHUNK_MAX=$c \
		RDMALLOC_HUGEPAGES=$([ $pm = huge ] && echo 1 || echo 0) "$b/rdmalloc-bench-footprint" \
		--header --env guest --live $fp_live --chunk-max $c --page-mode $pm
done

# fork(): plain, under the drop-in, and under the drop-in with every block's
# keys looked up (registered: the kernel copies pinned pages), interleaved.
echo "@@CSV fork.csv env,alloc,registered,heap_mib,rep,fork_ms,total_ms,vmpin_mib,rss_mib"
fork_modes=(plain dropin registered)
for rep in $(seq 1 $fork_reps); do
	for i in 0 1 2; do
		m=${fork_modes[$(((i + rep) % 3))]}
		case $m in
		plain) pre=() args=() ;;
		dropin) pre=(LD_PRELOAD="$build/preload/librdmalloc-preload.so") args=(--alloc rdmalloc) ;;
		registered) pre=(LD_PRELOAD="$build/preload/librdmalloc-preload.so") args=(--alloc rdmalloc --register) ;;
		esac
		run "fork-guest-$m" fork.csv env RDMALLOC_LOG_LEVEL=error "${pre[@]}" "$b/rdmalloc-bench-fork" \
			--env guest --heap $fork_heap --reps 1 "${args[@]}"
	done
done

# Phases: what is held after bursts, real registration; plain jemalloc's RSS beside it.
run phases-guest phases.csv "$b/rdmalloc-bench-phases" --header --env guest "${phases_args[@]}"
for spec in "$@"; do
	[ "${spec%%=*}" = jemalloc ] && run phases-guest-jemalloc phases.csv env LD_PRELOAD="${spec#*=}" \
		"$b/rdmalloc-bench-phases" --header --env guest --plain --alloc jemalloc "${phases_args[@]}"
done

# Growth latency: reserve on, off, malloc + ibv_reg_mr, and no growth at
# all (the machine's floor), interleaved.
echo "@@CSV growth.csv env,mode,rep,total_mib,allocs,measured,work_us,p50_ns,p99_ns,p999_ns,max_ns,inline_chunks,reserve_hits,reserve_waits,reserve_discards,seconds"
growth_modes=(reserve off regmr grown)
for rep in $(seq 1 $growth_reps); do
	for i in 0 1 2 3; do
		m=${growth_modes[$(((i + rep) % 4))]}
		run "growth-guest-$m" growth.csv env RDMALLOC_LOG_LEVEL=error "$b/rdmalloc-bench-growth" \
			--env guest --mode $m --rep $rep "${growth_args[@]}"
	done
done

# Allocators, interleaved; registration is active for rdmalloc's preload.
printf '[guest %3ds] allocators: %s\n' $((SECONDS - t0)) "$*"
echo "@@CSV alloc.csv env,allocator,rep,workload,threads,ops,seconds,cpu_seconds,ns_per_op,maxrss_kb,malloc_from"
n=$#
allocs=("$@")
for rep in $(seq 1 $alloc_reps); do
	for i in $(seq 0 $((n - 1))); do
		spec=${allocs[$(((i + rep) % n))]}
		a=${spec%%=*} lib=${spec#*=}
		for w in "${alloc_workloads[@]}"; do
			if row=$(env RDMALLOC_LOG_LEVEL=error ${lib:+LD_PRELOAD=$lib} "$b/rdmalloc-bench-alloc" "$w" --threads "$nproc" \
				--scale $alloc_scale); then
				echo "@@CSV alloc.csv guest,$a,$rep,$row"
				echo "@@RESULT alloc-guest-$a-$w 0"
			else
				echo "@@RESULT alloc-guest-$a-$w $?"
			fi
		done
	done
	printf '[guest %3ds] allocators: rep %d/%d done\n' $((SECONDS - t0)) $rep $alloc_reps
done
# A large buffer's wait for its keys, with one and two PDs (rxe1, rxe2),
# one and two registering threads, 4 KiB and 2 MiB pages (bigreg.sh).
if [ -n "${RDMALLOC_VM_HOSTS:-}" ]; then
	printf '[guest %3ds] bigreg\n' $((SECONDS - t0))
	"$(dirname "$0")/bigreg.sh" "$build" $mode
fi
# An engine between the two hosts (bench/run boots with --hosts 2):
# ucx_perftest plain, under the drop-in, and with the remote-access heap.
if [ -n "${RDMALLOC_VM_HOSTS:-}" ]; then
	if [ $mode = quick ]; then engine_args=(1 200); else engine_args=(5 2000); fi
	run engines-guest engines.csv "$(dirname "$0")/engines.sh" "$build" "${engine_args[@]}"
fi
printf '[guest %3ds] done\n' $((SECONDS - t0))
