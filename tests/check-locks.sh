#!/bin/sh
# Every lock of the library and the drop-in is in src/lock.h's table, which
# fork() walks in order and whose order every acquisition checks.  A lock
# declared anywhere else would be held across fork() by nobody's handler
# (a child could inherit it locked and hang) and escape the order check:
# fail, naming it.
set -eu
src=$1
found=$(grep -nE 'pthread_(mutex|rwlock|spinlock|cond|barrier)_(t|init)\b|PTHREAD_(MUTEX|RWLOCK|COND)_INITIALIZER|\bsem_(t|init)\b|\bmtx_t\b|\bcnd_t\b' \
	"$src"/src/*.c "$src"/src/*.h "$src"/preload/*.c "$src"/preload/*.cc "$src"/preload/*.h 2>/dev/null |
	grep -v "^$src/src/lock\.c:" || true)
if [ -n "$found" ]; then
	echo "locks declared outside src/lock.h's table (add them there, in order):"
	printf '%s\n' "$found" | sed "s|^$src/|  |"
	exit 1
fi
n=$(grep -cE '^[[:space:]]*X\([A-Z_]+, (OUTER|INNER),' "$src/src/lock.h")
echo "ok: every lock of src/ and preload/ is one of the $n in src/lock.h"
