# shellcheck shell=bash
# Sourced by tests/vm/smoke.sh and tests/preload/guest-clients.sh: verbs
# programs (ibv_rc_pingpong, perftest) as a server and a client over the
# guest's loopback, and the ok/FAIL counting both print.
# The sourcing script sets client_timeout, and may set before each
# run_pair: wrap (an array put before the command on both sides, e.g.
# `rdmalloc run --json --`) and note (words added to the ok/FAIL line).
logdir=$(mktemp -d "${TMPDIR:-/tmp}/rdmalloc-pairs.XXXXXX")
passed=0
failed=0
servers=()
wrap=()
note=

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

# Each verdict with the seconds since the one before (or the start).
verdict_mark=$SECONDS
since() { since_s=$((SECONDS - verdict_mark)); verdict_mark=$SECONDS; }
ok() {
	since
	echo "ok $1 ($since_s s)"
	passed=$((passed + 1))
}
# fail WHAT [LOG...]: counts, and shows the last lines of each log.
fail() {
	since
	echo "FAIL $1 ($since_s s)"
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

# run_pair NAME PORT CMD [ARGS...]: start "${wrap[@]} CMD ARGS -p PORT" as a
# server, wait for it to listen, run the client (same, plus 127.0.0.1),
# retrying only a refused connection.  Both must exit 0.  Logs:
# $logdir/NAME.{server,client} (stdout) and .err (stderr).  perftest
# refuses to report when its cycle counter does not calibrate (r^2 < 0.9,
# a loaded 2-core guest): that pair, and only that, runs again (twice at
# most), saying so.
run_pair() {
	local try
	for try in 1 2 3; do
		run_pair_once "$@" && return 0
		grep -q "Can't produce a report" "$logdir/$1.client.err" "$logdir/$1.server.err" 2>/dev/null ||
			return 1
		((try < 3)) && echo "# $1: perftest could not calibrate its clock (Can't produce a report): again"
	done
	return 1
}

run_pair_once() {
	local name=$1 port=$2 srv_pid i rc=1 src=1
	shift 2
	local slog=$logdir/$name.server clog=$logdir/$name.client
	timeout $((client_timeout + 60)) "${wrap[@]}" "$@" -p "$port" >"$slog" 2>"$slog.err" &
	srv_pid=$!
	servers+=("$srv_pid")
	for ((i = 0; i < 60; i++)); do
		listening "$port" && break
		kill -0 "$srv_pid" 2>/dev/null || break
		sleep 0.5
	done
	for _ in 1 2 3 4 5; do
		timeout "$client_timeout" "${wrap[@]}" "$@" -p "$port" 127.0.0.1 >"$clog" 2>"$clog.err"
		rc=$?
		((rc == 0)) && break
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
		ok "$name${note:+ $note}"
		# One result line for the record: perftest's table row, pingpong's rate.
		grep -hE '^ *[0-9]+ +[0-9]+ +[0-9.]+|bytes in .* seconds' "$clog" | tail -n 1 | sed 's/^ */#   /'
		return 0
	fi
	if grep -q "Can't produce a report" "$clog.err" "$slog.err" 2>/dev/null && ((${try:-3} < 3)); then
		return 1 # run_pair runs it again
	fi
	fail "$name${note:+ $note} (client exit $rc, server exit $src)" "$clog" "$clog.err" "$slog" "$slog.err"
	return 1
}

# device_up DEV: rxe is there and its port active (else a FAIL).
device_up() {
	if ibv_devinfo -d "$1" >"$logdir/devinfo" 2>&1 && grep -q PORT_ACTIVE "$logdir/devinfo"; then
		ok "ibv_devinfo $1 PORT_ACTIVE"
		return 0
	fi
	fail "ibv_devinfo $1 PORT_ACTIVE" "$logdir/devinfo"
	return 1
}

finish() {
	echo "$passed passed, $failed failed"
	((failed == 0))
}
