#!/bin/bash
# Every lock of the library and the drop-in is in src/sys/lock.h's table, which
# fork() walks in order and whose order every acquisition checks.  A lock
# declared anywhere else would be held across fork() by nobody's handler
# (a child could inherit it locked and hang) and escape the order check:
# fail, naming it.
set -eu
src=$1
found=$(grep -nE 'pthread_(mutex|rwlock|spinlock|cond|barrier)_(t|init)\b|PTHREAD_(MUTEX|RWLOCK|COND)_INITIALIZER|\bsem_(t|init)\b|\bmtx_t\b|\bcnd_t\b' \
	$(find "$src/src" "$src/preload" -name '*.[ch]' -o -name '*.cc') |
	grep -v "^$src/src/sys/lock\.c:" || true)
if [ -n "$found" ]; then
	echo "locks declared outside src/sys/lock.h's table (add them there, in order):"
	printf '%s\n' "$found" | sed "s|^$src/|  |"
	exit 1
fi
[ "$(find "$src/src" -name '*.c' | wc -l)" -gt 10 ] || { echo "no sources under $src/src"; exit 1; }
# doc/design.md's table of locks names the same ones, in the same order.
table=$(sed -nE 's/^[[:space:]]*X\(([A-Z_]+), (FIRST|OUTER|INNER),.*/\1 \2/p' "$src/src/sys/lock.h" | tr 'A-Z' 'a-z')
doc=$(sed -nE 's/^\| `([A-Z_]+)` \| (first|outer|inner) \|.*/\1 \2/p' "$src/doc/design.md" | tr 'A-Z' 'a-z')
if [ "$table" != "$doc" ]; then
	echo "doc/design.md's table of locks differs from src/sys/lock.h's (lock.h < > design.md):"
	diff <(printf '%s\n' "$table") <(printf '%s\n' "$doc") | grep '^[<>]'
	exit 1
fi
[ -n "$table" ] || { echo "no X(NAME, FIRST|OUTER|INNER, ...) lines in src/sys/lock.h"; exit 1; }
echo "ok: every lock of src/ and preload/ is one of the $(printf '%s\n' "$table" | wc -l) in src/sys/lock.h"
