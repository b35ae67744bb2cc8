#!/bin/sh
# Fails when a library imports a libc function that takes the message
# catalogue's lock or the locale's (strerror, gettext, setlocale...).  The
# library runs inside malloc, and programs call malloc holding those locks
# (bindtextdomain and textdomain hold the catalogue's for writing): a read
# lock taken there corrupts it, and the program later hangs (log.h's
# rdmalloc_strerror; tests/preload/libc_locks.c shows it).  strerror_r is
# jemalloc's own (its buferror, when a munmap of its own fails), as in
# plain jemalloc.
#   check-imports.sh LIB...
set -eu
bad='strerror|strerror_l|strsignal|perror|psignal|gettext|dgettext|dcgettext|ngettext|dngettext|dcngettext|__dcgettext|textdomain|bindtextdomain|setlocale|newlocale|uselocale|nl_langinfo|localeconv|err|errx|verr|verrx|warn|warnx|vwarn|vwarnx|error|error_at_line|syslog|vsyslog'
rc=0
for lib in "$@"; do
	imports=$(nm -D --undefined-only "$lib") || { echo "FAIL: nm cannot read $lib"; exit 1; }
	found=$(printf '%s\n' "$imports" | awk '{print $2}' | sed 's/@.*//' | grep -Ex "$bad" || true)
	if [ -n "$found" ]; then
		echo "FAIL: $(basename "$lib") imports what takes libc's catalogue or locale lock: $(echo $found)"
		rc=1
	else
		echo "ok: $(basename "$lib") imports none of libc's catalogue or locale functions"
	fi
done
exit $rc
