#!/bin/sh
# meson install gives a header, a versioned shared library and rdmalloc.pc
# that an outside program can build and run against.
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
echo "ok: installed $(basename "$(readlink -f "$lib")"), header and rdmalloc.pc; an outside program builds and runs"
