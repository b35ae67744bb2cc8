#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check-layers.py SRC BUILD - the layers of src/ keep one direction.

1. Each layer compiles with only its own and lower layers' headers in
   sight: with the exact command meson uses for a file of the layer, a
   probe that includes a header of a higher layer must fail to compile,
   and one that includes a header of its own layer must compile.
2. The kernel's memory calls are made only in src/sys/os.c, libibverbs'
   functions are called only in src/sys/verbs.c (and the drop-in's
   wrappers, preload/elide.c), jemalloc only in src/heap/.
Prints what it checked; exits 1 naming what broke the rule.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

src, build = (os.path.abspath(a) for a in sys.argv[1:3])
LAYERS = ["sys", "reg", "heap", "api"]
# One header of each layer, and a file whose compile command stands for the layer.
HEADER = {"sys": "log.h", "reg": "chunk.h", "heap": "heap.h", "api": "pd.h"}
SAMPLE = {"sys": "sys/log.c", "reg": "reg/chunk.c", "heap": "heap/heap.c", "api": "api/pd.c"}

failures = []
commands = {}
for entry in json.load(open(os.path.join(build, "compile_commands.json"))):
    path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    for layer, rel in SAMPLE.items():
        if path == os.path.join(src, "src", rel) and "librdmalloc_" + layer in entry["command"]:
            commands[layer] = (entry["directory"], shlex.split(entry["command"]))
for layer in LAYERS:
    if layer not in commands:
        failures.append(f"no compile command for src/{SAMPLE[layer]} in its layer library")


def compiles(layer, header):
    directory, cmd = commands[layer]
    with tempfile.NamedTemporaryFile("w", suffix=".c", dir=os.path.join(src, "src", layer)) as probe:
        probe.write(f'#include "{header}"\n')
        probe.flush()
        args, skip = [], False
        for a in cmd:
            if skip:
                skip = False
            elif a in ("-o", "-MF", "-MQ", "-c"):
                skip = True
            elif a == "-MD" or a.endswith(".c"):
                continue
            else:
                args.append(a)
        r = subprocess.run(args + ["-fsyntax-only", probe.name], cwd=directory, capture_output=True, text=True)
        return r.returncode == 0, r.stderr.strip().splitlines()[:1]


checked = 0
for i, layer in enumerate(LAYERS):
    if layer not in commands:
        continue
    ok, err = compiles(layer, HEADER[layer])
    if not ok:
        failures.append(f"src/{layer}: its own header {HEADER[layer]} does not compile: {err}")
    for upper in LAYERS[i + 1:]:
        ok, _ = compiles(layer, HEADER[upper])
        checked += 1
        if ok:
            failures.append(f"src/{layer} can include {HEADER[upper]} of src/{upper}: an upward include compiles")
print(f"{checked} upward includes tried, each refused by the compiler; own headers compile")


def sources(*dirs):
    for d in dirs:
        for root, _, files in os.walk(os.path.join(src, d)):
            for f in sorted(files):
                if f.endswith((".c", ".h", ".cc")):
                    yield os.path.relpath(os.path.join(root, f), src)


def code(path):
    """The file without comments and string literals."""
    text = open(os.path.join(src, path)).read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', text)


RULES = [
    ("the kernel's memory calls", re.compile(r"\b(mmap|munmap|mremap|madvise)\s*\("), {"src/sys/os.c"}),
    ("libibverbs calls", re.compile(r"\bibv_[a-z0-9_]+\s*\("), {"src/sys/verbs.c", "preload/elide.c"}),
    ("jemalloc calls", re.compile(r"\b(je_[a-z_]+|mallctl)\s*\(|\bMALLOCX_"), None),
]
for what, pattern, allowed in RULES:
    where = set()
    for path in sources("src", "preload"):
        if pattern.search(code(path)):
            where.add(path)
    if allowed is None:  # jemalloc: src/heap/ only
        bad = sorted(p for p in where if not p.startswith("src/heap/"))
        allowed_text = "src/heap/"
    else:
        bad = sorted(where - allowed)
        allowed_text = ", ".join(sorted(allowed))
    if not where:
        failures.append(f"{what}: found nowhere (is the pattern right?)")
    for p in bad:
        failures.append(f"{what} in {p} (only in {allowed_text})")
    print(f"{what}: only in {allowed_text} ({len(where)} files)")

if failures:
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)
print("ok: the layers keep one direction")
