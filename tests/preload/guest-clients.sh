#!/usr/bin/env bash
# Real RDMA clients under the LD_PRELOAD drop-in, inside the Soft-RoCE guest:
#   cd build && ../tools/rdmalloc-vm -- tests/preload/guest-clients.sh $PWD
# Server and client both run under `rdmalloc run --json` (every malloc from
# registered chunks; stats as one JSON line on stderr at exit), over rxe0 on
# the guest's loopback.  Each pair must pass, and the stats must show what
# happened to the programs' own ibv_reg_mr calls:
#   ibv_rc_pingpong registers LOCAL_WRITE buffers: elided (the preload heap's
#     default access is LOCAL_WRITE), elided_registrations >= 1 per process;
#   ib_write_bw registers with remote access: not eligible by default,
#     passthrough_registrations >= 1 per process; with
#     --access LOCAL_WRITE,REMOTE_WRITE,REMOTE_READ,REMOTE_ATOMIC it is,
#     elided_registrations >= 1 per process.
# Prints ok/FAIL per check and "N passed, M failed" last.
#   guest-clients.sh BUILD_DIR
set -uo pipefail

build=$(cd "${1:?usage: guest-clients.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
dev=${SMOKE_DEV:-rxe0}
client_timeout=${SMOKE_CLIENT_TIMEOUT:-180}
# The command, copied next to this script (the source tree may be invisible
# to the guest), and the drop-in of this build.
rdmalloc=$here/rdmalloc
export RDMALLOC_PRELOAD_LIB=$build/preload/librdmalloc-preload.so
. "$here/../vm/pairs.sh"

# field_of FILE FIELD: the field of the last JSON stats line in FILE, or -1.
field_of() {
	grep '^{"version": ' "$1" | tail -n 1 | grep -o "\"$2\": [0-9]*" | awk '{print $2}' | grep . || echo -1
}

# checked_pair NAME PORT FIELD "RUN-OPTIONS" CMD [ARGS...]: run_pair under
# "rdmalloc run --json RUN-OPTIONS", then check that FIELD >= 1 in both
# processes' stats.
checked_pair() {
	local name=$1 port=$2 field=$3 opts=$4
	shift 4
	# shellcheck disable=SC2206 # opts is a list of words
	wrap=("$rdmalloc" run --json $opts --)
	note="under rdmalloc run${opts:+ $opts}"
	run_pair "$name" "$port" "$@"
	local side f v e p
	for side in server client; do
		f=$logdir/$name.$side.err
		v=$(field_of "$f" "$field")
		e=$(field_of "$f" elided_registrations)
		p=$(field_of "$f" passthrough_registrations)
		if ((v >= 1)); then
			ok "$name $side: $field >= 1 (elided_registrations=$e passthrough_registrations=$p)"
		else
			fail "$name $side: $field = $v, want >= 1 (elided_registrations=$e passthrough_registrations=$p)" "$f"
		fi
	done
}

if [ ! -x "$rdmalloc" ] || [ ! -f "$RDMALLOC_PRELOAD_LIB" ]; then
	fail "set-up: need $rdmalloc and $RDMALLOC_PRELOAD_LIB"
elif device_up "$dev"; then
	checked_pair ibv_rc_pingpong 18525 elided_registrations "" \
		ibv_rc_pingpong -d "$dev" -g 1 -n 200 -c
	checked_pair ib_write_bw 18526 passthrough_registrations "" \
		ib_write_bw -d "$dev" -x 1 -s 65536 -n 200
	checked_pair ib_write_bw-remote-heap 18527 elided_registrations \
		"--access LOCAL_WRITE,REMOTE_WRITE,REMOTE_READ,REMOTE_ATOMIC" \
		ib_write_bw -d "$dev" -x 1 -s 65536 -n 200
else
	echo "# no active $dev: run this inside the guest: cd build && ../tools/rdmalloc-vm -- tests/preload/guest-clients.sh \$PWD"
fi
finish
