#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# rdmalloc-info names the device the library picks for its default PD
# (tools/info/info_devices.c keeps the rule of src/sys/verbs.c): run under
# stub_ibverbs.c's made-up devices, beside device_select.c's cases.
#   info_agrees.py RDMALLOC_INFO DEVICE|none [WORDS]
# With none, WORDS (the library's warning) must be in info's reason too.
import json
import subprocess
import sys

info, want = sys.argv[1], sys.argv[2]
words = sys.argv[3] if len(sys.argv) > 3 else ""
d = json.loads(subprocess.run([info, "--json"], check=True, capture_output=True, text=True).stdout)
chosen = [x["name"] for x in d["devices"] if x["default_pd"]]
print("# devices", [x["name"] for x in d["devices"]], "default PD on", chosen or d.get("default_pd"))
if want == "none":
    why = str(d.get("default_pd", ""))
    ok = not chosen and why.startswith("none") and words in why
else:
    ok = chosen == [want]
print("ok  " if ok else "FAIL", "rdmalloc info's default PD:", want, "wanted")
sys.exit(0 if ok else 1)
