#!/usr/bin/env bash
# known-crashes.sh tells libfabric 1.17's teardown crash of fi_pingpong's rdm
# run from every other failure, on made-up logs shaped like the guest's.
#   check-known-crashes.sh SOURCE_DIR
set -u
. "${1:?usage: check-known-crashes.sh SOURCE_DIR}/tests/middleware/known-crashes.sh"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
bad=0
want() { # WANT WHAT ARGS...: known_teardown_crash ARGS must return WANT
	local want=$1 what=$2 got
	shift 2
	known_teardown_crash "$@"
	got=$?
	if ((got == want)); then echo "ok $what"; else echo "FAIL $what: $got, want $want"; bad=1; fi
}
rows='bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
64k     100     =100     12m         0.91s     14.37    4562.08       0.00
1m      100     =100     200m        8.03s     26.12   40149.43       0.00'
crash='fi_pingpong:5419 terminated with signal 11 at PC=7f7e28e74f81 SP=7ffc0e0c1a40.  Backtrace:
/lib/x86_64-linux-gnu/libfabric.so.1(+0xb8f81)[0x7f7e28e74f81]
{"version": 1, "chunks": 4}'
printf '%s\n' "$rows" >"$d/c"
printf '%s\n' "$rows" >"$d/s"
printf '%s\n' "$crash" >"$d/s.err"
: >"$d/c.err"
want 0 "the server's crash after the last row" fi_pingpong-rdm 0 1 "$d/c" "$d/s"
want 1 "another program" fi_pingpong-msg 0 1 "$d/c" "$d/s"
want 1 "both sides failed" fi_pingpong-rdm 1 1 "$d/c" "$d/s"
want 1 "the client's log says nothing of a crash" fi_pingpong-rdm 1 0 "$d/c" "$d/s"
printf '%s\n' "$crash" >"$d/c.err"
want 0 "the client's crash after the last row" fi_pingpong-rdm 1 0 "$d/c" "$d/s"
head -n 2 "$d/c" >"$d/c.short" && cp "$d/c.err" "$d/c.short.err"
want 1 "a side short of the last row" fi_pingpong-rdm 0 1 "$d/c.short" "$d/s"
printf 'Segmentation fault\n' >"$d/s.err"
want 1 "a crash without the handler's words" fi_pingpong-rdm 0 1 "$d/c" "$d/s"
printf 'x terminated with signal 11.  Backtrace:\n/usr/lib/libucs.so.0(+0x1)[0x1]\n' >"$d/s.err"
want 1 "a crash outside libfabric" fi_pingpong-rdm 0 1 "$d/c" "$d/s"
exit $bad
