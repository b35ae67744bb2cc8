#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check-test-flags.py BUILD - every test object is compiled with its
allocation calls opaque, and no benchmark or example object is.

A test target declared without meson.build's test_c_args/test_cpp_args
lets the compiler drop the allocations it exists to make (calls_kept.c);
a benchmark or example declared with them times other code than a
program using the library would run.  Reads BUILD/compile_commands.json;
prints what it checked; exits 1 naming each object that breaks the rule.
"""
import json
import os
import sys

build = sys.argv[1]
FLAG = "-fno-builtin-malloc"
tests = others = 0
bad = []
for e in json.load(open(os.path.join(build, "compile_commands.json"))):
    out = e["output"]
    has = FLAG in e["command"].split()
    if out.startswith("tests/"):
        tests += 1
        if not has:
            bad.append(f"{out}: a test object without {FLAG} (give its target test_c_args/test_cpp_args)")
    elif out.startswith(("bench/", "examples/")):
        others += 1
        if has:
            bad.append(f"{out}: a benchmark or example object with {FLAG}")
for b in bad:
    print("FAIL", b)
if not bad:
    print(f"ok: {tests} test objects with their allocation calls opaque, {others} benchmark and example objects without")
sys.exit(1 if bad else 0)
