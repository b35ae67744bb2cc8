#!/usr/bin/env bash
# bench/engines.sh - an engine's latency and bandwidth between the guest's
# two hosts (tools/rdmalloc-vm --hosts 2), plain, under the drop-in
# (LOCAL_WRITE heap: UCX's registrations pass through) and with the
# remote-access heap (they are elided), interleaved: each repetition runs
# every mode once, in a rotating order.  Run by bench/guest.sh.
#
#   engines.sh BUILD_DIR REPS ITERS
#
# CSV on stdout: env,rep,mode,test,size,iters,p50_us,avg_us,mb_s,
# elided,passthrough,passthrough_ns (the last three: the client process,
# -1 plain).  ucx_perftest tag_lat (8 B) and tag_bw (1 MiB), server on
# host 2, client on host 1.
set -uo pipefail
build=${1:?usage: engines.sh BUILD_DIR REPS ITERS}
reps=${2:?usage: engines.sh BUILD_DIR REPS ITERS}
iters=${3:?usage: engines.sh BUILD_DIR REPS ITERS}
rdmalloc=$build/tests/preload/rdmalloc
export RDMALLOC_PRELOAD_LIB=$build/preload/librdmalloc-preload.so
. "$build/tests/middleware/hosts.sh"
log=$(mktemp -d "${TMPDIR:-/tmp}/engines.XXXXXX")
trap 'rm -rf "$log"' EXIT
port=13400

if [[ -z ${RDMALLOC_VM_HOSTS:-} ]]; then
	echo "engines.sh: needs the guest's two hosts (tools/rdmalloc-vm --hosts 2)" >&2
	exit 2
fi
echo "env,rep,mode,test,size,iters,p50_us,avg_us,mb_s,elided,passthrough,passthrough_ns,peak_held_bytes,peak_live_bytes,peak_pinned_bytes"
modes=(plain dropin remote)
status=0
for rep in $(seq 1 "$reps"); do
	for i in 0 1 2; do
		mode=${modes[$(((i + rep) % 3))]}
		for t in tag_lat:8 tag_bw:1048576; do
			test=${t%:*} size=${t#*:}
			n=$iters
			[[ $test == tag_bw ]] && n=$((iters / 10 > 20 ? iters / 10 : 20))
			port=$((port + 1))
			echo "engines.sh: rep $rep, $mode, $test" >&2
			timeout 300 bash -c 'on_host 2 "$@"' _ "$mode" ucx_perftest -p $port >"$log/s" 2>"$log/s.err" &
			spid=$!
			ok=0
			for _ in $(seq 1 60); do
				sleep 0.5
				if timeout 240 bash -c 'on_host 1 "$@"' _ "$mode" ucx_perftest 10.77.0.2 -p $port \
					-t "$test" -s "$size" -n "$n" -w $((n / 10)) >"$log/c" 2>"$log/c.err"; then
					ok=1
					break
				fi
				grep -q "Connection refused" "$log/c" "$log/c.err" || break
			done
			((ok)) || kill "$spid" 2>/dev/null
			wait "$spid" || ok=0
			row=$(grep 'Final:' "$log/c" | tail -n 1)
			if ((!ok)) || [[ -z $row ]]; then
				echo "engines.sh: ucx_perftest $test in mode $mode failed:" >&2
				tail -n 5 "$log/c" "$log/c.err" "$log/s.err" >&2
				status=1
				continue
			fi
			# Final: iters p50 avg overall bw_avg bw_overall rate_avg rate_overall
			read -r _ _ p50 avg _ _ bw _ <<<"$row"
			echo "guest-2hosts,$rep,$mode,$test,$size,$n,$p50,$avg,$bw,$(field_of "$log/c.err" elided_registrations),$(field_of "$log/c.err" passthrough_registrations),$(field_of "$log/c.err" passthrough_ns),$(field_of "$log/c.err" peak_chunk_bytes),$(field_of "$log/c.err" peak_live_bytes),$(field_of "$log/c.err" peak_pinned_bytes)"
		done
	done
done
exit $status
