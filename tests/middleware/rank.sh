#!/usr/bin/env bash
# One MPI rank as a process of its own guest host (tests/middleware/run.sh):
# rank R on host R+1, with that host's device for UCX and the drop-in, its
# stderr (the drop-in's stats line) in LOG.rankR.err.
#   rank.sh MODE LOG PROGRAM [ARGS...]
mode=$1 log=$2
shift 2
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-}}
[[ $r == [01] ]] || { echo "rank.sh: no rank 0 or 1 in the environment (got '$r')" >&2; exit 2; }
exec 2>"$log.rank$r.err"
on_host $((r + 1)) "$mode" "$@"
