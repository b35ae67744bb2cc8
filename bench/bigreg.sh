#!/usr/bin/env bash
# bench/bigreg.sh - how long a large buffer waits for its keys, in the
# Soft-RoCE guest with two devices (tools/rdmalloc-vm --hosts 2):
#
#   bigreg.sh BUILD_DIR quick|full
#
# rdmalloc-bench-bigreg for every size, 1 and 2 PDs (rxe1, and rxe2 as the
# second device), RDMALLOC_REG_THREADS 1 and 2, 4 KiB and huge pages
# (explicit 2 MiB pages, reserved here first), and the guest's own
# single-thread page-fault rate (--floor) beside them; each repetition runs
# every configuration once, in an order rotated per repetition.  CSV rows on
# stdout as bench/guest.sh collects them ("@@CSV bigreg.csv ROW"), progress
# on stderr.
set -uo pipefail
build=${1:?usage: bigreg.sh BUILD_DIR quick|full}
mode=${2:?usage: bigreg.sh BUILD_DIR quick|full}
b=$build/bench/rdmalloc-bench-bigreg
if [ $mode = quick ]; then
	sizes=(64) reps=1
else
	sizes=(256 1024 2048) reps=5
fi
# Explicit 2 MiB pages for the largest size, and some to spare.
largest=${sizes[-1]}
echo $((largest / 2 + 16)) >/proc/sys/vm/nr_hugepages 2>/dev/null
printf '[bigreg] %s 2 MiB pages reserved\n' "$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo no)" >&2

configs=()
for s in "${sizes[@]}"; do
	for pages in 4k huge; do
		configs+=("$s floor 1 $pages")
		for pds in 1 2; do
			for t in 1 2; do
				configs+=("$s register $pds $pages $t")
			done
		done
	done
done
n=${#configs[@]}
echo "@@CSV bigreg.csv env,what,size_mib,pds,threads,pages,rep,seconds,gib_per_s"
failed=0
for rep in $(seq 1 $reps); do
	for i in $(seq 0 $((n - 1))); do
		read -r s what pds pages t <<<"${configs[$(((i + rep * 7) % n))]}"
		if [ $what = floor ]; then
			args=(--floor)
		else
			args=(--pds $pds)
			[ $pds = 2 ] && args+=(--second-device rxe2)
		fi
		if row=$(env RDMALLOC_LOG_LEVEL=error RDMALLOC_DEVICE=rxe1 RDMALLOC_RESERVE=0 \
			${t:+RDMALLOC_REG_THREADS=$t} "$b" --size ${s}M --pages $pages --rep $rep "${args[@]}"); then
			echo "@@CSV bigreg.csv $row"
		else
			failed=$((failed + 1))
			printf '[bigreg] FAILED: %s MiB %s pds %s pages %s threads %s\n' "$s" "$what" "$pds" "$pages" "${t:-}" >&2
		fi
		t=
	done
	printf '[bigreg] rep %d/%d done\n' $rep $reps >&2
done
echo 0 >/proc/sys/vm/nr_hugepages 2>/dev/null # the rest of the boot has its memory back
echo "@@RESULT bigreg-guest $failed"
