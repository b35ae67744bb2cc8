#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/report.py OUT_DIR - medians, ratios, verdicts and plots of a run.

Reads the raw CSV files bench/run wrote in OUT_DIR and writes there:
summary.md (machine, tables, verdict per target), *.dat (the plotted
medians) and *.svg (gnuplot).  Standard library only; gnuplot from Debian
(gnuplot-nox).  Every timing is a median over repetitions; every ratio is
against a baseline measured in the same run (and, for the guest, the same
boot).
"""
import csv
import math
import os
import shutil
import statistics
import subprocess
import sys

out = sys.argv[1]
md = []
plots = []


def read(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def med(rows, key):
    vals = [float(r[key]) for r in rows]
    return statistics.median(vals) if vals else None


def fmt(v, digits=1):
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt_size(n):
    n = int(n)
    for unit, s in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << s and n % (1 << s) == 0:
            return f"{n >> s} {unit}"
    return f"{n} B"


def table(header, rows):
    md.append("| " + " | ".join(header) + " |")
    md.append("|" + "|".join(" --- " for _ in header) + "|")
    for r in rows:
        md.append("| " + " | ".join(str(c) for c in r) + " |")
    md.append("")


def gnuplot(name, script):
    """Write NAME.gp and, when gnuplot exists, NAME.svg."""
    gp = os.path.join(out, name + ".gp")
    with open(gp, "w") as f:
        f.write(f"set terminal svg size 720,400 dynamic font 'sans,11'\n")
        f.write(f"set output '{name}.svg'\n")
        f.write("set termoption noenhanced\nset datafile missing '?'\nset key top left\nset grid ytics\n")
        f.write(script)
    if shutil.which("gnuplot"):
        r = subprocess.run(["gnuplot", name + ".gp"], cwd=out, capture_output=True, text=True)
        if r.returncode == 0:
            plots.append(name + ".svg")
        else:
            print(f"report: gnuplot {name}: {r.stderr.strip()}", file=sys.stderr)


def write_dat(name, header, rows):
    with open(os.path.join(out, name), "w") as f:
        f.write("# " + " ".join(header) + "\n")
        for r in rows:
            f.write(" ".join("?" if c is None else (f'"{c}"' if isinstance(c, str) else f"{c:.6g}")
                             for c in r) + "\n")


verdicts = []


def verdict(target, status, why):
    verdicts.append((target, status, why))


# ------------------------------------------------------------------ machine
machine = {r["key"]: r["value"] for r in read("machine.csv")}
allocators = read("allocators.csv")
md.append(f"# rdmalloc benchmarks ({machine.get('mode', '?')} run)")
md.append("")
md.append("Produced by `bench/run`; raw results are the CSV files beside this one. "
          "Timings are medians over repetitions, ratios are against a baseline "
          "measured in the same run (guest ratios: in the same guest boot).")
md.append("")
table(["machine", ""], [
    ["date (UTC)", machine.get("date", "?")],
    ["commit", machine.get("commit", "?")],
    ["CPU", f"{machine.get('nproc', '?')} x {machine.get('cpu', '?')}"],
    ["memory", machine.get("memory", "?")],
    ["kernel", machine.get("kernel", "?")],
    ["Debian", machine.get("debian", "?")],
    ["compiler", "gcc " + machine.get("gcc", "?")],
    ["peers' packages", f"libc6 {machine.get('pkg_libc6', '?')} (glibc malloc, tsearch(3)), "
                        f"libibverbs1 {machine.get('pkg_libibverbs1', '?')} and ibverbs-providers "
                        f"{machine.get('pkg_ibverbs-providers', '?')} (ibv_reg_mr, rxe provider)"],
    ["Soft-RoCE guest", f"{machine.get('guest', '?')}; qemu {machine.get('qemu', '?')} (TCG, 2 vCPUs), "
                        f"kernel {machine.get('guest_kernel', '?')}, rdma_rxe on loopback"],
    ["suite wall time", machine.get("seconds", "?") + " s"],
    ["load average", machine.get("loadavg", "?")],
])
table(["allocator", "Debian package", "version", "library"],
      [[a["allocator"], a["package"], a["version"], f"`{a['library']}`" if a["library"] else "—"]
       for a in allocators])

# ------------------------------------------------------------------ 1. keys
keys = read("keys.csv")
md.append("## 1. Key lookup")
md.append("")
md.append("Nanoseconds per lookup of the keys of [p, p+len) for random live buffers "
          "(16 B - 16 KiB), each thread in its own random order; each thread's CPU time per lookup "
          "(CLOCK_THREAD_CPUTIME_ID, so other jobs on the machine do not count; wall-clock "
          "times are in keys.csv). `load` is one memory load "
          "(the buffer's first word); the caches hold the same keys, over rdmalloc's own regions "
          "(`-chunks`) or one region per buffer (`-buffers`, what a per-buffer registration cache "
          "holds); `tree` is glibc's tsearch(3) red-black tree; `regmr` is ibv_reg_mr + "
          "ibv_dereg_mr of the buffer (guest only). Host: fake registration backend (same lookup "
          "code); guest: real registration on rxe0, under emulation (~10x slower).")
md.append("")
key_order = ["loop", "load", "rdmalloc", "rdmalloc-table", "sorted-chunks", "tree-chunks",
             "sorted-buffers", "tree-buffers", "tree-buffers+rwlock", "regmr"]
key_res = {}
for env in ("host", "guest"):
    rows = [r for r in keys if r["env"] == env]
    if not rows:
        continue
    ths = sorted({int(r["threads"]) for r in rows})
    info = rows[0]
    md.append(f"**{env}** ({info['buffers']} buffers in {info['regions']} rdmalloc regions; "
              f"{max(int(r['rep']) for r in rows)} repetitions)")
    md.append("")
    hdr = ["method"]
    for t in ths:
        hdr += [f"ns, {t} thread{'s' if t > 1 else ''}", "x rdmalloc"]
    body = []
    for m in key_order:
        mr = [r for r in rows if r["method"] == m]
        if not mr:
            continue
        line = [f"`{m}`"]
        for t in ths:
            v = med([r for r in mr if int(r["threads"]) == t], "ns_per_op")
            base = med([r for r in rows if r["method"] == "rdmalloc" and int(r["threads"]) == t],
                       "ns_per_op")
            key_res[(env, m, t)] = v
            line += [fmt(v), fmt(ratio(v, base), 2)]
        body.append(line)
    table(hdr, body)
if key_res:
    data = []
    cols = [(e, t) for e in ("host", "guest") for t in sorted({k[2] for k in key_res if k[0] == e})]
    for m in key_order:
        if any((e, m, t) in key_res for e, t in cols):
            data.append([m] + [key_res.get((e, m, t)) for e, t in cols])
    write_dat("keys.dat", ["method"] + [f"{e}-{t}t" for e, t in cols], data)
    titles = ", ".join(f"'keys.dat' using {i + 2}{':xtic(1)' if i == 0 else ''} title '{e}, {t} thread{'s' if t > 1 else ''}'"
                       for i, (e, t) in enumerate(cols))
    gnuplot("keys", f"""set title 'Key lookup: CPU ns per lookup (median, log scale; lower is better)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel 'ns per lookup'
set xtics rotate by -30 scale 0 font ',9'
set key top left
plot {titles}
""")
    # Nanosecond targets are judged on the host: the guest's CPU is emulated
    # (a load that misses its software TLB costs hundreds of ns there).
    for env in ("host",):
        for t in sorted({k[2] for k in key_res if k[0] == env}):
            r_ = key_res.get((env, "rdmalloc", t))
            ld = key_res.get((env, "load", t))
            tc = key_res.get((env, "tree-chunks", t))
            tb = key_res.get((env, "tree-buffers", t))
            if r_ is None:
                continue
            diff = r_ - ld if ld is not None else None
            verdict(f"1. lookup within a few ns of one load ({env}, {t} thr)",
                    "met" if diff is not None and diff <= 5 else "not met",
                    f"rdmalloc {fmt(r_)} ns vs load {fmt(ld)} ns: {fmt(diff)} ns more (bar: 5 ns)")
            verdict(f"1. >= 10x faster than a tree cache hit ({env}, {t} thr)",
                    "met" if tc and tb and tc / r_ >= 10 and tb / r_ >= 10 else
                    ("met for per-buffer tree only" if tb and tb / r_ >= 10 else "not met"),
                    f"tree over the same regions {fmt(ratio(tc, r_), 1)}x, per-buffer tree {fmt(ratio(tb, r_), 1)}x")
else:
    md.append("Not measured.")
    md.append("")

# ------------------------------------------------------------------ 2. msg
msg = read("msg.csv")
md.append("## 2. Fresh buffer per message (Soft-RoCE guest)")
md.append("")
if msg:
    md.append("Per message: allocate, get the key, RDMA WRITE to the peer QP, wait for the "
              "completion, free. `malloc+reg` = malloc + ibv_reg_mr(LOCAL_WRITE) ... "
              "ibv_dereg_mr + free (glibc malloc). Nanoseconds per message (median of "
              f"{max(int(r['rep']) for r in msg)} repetitions; emulated CPU: compare ratios only).")
    md.append("")
    sizes = sorted({int(r["size"]) for r in msg})
    body, data = [], []
    for s in sizes:
        a = [r for r in msg if int(r["size"]) == s and r["method"] == "rdmalloc"]
        b = [r for r in msg if int(r["size"]) == s and r["method"] == "malloc+reg"]
        ra, rb = med(a, "ns_per_msg"), med(b, "ns_per_msg")
        # The buffer's own cost, the transfer left out: allocate + key + free.
        oa = med(a, "ns_alloc_key") + med(a, "ns_release")
        ob = med(b, "ns_alloc_key") + med(b, "ns_release")
        body.append([fmt_size(s), fmt(ra / 1e3, 1), fmt(rb / 1e3, 1), f"**{fmt(ratio(rb, ra), 2)}**",
                     fmt(oa / 1e3, 1), fmt(ob / 1e3, 1), fmt(ratio(ob, oa), 1),
                     fmt(med(a, "ns_xfer") / 1e3, 1), fmt(med(b, "ns_xfer") / 1e3, 1)])
        data.append([s, ra, rb, ratio(rb, ra), ratio(ob, oa)])
    table(["size", "rdmalloc µs/msg", "malloc+reg µs/msg", "ratio per message",
           "rdmalloc alloc+key+free µs", "malloc+reg_mr+dereg_mr+free µs", "ratio without the transfer",
           "WRITE+wait µs (rdmalloc)", "WRITE+wait µs (malloc+reg)"], body)
    write_dat("msg.dat", ["size", "rdmalloc_ns", "mallocreg_ns", "ratio", "ratio_no_transfer"], data)
    gnuplot("msg", """set title 'Fresh buffer per RDMA WRITE (Soft-RoCE guest): ns per message'
set logscale x 2
set logscale y
set format x '%.0b%B'
set xlabel 'message size (bytes)'
set ylabel 'ns per message (median)'
set y2label 'ratio malloc+reg / rdmalloc (log)'
set logscale y2
set y2tics
set ytics nomirror
set key top left
plot 'msg.dat' using 1:2 with linespoints lw 2 title 'rdmalloc', \\
     'msg.dat' using 1:3 with linespoints lw 2 title 'malloc + ibv_reg_mr', \\
     'msg.dat' using 1:4 axes x1y2 with linespoints dt 2 title 'ratio per message (right)', \\
     'msg.dat' using 1:5 axes x1y2 with linespoints dt 3 title 'ratio without the transfer (right)'
""")
    at = [d for d in data if d[0] == 65536]
    if at:
        a = [r for r in msg if int(r["size"]) == 65536 and r["method"] == "rdmalloc"]
        b = [r for r in msg if int(r["size"]) == 65536 and r["method"] == "malloc+reg"]
        oa = med(a, "ns_alloc_key") + med(a, "ns_release")
        ob = med(b, "ns_alloc_key") + med(b, "ns_release")
        verdict("2. >= 20x fewer ns per message at 64 KiB",
                "met" if at[0][3] and at[0][3] >= 20 else "not met",
                f"ratio {fmt(at[0][3], 2)} per message at 64 KiB (Soft-RoCE: the CPU moves the bytes); "
                f"{fmt(ratio(ob, oa), 1)}x without the transfer (allocate + key + free)")
    else:
        verdict("2. >= 20x fewer ns per message at 64 KiB", "not measured", "64 KiB not in this run")
else:
    md.append("Not measured (needs the Soft-RoCE guest).")
    md.append("")
    verdict("2. >= 20x fewer ns per message at 64 KiB", "not measured", "no guest run")

# ------------------------------------------------------------------ 3. alloc
alloc = read("alloc.csv")
md.append("## 3. Allocator speed")
md.append("")
md.append("The workloads of `bench/alloc.c` (plain malloc/free/realloc, and C++ new/sized delete for "
          "xthread-sized; one thread per core unless the workload says) "
          "under `LD_PRELOAD` of each allocator, interleaved (every repetition runs every "
          "allocator, in a rotated order). Median CPU seconds (user + system of the process, from the "
          "start barrier to the end, so the allocator's start-up is left out: "
          "on a shared machine, time spent waiting for a CPU is not the allocator's; wall-clock "
          "times are in alloc.csv), and the ratio to plain jemalloc (lower is better); geometric "
          "mean of the ratios over the workloads.")
md.append("")
rd = [a for a in allocators if a["allocator"] == "rdmalloc"]
if rd and not rd[0]["library"]:
    md.append("**rdmalloc preload: not built yet** (`build/preload/librdmalloc-preload.so` missing).")
    md.append("")
alloc_order = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "rdmalloc"]
geo = {}
for env in ("host", "guest"):
    rows = [r for r in alloc if r["env"] == env]
    if not rows:
        continue
    names = [a for a in alloc_order if any(r["allocator"] == a for r in rows)]
    # A workload run with fewer threads than the others is one of its own.
    nthr = max(int(r["threads"]) for r in rows)
    for r in rows:
        t = int(r["threads"])
        r["workload"] += "" if t == nthr else f" ({t} thread{'s' if t > 1 else ''})"
    wls = []
    for r in rows:
        if r["workload"] not in wls:
            wls.append(r["workload"])
    wrong = sorted({(r["allocator"], r["malloc_from"]) for r in rows
                    if (r["allocator"] == "glibc") != (r["malloc_from"] == "libc.so.6")})
    md.append(f"**{env}** ({'registration active for rdmalloc' if env == 'guest' else 'no device: registration inactive'}; "
              f"{nthr} threads unless the workload says; {max(int(r['rep']) for r in rows)} repetitions)")
    md.append("")
    body, data = [], []
    lr = {a: [] for a in names}
    lw = {a: [] for a in names}
    for w in wls:
        base = med([r for r in rows if r["workload"] == w and r["allocator"] == "jemalloc"], "cpu_seconds")
        wbase = med([r for r in rows if r["workload"] == w and r["allocator"] == "jemalloc"], "seconds")
        line, dl = [w], [w]
        for a in names:
            v = med([r for r in rows if r["workload"] == w and r["allocator"] == a], "cpu_seconds")
            wv = med([r for r in rows if r["workload"] == w and r["allocator"] == a], "seconds")
            q = ratio(v, base)
            if q:
                lr[a].append(math.log(q))
            if ratio(wv, wbase):
                lw[a].append(math.log(wv / wbase))
            line.append(f"{fmt(v, 3)} s ({fmt(q, 2)})")
            dl.append(q)
        body.append(line)
        data.append(dl)
    g = {a: math.exp(sum(lr[a]) / len(lr[a])) if lr[a] else None for a in names}
    gw = {a: math.exp(sum(lw[a]) / len(lw[a])) if lw[a] else None for a in names}
    geo[env] = g
    body.append(["**geometric mean of ratios**"] + [f"**{fmt(g[a], 2)}**" for a in names])
    body.append(["(the same, wall-clock time)"] + [fmt(gw[a], 2) for a in names])
    rss = ["peak RSS (MiB, median, largest workload)"]
    for a in names:
        vals = [med([r for r in rows if r["workload"] == w and r["allocator"] == a], "maxrss_kb") for w in wls]
        vals = [v for v in vals if v is not None]
        rss.append(fmt(max(vals) / 1024, 0) if vals else "—")
    body.append(rss)
    table(["workload"] + names, body)
    if wrong:
        md.append("Warning: malloc() did not resolve to the expected library: " +
                  ", ".join(f"{a} -> {f}" for a, f in wrong))
        md.append("")
    write_dat(f"alloc-{env}.dat", ["workload"] + names, data)
    series = ", ".join(f"'alloc-{env}.dat' using {i + 2}{':xtic(1)' if i == 0 else ''} title '{a}'"
                       for i, a in enumerate(names))
    gnuplot(f"alloc-{env}", f"""set title 'Allocators ({env}): CPU time relative to jemalloc (median; lower is better)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel 'CPU time / jemalloc CPU time'
set xtics scale 0
set key top left
plot {series}, 1 with lines dt 2 lc 'black' notitle
""")
    if "rdmalloc" in names:
        r_ = [d for d in data]
        worst = max((d[names.index("rdmalloc") + 1] or 0) for d in r_)
        if env == "host":
            verdict("3. no more than 5% slower than jemalloc (host)",
                    "met" if worst <= 1.05 else "not met",
                    f"worst workload ratio {fmt(worst, 2)}, geometric mean {fmt(g['rdmalloc'], 2)}")
        others = [g[a] for a in names if a not in ("rdmalloc",) and g[a]]
        verdict(f"3. geometric mean at least as good as the best of the four ({env})",
                "met" if g["rdmalloc"] <= min(others) else "not met",
                f"rdmalloc {fmt(g['rdmalloc'], 2)} vs best {fmt(min(others), 2)}")
if not any(r["allocator"] == "rdmalloc" for r in alloc):
    verdict("3. no more than 5% slower than jemalloc (host)", "not measured yet",
            "the LD_PRELOAD drop-in (build/preload/librdmalloc-preload.so) is not built yet")
    verdict("3. geometric mean at least as good as the best of the four", "not measured yet",
            "the LD_PRELOAD drop-in is not built yet")

# ------------------------------------------------------------------ 4. footprint
fp = read("footprint.csv")
md.append("## 4. Registration footprint")
md.append("")
GiB = float(1 << 30)
MiB = float(1 << 20)
if fp:
    md.append("`bench/footprint.c`: allocate random sizes (64 B - 1 MiB, log-uniform) up to the "
              "live target, churn (free a random block, allocate a new one) until 4x the target "
              "more was allocated (*steady*), then free three blocks in four (*shrink*). "
              "Pinned = bytes under registration (`registered_bytes`); live = bytes the program "
              "asked for and holds; RSS from /proc/self/statm. Host: fake backend (pins pages "
              "like ibv_reg_mr); guest: rxe0. Pages `huge`: RDMALLOC_HUGEPAGES=1 (explicit 2 MiB "
              "pages when reserved, else transparent huge pages, else 4 KiB; chunks rounded up to "
              "whole 2 MiB pages, doc/modes.md); no huge pages were reserved on either machine.")
    md.append("")
    body, data = [], []
    for env in ("host", "guest"):
        configs = []
        for r in fp:
            if r["env"] == env and (r["chunk_max"], r["page_mode"]) not in configs:
                configs.append((r["chunk_max"], r["page_mode"]))
        for c, pm in configs:
            st = [r for r in fp if r["env"] == env and r["chunk_max"] == c and r["page_mode"] == pm and r["phase"] == "steady"]
            sh = [r for r in fp if r["env"] == env and r["chunk_max"] == c and r["page_mode"] == pm and r["phase"] == "shrink"]
            if not st:
                continue
            s = st[0]
            reg, live, rss = float(s["registered_bytes"]), float(s["live_requested"]), float(s["rss_bytes"])
            regs, alloc_t = float(s["registrations"]), float(s["allocated_total"])
            pl = reg / live if live else None
            pr = reg / rss if rss else None
            per_gib_alloc = regs / (alloc_t / GiB)
            per_gib_reg = regs / (reg / GiB) if reg else None
            shr = float(sh[0]["registered_bytes"]) / float(sh[0]["live_requested"]) if sh and float(sh[0]["live_requested"]) else None
            body.append([env, "default" if c == "0" else c, s["page_mode"], fmt(live / MiB, 0), fmt(reg / MiB, 0),
                         fmt(rss / MiB, 0), fmt(pl, 2), fmt(pr, 2), s["mrs"], s["registrations"],
                         fmt(per_gib_alloc, 1), fmt(per_gib_reg, 1), fmt(shr, 2)])
            data.append([f"{env} {('default' if c == '0' else c)} {pm}", pl, pr, per_gib_reg])
            if c == "0":
                verdict(f"4. pinned/live <= 1.25 at steady state ({env}, default chunks, {pm} pages)",
                        "met" if pl and pl <= 1.25 else "not met", f"pinned/live {fmt(pl, 2)}")
                verdict(f"4. <= 16 registrations per GiB ({env}, default chunks, {pm} pages)",
                        "met" if per_gib_reg and per_gib_reg <= 16 else "not met",
                        f"{fmt(per_gib_reg, 1)} per GiB registered, {fmt(per_gib_alloc, 1)} per GiB allocated "
                        f"(cumulative, churn included)")
    table(["env", "RDMALLOC_CHUNK_MAX", "pages", "live MiB", "pinned MiB", "RSS MiB", "pinned/live",
           "pinned/RSS", "MRs", "registrations", "reg. per GiB allocated", "reg. per GiB pinned",
           "pinned/live after shrink"], body)
    write_dat("footprint.dat", ["config", "pinned_live", "pinned_rss", "regs_per_gib"], data)
    gnuplot("footprint", """set title 'Registration footprint at steady state, by RDMALLOC_CHUNK_MAX and page mode'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel 'ratio'
set y2label 'registrations per GiB pinned'
set logscale y2
set y2tics
set ytics nomirror
set yrange [0:*]
set xtics rotate by -30 scale 0 font ',9'
set key below
plot 'footprint.dat' using 2:xtic(1) title 'pinned / live', \\
     'footprint.dat' using 3 title 'pinned / RSS', \\
     'footprint.dat' using 0:4 axes x1y2 with points pt 7 ps 1.2 title 'registrations per GiB pinned (right)', \\
     1.25 with lines dt 2 lc 'black' title 'target 1.25 (left)', \\
     16 axes x1y2 with lines dt 3 lc 'red' title 'target 16 per GiB (right)'
""")
else:
    md.append("Not measured.")
    md.append("")

# ------------------------------------------------------------------ 4b. phases
ph = read("phases.csv")
md.append("## 4b. Phases: memory given back")
md.append("")
if ph:
    md.append("`bench/phases.c`: long-lived blocks (64 B - 64 KiB) first, then bursts of blocks "
              "(64 B - 4 MiB) allocated and freed, then what the allocator gives back at once "
              "(rdmalloc: `rdma_malloc_trim()`; plain jemalloc: `arena.<all>.purge`), then a "
              "steady state at constant live size. held = rdmalloc's chunk bytes (registered, "
              "pinned); registrations counted from row `warm` to row `steady`.")
    md.append("")
    rows = []
    by = {}
    for r in ph:
        by[(r["env"], r["alloc"], r["step"])] = r
    for (env, alloc, step), r in by.items():
        if not (step.startswith("given-back") or step in ("long-lived", "burst-1", "steady")):
            continue
        live, held, rss = int(r["live_bytes"]), int(r["chunk_bytes"]), int(r["rss_bytes"])
        regs = "—"
        w = by.get((env, alloc, "warm"))
        if step == "steady" and w and alloc != "jemalloc":
            regs = str(int(r["registrations"]) - int(w["registrations"]))
        rows.append([env, alloc, step, f"{live / 2**20:.0f}", f"{held / 2**20:.0f}" if held else "—",
                     fmt(ratio(held, live), 2) if held else "—", f"{rss / 2**20:.0f}", regs])
    table(["env", "allocator", "step", "live MiB", "held MiB", "held / live", "RSS MiB",
           "registrations at steady state"], rows)
    for env in sorted({r["env"] for r in ph}):
        last = [r for (e, a, s), r in by.items() if e == env and a == "rdmalloc" and s.startswith("given-back")]
        if last:
            r = last[-1]
            q = ratio(int(r["chunk_bytes"]), int(r["live_bytes"]))
            verdict(f"phases ({env}): held / live <= 1.5 after the give-back",
                             "met" if q is not None and q <= 1.5 else "NOT met", f"{fmt(q, 2)}")
else:
    md.append("Not measured.")
    md.append("")

# ------------------------------------------------------------------ 4c. engines
en = read("engines.csv")
md.append("## 4c. An engine between two hosts (Soft-RoCE guest)")
md.append("")
if en:
    md.append("`bench/engines.sh`: `ucx_perftest` (UCX over `rc_verbs`) between the guest's two hosts "
              "(rxe1 and rxe2 on a veth pair), the server on host 2, the client on host 1; plain, "
              "under the drop-in (`LOCAL_WRITE` heap: UCX's registrations pass through) and with the "
              "remote-access heap (they are elided), interleaved. Medians over repetitions; ratios "
              "against plain in the same boot. Registrations: the client's, from the drop-in's stats.")
    md.append("")
    rows = []
    for test, key, unit in (("tag_lat", "p50_us", "µs (p50)"), ("tag_bw", "mb_s", "MB/s")):
        base = med([r for r in en if r["test"] == test and r["mode"] == "plain"], key)
        dropin_ns = med([r for r in en if r["test"] == test and r["mode"] == "dropin"], "passthrough_ns")
        for mode in ("plain", "dropin", "remote"):
            rs = [r for r in en if r["test"] == test and r["mode"] == mode]
            if not rs:
                continue
            v = med(rs, key)
            vals = sorted(float(r[key]) for r in rs)
            el, pt, ns = med(rs, "elided"), med(rs, "passthrough"), med(rs, "passthrough_ns")
            saved = "—"
            if mode == "remote" and dropin_ns is not None:
                saved = fmt((dropin_ns - ns) / 1e6, 1)
            peaks = "—"
            if mode != "plain" and "peak_held_bytes" in rs[0]:
                peaks = " / ".join(f"{med(rs, k) / 2**20:.0f}"
                                   for k in ("peak_held_bytes", "peak_pinned_bytes", "peak_live_bytes"))
            rows.append([test, fmt_size(rs[0]["size"]), mode, str(len(rs)), f"{fmt(v, 1)} {unit}",
                         f"{fmt(vals[0], 1)}-{fmt(vals[-1], 1)}", fmt(ratio(v, base), 2),
                         "—" if mode == "plain" else f"{el:.0f} / {pt:.0f}",
                         "—" if mode == "plain" or not pt else fmt(ns / pt / 1000, 0), saved, peaks])
    table(["test", "size", "mode", "reps", "median", "spread", "/ plain", "elided / passed",
           "µs per passed ibv_reg_mr", "registration ms saved against dropin",
           "client's peak held / pinned / live MiB"], rows)
else:
    md.append("Not measured.")
    md.append("")

# ------------------------------------------------------------------ 4d. service
sv = read("service.csv")
md.append("## 4d. A service whose working set moves")
md.append("")
if sv:
    md.append("`bench/service.c`: a hot set that moves each phase to another size range (small "
              "objects, pages, message buffers, large buffers, mixed) and size, a burst of "
              "short-lived buffers on top, a shrink to a quarter every third phase (the oldest "
              "three quarters go; env *-scattered: three blocks in four across the hot set, a live "
              "block left on nearly every page, reported but not held to the mark); after each "
              "phase the program is quiet for twice the decay time plus a second, then: what it "
              "holds (live), rdmalloc's pinned bytes, RSS. Plain jemalloc (its background thread "
              "on, the same decay time) beside it. Pass mark: pinned <= 1.5 x live + 8 MiB.")
    md.append("")
    rows, data = [], {}
    for r in sv:
        if r["step"] != "settled":
            continue
        key = (r["env"], int(r["phase"]))
        d = data.setdefault(key, {"shape": r["shape"]})
        if r["alloc"] == "rdmalloc":
            d.update(live=int(r["live_bytes"]), pinned=int(r["pinned_bytes"]), rss=int(r["rss_bytes"]),
                     ok=r["pass"])
        else:
            d["je_rss"] = int(r["rss_bytes"])
    over = counted = 0
    for (env, phase), d in sorted(data.items()):
        mib = lambda k: f"{d[k] / 2**20:.0f}" if k in d else "—"
        # --scattered (env *-scattered): a shrink that leaves a live block
        # on nearly every page; reported, not held to the mark.
        if "scattered" not in env:
            over += d.get("ok") == "over"
            counted += "ok" in d
        rows.append([env, phase, d["shape"], mib("live"), mib("pinned"), mib("rss"), mib("je_rss"),
                     d.get("ok", "—")])
    table(["env", "phase", "hot set", "live MiB", "pinned MiB", "RSS MiB", "jemalloc RSS MiB",
           "pinned <= 1.5 x live + 8 MiB"], rows)
    write_dat("service.dat", ["phase", "live", "pinned", "rss", "je_rss"],
              [[p, d.get("live", 0) / 2**20, d.get("pinned", 0) / 2**20, d.get("rss", 0) / 2**20,
                d["je_rss"] / 2**20 if "je_rss" in d else None] for (e, p), d in sorted(data.items())
               if "scattered" not in e])
    gnuplot("service", """set title 'A service whose working set moves: after each phase and its decay'
set xlabel 'phase'
set ylabel 'MiB'
plot 'service.dat' using 1:2 with linespoints title 'live (the program holds)', \\
     'service.dat' using 1:3 with linespoints title 'rdmalloc pinned', \\
     'service.dat' using 1:4 with linespoints title 'rdmalloc RSS', \\
     'service.dat' using 1:5 with linespoints title 'plain jemalloc RSS', \\
     'service.dat' using 1:($2*1.5+8) with lines dt 2 title '1.5 x live + 8 MiB'
""")
    verdict("service: pinned <= 1.5 x live + 8 MiB after each phase's decay",
            "met" if over == 0 else "NOT met", f"{counted - over} of {counted} phases")
else:
    md.append("Not measured.")
    md.append("")

# ------------------------------------------------------------------ 5. startup
su = read("startup.csv")
md.append("## 5. Start-up")
md.append("")
if su:
    md.append("Microseconds from just before posix_spawn() in the parent to main() in the child, "
              "and to the first buffer with keys (`exec`: nothing; `malloc`: first malloc, no keys; "
              "`rdmalloc`: rdma_malloc + rdma_malloc_keys, library initialisation included; "
              "`verbs`: malloc + ibv_get_device_list + ibv_open_device + ibv_alloc_pd + ibv_reg_mr by "
              "hand; `devices`: ibv_get_device_list alone, a diagnostic; `rdmalloc-nodev`: rdmalloc with "
              "RDMALLOC_DEVICE naming a device that does not exist, so it falls back to unregistered "
              "memory). Methods are interleaved; compare within one env.")
    md.append("")
    body = []
    for env in [e for e in ("host-nodevice", "guest-rxe0") if any(r["env"] == e for r in su)]:
        rows = [r for r in su if r["env"] == env]
        base = med([r for r in rows if r["method"] == "exec"], "us_to_first")
        for m in ("exec", "malloc", "devices", "verbs", "rdmalloc", "rdmalloc-nodev"):
            mr = [r for r in rows if r["method"] == m]
            if not mr:
                continue
            v = med(mr, "us_to_first")
            body.append([env, m, fmt(med(mr, "us_to_main"), 0), fmt(v, 0), fmt(v - base if base else None, 0),
                         "yes" if all(r["keys"] == "1" for r in mr) else "no"])
    table(["env", "method", "µs to main", "µs to first buffer", "µs over exec", "keys"], body)
    verdict("5. start-up measured with and without a device",
            "measured" if any(r["env"].startswith("guest-rxe0") for r in su) else "measured without a device only",
            "no numeric target")
else:
    md.append("Not measured.")
    md.append("")

# ------------------------------------------------------------------ 6. growth
gr = read("growth.csv")
md.append("## 6. Growth latency")
md.append("")
if gr:
    info = gr[0]
    md.append(f"Latency of each allocation (buffer usable for RDMA) while a heap grows to "
              f"{info['total_mib']} MiB of live {info.get('work_us', '?')}-µs-apart message buffers "
              "(`growth.c`), after the first 16 MiB: `reserve` = rdma_malloc + keys with the next chunk "
              "registered ahead (RDMALLOC_RESERVE=1), `off` = the same, the allocation that grows the heap "
              "registering (RDMALLOC_RESERVE=0), `regmr` = malloc + ibv_reg_mr per buffer. Medians over "
              "the repetitions, interleaved. `grown` = the reserve's run on a heap grown and freed beforehand: (almost) no "
              "growth, the machine's own floor.")
    md.append("")
    body = []
    res = {}
    for env in sorted({r["env"] for r in gr}):
        for m in ("reserve", "off", "regmr", "grown"):
            mr = [r for r in gr if r["env"] == env and r["mode"] == m]
            if not mr:
                continue
            v = {k: med(mr, k) for k in ("p50_ns", "p99_ns", "p999_ns", "max_ns", "inline_chunks", "reserve_hits",
                                         "reserve_waits")}
            res[(env, m)] = v
            body.append([env, m, str(len(mr)), fmt(v["p50_ns"] / 1000, 1), fmt(v["p99_ns"] / 1000, 1),
                         fmt(v["p999_ns"] / 1000, 1), fmt(v["max_ns"] / 1000, 0),
                         fmt(ratio(v["max_ns"], v["p50_ns"]), 0), fmt(v["inline_chunks"], 0),
                         fmt(v["reserve_hits"], 0), fmt(v["reserve_waits"], 0)])
    table(["env", "mode", "reps", "p50 µs", "p99 µs", "p99.9 µs", "max µs", "max / p50",
           "chunks registered inline", "reserve hits", "of which waited"], body)
    for env in sorted({k[0] for k in res}):
        v = res.get((env, "reserve"))
        if v:
            r_ = ratio(v["max_ns"], v["p50_ns"])
            verdict(f"6. growth: max allocation latency within 10x of p50 with the reserve ({env})",
                    "met" if r_ is not None and r_ <= 10 else "not met",
                    f"max {fmt(v['max_ns'] / 1000, 0)} µs, p50 {fmt(v['p50_ns'] / 1000, 1)} µs: {fmt(r_, 0)}x")
else:
    md.append("Not measured.")
    md.append("")

# ------------------------------------------------------------------ 7. fork
fk = read("fork.csv")
md.append("## 7. fork()")
md.append("")
if fk:
    md.append("Milliseconds for fork() + the child's _exit + waitpid() of a program holding "
              f"{fk[0]['heap_mib']} MiB of malloc'ed, written blocks (`fork.c`): plain (glibc), under the "
              "drop-in with the heap untouched by RDMA, and under the drop-in after looking up the keys of "
              "every block (which registers, so pins, the heap). Medians over the repetitions, interleaved; "
              "ratios against plain in the same env (the same boot).")
    md.append("")
    body = []
    for env in sorted({r["env"] for r in fk}):
        base = med([r for r in fk if r["env"] == env and r["alloc"] == "plain"], "total_ms")
        for a, reg in (("plain", "no"), ("rdmalloc", "no"), ("rdmalloc", "yes")):
            rows = [r for r in fk if r["env"] == env and r["alloc"] == a and r["registered"] == reg]
            if not rows:
                continue
            t = med(rows, "total_ms")
            tot = [float(r["total_ms"]) for r in rows]
            body.append([env, a, reg, str(len(rows)), fmt(med(rows, "fork_ms"), 1), fmt(t, 1),
                         f"{fmt(min(tot), 1)}-{fmt(max(tot), 1)}", fmt(ratio(t, base), 2),
                         fmt(med(rows, "vmpin_mib"), 0)])
            if a == "rdmalloc" and reg == "no" and env.startswith("guest"):
                r_ = ratio(t, base)
                verdict(f"7. fork: drop-in, heap untouched by RDMA, within 2x of plain ({env})",
                        "met" if r_ is not None and r_ <= 2 else "not met",
                        f"{fmt(t, 1)} ms against {fmt(base, 1)} ms: {fmt(r_, 2)}x")
    table(["env", "alloc", "keys looked up", "reps", "fork() ms", "fork + exit + wait ms", "range",
           "/ plain", "VmPin MiB"], body)
else:
    md.append("Not measured.")
    md.append("")

# ------------------------------------------------------------------ 8. bigreg
bg = read("bigreg.csv")
md.append("## 8. Registration in parallel")
md.append("")
if bg:
    md.append("Seconds from `rdma_heap_malloc` of a large buffer to its keys on every PD (`bigreg.c`), with "
              "one PD (rxe1) and two (rxe1, rxe2), `RDMALLOC_REG_THREADS` 1 and 2, 4 KiB and explicit 2 MiB "
              "pages, and the guest's own single-thread page-fault rate for as many fresh pages (floor). "
              "Medians over the repetitions, interleaved; the ratio is 2 threads over 1 for the same work, "
              "in the same boot.")
    md.append("")
    body, dat = [], []
    sizes = sorted({int(r["size_mib"]) for r in bg})
    for env in sorted({r["env"] for r in bg}):
        for pages in ("4k", "huge"):
            for size in sizes:
                sel = [r for r in bg if r["env"] == env and r["pages"] == pages and int(r["size_mib"]) == size]
                flr = med([r for r in sel if r["what"] == "floor"], "seconds")
                cells = {}
                for pds in ("1", "2"):
                    for t in ("1", "2"):
                        cells[(pds, t)] = med([r for r in sel if r["what"] == "register" and r["pds"] == pds
                                               and r["threads"] == t], "seconds")
                    one, two = cells[(pds, "1")], cells[(pds, "2")]
                    r_ = ratio(two, one)
                    gib = size / 1024
                    body.append([env, pages, fmt_size(size << 20), pds, str(len([r for r in sel if r["what"] == "register" and r["pds"] == pds and r["threads"] == "1"])),
                                 fmt(flr, 3), fmt(one, 3), fmt(two, 3), fmt(r_, 2),
                                 fmt(ratio(gib, one), 2), fmt(ratio(gib, two), 2), fmt(ratio(gib, flr), 2)])
                    if pds == "2":
                        verdict(f"8. 2 threads, 2 PDs at most 0.6x of 1 thread ({env}, {pages}, {fmt_size(size << 20)})",
                                "met" if r_ is not None and r_ <= 0.6 else "not met",
                                f"{fmt(two, 3)} s against {fmt(one, 3)} s: {fmt(r_, 2)}x")
                dat.append([size, flr, cells[("1", "1")], cells[("1", "2")], cells[("2", "1")], cells[("2", "2")]])
            write_dat(f"bigreg-{env}-{pages}.dat", ["size_mib", "floor", "pd1_t1", "pd1_t2", "pd2_t1", "pd2_t2"], dat)
            dat = []
            gnuplot(f"bigreg-{env}-{pages}",
                    f"set title 'time to keys of a new buffer ({env}, {pages} pages)'\n"
                    "set xlabel 'buffer MiB'\nset ylabel 'seconds (median)'\nset logscale x 2\n"
                    f"plot 'bigreg-{env}-{pages}.dat' using 1:2 with linespoints title 'one thread touching its pages (floor)', "
                    "'' using 1:5 with linespoints title '2 PDs, 1 thread', '' using 1:6 with linespoints title '2 PDs, 2 threads', "
                    "'' using 1:3 with linespoints title '1 PD, 1 thread', '' using 1:4 with linespoints title '1 PD, 2 threads'\n")
    table(["env", "pages", "buffer", "PDs", "reps", "floor s", "1 thread s", "2 threads s", "2 / 1",
           "GiB/s, 1 thread", "GiB/s, 2 threads", "GiB/s, floor"], body)
else:
    md.append("Not measured.")
    md.append("")

# ------------------------------------------------------------------ verdicts
md.append("## Verdicts")
md.append("")
table(["target", "verdict", "numbers"], [[t, s, w] for t, s, w in verdicts])
if plots:
    md.append("## Plots")
    md.append("")
    for p in plots:
        md.append(f"![{p}]({p})")
        md.append("")

with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("\n".join(md) + "\n")
print(f"report: {out}/summary.md, {len(plots)} plots")
