#!/bin/sh
# Fails when the library exports anything but the functions its public
# header declares, or misses one of them; or when an exported function is
# not named, exactly once and by its full name, in a node of the version
# script, or carries another version than that node's (doc/abi.md).
#   check-symbols.sh LIB HEADER MAP
set -eu
lib=$1 header=$2 map=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rdmalloc-symbols.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwDdBbVvi]$/ {print $3}' | sort -u >"$tmp/versioned"
sed 's/@.*//' "$tmp/versioned" | sort -u >"$tmp/exported"
grep -oE '\b(rdma_[a-z_]+)\(' "$header" | tr -d '(' | sort -u >"$tmp/declared"
if ! cmp -s "$tmp/exported" "$tmp/declared"; then
	echo "exported symbols differ from the header's functions (- declared, + exported):"
	diff -u "$tmp/declared" "$tmp/exported" | sed 's/^/  /'
	exit 1
fi
# The map, one "NAME VERSION" per function named in a node's global part.
sed 's|/\*.*\*/||g; /^[[:space:]]*\*/d; /^\/\*/d' "$map" | awk '
	/^[A-Z0-9_.]+[[:space:]]*\{/ { node = $1; sub(/\{.*/, "", node); part = ""; next }
	/global:/ { part = "global"; next }
	/local:/ { part = "local"; next }
	/^}/ { node = ""; next }
	node != "" && part == "global" { gsub(/[;[:space:]]/, ""); if ($0 != "") print $0 " " node }' |
	sort >"$tmp/map"
if grep -q '[*?]' "$tmp/map"; then
	echo "the map names functions by pattern (each must be named in the node that added it):"
	grep '[*?]' "$tmp/map" | sed 's/^/  /'
	exit 1
fi
dups=$(cut -d' ' -f1 "$tmp/map" | sort | uniq -d)
[ -z "$dups" ] || { echo "named in two nodes of the map: $dups"; exit 1; }
sed 's/@@*/ /' "$tmp/versioned" | sort >"$tmp/have"
if ! cmp -s "$tmp/map" "$tmp/have"; then
	echo "exported versions differ from the map's nodes (- map, + library):"
	diff -u "$tmp/map" "$tmp/have" | sed 's/^/  /'
	exit 1
fi
echo "ok: $(wc -l <"$tmp/exported") symbols, all declared in $(basename "$header"), each in its node of $(basename "$map") ($(cut -d' ' -f2 "$tmp/map" | sort -u | tr '\n' ' '))"
