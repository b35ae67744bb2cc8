#!/bin/sh
# Fails when the library exports anything but the functions its public
# header declares, or misses one of them.
set -eu
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwDdBbVvi]$/ {print $3}' | sed 's/@.*//' | sort -u)
declared=$(grep -oE '\b(rdma_[a-z_]+)\(' "$header" | tr -d '(' | sort -u)
if [ "$exported" != "$declared" ]; then
	echo "exported symbols differ from the header's functions:"
	printf '%s\n' "$exported" > /tmp/rdmalloc-exported.$$
	printf '%s\n' "$declared" | diff -u - /tmp/rdmalloc-exported.$$ | sed 's/^/  /'
	rm -f /tmp/rdmalloc-exported.$$
	exit 1
fi
echo "ok: $(printf '%s\n' "$exported" | wc -l) symbols, all declared in $(basename "$header")"
