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
logdir=$(mktemp -d "${TMPDIR:-/tmp}/rdmalloc-clients.XXXXXX")
passed=0
failed=0
servers=()

cleanup() {
	local pid
	for pid in "${servers[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${servers[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$logdir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() {
	echo "FAIL $1"
	failed=$((failed + 1))
	shift
	local f
	for f in "$@"; do
		[[ -s $f ]] && sed -n "s|^|#   ${f##*/}: |p" "$f" | tail -n 15
	done
}

# Is something listening on TCP port $1 (IPv4 or IPv6)?
listening() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# field_of FILE FIELD: the field of the last JSON stats line in FILE, or -1.
field_of() {
	grep '^{"version": ' "$1" | tail -n 1 | grep -o "\"$2\": [0-9]*" | awk '{print $2}' | grep . || echo -1
}

# run_pair NAME PORT FIELD "RUN-OPTIONS" CMD [ARGS...]: start
# "rdmalloc run --json RUN-OPTIONS -- CMD ARGS -p PORT" as a server, wait for
# it to listen, run the client (same, plus 127.0.0.1) with retries, then
# check that both passed and that FIELD >= 1 in both processes' stats.
run_pair() {
	local name=$1 port=$2 field=$3 opts=$4 srv_pid i rc=1 src=1
	shift 4
	local slog=$logdir/$name.server clog=$logdir/$name.client
	# shellcheck disable=SC2086 # opts is a list of words
	timeout $((client_timeout + 60)) "$rdmalloc" run --json $opts -- "$@" -p "$port" >"$slog" 2>"$slog.err" &
	srv_pid=$!
	servers+=("$srv_pid")
	for ((i = 0; i < 60; i++)); do
		listening "$port" && break
		kill -0 "$srv_pid" 2>/dev/null || break
		sleep 0.5
	done
	for _ in 1 2 3 4 5; do
		# shellcheck disable=SC2086
		timeout "$client_timeout" "$rdmalloc" run --json $opts -- "$@" -p "$port" 127.0.0.1 >"$clog" 2>"$clog.err"
		rc=$?
		((rc == 0)) && break
		# Only a refused connection is worth retrying; anything else is a failure.
		grep -qiE "couldn't connect|unable to open file descriptor|connection refused" "$clog" "$clog.err" || break
		kill -0 "$srv_pid" 2>/dev/null || break
		sleep 2
	done
	if ((rc == 0)); then
		wait "$srv_pid" 2>/dev/null
		src=$?
	else
		kill "$srv_pid" 2>/dev/null || true
		wait "$srv_pid" 2>/dev/null
	fi
	if ((rc == 0 && src == 0)); then
		ok "$name under rdmalloc run${opts:+ $opts}"
		grep -hE '^ *[0-9]+ +[0-9]+ +[0-9.]+|bytes in .* seconds' "$clog" | tail -n 1 | sed 's/^ */#   /'
	else
		fail "$name under rdmalloc run${opts:+ $opts} (client exit $rc, server exit $src)" \
			"$clog" "$clog.err" "$slog" "$slog.err"
	fi
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
elif ibv_devinfo -d "$dev" >"$logdir/devinfo" 2>&1 && grep -q PORT_ACTIVE "$logdir/devinfo"; then
	ok "ibv_devinfo $dev PORT_ACTIVE"
	run_pair ibv_rc_pingpong 18525 elided_registrations "" \
		ibv_rc_pingpong -d "$dev" -g 1 -n 200 -c
	run_pair ib_write_bw 18526 passthrough_registrations "" \
		ib_write_bw -d "$dev" -x 1 -s 65536 -n 200
	run_pair ib_write_bw-remote-heap 18527 elided_registrations \
		"--access LOCAL_WRITE,REMOTE_WRITE,REMOTE_READ,REMOTE_ATOMIC" \
		ib_write_bw -d "$dev" -x 1 -s 65536 -n 200
else
	fail "ibv_devinfo $dev PORT_ACTIVE" "$logdir/devinfo"
	echo "# no active $dev: run this inside the guest: cd build && ../tools/rdmalloc-vm -- tests/preload/guest-clients.sh \$PWD"
fi

echo "$passed passed, $failed failed"
((failed == 0))
