#!/usr/bin/env bash
# Soft-RoCE smoke test, meant to run inside the test VM:
#   tools/rdmalloc-vm -- tests/vm/smoke.sh
# Checks that rxe0 is active, then runs verbs traffic over the guest's loopback:
# ibv_rc_pingpong and perftest's ib_write_bw, ib_read_bw and ib_send_lat, each as
# a background server plus a client against 127.0.0.1.
# Prints "ok NAME" / "FAIL NAME" per check and "N passed, M failed" at the end.
set -uo pipefail

dev=${SMOKE_DEV:-rxe0}
client_timeout=${SMOKE_CLIENT_TIMEOUT:-120}
. "$(dirname "$0")/pairs.sh"

if device_up "$dev"; then
	run_pair ibv_rc_pingpong 18515 ibv_rc_pingpong -d "$dev" -g 1 -n 200
	run_pair ib_write_bw 18516 ib_write_bw -d "$dev" -x 1 -s 65536 -n 200
	run_pair ib_read_bw 18517 ib_read_bw -d "$dev" -x 1 -n 200
	run_pair ib_send_lat 18518 ib_send_lat -d "$dev" -x 1 -n 200
else
	echo "# no active $dev: run this inside the VM: tools/rdmalloc-vm -- tests/vm/smoke.sh"
	for name in ibv_rc_pingpong ib_write_bw ib_read_bw ib_send_lat; do
		fail "$name (not run: no device)"
	done
fi
finish
