#!/bin/sh
# The rdmalloc command as a user meets it (rdmalloc(1)): bad arguments are
# refused with one line and a non-zero exit before any program starts,
# every subcommand has --help, a missing program is reported as env(1)
# does, --version and `info` say what the library is and would do.
#   check-command.sh RDMALLOC PRELOAD_LIB INFO VERSION
set -u
cmd=$1 version=$4
export RDMALLOC_PRELOAD_LIB=$2 RDMALLOC_INFO=$3
passed=0 failed=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# expect NAME STATUS GREP-PATTERN ARGS...: status, and a line of the output
# (stdout and stderr) matching the pattern (when it is not empty).
expect() {
	name=$1 want=$2 pat=$3
	shift 3
	"$cmd" "$@" >"$out" 2>&1
	rc=$?
	if [ "$rc" = "$want" ] && { [ -z "$pat" ] || grep -q -e "$pat" "$out"; }; then
		echo "ok $name"
		passed=$((passed + 1))
	else
		echo "FAIL $name: exit $rc (want $want), output:"
		sed 's/^/#   /' "$out" | head -20
		failed=$((failed + 1))
	fi
}
lines() { "$cmd" "$@" 2>&1 | wc -l; }
# verdict NAME GOT WANT [DETAIL]: ok when GOT is WANT.
verdict() {
	if [ "$2" = "$3" ]; then
		echo "ok $1${4:+ ($4)}"
		passed=$((passed + 1))
	else
		echo "FAIL $1: got $2, want $3${4:+ ($4)}"
		failed=$((failed + 1))
	fi
}

expect "unknown command: one line, exit 2" 2 "^rdmalloc: unknown command 'frobnicate'" frobnicate
[ "$(lines frobnicate)" = 1 ] && passed=$((passed + 1)) || { echo "FAIL unknown command: not one line"; failed=$((failed + 1)); }
expect "run --device with no value" 2 "option --device needs a value" run --device
expect "run: unknown option" 2 "unknown option '--frob'" run --frob -- true
expect "run: no program" 2 "no PROGRAM given" run --stats
# The value is judged by the library's own parser, before the program runs:
# the marker file must not appear.
expect "run --access=junk is refused before the program" 2 "invalid value 'junk' for RDMALLOC_PRELOAD_ACCESS" \
	run --access=junk -- sh -c "touch $out.ran"
[ ! -e "$out.ran" ] && passed=$((passed + 1)) || { echo "FAIL the program ran despite --access=junk"; failed=$((failed + 1)); rm -f "$out.ran"; }
expect "run --access LOCAL_WRITE,REMOTE_READ is taken" 0 "^LOCAL_WRITE,REMOTE_READ$" \
	run --access LOCAL_WRITE,REMOTE_READ -- sh -c 'echo $RDMALLOC_PRELOAD_ACCESS'
expect "run: missing program, as env(1): 127" 127 "'/nonexistent': No such file or directory" run -- /nonexistent
expect "run: program not in PATH: 127" 127 "'rdmalloc-no-such-program': No such file or directory" run rdmalloc-no-such-program
expect "run: a directory: 126" 126 "'/': Is a directory" run -- /
expect "run: exit status passes through" 3 "" run -- sh -c 'exit 3'
expect "run: the drop-in is loaded" 0 "librdmalloc-preload.so" run -- sh -c 'cat /proc/$$/maps'
# --quiet: the job is told of both warnings about the machine's devices
# (none found; one passed over for the default PD), after what it was told.
export RDMALLOC_JOB_NOTED=x
expect "run --quiet: no device warnings in the job" 0 "^x,no-device,device-passed-over$" \
	run --quiet -- sh -c 'echo $RDMALLOC_JOB_NOTED'
unset RDMALLOC_JOB_NOTED
# The loader ignores LD_PRELOAD for a program run in secure-execution mode
# (ld.so(8)): `run` says so, and only for the programs the loader does run
# without the drop-in.  Copies of cat, as root: set-user-ID to nobody and
# set-group-ID to nobody's group (warned); set-group-ID without group
# execute, a plain copy, a set-user-ID script (the kernel ignores those
# bits) and one given a file capability (root has them all already); as
# nobody, that one and a symlink to it (warned).  The truth is what the
# program maps when run under LD_PRELOAD itself; where the set-user-ID copy
# maps the drop-in all the same (a nosuid /tmp, no_new_privs), this
# machine cannot show it.
if [ "$(id -u)" = 0 ] && d=$(mktemp -d); then
	chmod 755 "$d"
	ng=$(id -g nobody)
	cp "$cmd" "$d/rdmalloc" && cp "$RDMALLOC_PRELOAD_LIB" "$d/librdmalloc-preload.so"
	cp /bin/cat "$d/suid" && chown nobody "$d/suid" && chmod 4755 "$d/suid"
	cp /bin/cat "$d/sgid" && chgrp "$ng" "$d/sgid" && chmod 2755 "$d/sgid"
	cp /bin/cat "$d/sgid-nox" && chgrp "$ng" "$d/sgid-nox" && chmod 2705 "$d/sgid-nox"
	cp /bin/cat "$d/plain"
	printf '#!/bin/sh\ncat /proc/self/maps\n' >"$d/script" && chown nobody "$d/script" && chmod 4755 "$d/script"
	cases="root:suid:set-user-ID root:sgid:set-group-ID root:sgid-nox:any root:plain:any root:script:any"
	command -v setcap >/dev/null && cp /bin/cat "$d/caps" && setcap cap_net_raw+ep "$d/caps" &&
		ln -s caps "$d/capslink" &&
		cases="$cases root:caps:any nobody:caps:given.file.capabilities nobody:capslink:given.file.capabilities"
	as() { if [ "$who" = root ]; then env "$@"; else setpriv --reuid=nobody --regid="$ng" --clear-groups env "$@"; fi; }
	mapped() { as LD_PRELOAD="$d/librdmalloc-preload.so" "$d/$1" /proc/self/maps 2>/dev/null | grep -c librdmalloc-preload; }
	who=root
	if [ "$(mapped suid)" != 0 ]; then
		echo "skip run: secure-execution warning (set-user-ID programs do not run in secure-execution mode here)"
		cases=
	fi
	for c in $cases; do
		who=${c%%:*} p=${c#*:} what=${c##*:}
		p=${p%%:*}
		[ "$what" = any ] && what='.*' # want none: no warning of any kind
		loaded=$(mapped "$p")
		warned=$(as RDMALLOC_PRELOAD_LIB="$d/librdmalloc-preload.so" "$d/rdmalloc" run -- "$d/$p" /proc/self/maps 2>&1 >/dev/null |
			grep -c "'$d/$p' is $what: the loader runs it")
		verdict "run: secure-execution warnings, $p as $who" "$warned" "$([ "$loaded" = 0 ] && echo 1 || echo 0)" \
			"drop-in mapped: $loaded"
	done
	# What it starts gets no LD_PRELOAD from it: the loader took it out.
	if [ -n "$cases" ]; then
		cp /usr/bin/env "$d/suidenv" && chown nobody "$d/suidenv" && chmod 4755 "$d/suidenv"
		cp /usr/bin/env "$d/plainenv"
		n=$(RDMALLOC_PRELOAD_LIB="$d/librdmalloc-preload.so" "$d/rdmalloc" run -- "$d/suidenv" 2>/dev/null | grep -c '^LD_PRELOAD=')
		m=$(RDMALLOC_PRELOAD_LIB="$d/librdmalloc-preload.so" "$d/rdmalloc" run -- "$d/plainenv" 2>/dev/null | grep -c '^LD_PRELOAD=')
		verdict "run: LD_PRELOAD lines a set-user-ID env and a plain one pass on" "$n $m" "0 1"
	fi
	rm -rf "$d"
else
	echo "skip run: secure-execution warning (making a set-user-ID program of another user needs root)"
fi
for sub in run info; do
	expect "$sub --help" 0 "^Usage: rdmalloc $sub" $sub --help
done
expect "--help" 0 "^Usage: rdmalloc run" --help
expect "--version" 0 "^rdmalloc $version\$" --version
expect "info: unknown argument" 2 "unknown argument '--bogus'" info --bogus

# info: every option of the table with its source; a misspelled name with
# the nearest one; devices, memlock, address space; JSON that parses.
RDMALLOC_STAT=1 RDMALLOC_DECAY_MS=junk RDMALLOC_BIG_BLOCK=128K "$cmd" info >"$out" 2>&1
for want in "version: $version" "RDMALLOC_BIG_BLOCK  *128K  *environment (default 64K)" \
	"RDMALLOC_DECAY_MS  *10000  *default, the environment's is not valid: \"junk\"" \
	"RDMALLOC_LOG_LEVEL  *warn  *default" "RDMALLOC_STAT  *did you mean RDMALLOC_STATS?" \
	"^devices:" "^memlock:" "^address_space:" "dropin:" "preload: .*librdmalloc-preload.so"; do
	if grep -q -e "$want" "$out"; then passed=$((passed + 1)); else
		echo "FAIL info: no line matching '$want'"; sed 's/^/#   /' "$out"; failed=$((failed + 1))
	fi
done
n=$(grep -c '^  RDMALLOC_' "$out")
[ "$n" -ge 15 ] && passed=$((passed + 1)) || { echo "FAIL info lists $n options"; failed=$((failed + 1)); }
if RDMALLOC_BIG_BLOCK=128K "$cmd" info --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
o = {x["name"]: x for x in d["options"]}
assert o["RDMALLOC_BIG_BLOCK"]["value"] == "128K" and o["RDMALLOC_BIG_BLOCK"]["source"] == "environment"
assert o["RDMALLOC_BIG_BLOCK"]["default"] == "64K"
assert "devices" in d and "memlock" in d and d["address_space"]["plain"]["vmsize"] > 0
assert d["library"]["version"] == sys.argv[1]
' "$version"; then
	echo "ok info --json parses and carries the options"
	passed=$((passed + 1))
else
	echo "FAIL info --json"
	failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
