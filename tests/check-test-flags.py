#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check-test-flags.py BUILD C_ARGS CPP_ARGS - every test object is
compiled with its allocation calls opaque, and no benchmark or example
object is.

A test target declared without meson.build's test_c_args/test_cpp_args
lets the compiler drop the allocations it exists to make (calls_kept.c);
a benchmark or example declared with them times other code than a
program using the library would run.  C_ARGS and CPP_ARGS are those two
lists, each one argument, space-separated.  Reads
BUILD/compile_commands.json; each object is checked against its
language's list (by its source's suffix).  Prints what it checked;
exits 1 naming each object that breaks the rule, or when it finds no
test object at all.
"""
import json
import os
import shlex
import sys

build = sys.argv[1]
want = {"c": set(sys.argv[2].split()), "cpp": set(sys.argv[3].split())}
if not want["c"] or not want["cpp"]:
    sys.exit("check-test-flags.py: empty flag lists: nothing to check")
tests = others = 0
bad = []
for e in json.load(open(os.path.join(build, "compile_commands.json"))):
    out = e["output"]
    lang = "c" if e["file"].endswith(".c") else "cpp"
    args = set(shlex.split(e["command"]))
    missing = want[lang] - args
    present = want[lang] & args
    if out.startswith("tests/"):
        tests += 1
        if missing:
            bad.append(f"{out}: a test object without {' '.join(sorted(missing))} "
                       "(give its target test_c_args/test_cpp_args)")
    elif out.startswith(("bench/", "examples/")):
        others += 1
        if present:
            bad.append(f"{out}: a benchmark or example object with {' '.join(sorted(present))}")
if tests == 0:
    bad.append("no test object in compile_commands.json: nothing checked")
for b in bad:
    print("FAIL", b)
if not bad:
    print(f"ok: {tests} test objects with their allocation calls opaque, "
          f"{others} benchmark and example objects without")
sys.exit(1 if bad else 0)
