#!/bin/sh
# check-consumer.sh BUILD SRC PREFIX LIBDIR: meson install --destdir into a
# temporary directory, then the outside project of tests/consumer builds
# examples/keys.c against that tree with CMake (find_package(rdmalloc
# CONFIG)) and with pkg-config, and runs it.  The tree is not at its prefix,
# so this also proves the CMake files find the prefix from where they are.
set -eu
build=$1 src=$2 prefix=$3 libdir=$4
command -v cmake >/dev/null || { echo "cmake not installed (tools/setup-deps)"; exit 1; }
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --no-rebuild --quiet
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
for f in rdmallocConfig.cmake rdmallocConfigVersion.cmake; do
	[ -f "$dest$libdir/cmake/rdmalloc/$f" ] || { echo "no $f installed in $libdir/cmake/rdmalloc"; exit 1; }
done
# cmake/meson.build names the soname itself: it must be the library's.
soname=$(objdump -p "$dest$libdir/librdmalloc.so" | sed -n 's/^ *SONAME *//p')
grep -q "IMPORTED_SONAME \"$soname\"" "$dest$libdir/cmake/rdmalloc/rdmallocConfig.cmake" ||
	{ echo "rdmallocConfig.cmake's IMPORTED_SONAME is not the library's $soname (cmake/meson.build)"; exit 1; }
export CMAKE_PREFIX_PATH="$dest$prefix"
export PKG_CONFIG_PATH="$dest$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest"
export LD_LIBRARY_PATH="$dest$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$src/tests/consumer/run.sh" "$src/examples/keys.c" "$dest/work"
