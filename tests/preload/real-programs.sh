#!/usr/bin/env bash
# Real programs under the LD_PRELOAD drop-in: each workload runs twice in a
# fresh directory, without and with librdmalloc-preload.so, and must exit 0
# both times with byte-identical standard output.  The run with the drop-in
# must also show (RDMALLOC_STATS=json on stderr) that rdmalloc served its
# mallocs, and print no rdmalloc error.
#   real-programs.sh PRELOAD_LIB MT_CXX_PROGRAM
# Workloads: python3 (dicts, lists, strings, a JSON round trip of a few MB;
# pymalloc and PYTHONMALLOC=malloc), sqlite3 (20000 inserts in a transaction,
# indexes, joins, updates, deletes, VACUUM, integrity_check), git (init, add,
# commit, branch, merge, log, gc, fsck, archive in a scratch repository with
# fixed identities and dates), gcc (compile, link, run a small program) and a
# multi-threaded C++ program of ours (mt_cxx).  A program that is not
# installed is SKIPPED, loudly, and not counted as passed.
# Prints ok/FAIL/SKIP per check and "N passed, M failed" last.
# REAL_PROGRAMS_BIG=1 adds a python3 that builds about 300 MB of objects;
# REAL_PROGRAMS_UNREGISTERED=1 requires the drop-in's stats to show chunks
# left unregistered by processes that had the device open (issue 22: runs
# under a pinning limit, as a user who must be able to open it, with
# RDMALLOC_PRELOAD_REGISTER=eager: by default these programs never use RDMA
# and never open the device); REAL_PROGRAMS_DEVICE=1 requires only the
# device open.
set -uo pipefail

lib=$(readlink -f "${1:?usage: real-programs.sh PRELOAD_LIB MT_CXX_PROGRAM}")
mt=$(readlink -f "${2:?usage: real-programs.sh PRELOAD_LIB MT_CXX_PROGRAM}")
[ -f "$lib" ] || { echo "no such library: $lib"; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/rdmalloc-real.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
skipped=0
skipped_names=()

# The same environment for both runs, but LD_PRELOAD.  Fixed locale, time
# zone, hash seed; git without user or system configuration.
export LC_ALL=C TZ=UTC PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_PAGER=cat PAGER=cat
export GIT_AUTHOR_NAME="A U Thor" GIT_AUTHOR_EMAIL=author@example.com
export GIT_COMMITTER_NAME="C O Mitter" GIT_COMMITTER_EMAIL=committer@example.com
export GIT_AUTHOR_DATE="2005-04-07T22:13:13Z" GIT_COMMITTER_DATE="2005-04-07T22:13:13Z"
export RDMALLOC_STATS=json RDMALLOC_LOG_LEVEL=error
unset LD_PRELOAD MALLOC_CONF

skip() {
	echo "SKIP $1: $2 -- NOT TESTED"
	skipped=$((skipped + 1))
	skipped_names+=("$1")
}

# check NAME PROGRAM CMD...: skip when PROGRAM is absent, else compare.
check() {
	local name=$1 prog=$2
	shift 2
	if [ -n "${REAL_PROGRAMS_ONLY:-}" ] && [[ " $REAL_PROGRAMS_ONLY " != *" $name "* ]]; then
		echo "# $name: not in this run (REAL_PROGRAMS_ONLY)"
		return
	fi
	if ! command -v "$prog" >/dev/null 2>&1; then
		skip "$name" "$prog is not installed"
		return
	fi
	local d=$work/$name t0=$SECONDS rc_ref ref=${REAL_PROGRAMS_REFS:+$REAL_PROGRAMS_REFS/$name}
	mkdir -p "$d/ref" "$d/pre"
	if [ -n "$ref" ] && [ -f "$ref.rc" ]; then
		cp "$ref.out" "$d/ref.out" && cp "$ref.err" "$d/ref.err" && rc_ref=$(<"$ref.rc")
	else
		(cd "$d/ref" || exit 125; "$@") >"$d/ref.out" 2>"$d/ref.err"
		rc_ref=$?
		[ -z "$ref" ] || { cp "$d/ref.out" "$ref.out" && cp "$d/ref.err" "$ref.err" && echo "$rc_ref" >"$ref.rc"; }
	fi
	(cd "$d/pre" || exit 125; export LD_PRELOAD=$lib; "$@") >"$d/pre.out" 2>"$d/pre.err"
	local rc_pre=$?
	local why=()
	((rc_ref == 0)) || why+=("the run without the drop-in failed (exit $rc_ref): the workload is broken")
	((rc_pre == rc_ref)) || why+=("exit $rc_pre under the drop-in, $rc_ref without")
	cmp -s "$d/ref.out" "$d/pre.out" || why+=("stdout differs")
	[ -s "$d/ref.out" ] || why+=("no output at all")
	# One JSON stats line per process that exited through exit(): the drop-in
	# was there and its heap has chunks.
	local procs chunks
	procs=$(grep -c '^{"version": ' "$d/pre.err")
	chunks=$(grep -o '"chunks": [0-9]*' "$d/pre.err" | awk '{s += $2} END {print s + 0}')
	((procs > 0 && chunks > 0)) || why+=("no sign of rdmalloc in the run with the drop-in")
	local unreg pds
	unreg=$(grep -o '"unregistered_chunks": [0-9]*' "$d/pre.err" | awk '{s += $2} END {print s + 0}')
	[ "${REAL_PROGRAMS_UNREGISTERED:-0}" = 0 ] || ((unreg > 0)) ||
		why+=("the stats show no chunk left unregistered")
	# ...by a process that had the device open (its default PD attached):
	# without one every chunk is unregistered and nothing was tried.
	pds=$(grep -o '"pds": [0-9]*' "$d/pre.err" | awk '$2 > m {m = $2} END {print m + 0}')
	[ "${REAL_PROGRAMS_UNREGISTERED:-0}${REAL_PROGRAMS_DEVICE:-0}" = 00 ] || ((pds > 0)) ||
		why+=("no process under the drop-in had the device open (pds 0)")
	! grep -q '^{"version": ' "$d/ref.err" || why+=("the reference run had rdmalloc loaded")
	if grep -q '^rdmalloc: ' "$d/pre.err"; then
		why+=("rdmalloc printed errors")
	fi
	local what
	what="$(wc -c <"$d/pre.out") bytes of stdout identical, $procs processes under rdmalloc, $((SECONDS - t0)) s"
	if [ ${#why[@]} -eq 0 ]; then
		echo "ok $name ($what)"
		passed=$((passed + 1))
	else
		echo "FAIL $name: $(IFS=';'; echo "${why[*]}")"
		failed=$((failed + 1))
		diff "$d/ref.out" "$d/pre.out" | head -n 10 | sed 's/^/#   diff: /'
		grep -v '^{"version": ' "$d/pre.err" | tail -n 10 | sed 's/^/#   stderr with the drop-in: /'
		tail -n 5 "$d/ref.err" | sed 's/^/#   stderr without: /'
	fi
}

# ---- python3 ----
cat >"$work/workload.py" <<'EOF'
import collections, hashlib, json, sys
d = {}
for i in range(40000):
    d["key%05d" % i] = [i, str(i) * (i % 7), {"half": i * 0.5, "pad": "x" * (i % 13), "neg": -i}]
items = sorted(d.items(), key=lambda kv: (len(kv[1][1]), kv[0]), reverse=True)
text = json.dumps(d, sort_keys=True)
back = json.loads(text)
assert back == d, "json round trip"
print("dict", len(d), "json", len(text), hashlib.sha256(text.encode()).hexdigest())
print("sorted head", [k for k, _ in items[:4]])
joined = "|".join(k for k, _ in items)
parts = joined.split("|")
print("joined", len(joined), len(parts), joined.count("key0"), joined[-30:])
buf = bytearray()
for i in range(3000):
    buf += (str(i) * 97).encode()
    if i % 500 == 0:
        del buf[: len(buf) // 3]
print("bytearray", len(buf), hashlib.md5(bytes(buf)).hexdigest())
lists = [list(range(i % 300)) for i in range(4000)]
print("lists", sum(map(len, lists)), sum(sum(l) for l in lists))
c = collections.Counter(w for w in text.split('"') if w.startswith("x"))
print("counter", sorted(c.items())[:3])
s = set(range(0, 300000, 3)) - set(range(0, 300000, 5))
print("set", len(s), sum(s) % 1000003)
print("upper", hashlib.sha1(text.upper().replace("KEY", "k").encode()).hexdigest())
EOF
# Debian's python3 when there is one (a pyenv shim in PATH is a shell script).
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
check python3 "$py" "$py" "$work/workload.py"
check python3-PYTHONMALLOC=malloc "$py" env PYTHONMALLOC=malloc "$py" "$work/workload.py"

if [ "${REAL_PROGRAMS_BIG:-0}" != 0 ]; then
	cat >"$work/big.py" <<'EOF'
import hashlib
rows = [(i, "v%09d" % i, [i] * 8) for i in range(700000)]
blobs = [bytes([i % 251]) * (1000 + i % 3000) for i in range(60000)]
h = hashlib.sha256()
for r in rows[::997]:
    h.update(repr(r).encode())
for b in blobs[::101]:
    h.update(b)
print("rows", len(rows), "blobs", len(blobs), sum(map(len, blobs)), h.hexdigest())
EOF
	check python3-300MB "$py" "$py" "$work/big.py"
fi

# ---- sqlite3 ----
{
	echo "PRAGMA journal_mode=WAL;"
	echo "CREATE TABLE people(id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, age INT, score REAL, bio TEXT);"
	echo "CREATE TABLE orders(id INTEGER PRIMARY KEY, person INT REFERENCES people(id), amount INT, note TEXT);"
	echo "BEGIN;"
	awk 'BEGIN {
		base = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor ";
		base = base base base;
		for (i = 1; i <= 20000; i++)
			printf "INSERT INTO people VALUES(%d, %cname-%05d%c, %ccity-%02d%c, %d, %d.%02d, %c%s%c);\n",
				i, 39, (i * 7919) % 20000, 39, 39, i % 23, 39, 18 + i % 60, i % 1000, i % 100,
				39, substr(base, 1 + i % 40, i % 180), 39;
	}'
	echo "COMMIT;"
	cat <<'EOF'
BEGIN;
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 30000)
INSERT INTO orders(person, amount, note) SELECT 1 + (x * 31) % 20000, (x * 17) % 1000, printf('order %d for %d', x, 1 + (x * 31) % 20000) FROM n;
COMMIT;
CREATE INDEX people_city ON people(city, age);
CREATE INDEX orders_person ON orders(person, amount);
CREATE UNIQUE INDEX people_name_id ON people(name, id);
SELECT count(*), sum(age), round(avg(score), 3), sum(length(bio)) FROM people;
SELECT city, count(*), max(age), min(name) FROM people GROUP BY city ORDER BY city LIMIT 8;
SELECT p.name, count(o.id), sum(o.amount) AS t FROM people p JOIN orders o ON o.person = p.id
  GROUP BY p.id ORDER BY t DESC, p.name LIMIT 5;
SELECT name, age FROM people WHERE city = 'city-03' AND age BETWEEN 30 AND 32 ORDER BY name LIMIT 5;
UPDATE people SET score = score * 1.5, bio = bio || ' (updated)' WHERE age % 3 = 0;
UPDATE orders SET note = upper(note) WHERE amount > 900;
DELETE FROM orders WHERE amount % 5 = 0;
DELETE FROM people WHERE id % 7 = 0 AND id NOT IN (SELECT person FROM orders);
SELECT count(*), round(sum(score), 2) FROM people;
SELECT count(*), sum(amount), max(note) FROM orders;
SELECT group_concat(name, ',') FROM (SELECT name FROM people WHERE city = 'city-11' ORDER BY age DESC, name LIMIT 6);
VACUUM;
PRAGMA integrity_check;
SELECT count(*) FROM people WHERE bio LIKE '%updated%';
EOF
} >"$work/workload.sql"
sqlite_run() {
	sqlite3 -batch test.db <"$1" || return
	# integrity_check must have said ok
	sqlite3 -batch test.db 'PRAGMA integrity_check;' | grep -qx ok
}
check sqlite3 sqlite3 sqlite_run "$work/workload.sql"

# ---- git ----
git_run() {
	set -e
	git init -q -b main .
	for i in $(seq 1 40); do
		seq "$i" 3 3000 >"file$i.txt"
	done
	mkdir -p src/deep/er
	printf 'int main(void) { return %d; }\n' 1 2 3 >src/deep/er/main.c
	git add -A
	git commit -q -m "first: 40 files"
	git checkout -q -b topic
	for i in $(seq 1 40 | awk 'NR % 3 == 0'); do
		sed -i 's/^1/one/' "file$i.txt"
	done
	git rm -q file2.txt
	git commit -q -am "topic: rewrite some ones"
	git checkout -q main
	echo "a line on main" >>file1.txt
	git commit -q -am "main: one line"
	git merge -q --no-edit topic
	git log --format='%H %an <%ae> %ad %s' --date=iso-strict --stat
	git show --stat HEAD~1
	git diff --stat HEAD~2 HEAD
	git gc -q
	git fsck --full --no-progress # (its stderr holds rdmalloc's stats)
	git rev-list --all --objects | sort
	git archive --format=tar HEAD | cksum
	git grep -c one -- 'file1*.txt'
	git blame -s file1.txt | awk 'NR > 995'
	git cat-file -p HEAD
}
check git git git_run

# ---- gcc ----
cat >"$work/prog.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void)
{
	enum { N = 5000 };
	char **v = malloc(N * sizeof(*v));
	for (int i = 0; i < N; i++) {
		v[i] = malloc(32);
		snprintf(v[i], 32, "w%07d", (i * 7919) % N);
	}
	qsort(v, N, sizeof(*v), cmp);
	unsigned long h = 5381;
	for (int i = 0; i < N; i++) {
		for (const char *c = v[i]; *c; c++)
			h = h * 33 + (unsigned char)*c;
		free(v[i]);
	}
	free(v);
	printf("sorted %d words, first w%07d, hash %lu\n", N, 0, h);
	return 0;
}
EOF
gcc_run() {
	gcc -O2 -Wall -Werror -c "$1" -o prog.o || return
	gcc prog.o -o prog || return
	cksum <prog.o # the compiler's output, byte for byte
	./prog
}
check gcc gcc gcc_run "$work/prog.c"

# ---- a multi-threaded C++ program ----
check mt_cxx "$mt" "$mt" 4 40

for n in "${skipped_names[@]}"; do
	echo "# SKIPPED (not installed, not tested): $n"
done
[ "$skipped" = 0 ] || echo "$skipped skipped"
echo "$passed passed, $failed failed"
((failed == 0))
