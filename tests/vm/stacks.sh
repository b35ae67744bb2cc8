#!/usr/bin/env bash
# What each process is doing, for a guest step that outlived its time: its
# command, each thread's state and kernel wait channel, and with gdb (which
# tools/setup-deps installs) each thread's stack.  Run as root.
#   stacks.sh PID...
for p in "$@"; do
	[ -d "/proc/$p" ] || continue
	echo "-- pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
	for t in /proc/"$p"/task/*; do
		echo "   thread ${t##*/}: $(awk '/^State/ {print $2, $3}' "$t/status" 2>/dev/null)" \
			"in $(cat "$t/wchan" 2>/dev/null)"
	done
	if command -v gdb >/dev/null; then
		timeout 60 gdb -q -batch -p "$p" -ex 'thread apply all bt 30' 2>/dev/null | grep -E '^(#|Thread)'
	fi
done
