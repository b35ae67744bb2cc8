# shellcheck shell=bash
# Sourced by tests/middleware/run.sh: the engines' own crashes it knows
# (doc/mpi.md), each told from any other failure by what its logs say.
# tests/middleware/check-known-crashes.sh tests the telling on made-up logs.

# known_teardown_crash NAME RC SRC CLOG SLOG: did a side of fi_pingpong's rdm
# run die of libfabric 1.17's own bug, once both sides had checked their
# last transfer?  Its rxm closes a connection's msg endpoint, then drains the
# completions still queued for it and touches the freed endpoint (upstream
# 697688386, "prov/rxm: fix the msg_ep use-after-free at connection
# teardown", 2026; Debian 12 ships 1.17.0).  The crash handler of
# libinfinipath, which fi_pingpong loads, says "terminated with signal" and
# exits 1.  Anything else, or a second time, is a failure.
known_teardown_crash() {
	local name=$1 rc=$2 src=$3 clog=$4 slog=$5 dead
	[[ $name == fi_pingpong-rdm ]] || return 1
	((rc == 0 || src == 0)) || return 1
	# the 1 MiB row, fi_pingpong's last, on both sides
	grep -qE '^1m +100 +=100 ' "$clog" && grep -qE '^1m +100 +=100 ' "$slog" || return 1
	((rc == 0)) && dead=$slog.err || dead=$clog.err
	grep -q 'terminated with signal' "$dead" && grep -q 'libfabric\.so' "$dead"
}
