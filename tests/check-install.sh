#!/bin/sh
# meson install gives a header, a versioned shared library and rdmalloc.pc
# that an outside program can build and run against, and the man pages and
# docs.
set -eu
build=$1 src=$2
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --no-rebuild --quiet
pc=$(find "$dest" -name rdmalloc.pc)
[ -n "$pc" ] || { echo "no rdmalloc.pc installed"; exit 1; }
lib=$(find "$dest" -name 'librdmalloc.so.0' | head -1)
[ -n "$lib" ] || { echo "no librdmalloc.so.0 installed"; exit 1; }
[ -n "$(find "$dest" -name rdma_malloc.h)" ] || { echo "no header installed"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$dest"
cc -std=c11 -Wall -Wextra -Werror -o "$dest/keys" "$src/examples/keys.c" $(pkg-config --cflags --libs rdmalloc)
LD_LIBRARY_PATH=$(dirname "$lib") "$dest/keys" >/dev/null 2>&1 || { echo "installed example failed"; exit 1; }
# Every man page of doc/man installs, the one-line aliases included (so that
# "man rdma_free" finds rdma_malloc(3)), and the docs the pages name as
# @DOCDIR@/NAME install where the installed pages say.
mans=0
for p in "$src"/doc/man/*; do
	n=${p##*/}
	m=$(find "$dest" -path "*/man${n##*.}/$n")
	[ -n "$m" ] || { echo "man page $n not installed (doc/meson.build)"; exit 1; }
	! grep -q '@DOCDIR@' "$m" || { echo "$n installed with @DOCDIR@ unsubstituted"; exit 1; }
	so=$(sed -n 's|^\.so ||p' "$m") # man resolves it from the top of the man tree
	[ -z "$so" ] || [ -f "${m%/*/*}/$so" ] || { echo "$n installed, but not its .so target $so"; exit 1; }
	mans=$((mans + 1))
done
docdir=$(sed -n 's|^\.I.* \(/[^ ]*\)/preload\.md.*|\1|p' "$(find "$dest" -path '*/man7/rdmalloc.7')")
[ -n "$docdir" ] || { echo "rdmalloc.7 names no installed preload.md"; exit 1; }
for p in "$src"/doc/*.md; do
	[ -f "$dest$docdir/${p##*/}" ] || { echo "$docdir/${p##*/}, which the man pages name, not installed"; exit 1; }
done
echo "ok: installed $(basename "$(readlink -f "$lib")"), header and rdmalloc.pc; an outside program builds and runs; $mans man pages and the docs in $docdir"
