#!/bin/sh
# Every RDMALLOC_* name that rdmalloc's own commands, build and tests read
# from the environment is either an option or one of the names the library
# knows are not (RDMALLOC_OTHER_NAMES, src/sys/options.h): else a user who
# sets it as a command asks (rdmalloc run's "set RDMALLOC_INFO") is told by
# every program under the drop-in that it "is not an rdmalloc option and is
# ignored".  The names are found where they are read: shell expansions,
# printenv and Python's environ and getenv in the tracked scripts, getenv()
# with a literal name in the C of tests, tools, bench and examples, $ENV{}
# in CMake (src/ reads its options through the table).
#   check-names-read.sh SOURCE_ROOT PRELOAD_LIB
# Prints ok/FAIL per name and "N passed, M failed".
set -u
src=$1 lib=$2
passed=0 failed=0
cd "$src" || exit 2
# A checkout of another user's is still read (git refuses it otherwise).
git() { command git -c safe.directory='*' "$@"; }
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	[ -e .git ] && { echo "FAIL: git cannot read $src"; exit 1; }
	echo "SKIP: $src is not a git work tree (the names are found in its tracked files)"
	exit 77
fi
warned() { # NAME: the drop-in's words about NAME=1, if any
	env -u RDMALLOC_JOB_NOTED RDMALLOC_LOG_LEVEL=warn "$1=1" LD_PRELOAD="$lib" /bin/true 2>&1 |
		grep "$1 is not an rdmalloc option"
}
names=$(git ls-files | grep -v -e '^doc/' -e '^debian/' -e '\.\(md\|[137]\|csv\|svg\)$' | while read -r f; do
	case $f in
	tests/*.[ch] | tests/*.cc | tools/*.[ch] | bench/*.[ch] | examples/*.[ch]) grep -ho 'getenv("RDMALLOC_[A-Z][A-Z0-9_]*' "$f" ;;
	*.c | *.h | *.cc) ;;
	*CMakeLists.txt | *.cmake | *.cmake.in) grep -ho '\$ENV{RDMALLOC_[A-Z][A-Z0-9_]*' "$f" ;; # ${X} is CMake's own
	*) grep -ho -e '\${\{0,1\}RDMALLOC_[A-Z][A-Z0-9_]*' -e 'environ[^A-Z]*RDMALLOC_[A-Z][A-Z0-9_]*' \
		-e 'getenv[^A-Z]*RDMALLOC_[A-Z][A-Z0-9_]*' -e 'printenv  *RDMALLOC_[A-Z][A-Z0-9_]*' "$f" ;;
	esac
done | grep -o 'RDMALLOC_[A-Z0-9_]*' | sort -u)
# The search must find what it is known to read, and the probe must see a
# warning where there is one: else every name below would pass unseen.
for n in RDMALLOC_PRELOAD_LIB RDMALLOC_VM_HOSTS RDMALLOC_DEVICE; do
	case " $(echo $names) " in
	*" $n "*) ;;
	*) echo "FAIL the search did not find $n"; failed=$((failed + 1)) ;;
	esac
done
if [ -n "$(warned RDMALLOC_STAT)" ]; then passed=$((passed + 1)); else
	echo "FAIL RDMALLOC_STAT (no option) was not warned about: the probe sees nothing"
	failed=$((failed + 1))
fi
for n in $names; do
	said=$(warned "$n")
	if [ -z "$said" ]; then
		echo "ok $n"
		passed=$((passed + 1))
	else
		echo "FAIL $n is read by $(git grep -lw -e "$n" -- ':!doc' ':!*.md' | tr '\n' ' ')but the drop-in says: $said"
		failed=$((failed + 1))
	fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
