#!/bin/sh
# run.sh EXAMPLE.c WORKDIR: build EXAMPLE.c against an installed rdmalloc,
# once as a CMake project (find_package(rdmalloc CONFIG), CMakeLists.txt)
# and once with pkg-config (Makefile), run both, and check which versions
# the CMake package says it meets.  The installed tree is found the usual
# ways: CMAKE_PREFIX_PATH, PKG_CONFIG_PATH (and PKG_CONFIG_SYSROOT_DIR,
# LD_LIBRARY_PATH for a tree that is not installed at its prefix), or none
# of them for one in /usr.  Used by tests/check-consumer.sh (a meson
# --destdir tree) and tools/check-packages (the .debs in a clean root).
set -eu
here=$(cd "$(dirname "$0")" && pwd -P)
example=$(cd "$(dirname "$1")" && pwd -P)/$(basename "$1")
work=$2
mkdir -p "$work"

version=$(pkg-config --modversion rdmalloc)
echo "== rdmalloc $version, $(pkg-config --variable=libdir rdmalloc)"

runs() { # runs PROGRAM: exit 0, and the library that ran is this version
	out=$("$1" 2>&1) || { printf '%s\n' "$out"; echo "FAIL: $1 exited non-zero"; exit 1; }
	printf '%s\n' "$out" | sed -n '1,6p'
	printf '%s\n' "$out" | grep -q "^rdmalloc $version stats" ||
		{ echo "FAIL: $1 did not report rdmalloc $version"; exit 1; }
	echo "ok: $(basename "$1") ran against rdmalloc $version"
}

echo "== CMake: find_package(rdmalloc CONFIG), target rdmalloc::rdmalloc"
cmake -S "$here" -B "$work/cmake" -DRDMALLOC_EXAMPLE="$example" >"$work/cmake.log" 2>&1 ||
	{ cat "$work/cmake.log"; exit 1; }
grep 'rdmalloc .* from' "$work/cmake.log"
cmake --build "$work/cmake" >>"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; exit 1; }
runs "$work/cmake/keys-cmake"

echo "== pkg-config: $(pkg-config --cflags --libs rdmalloc)"
make -s -C "$work" -f "$here/Makefile" EXAMPLE="$example"
runs "$work/keys-pkgconfig"

echo "== rdmallocConfigVersion.cmake: which find_package(rdmalloc VERSION) it meets"
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}
# 0.1: the first release of librdmalloc.so.0 (cmake/meson.build); a newer
# MINOR or MAJOR than this one is not met.
probes="$version=TRUE;$major.$minor=TRUE;0.1=TRUE;0.1...<$major.$((minor + 1))=TRUE"
probes="$probes;$major.$((minor + 1))=FALSE;$((major + 1)).0=FALSE"
cmake -S "$here/versions" -B "$work/versions" -DPROBES="$probes" >"$work/versions.log" 2>&1 ||
	{ cat "$work/versions.log"; exit 1; }
grep -o 'find_package.*as expected' "$work/versions.log"
echo "ok: the CMake package and rdmalloc.pc build programs that run"
