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
logdir=$(mktemp -d "${TMPDIR:-/tmp}/rdmalloc-smoke.XXXXXX")
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

# run_pair NAME PORT CMD [ARGS...]: start "CMD ARGS -p PORT" as a server in the
# background, wait for it to listen, then run the client "CMD ARGS -p PORT
# 127.0.0.1", retrying the connection a few times.
run_pair() {
    local name=$1 port=$2 srv_pid i rc=1
    shift 2
    local slog=$logdir/$name.server clog=$logdir/$name.client
    timeout $((client_timeout + 60)) "$@" -p "$port" >"$slog" 2>&1 &
    srv_pid=$!
    servers+=("$srv_pid")
    for ((i = 0; i < 60; i++)); do
        listening "$port" && break
        kill -0 "$srv_pid" 2>/dev/null || break
        sleep 0.5
    done
    for _ in 1 2 3 4 5; do
        timeout "$client_timeout" "$@" -p "$port" 127.0.0.1 >"$clog" 2>&1
        rc=$?
        ((rc == 0)) && break
        # Only a refused connection is worth retrying; anything else is a failure.
        grep -qiE "couldn't connect|unable to open file descriptor|connection refused" "$clog" || break
        kill -0 "$srv_pid" 2>/dev/null || break
        sleep 2
    done
    if ((rc == 0)); then
        wait "$srv_pid" 2>/dev/null
        ok "$name"
        # One result line for the record: perftest's table row, pingpong's rate.
        grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+|bytes in .* seconds' "$clog" | tail -n 1 | sed 's/^ */#   /'
    else
        kill "$srv_pid" 2>/dev/null || true
        wait "$srv_pid" 2>/dev/null
        fail "$name (client exit $rc)" "$clog" "$slog"
    fi
}

if ibv_devinfo -d "$dev" >"$logdir/devinfo" 2>&1 && grep -q PORT_ACTIVE "$logdir/devinfo"; then
    ok "ibv_devinfo $dev PORT_ACTIVE"
    run_pair ibv_rc_pingpong 18515 ibv_rc_pingpong -d "$dev" -g 1 -n 200
    run_pair ib_write_bw 18516 ib_write_bw -d "$dev" -x 1 -s 65536 -n 200
    run_pair ib_read_bw 18517 ib_read_bw -d "$dev" -x 1 -n 200
    run_pair ib_send_lat 18518 ib_send_lat -d "$dev" -x 1 -n 200
else
    fail "ibv_devinfo $dev PORT_ACTIVE" "$logdir/devinfo"
    echo "# no active $dev: run this inside the VM: tools/rdmalloc-vm -- tests/vm/smoke.sh"
    for name in ibv_rc_pingpong ib_write_bw ib_read_bw ib_send_lat; do
        fail "$name (not run: no device)"
    done
fi

echo "$passed passed, $failed failed"
((failed == 0))
