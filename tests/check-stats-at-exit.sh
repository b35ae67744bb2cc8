#!/bin/sh
# The stats at exit (RDMALLOC_STATS): JSON with every field of the header's
# X-macro plus pid, program and library version; text with a header line
# (version, pid, program), units, no zero row unless RDMALLOC_STATS_ALL=1,
# values in one aligned column; RDMALLOC_STATS_FILE with %p, %h and %%, and
# too long once expanded; a bad value warns once, naming the variable, and
# prints nothing.
#   check-stats-at-exit.sh PROGRAM HEADER VERSION
set -eu
exe=$1 header=$2 version=$3
prog=$(basename "$exe")
fields=$(sed -n '/^#define RDMA_MALLOC_STATS_FIELDS/,/^$/p' "$header" | grep -c '^[[:space:]]*X(')
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rdmalloc-stats.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $1"; [ -f "$tmp/out" ] && sed 's/^/#   /' "$tmp/out"; exit 1; }
export RDMALLOC_LOG_LEVEL=error

RDMALLOC_STATS=json "$exe" 2>"$tmp/out" >/dev/null
grep -q '^{"version": 1, "chunks": [0-9]*,.*"fallbacks": [0-9]*, .*"pid": [0-9]*, "program": "'"$prog"'", "library_version": "'"$version"'"}$' "$tmp/out" ||
	fail "no JSON stats at exit with pid, program and library_version"
n=$(grep -o '"[a-z_]*": [0-9]' "$tmp/out" | wc -l)
# every field, plus version and pid
[ "$n" = $((fields + 2)) ] || fail "JSON has $n numbers, want the $fields fields + version + pid"

RDMALLOC_STATS=1 "$exe" 2>"$tmp/out" >/dev/null
head -1 "$tmp/out" | grep -q "^rdmalloc $version stats of pid [0-9]* ($prog): [0-9]* of $fields rows, the zero ones left out" ||
	fail "no text header line with version, pid and program"
grep -q '^  chunk_bytes  *[0-9.]* MiB  bytes in chunks held$' "$tmp/out" || fail "chunk_bytes not in MiB"
! grep -q '^  [a-z_]*  *0  ' "$tmp/out" || fail "a zero row is shown"
rows=$(($(wc -l <"$tmp/out") - 1))
[ "$rows" -ge 3 ] && [ "$rows" -lt "$fields" ] || fail "$rows rows shown, want some but not all $fields"
# One column: every value ends where the others do.
ends=$(sed 1d "$tmp/out" | LC_ALL=C.UTF-8 awk '{ if ($3 ~ /^(B|KiB|MiB|GiB|TiB|ns|µs|ms|s)$/) i = index($0, " " $3 "  ") + length($3) + 1; else i = index($0, $2 "  ") + length($2); print i }' | sort -u | wc -l)
[ "$ends" = 1 ] || fail "values are not in one aligned column"

RDMALLOC_STATS=1 RDMALLOC_STATS_ALL=1 "$exe" 2>"$tmp/out" >/dev/null
head -1 "$tmp/out" | grep -q "all $fields rows" || fail "RDMALLOC_STATS_ALL=1 does not say all rows"
[ $(($(wc -l <"$tmp/out") - 1)) = "$fields" ] || fail "RDMALLOC_STATS_ALL=1 does not show all $fields rows"
grep -q '^  mw_binds  *0  memory-window binds posted$' "$tmp/out" || fail "RDMALLOC_STATS_ALL=1 hides a zero row"

RDMALLOC_STATS=1 RDMALLOC_STATS_FILE="$tmp/stats-%p.txt" "$exe" 2>"$tmp/out" >/dev/null
! grep -q 'stats of pid' "$tmp/out" || fail "stats on stderr although RDMALLOC_STATS_FILE is set"
f=$(ls "$tmp"/stats-*.txt 2>/dev/null | head -1)
[ -n "$f" ] || fail "RDMALLOC_STATS_FILE=$tmp/stats-%p.txt made no file"
pid=${f##*/stats-}
pid=${pid%.txt}
grep -q "^rdmalloc $version stats of pid $pid ($prog)" "$f" || { cp "$f" "$tmp/out"; fail "the file's report is not of pid $pid"; }
RDMALLOC_STATS=json RDMALLOC_STATS_FILE="$tmp/all.json" "$exe" >/dev/null 2>&1
RDMALLOC_STATS=json RDMALLOC_STATS_FILE="$tmp/all.json" "$exe" >/dev/null 2>&1
[ "$(grep -c '^{"version"' "$tmp/all.json")" = 2 ] || fail "two processes did not append a line each to one file"
host=$(uname -n)
RDMALLOC_STATS=json RDMALLOC_STATS_FILE="$tmp/%h-100%%.json" "$exe" >/dev/null 2>&1
[ -s "$tmp/$host-100%.json" ] || { ls "$tmp" >"$tmp/out"; fail "RDMALLOC_STATS_FILE=%h-100%%.json did not make $host-100%.json"; }
RDMALLOC_STATS=1 RDMALLOC_STATS_FILE="$tmp/no/such/dir/x" "$exe" 2>"$tmp/out" >/dev/null
grep -q 'cannot open RDMALLOC_STATS_FILE' "$tmp/out" && grep -q 'stats of pid' "$tmp/out" ||
	fail "an unopenable RDMALLOC_STATS_FILE is not reported, or the stats are lost"

# Too long once %h is expanded (the room is 511 bytes; a host name may
# have 64): said, and the stats go to standard error, not lost.  The long
# host name in a UTS namespace of the test's own.
long=$(printf '%%h%.0s' 1 2 3 4 5 6 7 8 9 10)
h64=$(printf 'h%.0s' $(seq 64))
# (root: a UTS namespace alone; anyone: with a user namespace, if allowed)
uts=
for u in "unshare -u" "unshare -Ur -u"; do
	if $u hostname "$h64" 2>/dev/null; then
		uts=$u
		break
	fi
done
if [ -n "$uts" ]; then
	$uts sh -c 'hostname "$1" && shift && exec "$@"' _ "$h64" \
		env RDMALLOC_STATS=1 RDMALLOC_STATS_FILE="$tmp/$long" "$exe" 2>"$tmp/out" >/dev/null ||
		fail "the program under $uts failed"
	grep -q 'RDMALLOC_STATS_FILE ".*" is too long once expanded; the stats go to standard error' "$tmp/out" &&
		grep -q 'stats of pid' "$tmp/out" ||
		fail "RDMALLOC_STATS_FILE too long once expanded is not reported, or the stats are lost"
	toolong="too long once expanded: said, to stderr"
else
	toolong="too long once expanded: NOT CHECKED (no UTS namespace: unshare -u and -Ur -u refused here)"
fi

RDMALLOC_STATS=maybe RDMALLOC_LOG_LEVEL=warn "$exe" 2>"$tmp/out" >/dev/null
[ "$(grep -c 'RDMALLOC_STATS="maybe" is not valid' "$tmp/out")" = 1 ] || fail "bad RDMALLOC_STATS not warned once"
! grep -q '"version"\|stats of pid' "$tmp/out" || fail "stats printed although RDMALLOC_STATS was invalid"
echo "ok: stats at exit (json: $fields fields + pid, program, version; text: header, units, no zero rows, one column; all rows; file with %p, %h and %%, appended; $toolong; bad value warned)"
