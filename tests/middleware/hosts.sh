# shellcheck shell=bash
# Sourced by tests/middleware/run.sh and bench/engines.sh: processes on the
# Soft-RoCE guest's two hosts (tools/rdmalloc-vm --hosts 2: host N is rxeN
# at 10.77.0.N), plain or under the drop-in, and their stats.
# The sourcing script sets RDMALLOC_PRELOAD_LIB and rdmalloc (the command).

REMOTE=LOCAL_WRITE,REMOTE_WRITE,REMOTE_READ,REMOTE_ATOMIC
# What the engines need on rxe: UCX's RC and UD transports over verbs (its
# UD checks of Ethernet GIDs fail on rxe); MPICH would otherwise move data
# between ranks of one machine through shared memory, not the NIC;
# libfabric's rxm sizes a CQ from the universe size, beyond rxe's limit.
export UCX_TLS=rc_verbs,ud_verbs,self UCX_UD_ETH_DGID_CHECK=n
export MPIR_CVAR_NOLOCAL=1 FI_UNIVERSE_SIZE=16
export OMPI_MCA_btl=^openib OMPI_MCA_pml=ucx OMPI_MCA_osc=ucx

# on_host N MODE CMD...: exec CMD as a process of host N, in MODE: plain;
# dropin (rdmalloc run, default LOCAL_WRITE heap); remote (the heap
# registered with remote access: the engine's registrations are elided);
# giveback (remote, and idle chunks given back at once); local-giveback
# (dropin, idle chunks given back at once: under registrations of the
# engine's own, which its memory hooks must see go).  Under the
# drop-in its stats come as one JSON line on stderr at exit.
on_host() {
	local n=$1 mode=$2
	shift 2
	local w=()
	case $mode in
	plain) ;;
	dropin) w=("$rdmalloc" run --json --device "rxe$n" --) ;;
	remote) w=("$rdmalloc" run --json --device "rxe$n" --access "$REMOTE" --) ;;
	giveback) w=(env RDMALLOC_DECAY_MS=0 "$rdmalloc" run --json --device "rxe$n" --access "$REMOTE" --) ;;
	local-giveback) w=(env RDMALLOC_DECAY_MS=0 "$rdmalloc" run --json --device "rxe$n" --) ;;
	*) echo "on_host: unknown mode $mode" >&2; return 2 ;;
	esac
	UCX_NET_DEVICES=rxe$n:1 exec "${w[@]}" "$@"
}
export -f on_host
export rdmalloc REMOTE

# field_of FILE FIELD: the field of the last JSON stats line in FILE, or -1.
field_of() {
	grep -o '{"version": .*' "$1" | tail -n 1 | grep -o "\"$2\": [0-9]*" | awk '{print $2}' | grep . || echo -1
}
