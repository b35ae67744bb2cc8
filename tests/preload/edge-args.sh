#!/bin/bash
# The drop-in answers every allocation function's edge arguments as the
# glibc and libstdc++ it replaces (edge_args.c, edge_args_new.cc): the same
# lines plain and under it; and, as a glibc 2.38 or later would
# (EDGE_ARGS_238 says it is one), an aligned_alloc alignment that is not a
# power of two (or 0) fails with EINVAL.
#   edge-args.sh PRELOAD_LIB EDGE_ARGS EDGE_ARGS_238 EDGE_ARGS_NEW
set -u
lib=$1 prog=$2 prog238=$3 prognew=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
glibc=$(getconf GNU_LIBC_VERSION)
under() { # under OUT PROG: PROG under the drop-in, nothing on stderr
	LD_PRELOAD=$lib "$2" >"$tmp/$1" 2>"$tmp/err" || {
		echo "FAIL: $2 failed under the drop-in (status $?)"; cat "$tmp/err"; exit 1; }
	[ ! -s "$tmp/err" ] || { echo "FAIL: the drop-in said:"; cat "$tmp/err"; exit 1; }
}
for p in "$prog" "$prognew"; do
	"$p" >"$tmp/plain" || { echo "FAIL: $p failed plain (status $?)"; exit 1; }
	under dropin "$p"
	if ! diff -u --label "plain ($glibc)" --label drop-in "$tmp/plain" "$tmp/dropin"; then
		echo "FAIL: the drop-in answers differently (${p##*/})"
		exit 1
	fi
	echo "ok: ${p##*/}: $(wc -l <"$tmp/plain") lines, the same plain ($glibc) and under the drop-in"
done
"$prog" >"$tmp/plain"

# Which glibc answers decides what the drop-in must answer.
[[ $glibc == "glibc 2."* ]] || { echo "SKIP: which glibc is this? (getconf said '$glibc'): 2.38's answers NOT TESTED"; exit 77; }
case $glibc in
"glibc 2."[0-9] | "glibc 2."[0-2][0-9] | "glibc 2.3"[0-7]) ;;
*) echo "SKIP: $glibc refuses those alignments itself: the comparison above covers it"; exit 0 ;;
esac
under as238 "$prog238"
# What 2.38 changed: aligned_alloc(A, n) with A 0 or not a power of two.
awk '/^aligned_alloc\(/ { a = substr($0, 15) + 0; p = 1; while (p < a) p *= 2
	if (p != a || a == 0) { printf "%-44s NULL, errno 22\n", substr($0, 1, index($0, ")")); next } }
	{ print }' "$tmp/plain" >"$tmp/want238" || { echo "FAIL: awk"; exit 1; }
if ! diff -u --label "what glibc 2.38 answers" --label "drop-in, told it replaces 2.38" "$tmp/want238" "$tmp/as238"; then
	echo "FAIL: the drop-in does not answer as glibc 2.38 would"
	exit 1
fi
echo "ok: told it replaces glibc 2.38, $(grep -c 'aligned_alloc.*errno 22' "$tmp/as238") aligned_alloc calls fail with EINVAL"
