#!/bin/sh
# Fails when rdmalloc's code calls a libc function that takes the message
# catalogue's lock or the locale's (strerror, gettext, setlocale...).  The
# library runs inside malloc, and programs call malloc holding those locks
# (bindtextdomain and textdomain hold the catalogue's for writing): a read
# lock taken there corrupts it, and the program later hangs (log.h's
# rdmalloc_strerror; tests/preload/libc_locks.c shows it).
#   check-imports.sh SRCDIR FILE...
# FILE: a shared library (its dynamic imports: ours and the jemalloc linked
# into it, whose buferror calls strerror_r when a munmap of its own fails,
# as in plain jemalloc), with its own objects beside it (FILE.p/*.o, as
# meson builds them); or an archive of ours (each member).  Our objects may
# not call strerror_r either, nor dlerror (it translates) but where it
# runs outside every malloc: sys/verbs.c (rdmalloc_init: the drop-in's
# constructor, a first API call or key lookup) and preload/elide.c (a
# missing libibverbs symbol, before the fatal message); nor open, close or
# flush a FILE (fopen and fclose take stdio's list lock, which fflush(NULL)
# holds while it waits for a FILE's lock, whose holder may be in malloc)
# but in api/stats_exit.c (at exit) and api/stats_print.c (the program's
# call); the list lock is taken by sys/stdio_fork.c only, in fork's
# prepare (stdio_fork.h says why).  And no format string of SRCDIR's src/
# and preload/ may hold %m (strerror inside printf).
set -eu
bad='strerror|strerror_l|strsignal|perror|psignal|gettext|dgettext|dcgettext|ngettext|dngettext|dcngettext|__dcgettext|textdomain|bindtextdomain|setlocale|newlocale|uselocale|nl_langinfo|localeconv|err|errx|verr|verrx|warn|warnx|vwarn|vwarnx|error|error_at_line|syslog|vsyslog'
stdio='fopen|fopen64|fdopen|fopencookie|fclose|freopen|freopen64|popen|pclose|tmpfile|tmpfile64|open_memstream|open_wmemstream|fmemopen|fcloseall|fflush|fflush_unlocked|_IO_list_lock'
ours="$bad|strerror_r|__xpg_strerror_r"
src=$1
shift
rc=0

# $1: what is checked; $2: undefined symbols, one "name" per line; $3: the
# names forbidden there.
judge() {
	found=$(printf '%s\n' "$2" | sed 's/@.*//' | grep -Ex "$3" | sort -u || true)
	if [ -n "$found" ]; then
		echo "FAIL: $1 imports what takes libc's catalogue, locale or stdio list lock: $(echo $found)"
		rc=1
	fi
}

# $1: an object or archive; every object in it, judged by its own name.
objects() {
	listing=$(nm -A --undefined-only "$1") || { echo "FAIL: nm cannot read $1"; exit 1; }
	if [ -z "$listing" ]; then # calls nothing: nothing to judge
		n=$((n + 1))
		return
	fi
	objs=$(printf '%s\n' "$listing" | awk -F: '{print $(NF-1)}' | sort -u)
	while IFS= read -r obj; do
		names=$(printf '%s\n' "$listing" | awk -F: -v o="$obj" '$(NF-1) == o {print $NF}' | awk '{print $NF}')
		name=$(basename "$obj")
		case $name in
		sys_verbs.c.o | elide.c.o) judge "$name" "$names" "$ours|$stdio" ;;
		sys_stdio_fork.c.o) judge "$name" "$names" "$ours|dlerror|$(echo "$stdio" | sed 's/|_IO_list_lock//')" ;;
		api_stats_exit.c.o | api_stats_print.c.o) judge "$name" "$names" "$ours|dlerror" ;;
		*) judge "$name" "$names" "$ours|dlerror|$stdio" ;;
		esac
		n=$((n + 1))
	done <<EOF
$objs
EOF
}

for f in "$@"; do
	n=0
	case $f in
	*.a)
		objects "$f"
		[ $n -gt 0 ] || { echo "FAIL: no object in $f"; exit 1; }
		echo "checked $(basename "$f"): $n objects of ours"
		;;
	*)
		imports=$(nm -D --undefined-only "$f") || { echo "FAIL: nm cannot read $f"; exit 1; }
		judge "$(basename "$f")" "$(printf '%s\n' "$imports" | awk '{print $2}')" "$bad"
		[ -d "$f.p" ] || { echo "FAIL: no $f.p beside $f: its own objects are unchecked"; exit 1; }
		for o in "$f".p/*.o; do
			objects "$o"
		done
		[ $n -gt 0 ] || { echo "FAIL: no object in $f.p"; exit 1; }
		echo "checked $(basename "$f"): its imports and $n objects of its own"
		;;
	esac
done

# printf's %m is strerror, inside the library's own formatting.
for d in "$src/src" "$src/preload"; do
	[ -d "$d" ] || { echo "FAIL: no $d"; exit 1; }
done
m=$(grep -rnE --include='*.c' --include='*.h' --include='*.cc' '"([^"\\]|\\.)*%m' "$src/src" "$src/preload" || true)
if [ -n "$m" ]; then
	echo "FAIL: a format with %m (strerror inside printf):"
	echo "$m"
	rc=1
fi
[ $rc -eq 0 ] && echo "ok: no object of ours calls what takes libc's catalogue, locale or stdio list lock where malloc runs; jemalloc's strerror_r only"
exit $rc
