#!/bin/sh
# RDMALLOC_STATS=json prints one JSON object at exit; =1 a text report;
# a bad value warns once, naming the variable, and prints nothing.
set -eu
exe=$1
out=$(RDMALLOC_STATS=json "$exe" 2>&1 >/dev/null)
printf '%s\n' "$out" | grep -q '^{"version": 1, "chunks": [0-9]*,.*"fallbacks": [0-9]*\(, .*\)\{0,1\}}$' ||
	{ echo "no JSON stats at exit:"; printf '%s\n' "$out"; exit 1; }
out=$(RDMALLOC_STATS=1 "$exe" 2>&1 >/dev/null)
printf '%s\n' "$out" | grep -q '^  registrations  *[0-9]*  ibv_reg_mr calls that succeeded$' ||
	{ echo "no text stats at exit:"; printf '%s\n' "$out"; exit 1; }
out=$(RDMALLOC_STATS=maybe RDMALLOC_LOG_LEVEL=warn "$exe" 2>&1 >/dev/null)
[ "$(printf '%s\n' "$out" | grep -c 'RDMALLOC_STATS="maybe" is not valid')" = 1 ] ||
	{ echo "bad RDMALLOC_STATS not warned once:"; printf '%s\n' "$out"; exit 1; }
if printf '%s\n' "$out" | grep -q '"version"\|registrations'; then
	echo "stats printed although RDMALLOC_STATS was invalid"; exit 1
fi
echo "ok: stats at exit (json, text), bad value warned"
