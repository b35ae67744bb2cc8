#!/usr/bin/env bash
# Real programs under the drop-in as a user without CAP_IPC_LOCK whose
# RLIMIT_MEMLOCK is Debian's default (8 MiB) and a container's (64 KiB),
# with a device (the Soft-RoCE guest; issue 22): each must run as it runs
# without the drop-in, since a refused registration fails a lookup, never a
# malloc.  Twice per limit: by default (RDMA on first need: these programs
# never open the device, so nothing is pinned), and with
# RDMALLOC_PRELOAD_REGISTER=eager, where the device is opened at start and
# every chunk's registration is tried: the stats must show the device
# open and, at 64 KiB, where no program fits, chunks the limit left
# unregistered (at 8 MiB the small programs fit whole).  On main e6168cb python3 died with MemoryError at 8 MiB and could
# not start at 64 KiB.  Run as root (it drops to nobody).
# Each workload runs once without the drop-in (a plain run pins nothing:
# the limit and the mode do not change it), and git, whose 90 processes
# take minutes in the guest, only in the hardest pass (64 KiB, eager).
#   memlock-user.sh BUILD_DIR
set -uo pipefail
build=$(readlink -f "${1:?usage: memlock-user.sh BUILD_DIR}")
here=$(dirname "$(readlink -f "$0")")
((EUID == 0)) || { echo "SKIP: must start as root to drop to nobody"; exit 77; }
command -v setpriv >/dev/null || { echo "SKIP: no setpriv (util-linux)"; exit 77; }
# The guest has no udev: let the user open the device, as Debian's rules do.
chmod a+rw /dev/infiniband/uverbs* /dev/infiniband/rdma_cm 2>/dev/null
# Copies the user can read wherever the clone lives (/root is 0700).
copy=$(mktemp -d /tmp/rdmalloc-memlock.XXXXXX)
trap 'rm -rf "$copy"' EXIT
cp "$here/real-programs.sh" "$build/preload/librdmalloc-preload.so" "$build/tests/preload/mt_cxx" "$copy/"
mkdir "$copy/refs"
chmod -R a+rX "$copy"
chmod a+rwx "$copy/refs"
rc=0
for kib in 8192 64; do
	for mode in first-use eager; do
		echo "-- RLIMIT_MEMLOCK ${kib} KiB, user nobody, RDMALLOC_PRELOAD_REGISTER=$mode"
		unreg=0 dev=0
		[ "$mode" = eager ] && dev=1
		[ "$mode" = eager ] && [ "$kib" = 64 ] && unreg=1
		only="python3 python3-PYTHONMALLOC=malloc python3-300MB sqlite3 gcc mt_cxx"
		[ "$unreg" = 1 ] && only="$only git"
		# Lowered as root, then kept across the drop (the user cannot raise it).
		bash -c 'ulimit -l "$1" && exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
			env HOME=/tmp REAL_PROGRAMS_BIG=1 REAL_PROGRAMS_UNREGISTERED=$3 REAL_PROGRAMS_DEVICE=$5 \
			REAL_PROGRAMS_REFS="$2/refs" REAL_PROGRAMS_ONLY="$6" \
			RDMALLOC_PRELOAD_REGISTER=$4 "$2/real-programs.sh" "$2/librdmalloc-preload.so" "$2/mt_cxx"' \
			_ "$kib" "$copy" "$unreg" "$mode" "$dev" "$only" || rc=1
	done
done
exit $rc
