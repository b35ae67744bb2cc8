#!/usr/bin/env bash
# The LD_PRELOAD drop-in exports exactly what it means to: the names of its
# version script (C names and, demangled, the C++ operators), the rdma_*
# functions the public header declares, and nothing else (no jemalloc, no
# rdmalloc_* internals).  They must be unversioned (objdump -T: "Base", no
# version definitions): ld.so binds a program's malloc@GLIBC_2.2.5 to an
# unversioned definition that comes first, never to another version name.
# Finally, at run time (LD_BIND_NOW, LD_DEBUG=bindings), every reference to
# an allocation function, from the program, libc and libstdc++, binds to the
# drop-in.
#   check-preload-symbols.sh LIB MAP HEADER [CXX_PROGRAM]
# Prints ok/FAIL per check and "N passed, M failed".
set -uo pipefail
lib=${1:?usage: check-preload-symbols.sh LIB MAP HEADER [CXX_PROGRAM]}
map=${2:?} header=${3:?} cxx=${4:-}
lib=$(readlink -f "$lib")
passed=0
failed=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rdmalloc-syms.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

# ---- the intended list ----
# Between "global:" and "local:", drop comments; quoted strings are C++
# names, the other words C names; rdma_* stands for the header's functions.
sed -e 's|/\*.*\*/||g' -e 's/extern[[:space:]]*"C++"//g' "$map" | sed -n '/global:/,/local:/p' | sed -e '1s/.*global://' -e '$s/local:.*//' >"$tmp/global"
grep -o '"[^"]*"' "$tmp/global" | tr -d '"' >"$tmp/want.cxx"
sed -e 's/"[^"]*"//g' -e 's/extern//g' -e 's/[{};]/ /g' "$tmp/global" | tr -s '[:blank:]' '\n' |
	grep -v -e '^$' -e '^rdma_\*$' >"$tmp/want.c"
grep -q '^[[:space:]]*rdma_\*;' "$tmp/global" &&
	grep -oE '\b(rdma_[a-z_]+)\(' "$header" | tr -d '(' >>"$tmp/want.c"
sort -u -o "$tmp/want.c" "$tmp/want.c"
sort -u "$tmp/want.c" "$tmp/want.cxx" >"$tmp/want"

# ---- what is exported (defined dynamic symbols), demangled ----
nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$tmp/mangled"
c++filt <"$tmp/mangled" | sort -u >"$tmp/have"

if diff -u "$tmp/want" "$tmp/have" >"$tmp/diff"; then
	ok "exports exactly the map's $(grep -vc '^rdma_' "$tmp/want.c") C names, the header's $(grep -c '^rdma_' "$tmp/want.c") rdma_* functions and $(wc -l <"$tmp/want.cxx") C++ operators, nothing else"
else
	fail "exported symbols differ from the intended list (- intended, + exported):"
	grep '^[-+][^-+]' "$tmp/diff" | sed 's/^/#   /'
fi
internals=$(grep -E '^(rdmalloc_|je_|rdmalloc_je_|_rjem|jemalloc|mallctl|mallocx|dallocx|sdallocx|rallocx|nallocx|xallocx|sallocx|pthread_|__cxa|_ZSt|_ZNSt)' "$tmp/mangled")
if [ -z "$internals" ]; then
	ok "no jemalloc, rdmalloc_* or C++ runtime internals exported"
else
	fail "internals exported: $(printf '%s' "$internals" | tr '\n' ' ')"
fi
# Every C++ name of the map must exist mangled, too (a typo in the map is
# silently ignored by the linker).
missing=$(comm -23 <(sort -u "$tmp/want.cxx") "$tmp/have")
if [ -z "$missing" ]; then
	ok "all $(wc -l <"$tmp/want.cxx") operator new/delete of the map are defined"
else
	fail "$(printf '%s\n' "$missing" | wc -l) operators of the map are not defined:"
	printf '%s\n' "$missing" | sed 's/^/#   /'
fi

# ---- unversioned ----
objdump -T "$lib" | awk '$0 ~ /^[0-9a-f]+ / && $0 !~ /\*UND\*/' >"$tmp/objdump"
versioned=$(awk '{v = $(NF - 1); if (v != "Base") print $NF " (" v ")"}' "$tmp/objdump")
n=$(wc -l <"$tmp/objdump")
if [ "$n" -gt 0 ] && [ -z "$versioned" ]; then
	ok "all $n defined dynamic symbols are unversioned (objdump -T: Base)"
else
	fail "versioned or unreadable definitions ($n read): $(printf '%s ' "$versioned" | tr '\n' ' ' | head -c 400)"
fi
if objdump -p "$lib" | grep -q '^Version definitions:'; then
	fail "the library defines symbol versions (objdump -p: Version definitions)"
	objdump -p "$lib" | sed -n '/^Version definitions:/,/^$/p' | sed 's/^/#   /'
else
	ok "no version definitions (only version references)"
fi

# ---- run time: who binds to whom ----
# bound PROGRAM ARGS...: LD_DEBUG=bindings of every symbol, now.
bound() {
	LD_PRELOAD=$lib LD_BIND_NOW=1 LD_DEBUG=bindings RDMALLOC_LOG_LEVEL=none "$@" 2>&1 >/dev/null |
		sed -n "s/.*binding file \([^ ]*\) \[[0-9]*\] to \([^ ]*\) \[[0-9]*\]: normal symbol \`\([^']*\)'\(.*\)/\1 \2 \3\4/p"
}
alloc_names='malloc|free|calloc|realloc|reallocarray|cfree|aligned_alloc|posix_memalign|memalign|valloc|pvalloc|malloc_usable_size|__libc_[a-z]+|_Zn[wa]m[^ ]*|_Zd[la]Pv[^ ]*'
check_bindings() { # NAME PROGRAM ARGS...: must show MUST (regex) bound to the drop-in
	local name=$1 must=$2
	shift 2
	bound "$@" | awk -v n="^($alloc_names)\$" '$3 ~ n' >"$tmp/bind"
	local elsewhere
	elsewhere=$(awk -v lib="$lib" '$2 != lib' "$tmp/bind" | sort -u | head -n 5)
	if [ -z "$elsewhere" ] && grep -qE "$must" "$tmp/bind"; then
		ok "$name: $(wc -l <"$tmp/bind") references to allocation functions all bind to the drop-in, e.g. $(grep -E "$must" "$tmp/bind" | head -n 1 | awk '{print $1 " -> " $3 " " $4}')"
	else
		fail "$name: not every reference binds to the drop-in (or none of $must seen)"
		printf '%s\n' "$elsewhere" | sed 's/^/#   /'
	fi
}
check_bindings "ls" " malloc \[GLIBC_2\.2\.5\]" ls /
if [ -n "$cxx" ]; then
	check_bindings "C++ program" " _Znwm \[GLIBCXX_3\.4\]" "$cxx" 1 1
fi

echo "$passed passed, $failed failed"
((failed == 0))
