#!/bin/sh
# The documentation says what the tree has (issue 24): the man pages, README
# and doc/ had drifted from the code (a function with no page, a page that
# did not install, a path that had moved).  Checked mechanically:
#  (a) every function of src/librdmalloc.map has a man page, its own or a
#      one-line alias (.so man3/PAGE.3), and the page that documents it names
#      it in NAME, gives its prototype in SYNOPSIS and describes it (a bold
#      "fn ()" outside SYNOPSIS), so that "man fn" finds its contract;
#  (b) every page of doc/man is named in doc/meson.build (which installs
#      them; tests/check-install.sh checks that they do);
#  (c) every option of src/sys/options.h's RDMALLOC_OPTIONS table has an
#      entry in rdmalloc(7) and a row in doc/options.md that give the table's
#      default, and neither documents an option the table does not have;
#  (d) no doc names a path of the repository that does not exist, and the
#      man pages name docs where they are installed (@DOCDIR@/NAME);
#  (e) rdma_malloc_stats_get(3) describes every stats field of the header.
#   check-docs.sh SOURCE_ROOT
# Prints one FAIL line per mismatch, naming the file, then a summary.
set -u
src=$1
man=$src/doc/man
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# (a) ------------------------------------------------------------------
funcs=$(sed -n 's/^[[:space:]]*\(rdma_[a-z0-9_]*\);.*/\1/p' "$src/src/librdmalloc.map")
[ "$(echo "$funcs" | wc -w)" -gt 20 ] || fail "src/librdmalloc.map: too few functions found (parse)"
# documents PAGE FN: what PAGE lacks to document FN (empty: nothing).
documents() {
	awk -v fn="$2" '
	/^\.SH/ { sec = $2; next }
	sec == "NAME" && $0 ~ ("(^|[ ,])" fn "([ ,]|$)") { name = 1 }
	sec == "SYNOPSIS" && /^\.B/ && $0 ~ ("(^|[^a-z0-9_])" fn "\\(") { syn = 1 }
	sec != "NAME" && sec != "SYNOPSIS" && $0 ~ ("^\\.BR? " fn "( |$)") { desc = 1 }
	END {
		if (!name) printf " not in NAME;"
		if (!syn) printf " no prototype in SYNOPSIS;"
		if (!desc) printf " not described (no \".BR " fn " ()\" outside SYNOPSIS);"
	}' "$1"
}
for f in $funcs; do
	page=doc/man/$f.3
	if [ ! -f "$src/$page" ]; then
		fail "$page: missing: no page or alias for $f (src/librdmalloc.map)"
		continue
	fi
	# An alias is one line (comments aside), as in Linux man-pages.
	target=$(sed -n 's|^\.so man3/\(.*\)$|\1|p' "$src/$page")
	if [ -n "$target" ]; then
		[ "$(grep -cv '^\.\\"' "$src/$page")" = 1 ] || fail "$page: an alias page holds the .so line only"
		[ -f "$man/$target" ] || { fail "$page: .so target doc/man/$target does not exist"; continue; }
		page=doc/man/$target
	fi
	lacks=$(documents "$src/$page" "$f")
	[ -z "$lacks" ] || fail "$page: does not document $f:$lacks"
done
for p in "$man"/*; do # an alias of no function of the map must resolve too
	n=${p##*/}
	case " $(echo $funcs) " in *" ${n%.3} "*) continue ;; esac
	target=$(sed -n 's|^\.so man3/\(.*\)$|\1|p' "$p")
	[ -z "$target" ] || [ -f "$man/$target" ] || fail "doc/man/${p##*/}: .so target doc/man/$target does not exist"
done

# (b) ------------------------------------------------------------------
# Each named in doc/meson.build ('NAME' or 'DIR/NAME'): the man pages in
# man_pages, the docs they point at in install_data.
for p in "$man"/*; do
	n=${p##*/}
	grep -qF -e "'$n'" -e "/$n'" "$src/doc/meson.build" ||
		fail "doc/man/$n: not in doc/meson.build's man_pages: it does not install"
done
for p in "$src"/doc/*.md; do
	n=${p##*/}
	grep -qF -e "'$n'" -e "/$n'" "$src/doc/meson.build" ||
		fail "doc/$n: not in doc/meson.build's install_data: it does not install"
done

# (c) ------------------------------------------------------------------
# "NAME|default" per option of the table (the default may be empty).
opts=$(sed -n 's/^[[:space:]]*X(\([A-Z_]*\), [a-z_]*, [a-z_]*, "\([^"]*\)",.*/\1|\2/p' "$src/src/sys/options.h")
[ "$(echo "$opts" | wc -l)" -gt 10 ] || fail "src/sys/options.h: too few options found (parse)"
# rdmalloc(7): each option is ".TP" then ".B RDMALLOC_NAME" in ENVIRONMENT,
# whose text says "Default VALUE." or, for an empty default, "Default: empty".
# Prints "NAME|the word after Default" per entry (roff fonts removed).
man7=$(awk '
	/^\.SH/ { env = ($2 == "ENVIRONMENT"); if (name != "") out(); next }
	!env { next }
	/^\.(TP|PP|SS)/ { if (name != "") out(); tp = /^\.TP/; next }
	tp && /^\.B RDMALLOC_[A-Z_]+$/ { name = substr($2, 10); text = ""; tp = 0; next }
	{ tp = 0 }
	name != "" { line = $0; sub(/^\.[A-Z]+ ?/, "", line); gsub(/"/, "", line); text = text " " line }
	function out(  w, i, n) {
		n = split(text, w, " "); d = "(none)"
		for (i = 1; i < n; i++)
			if (w[i] == "Default" || w[i] == "Default:") { d = w[i + 1]; sub(/[.,;:]$/, "", d); break }
		print name "|" d; name = ""
	}' "$man/rdmalloc.7")
# doc/options.md: "| `RDMALLOC_NAME` | `default` or empty | ...".
md=$(awk -F'|' '$2 ~ /^ *`RDMALLOC_[A-Z_]+` *$/ {
	n = $2; d = $3; gsub(/[ `]/, "", n); sub(/^ +/, "", d); sub(/ +$/, "", d)
	print substr(n, 10) "|" d }' "$src/doc/options.md")
for o in $opts; do
	name=${o%%|*} def=${o#*|}
	want7=empty wantmd=empty
	[ -z "$def" ] || want7=$def wantmd="\`$def\`"
	got=$(printf '%s\n' "$man7" | sed -n "s/^$name|//p")
	if [ -z "$got" ]; then fail "doc/man/rdmalloc.7: no ENVIRONMENT entry (.TP, .B RDMALLOC_$name)"
	elif [ "$got" != "$want7" ]; then fail "doc/man/rdmalloc.7: RDMALLOC_$name: default '$got', src/sys/options.h says '$want7'"; fi
	got=$(printf '%s\n' "$md" | sed -n "s/^$name|//p")
	if [ -z "$got" ]; then fail "doc/options.md: no table row for RDMALLOC_$name"
	elif [ "$got" != "$wantmd" ]; then fail "doc/options.md: RDMALLOC_$name: default '$got', src/sys/options.h says '$wantmd'"; fi
done
for o in $(printf '%s\n' "$man7" | cut -d'|' -f1); do
	printf '%s\n' "$opts" | grep -q "^$o|" || fail "doc/man/rdmalloc.7: documents RDMALLOC_$o, which src/sys/options.h has not"
done
for o in $(printf '%s\n' "$md" | cut -d'|' -f1); do
	printf '%s\n' "$opts" | grep -q "^$o|" || fail "doc/options.md: documents RDMALLOC_$o, which src/sys/options.h has not"
done

# (d) ------------------------------------------------------------------
# A path is a word that starts with one of the tree's top directories and a
# slash, not preceded by a path character (so /usr/share/doc/... and
# ../build/preload/ are not ones); {a,b} in it is expanded.  Skipped:
# "(then `old/path`)", which names where a file used to be
# (doc/reliability.md's bug list); roff's "\-" is a "-".  A man page names
# a doc as @DOCDIR@/NAME (doc/meson.build puts the installed directory
# there): a bare doc/NAME points a user of the installed library at a
# source tree they may not have.  A path with no extension may name the
# program built from its .c or .cc (bench/footprint).
# Paths named on purpose though absent from the tree, each with its reason:
exceptions='
tests/e2e/rdmalloc-e2e
bench/CMakeLists.txt
'
# tests/e2e/rdmalloc-e2e: the end-to-end program of the build tree, which
#   README's "one test by hand" runs from the build directory.
# bench/CMakeLists.txt: mimalloc-bench's (doc/benchmarks.md, "The run").
paths=$(cd "$src" && awk '
	function out(p,  a, n, i, pre, post) {
		sub(/\.+$/, "", p)
		if (match(p, /\{[^}]*\}/)) {
			pre = substr(p, 1, RSTART - 1); post = substr(p, RSTART + RLENGTH)
			n = split(substr(p, RSTART + 1, RLENGTH - 2), a, ",")
			for (i = 1; i <= n; i++) out(pre a[i] post)
		} else print FILENAME ":" FNR ":" p
	}
	{
		line = $0; gsub(/\\-/, "-", line); gsub(/\(then `[^`]*`\)/, "", line)
		rest = line
		while (match(rest, /@DOCDIR@\/[A-Za-z0-9_.-]+/)) {
			p = substr(rest, RSTART + 9, RLENGTH - 9); rest = substr(rest, RSTART + RLENGTH)
			out("doc/" p) # out() sets RSTART
		}
		while (match(line, /(^|[^A-Za-z0-9_.\/~$@-])(src|tests|tools|bench|doc|include|preload|examples)\/[A-Za-z0-9_.\/*+-]*(\{[A-Za-z0-9_,.-]*\}[A-Za-z0-9_.\/*+-]*)?/)) {
			p = substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
			sub(/^[^a-z]/, "", p); sub(/\.+$/, "", p)
			if (FILENAME ~ /^doc\/man\// && p ~ /^doc\//)
				print FILENAME ":" FNR ":bare:" p
			out(p)
		}
	}' README.md NEWS.md doc/*.md doc/man/*)
npaths=0
for l in $paths; do
	p=${l#*:*:}
	case "$p" in bare:*)
		fail "${l%%:bare:*}: names ${p#bare:}, which an installed library does not have: write @DOCDIR@/${p#bare:doc/}"
		continue ;;
	esac
	npaths=$((npaths + 1))
	case "$exceptions" in *"
$p
"*) continue ;; esac
	# shellcheck disable=SC2086 # a glob (tests/e2e/test_*.c) must expand
	set -- "$src"/$p
	[ -e "$1" ] || [ -e "$1.c" ] || [ -e "$1.cc" ] || fail "${l%:*}: names $p, which is not in the tree"
done
[ "$npaths" -gt 50 ] || fail "too few paths found in the docs (parse)"

# (e) ------------------------------------------------------------------
# rdma_malloc_stats_get(3) says it describes every field of the header's
# RDMA_MALLOC_STATS_FIELDS in its order (".TP", then ".BR name ..." naming
# one or more fields): it had lost 36 of them.
hdr=$(sed -n 's/^[[:space:]]*X(\([a-z_]*\), \(gauge\|counter\),.*/\1/p' "$src/include/rdma_malloc.h")
[ "$(echo "$hdr" | wc -l)" -gt 40 ] || fail "include/rdma_malloc.h: too few stats fields found (parse)"
pg=$(awk '/^\.TP/ { getline; if ($1 == ".BR") for (i = 2; i <= NF; i++) if ($i ~ /^[a-z_]+$/) print $i }' \
	"$man/rdma_malloc_stats_get.3")
if [ "$hdr" != "$pg" ]; then
	tmp=$(mktemp -d)
	printf '%s\n' "$hdr" >"$tmp/h"
	printf '%s\n' "$pg" >"$tmp/p"
	fail "doc/man/rdma_malloc_stats_get.3: its fields differ from include/rdma_malloc.h's (-missing, +extra or out of order):" \
		"$(diff "$tmp/h" "$tmp/p" | sed -n 's/^< /-/p; s/^> /+/p' | tr '\n' ' ')"
	rm -rf "$tmp"
fi

if [ "$fails" -gt 0 ]; then
	echo "$fails mismatches between the docs and the tree"
	exit 1
fi
echo "ok: $(echo "$funcs" | wc -w) functions with a page, $(ls "$man" | wc -l) pages to install, $(echo "$opts" | wc -l) options with their defaults, $npaths paths in the docs, all in the tree"
