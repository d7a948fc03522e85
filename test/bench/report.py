#!/usr/bin/env python3
"""Tables, derived figures and charts for one bpext benchmark run.

    report.py RESULTS_DIR

Reads RESULTS_DIR/params.json, RESULTS_DIR/manifest.jsonl (written by run.sh)
and the pgbench logs under RESULTS_DIR/runs/; writes results.md, results.csv,
runs.csv, derived.txt, tps.png and timeline.png into RESULTS_DIR and prints
the tables and derived figures.  Charts are skipped when matplotlib is
missing.
"""
import csv
import json
import math
import os
import re
import statistics
import sys

CONFIG_ORDER = ["A", "B", "C", "D", "E0", "E", "M0", "MS", "ML"]
CONFIG_LABEL = {
    "A": "A no tier",
    "B": "B bpext tier",
    "C": "C fast disk",
    "D": "D big shared_buffers",
    "E0": "E0 fits in RAM, no bpext",
    "E": "E fits in RAM, bpext on",
    "M0": "M0 data in RAM, no bpext",
    "MS": "MS data in RAM, tier smaller",
    "ML": "ML data in RAM, tier holds it",
}
WORKLOAD_LABEL = {
    "select": "select-only (-S)",
    "skew": "skewed select",
    "skewrw": "skewed read/write",
    "scan": "sequential scan",
    "tpcb": "TPC-B",
}
COLORS = {"A": "#d62728", "B": "#1f77b4", "C": "#2ca02c", "D": "#9467bd",
          "E0": "#7f7f7f", "E": "#17becf", "R0": "#d62728", "RC": "#ff7f0e",
          "RW": "#1f77b4", "M0": "#8c564b", "MS": "#e377c2", "ML": "#bcbd22"}
# R: select-only after a clean restart, per start mode.
RESTART_ORDER = ["R0", "RC", "RW"]
RESTART_LABEL = {
    "R0": "no tier",
    "RC": "tier, cold start",
    "RW": "tier, warm start",
}


def parse_log(path):
    """Final figures and the per-second progress of one pgbench log."""
    out = {"tps": None, "latency_ms": None, "transactions": None, "failed": None,
           "progress": []}
    try:
        with open(path) as f:
            for line in f:
                m = re.match(r"progress: ([\d.]+) s, ([\d.]+) tps, lat ([\d.]+) ms", line)
                if m:
                    out["progress"].append((float(m.group(1)), float(m.group(2)),
                                            float(m.group(3))))
                    continue
                m = re.match(r"tps = ([\d.]+)", line)
                if m:
                    out["tps"] = float(m.group(1))
                m = re.match(r"latency average = ([\d.]+) ms", line)
                if m:
                    out["latency_ms"] = float(m.group(1))
                m = re.match(r"number of transactions actually processed: (\d+)", line)
                if m:
                    out["transactions"] = int(m.group(1))
                m = re.match(r"number of failed transactions: (\d+)", line)
                if m:
                    out["failed"] = int(m.group(1))
    except OSError:
        pass
    return out


def time_to_reach(progress, target, window=3):
    """Seconds into a run at which throughput reached target and held it:
    the first progress second from which the mean of the next window
    seconds is at least target.  None if it never did."""
    tps = [x[1] for x in progress]
    for i, (t, _, _) in enumerate(progress):
        ahead = tps[i:i + window]
        if ahead and statistics.mean(ahead) >= target:
            return t
    return None


def restart_figures(runs):
    """Per R configuration: steady TPS before the restart, the restart run,
    and the seconds to 90% of that steady TPS after the restart."""
    out = {}
    for c in RESTART_ORDER:
        steady = [r for r in runs if r["config"] == c and r["tag"] == "steady" and r["tps"]]
        after = [r for r in runs if r["config"] == c and r["tag"] == "restart" and r["progress"]]
        if not steady or not after:
            continue
        s_tps = steady[0]["tps"]
        prog = after[0]["progress"]
        first10 = [x[1] for x in prog if x[0] <= 10]
        out[c] = {"steady": s_tps, "run": after[0], "seconds": prog[-1][0],
                  "first10": statistics.mean(first10) if first10 else None,
                  "t90": time_to_reach(prog, 0.9 * s_tps)}
    return out


def ab_rounds(runs, w):
    """B/A per round of the A/B alternation: [(round, A TPS, B TPS, B/A)]."""
    tps = {}
    for r in runs:
        if r["config"] in ("A", "B") and r["workload"] == w and r["tag"] == "main" and r["tps"]:
            tps[(r["config"], r.get("round", 1))] = r["tps"]
    return [(n, tps[("A", n)], tps[("B", n)], tps[("B", n)] / tps[("A", n)])
            for n in sorted({k[1] for k in tps}) if ("A", n) in tps and ("B", n) in tps]


def ram_rounds(runs, w, c, key="tps"):
    """Per round of the data-in-RAM rounds: [(round, M0's, c's, ratio)] of
    key.  The ratio is c/M0 for throughput (tps) and M0/c for a cost
    (server_cpu_us_per_txn), so that either way 1.0 is parity and below it
    bpext does worse."""
    val = {}
    for r in runs:
        if r["config"] in ("M0", c) and r["workload"] == w and r["tag"] == "main" and r.get(key):
            val[(r["config"], r.get("round", 1))] = r[key]
    out = []
    for n in sorted({k[1] for k in val}):
        if ("M0", n) in val and (c, n) in val:
            m0, cv = val[("M0", n)], val[(c, n)]
            out.append((n, m0, cv, cv / m0 if key == "tps" else m0 / cv))
    return out


def rounds_table(lines, per_key, nr, ratio_label, cell):
    """A table of data-in-RAM ratios, a row per (workload, config) of
    per_key and a column per round, with the median and spread."""
    lines.append("| workload | ratio | " + " | ".join(f"round {n}" for n in range(1, nr + 1))
                 + " | median | min - max |")
    lines.append("|" + "---|" * (nr + 4))
    for (w, c), per_round in per_key.items():
        if not per_round:
            continue
        cells = {n: cell(v, a, b) for n, a, b, v in per_round}
        vals = [x[3] for x in per_round]
        lines.append(f"| {WORKLOAD_LABEL[w]} | {ratio_label(c)} | "
                     + " | ".join(cells.get(n, "-") for n in range(1, nr + 1))
                     + f" | {statistics.median(vals):.3f} | {min(vals):.3f} - {max(vals):.3f} |")


def delta(after, before, key):
    if not after or not before or after.get(key) is None or before.get(key) is None:
        return None
    return after[key] - before[key]


def ratio(a, b):
    if a is None or b in (None, 0):
        return None
    return a / b


def fmt(v, digits=0, suffix=""):
    if v is None:
        return "-"
    if isinstance(v, float) and digits == 0 and abs(v) < 10:
        digits = 2 if abs(v) < 1 else 1
    return f"{v:,.{digits}f}{suffix}"


def main():
    res = sys.argv[1]
    params = json.load(open(os.path.join(res, "params.json")))
    entries = [json.loads(line) for line in open(os.path.join(res, "manifest.jsonl"))
               if line.strip()]
    runs = [e for e in entries if e["kind"] == "run"]
    prewarms = [e for e in entries if e["kind"] == "prewarm"]
    caches = [e for e in entries if e["kind"] == "cache"]
    tiers = {e["config"]: e for e in entries if e["kind"] == "tier"}
    memory = {}
    for e in entries:
        if e["kind"] == "memory":
            memory.setdefault(e["config"], []).append(e["memory"])

    slow_configs = {"A", "B", "D", "R0", "RC", "RW"}
    for r in runs:
        r.update(parse_log(os.path.join(res, r["log"])))
        secs = r["t1"] - r["t0"]
        r["wall"] = secs
        if r["config"] in slow_configs:
            r["disk_rps"] = delta(r["dev_after"], r["dev_before"], "reads") / secs
            r["disk_wps"] = delta(r["dev_after"], r["dev_before"], "writes") / secs
        else:
            r["disk_rps"] = r["disk_wps"] = None
        reads = delta(r["db_after"], r["db_before"], "blks_read")
        read_ms = delta(r["db_after"], r["db_before"], "blk_read_time")
        r["sb_misses_per_txn"] = ratio(reads, r["transactions"])
        r["read_latency_us"] = ratio(read_ms * 1000 if read_ms is not None else None, reads)
        b0, b1 = r.get("bpext_before"), r.get("bpext_after")
        r["tier_reads"] = delta(b1, b0, "extension_page_reads")
        r["tier_writes"] = delta(b1, b0, "extension_page_writes")
        r["tier_hit_pct"] = ratio(None if delta(b1, b0, "hits") is None else
                                  100.0 * delta(b1, b0, "hits"), delta(b1, b0, "lookups"))
        tr_ms = delta(b1, b0, "read_time_ms")
        r["tier_read_us"] = ratio(tr_ms * 1000 if tr_ms is not None else None, r["tier_reads"])
        r["tier_reads_ps"] = ratio(r["tier_reads"], secs)
        # --tier-latency: the emulated SSD's reads in flight, sampled.
        inflight = r.get("tier_inflight") or {}
        r["tier_inflight_mean"] = inflight.get("mean")
        r["tier_inflight_max"] = inflight.get("max")
        r["tier_writes_ps"] = ratio(r["tier_writes"], secs)
        # CPU time of the server's processes (its cgroup) per transaction,
        # and the bpext tier worker's per second of the run.
        cpu_ns = r.get("server_cpu_ns")
        r["server_cpu_us_per_txn"] = ratio(None if cpu_ns is None else cpu_ns / 1000.0,
                                           r["transactions"])
        r["worker_cpu_ms_per_s"] = ratio(r.get("worker_cpu_ms"), secs)
        r["tier_pushed"] = delta(b1, b0, "pages_pushed")
        r["tier_dual_written"] = delta(b1, b0, "pages_dual_written")
        r["tier_evictions"] = delta(b1, b0, "extension_page_evictions")
        # bpext 1.2: clean main-fork pages that left shared buffers, and
        # those of them the tier did not hold (the push missed them).
        r["clean_evictions"] = delta(b1, b0, "clean_evictions")
        r["missed_pushes"] = delta(b1, b0, "missed_pushes")
        r["push_captured_pct"] = ratio(
            None if r["missed_pushes"] is None or not r["clean_evictions"]
            else 100.0 * (r["clean_evictions"] - r["missed_pushes"]), r["clean_evictions"])

    workloads = [w for w in params["workloads"].split(",")]
    overhead_workloads = [w for w in params["overhead_workloads"].split(",")]
    ram_workloads = params.get("ram_workloads", "select").split(",")
    # E/E0's and M's workloads count only where they ran.
    all_workloads = list(workloads)
    if any(r["config"] in ("E", "E0") for r in runs):
        all_workloads += [w for w in overhead_workloads if w not in all_workloads]
    if any(r["config"] in ("M0", "MS", "ML") for r in runs):
        all_workloads += [w for w in ram_workloads if w not in all_workloads]

    # Throughput per configuration and workload: measured runs only (tag
    # "main"; E and E0: the mean over their rounds).
    tps = {}
    lat = {}
    for w in all_workloads:
        for c in CONFIG_ORDER:
            sel = [r for r in runs if r["config"] == c and r["workload"] == w
                   and r["tag"] not in ("cold", "warmup") and r["tps"] is not None]
            if sel:
                tps[(c, w)] = statistics.mean(r["tps"] for r in sel)
                lat[(c, w)] = statistics.mean(r["latency_ms"] for r in sel
                                              if r["latency_ms"] is not None)
    present = [c for c in CONFIG_ORDER if any((c, w) in tps for w in all_workloads)]

    lines = []
    p = params
    lines.append("# bpext benchmark results\n")
    lines.append(f"Command: `{p['command']}`  ")
    lines.append(f"Started {p['started']} on {p['host']} ({p['cpus']} CPUs, "
                 f"{p['mem_total_kb'] // 1024} MB RAM, kernel {p['kernel']}, cgroup {p['cgroup']}), "
                 f"{p['postgres']}, bpext {p['bpext_commit']}.  ")
    lines.append(f"pgbench scale {p['scale']} (database {p['db_bytes'] // 1048576} MB, "
                 f"pgbench_accounts {p['accounts_bytes'] // 1048576} MB + pkey "
                 f"{p['accounts_pkey_bytes'] // 1048576} MB), {p['clients']} clients "
                 f"({p['scan_clients']} for scan), {p['threads']} threads, -M {p['protocol']}, "
                 f"{p['duration']} s per run ({p['overhead_duration']} s x {p['rounds']} rounds for E/E0).  ")
    lines.append(f"Slow disk: {p['read_iops']} read / {p['write_iops']} write IOPS"
                 f"{', %d MB/s' % p['mbps'] if p['mbps'] else ''}, read_ahead_kb {p['readahead_kb']}. "
                 f"RAM budget {p['ram_mb']} MB with shared_buffers {p['shared_buffers_mb']} MB "
                 f"(D/E/E0: {p['big_ram_mb']} MB with {p['big_shared_buffers_mb']} MB). "
                 f"Tier {p['tier_size_mb']} MB, admission {p['admission']}, "
                 f"write_policy {p['write_policy']}, direct_io {p.get('direct_io', 'on')}"
                 f"{', tier_read_depth %s' % p['tier_read_depth'] if p.get('tier_read_depth', 'default') != 'default' else ''}"
                 f"{', tier_readers %s' % p['tier_readers'] if p.get('tier_readers', 'default') != 'default' else ''}. "
                 f"Tier file {'on an emulated SSD, %d us a request' % p['tier_latency_us'] if p.get('tier_latency_us') else 'on the fast disk'}. "
                 f"Skew: {p['skew']}.\n")

    # -- the main table
    lines.append("## Throughput (TPS)\n")
    head = ["workload"] + [CONFIG_LABEL[c] for c in present]
    extra = []
    if "B" in present and "A" in present:
        extra.append("B/A")
    if "B" in present and "C" in present:
        extra.append("B/C")
    if "B" in present and "D" in present:
        extra.append("B/D")
    if "E" in present and "E0" in present:
        extra.append("E overhead")
    lines.append("| " + " | ".join(head + extra) + " |")
    lines.append("|" + "---|" * (len(head) + len(extra)))
    csv_rows = []
    for w in all_workloads:
        row = [WORKLOAD_LABEL[w]]
        for c in present:
            row.append(fmt(tps.get((c, w)), 1 if (tps.get((c, w)) or 0) < 100 else 0))
            if (c, w) in tps:
                csv_rows.append({"workload": w, "config": c, "tps": round(tps[(c, w)], 3),
                                 "latency_ms": round(lat.get((c, w)) or 0, 3)})
        if "B/A" in extra:
            per_round = ab_rounds(runs, w)
            ba = statistics.median(x[3] for x in per_round) if per_round else None
            row.append(fmt(ba, 2, "x"))
        if "B/C" in extra:
            row.append(fmt(ratio(tps.get(("B", w)), tps.get(("C", w))), 2))
        if "B/D" in extra:
            row.append(fmt(ratio(tps.get(("B", w)), tps.get(("D", w))), 2))
        if "E overhead" in extra:
            e, e0 = tps.get(("E", w)), tps.get(("E0", w))
            row.append(fmt(None if e is None or e0 is None else 100.0 * (e0 - e) / e0, 1, "%"))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    if "B/A" in extra:
        lines.append("B/A is the median over the A/B rounds (%d, ABBA order; each run its own "
                     "server start on a fresh copy of the dataset); TPS are means over the rounds.\n"
                     % p.get("ab_rounds", 1))

    # -- B/A per round of the alternation
    nrounds = max((len(ab_rounds(runs, w)) for w in workloads), default=0)
    if nrounds > 1:
        lines.append("## B/A per round\n")
        lines.append("| workload | " + " | ".join(f"round {n}" for n in range(1, nrounds + 1))
                     + " | median | min - max |")
        lines.append("|" + "---|" * (nrounds + 3))
        for w in workloads:
            per_round = ab_rounds(runs, w)
            if not per_round:
                continue
            cells = {n: f"{b / a:.2f} ({fmt(a)} / {fmt(b)})" for n, a, b, _ in per_round}
            vals = [x[3] for x in per_round]
            lines.append(f"| {WORKLOAD_LABEL[w]} | "
                         + " | ".join(cells.get(n, "-") for n in range(1, nrounds + 1))
                         + f" | {statistics.median(vals):.2f} | {min(vals):.2f} - {max(vals):.2f} |")
        lines.append("\nEach cell: B/A (A TPS / B TPS).\n")

    # -- data in RAM: bpext against no bpext, per round
    ram = {(w, c): ram_rounds(runs, w, c) for w in ram_workloads for c in ("MS", "ML")}
    if any(ram.values()):
        lines.append("## Data in RAM: bpext against no bpext\n")
        lines.append(f"Data on the fast disk, read into the page cache, no memory limit, "
                     f"shared_buffers {p['shared_buffers_mb']} MB; MS: a tier of "
                     f"{p.get('ram_tier_small_mb')} MB, smaller than the database; ML: a tier of "
                     f"{p.get('ram_tier_large_mb')} MB that holds it.  Each run its own server "
                     f"start on a fresh copy of the dataset, after {p.get('ram_warmup')} s of "
                     f"select-only; rounds in M0 MS ML, ML MS M0 order.\n")
        nr = max(len(v) for v in ram.values())
        rounds_table(lines, ram, nr, lambda c: f"{c}/M0",
                     lambda v, a, b: f"{v:.3f} ({fmt(a)} / {fmt(b)})")
        lines.append("\nEach cell: ratio (M0 TPS / bpext TPS).\n")
        ram_cpu = {(w, c): ram_rounds(runs, w, c, "server_cpu_us_per_txn")
                   for w in ram_workloads for c in ("MS", "ML")}
        if any(ram_cpu.values()):
            lines.append("CPU time of the server's processes per transaction, from its cgroup "
                         "(user and system, every backend and worker; pgbench not included), "
                         "in the same runs:\n")
            rounds_table(lines, ram_cpu, nr, lambda c: f"M0/{c}",
                         lambda v, a, b: f"{v:.3f} ({a:.1f} / {b:.1f})")
            lines.append("\nEach cell: ratio (M0 us / bpext us of server CPU per transaction); "
                         "below 1, bpext's server costs more CPU per transaction.\n")

    # -- perf profiles (--profile): the server's CPU by library
    profiled = [r for r in sorted(runs, key=lambda r: r["t0"]) if r.get("profile")]
    if profiled:
        lines.append("## The server's CPU by library (perf)\n")
        lines.append(f"Samples of every CPU (cpu-clock, 999 Hz) for {p.get('profile_seconds')} s "
                     "of each measured run, from its 3rd second; each cell a percentage of the "
                     "samples of the server's processes (those of its cgroup), the last column "
                     "their share of all samples (the rest: pgbench, idle, other processes).  "
                     "Each library's own samples: what bpext.so calls in PostgreSQL, libc or the "
                     "kernel counts there.  `runs/*.profile.txt` has the symbols.\n")
        lines.append("| config | workload | round | bpext.so | postgres | kernel | libc | other | "
                     "server, of all samples |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for r in profiled:
            prof = dict(r["profile"])
            server = prof.pop("samples_share", None)
            named = [prof.pop(k, None) for k in ("bpext.so", "postgres", "[kernel.kallsyms]")]
            libc = sum(v for k, v in list(prof.items()) if k.startswith("libc"))
            other = sum(v for k, v in prof.items() if not k.startswith("libc"))
            lines.append(f"| {r['config']} | {r['workload']} | {r.get('round', 1)} | "
                         + " | ".join("" if v is None else f"{v:.1f}%"
                                      for v in named + [libc, other])
                         + f" | {fmt(server, 1, '%')} |")
        lines.append("")

    # -- per-run detail
    lines.append("## Runs\n")
    lines.append("| config | workload | run | round | TPS | latency ms | data disk r/s | w/s | "
                 "shared-buffer misses/txn | read latency us | tier hit % | tier reads/s | "
                 "tier writes/s | tier read us | SSD reads in flight, mean / max | "
                 "server CPU us/txn | bpext worker CPU ms/s | load |")
    lines.append("|" + "---|" * 18)
    ordered = sorted(runs, key=lambda r: r["t0"])
    for r in ordered:
        lines.append("| " + " | ".join([
            r["config"], r["workload"], r["tag"], str(r.get("round", 1)), fmt(r["tps"], 1),
            fmt(r["latency_ms"], 2),
            fmt(r["disk_rps"]), fmt(r["disk_wps"]), fmt(r["sb_misses_per_txn"], 2),
            fmt(r["read_latency_us"]), fmt(r["tier_hit_pct"], 1), fmt(r["tier_reads_ps"]),
            fmt(r["tier_writes_ps"]), fmt(r["tier_read_us"]),
            "-" if r["tier_inflight_mean"] is None
            else f"{r['tier_inflight_mean']:.1f} / {r['tier_inflight_max']}",
            fmt(r["server_cpu_us_per_txn"], 1), fmt(r["worker_cpu_ms_per_s"], 1),
            r["load"].split()[0]]) + " |")
    lines.append("")

    # -- double caching: the page cache after each run of A and B
    if caches:
        lines.append("## Page cache after each run (pgbench_accounts and its key)\n")
        lines.append("| config | workload | run | round | data files MB | tier file MB | "
                     "cached twice MB | share of the tier's cached pages cached twice | "
                     "dirty or under writeback MB |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for e in caches:
            c = e["cache"]
            mb = lambda n: "-" if n is None else f"{n * 8192 / 1048576:,.0f}"
            tier_res = c.get("tier_resident_pages")
            both = c.get("double_cached_pages")
            lines.append(f"| {e['config']} | {e['workload']} | {e['tag']} | {e.get('round', 1)} | "
                         f"{mb(c['data_resident_pages'])} | {mb(tier_res)} | {mb(both)} | "
                         f"{fmt(ratio(None if both is None else 100.0 * both, tier_res), 1, '%')} | "
                         f"{fmt(None if e.get('dirty_bytes') is None else e['dirty_bytes'] / 1048576)} |")
        lines.append("\nMeasured with mincore(2) right after each run (test/bench/page_cache.py). "
                     "\"Cached twice\": a block resident both as a data-file page and as its "
                     "copy in the tier file, inside the same memory budget. Dirty: the server's "
                     "memory cgroup's dirty and under-writeback page cache (all files).\n")

    # -- warm-ups
    if prewarms:
        lines.append("## Warm-up before the measured runs\n")
        lines.append("| config | function | relation | pages | MB | seconds | MB/s | data disk r/s |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for e in prewarms:
            mb = e["pages"] * 8192 / 1048576
            rps = delta(e["dev_after"], e["dev_before"], "reads") / max(e["seconds"], 1e-3)
            fn = e["function"] + (f" ({e['mode']})" if e["mode"] else "")
            lines.append(f"| {e['config']} | {fn} | {e['relation']} | {e['pages']} | {mb:,.0f} | "
                         f"{e['seconds']:.1f} | {mb / max(e['seconds'], 1e-3):,.0f} | "
                         f"{fmt(rps) if e['config'] in slow_configs else '-'} |")
        lines.append("")

    # -- derived figures and targets
    derived = []
    targets = []

    def target(name, value, goal, ok):
        targets.append((name, value, goal, "met" if ok else ("missed" if ok is not None else "n/a")))

    for w in all_workloads:
        per_round = ab_rounds(runs, w)
        bc = ratio(tps.get(("B", w)), tps.get(("C", w)))
        if per_round:
            vals = [x[3] for x in per_round]
            ba = statistics.median(vals)
            # One line per workload, "B/A <workload>: <r>x speed-up (<A> -> <B> TPS)"
            # first: test/demo.sh reads it.
            rounds = (f", the median of {len(vals)} rounds ({', '.join(f'{v:.2f}' for v in vals)}; "
                      f"TPS are means)" if len(vals) > 1 else "")
            derived.append(f"B/A {WORKLOAD_LABEL[w]}: {ba:.2f}x speed-up "
                           f"({tps[('A', w)]:,.0f} -> {tps[('B', w)]:,.0f} TPS){rounds}")
            # The tier must never make a workload slower; select-only must gain.
            if w == "select":
                target("B/A select-only (median of rounds)", f"{ba:.2f}x", ">= 10x", ba >= 10)
            else:
                target(f"B/A {WORKLOAD_LABEL[w]} (median of rounds)", f"{ba:.2f}", ">= 0.97",
                       ba >= 0.97)
        if bc is not None:
            derived.append(f"B/C {WORKLOAD_LABEL[w]}: {bc:.2f} of the SSD ceiling "
                           f"({tps[('C', w)]:,.0f} TPS)")
    for w in ("select", "tpcb"):
        v = ratio(tps.get(("B", w)), tps.get(("C", w)))
        if v is not None:
            target(f"B/C {WORKLOAD_LABEL[w]}", f"{v:.2f}", ">= 0.9", v >= 0.9)
    for w in ("select",):
        for c, goal in (("A", "~600"), ("C", "~17,000")):
            if (c, w) in tps:
                target(f"{c} select-only TPS", f"{tps[(c, w)]:,.0f}", goal, None)

    for (w, c), per_round in ram.items():
        if not per_round:
            continue
        vals = [x[3] for x in per_round]
        med = statistics.median(vals)
        derived.append(f"{c}/M0 {WORKLOAD_LABEL[w]} (data in RAM): {med:.3f}, the median of "
                       f"{len(vals)} rounds ({', '.join(f'{v:.3f}' for v in vals)})")
        target(f"{c}/M0 {WORKLOAD_LABEL[w]}, data in RAM (median of rounds)", f"{med:.3f}",
               ">= 0.97", med >= 0.97)
        cpu_vals = [x[3] for x in ram_rounds(runs, w, c, "server_cpu_us_per_txn")]
        if cpu_vals:
            cpu_med = statistics.median(cpu_vals)
            # Not a target: it moves with the host as the TPS do
            # (test/bench/side_by_side.sh is the measure that does not).
            derived.append(f"M0/{c} server CPU per transaction {WORKLOAD_LABEL[w]} (data in RAM): "
                           f"{cpu_med:.3f}, the median of {len(cpu_vals)} rounds "
                           f"({', '.join(f'{v:.3f}' for v in cpu_vals)})")
    for r in runs:
        if r["config"] in ("MS", "ML") and r["tag"] == "main" and r.get("bpext_after"):
            b1 = r["bpext_after"]
            derived.append(f"{r['config']} {WORKLOAD_LABEL[r['workload']]} round {r.get('round', 1)}: "
                           f"admission {'paused' if b1.get('admission_paused') else 'admitting'} at the "
                           f"end ({b1.get('admission_pauses', '-')} pauses, "
                           f"{b1.get('admission_resumes', '-')} resumes since start), "
                           f"{fmt(r['tier_pushed'])} pushed, {fmt(r['tier_evictions'])} tier evictions "
                           f"and tier hit {fmt(r['tier_hit_pct'], 1)}% in the measured run")

    for w in overhead_workloads:
        e_runs = {r["tag"]: r["tps"] for r in runs if r["config"] == "E" and r["workload"] == w}
        e0_runs = {r["tag"]: r["tps"] for r in runs if r["config"] == "E0" and r["workload"] == w}
        pairs = [(e0_runs[t], e_runs[t]) for t in sorted(e_runs) if t in e0_runs
                 and e_runs[t] and e0_runs[t]]
        if pairs:
            e0m = statistics.mean(p[0] for p in pairs)
            em = statistics.mean(p[1] for p in pairs)
            ov = 100.0 * (e0m - em) / e0m
            per_round = ", ".join(f"{100.0 * (a - b) / a:+.1f}%" for a, b in pairs)
            spread = ""
            if len(pairs) > 1:
                sd0 = statistics.pstdev(p[0] for p in pairs) / e0m * 100
                spread = f"; E0 run-to-run spread {sd0:.1f}%"
            derived.append(f"E overhead {WORKLOAD_LABEL[w]}: {ov:+.1f}% "
                           f"(E0 {e0m:,.0f} vs E {em:,.0f} TPS; per round {per_round}{spread})")
            target(f"E overhead {WORKLOAD_LABEL[w]}", f"{ov:+.1f}%", "<= 2%", ov <= 2.0)

    for c, t in tiers.items():
        conf = t.get("configuration") or {}
        st = t.get("stats") or {}
        mbpp = conf.get("map_bytes_per_page")
        derived.append(f"{c}: shared memory per tier page (map_bytes_per_page): {mbpp} bytes; "
                       f"tier {conf.get('allocated_pages')} pages allocated, state "
                       f"{conf.get('state_description')}"
                       + (f", last error: {conf['last_error']}" if conf.get("last_error") else ""))
        if c == "B" and mbpp is not None:
            target("shared memory per tier page", f"{mbpp} bytes", "<= 40 bytes", mbpp <= 40)
        if st:
            derived.append(
                f"{c}: since its last server start: {st['extension_page_writes']:,} pages written to the tier "
                f"({st['pages_prewarmed']:,} prewarm, {st['pages_pushed']:,} pushed at eviction, "
                f"{st['pages_dual_written']:,} dual-written, {st['pages_read_admitted']:,} "
                f"read-admitted), {st['extension_page_reads']:,} served; write amplification "
                f"{fmt(ratio(st['extension_page_writes'], st['extension_page_reads']), 2)}; "
                f"{st['invalidations']:,} invalidations, {st['publish_races']:,} publish races, "
                f"{st['extension_page_evictions']:,} evictions, {st['crc_failures']} CRC failures, "
                f"{st['io_errors']} I/O errors")
    b_runs = [r for r in runs if r["config"] == "B" and r["tag"] == "main"]
    if b_runs:
        w_sum = sum(r["tier_writes"] or 0 for r in b_runs)
        r_sum = sum(r["tier_reads"] or 0 for r in b_runs)
        derived.append(f"B: tier write amplification in the measured runs (extension_page_writes / "
                       f"extension_page_reads): {fmt(ratio(w_sum, r_sum), 3)} "
                       f"({w_sum:,} written / {r_sum:,} served)")
        for r in b_runs:
            derived.append(f"B {WORKLOAD_LABEL[r['workload']]}: write amplification "
                           f"{fmt(ratio(r['tier_writes'], r['tier_reads']), 3)}, tier hit "
                           f"{fmt(r['tier_hit_pct'], 1)}%, tier read {fmt(r['tier_read_us'])} us, "
                           f"{fmt(r['tier_reads_ps'])} tier reads/s, data disk "
                           f"{fmt(r['disk_rps'])} r/s {fmt(r['disk_wps'])} w/s, "
                           f"{fmt(r['tier_pushed'])} pushed, {fmt(r['tier_dual_written'])} dual-written, "
                           f"{fmt(r['tier_evictions'])} tier evictions, "
                           f"{fmt(r['clean_evictions'])} clean evictions from shared buffers of which "
                           f"{fmt(r['missed_pushes'])} missed by the push")
    # The push's share of clean evictions, where the tier fills by evictions
    # alone: B's cold start (no prewarm), select-only.
    for r in runs:
        if r["config"] == "B" and r["tag"] == "cold" and r.get("clean_evictions") == 0:
            derived.append("B cold start select-only: no clean page left shared buffers (they "
                           "were still filling); --cold-seconds 60 or more measures the push")
        if r["config"] == "B" and r["tag"] == "cold" and r.get("push_captured_pct") is not None:
            derived.append(f"B cold start select-only: the tier captured {r['push_captured_pct']:.1f}% "
                           f"of the {r['clean_evictions']:,} clean main-fork pages that left shared "
                           f"buffers ({r['missed_pushes']:,} missed pushes)")
            target("clean evictions captured by the tier, B cold start select-only",
                   f"{r['push_captured_pct']:.1f}%", ">= 95%", r["push_captured_pct"] >= 95)
    slowest_prewarm = None
    for e in prewarms:
        if e["function"] == "bpext_prewarm":
            mb = e["pages"] * 8192 / 1048576
            derived.append(f"{e['config']}: bpext_prewarm({e['relation']}): {e['pages']:,} pages "
                           f"({mb:,.0f} MB) in {e['seconds']:.1f} s ({mb / max(e['seconds'], 1e-3):,.0f} MB/s)")
            if e["relation"] == "pgbench_accounts" and \
                    (slowest_prewarm is None or e["seconds"] > slowest_prewarm["seconds"]):
                slowest_prewarm = e
    if slowest_prewarm:
        e = slowest_prewarm
        target(f"bpext_prewarm pgbench_accounts ({e['pages'] * 8192 / 1048576:,.0f} MB, "
               f"the slowest)", f"{e['seconds']:.1f} s", "< 60 s", e["seconds"] < 60)
    for c, mems in memory.items():
        m = mems[-1]
        if m.get("max_usage"):
            derived.append(f"{c}: memory cgroup peak {m['max_usage'] / 1048576:,.0f} MB of "
                           f"{int(m['limit']) / 1048576:,.0f} MB limit, limit hit {m['failcnt']} times")
    cold = [r for r in runs if r["tag"] == "cold"]
    for r in cold:
        prog = r["progress"]
        if prog:
            n = max(1, len(prog) // 4)
            first = statistics.mean(x[1] for x in prog[:n])
            last = statistics.mean(x[1] for x in prog[-n:])
            derived.append(f"{r['config']} cold start select-only: {first:,.0f} TPS in the first "
                           f"quarter, {last:,.0f} in the last ({r['tps'] or 0:,.0f} overall)")

    restart = restart_figures(runs)
    if restart:
        lines.append("## After a clean restart (select-only)\n")
        lines.append("| configuration | tier start | steady TPS before | TPS in the first 10 s | "
                     "time to 90% of steady |")
        lines.append("|---|---|---|---|---|")
        for c, f in restart.items():
            conf = (tiers.get(c) or {}).get("configuration") or {}
            mode = conf.get("start_mode", "-") if c != "R0" else "-"
            if conf.get("cold_start_reason"):
                mode += f" ({conf['cold_start_reason']})"
            t90 = f"{f['t90']:.0f} s" if f["t90"] is not None else f"not within {f['seconds']:.0f} s"
            lines.append(f"| {c} {RESTART_LABEL[c]} | {mode} | {fmt(f['steady'])} | "
                         f"{fmt(f['first10'])} | {t90} |")
            derived.append(f"{c} ({RESTART_LABEL[c]}): after a clean restart, 90% of its steady "
                           f"{f['steady']:,.0f} TPS reached {t90 if f['t90'] is None else 'after ' + t90}"
                           f"; {fmt(f['first10'])} TPS in the first 10 s")
        lines.append("")
        if "RW" in restart and "RC" in restart and restart["RW"]["t90"] is not None:
            warm_t = max(restart["RW"]["t90"], 1.0)
            cold_t = restart["RC"]["t90"]
            if cold_t is not None:
                v = cold_t / warm_t
                value = f"{v:.1f}x ({warm_t:.0f} s vs {cold_t:.0f} s)"
            else:
                v = restart["RC"]["seconds"] / warm_t
                value = f"> {v:.0f}x ({warm_t:.0f} s vs not within {restart['RC']['seconds']:.0f} s)"
            derived.append(f"warm restart: 90% of steady select-only TPS {value} sooner than a cold tier")
            target("warm vs cold restart, time to 90% of steady select-only TPS", value,
                   ">= 10x sooner", v >= 10)

    for e in entries:
        if e["kind"] == "failure":
            derived.append(f"{e['config']}: FAILED: {e['what']} (see logs/server-{e['config']}.log)")
    lines.append("## Derived figures\n")
    lines += [f"* {d}" for d in derived]
    lines.append("")
    if targets:
        lines.append("## Targets (benchmark figures, not assertions)\n")
        lines.append("| figure | value | target | |")
        lines.append("|---|---|---|---|")
        for t in targets:
            lines.append(f"| {t[0]} | {t[1]} | {t[2]} | {t[3]} |")
        lines.append("")

    md = "\n".join(lines)
    open(os.path.join(res, "results.md"), "w").write(md)
    open(os.path.join(res, "derived.txt"), "w").write("\n".join(derived) + "\n")

    with open(os.path.join(res, "results.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=["workload", "config", "tps", "latency_ms"])
        wr.writeheader()
        wr.writerows(csv_rows)
    fields = ["config", "workload", "tag", "round", "clients", "seconds", "tps", "latency_ms",
              "transactions", "failed", "disk_rps", "disk_wps", "sb_misses_per_txn",
              "read_latency_us", "tier_hit_pct", "tier_reads", "tier_writes", "tier_read_us",
              "tier_pushed", "tier_dual_written", "tier_evictions", "clean_evictions",
              "missed_pushes", "tier_inflight_mean", "tier_inflight_max",
              "server_cpu_us_per_txn", "worker_cpu_ms_per_s", "mem_usage", "load", "status"]
    with open(os.path.join(res, "runs.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        wr.writeheader()
        for r in ordered:
            wr.writerow({k: (round(v, 3) if isinstance(v, float) else v)
                         for k, v in r.items() if k in fields})

    charts(res, runs, tps, present, all_workloads, restart)
    print(md)


def charts(res, runs, tps, present, workloads, restart):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no charts)")
        return

    if present:
        tps_chart(plt, res, tps, present, workloads)

    # Throughput over time: one panel per workload (each configuration's
    # measured run; E/E0 their first round), the cold starts of A and B,
    # and the restarts of R.
    panels = [(w, "main") for w in workloads] if present else []
    if any(r["tag"] == "cold" for r in runs):
        panels.insert(0, ("select", "cold"))
    if restart:
        panels.insert(0, ("select", "restart"))
    if not panels:
        return
    timeline_chart(plt, res, runs, restart, panels)


def tps_chart(plt, res, tps, present, workloads):
    """Throughput per configuration, grouped by workload, log scale."""
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 4.6), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        cs = [c for c in present if (c, w) in tps]
        vals = [tps[(c, w)] for c in cs]
        bars = ax.bar(range(len(cs)), vals, color=[COLORS[c] for c in cs])
        ax.set_xticks(range(len(cs)))
        ax.set_xticklabels(cs)
        ax.set_yscale("log")
        if vals:
            ax.set_ylim(bottom=10 ** math.floor(math.log10(max(min(vals), 1e-3))),
                        top=max(vals) * 2)
        ax.set_title(WORKLOAD_LABEL[w])
        ax.set_ylabel("TPS (log scale)")
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:,.0f}" if v >= 10 else f"{v:.2f}",
                        (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
        ax.grid(axis="y", which="both", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[c]) for c in present]
    fig.legend(handles, [CONFIG_LABEL[c] for c in present], loc="lower center",
               ncol=min(6, len(present)), fontsize=8)
    fig.suptitle("Throughput per configuration")
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    fig.savefig(os.path.join(res, "tps.png"), dpi=110)
    plt.close(fig)


def timeline_chart(plt, res, runs, restart, panels):
    """Throughput over time, one panel per (workload, run tag)."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.8 * len(panels)), squeeze=False)
    for ax, (w, tag) in zip(axes[:, 0], panels):
        drawn = []
        if tag == "restart":
            for c, f in restart.items():
                prog = f["run"]["progress"]
                ax.plot([x[0] for x in prog], [x[1] for x in prog], color=COLORS[c],
                        linewidth=1.2, label=f"{c} {RESTART_LABEL[c]}"
                        + (f" (90% at {f['t90']:.0f} s)" if f["t90"] is not None else " (90% not reached)"))
                ax.axhline(0.9 * f["steady"], color=COLORS[c], linestyle=":", linewidth=0.8)
            ax.set_title("select-only after a clean restart (dotted: 90% of each one's steady TPS "
                         "before the restart)", fontsize=10)
            ax.set_ylabel("TPS")
            ax.set_yscale("log")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
            continue
        for c in CONFIG_ORDER:
            sel = [r for r in runs if r["config"] == c and r["workload"] == w and
                   (r["tag"] == tag or (tag == "main" and c in ("E", "E0") and r["tag"] == "r1"))]
            if not sel or not sel[0]["progress"]:
                continue
            xs = [x[0] for x in sel[0]["progress"]]
            ys = [x[1] for x in sel[0]["progress"]]
            if w == "scan":   # a scan takes seconds: a 5 s moving average
                ys = [statistics.mean(ys[max(0, i - 4):i + 1]) for i in range(len(ys))]
            drawn.extend(y for y in ys if y > 0)
            ax.plot(xs, ys, label=CONFIG_LABEL[c], color=COLORS[c], linewidth=1.2)
        title = WORKLOAD_LABEL[w] + (" from a cold start (B: tier empty, no prewarm)"
                                     if tag == "cold" else " after warm-up")
        if w == "scan":
            title += " (5 s moving average)"
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("TPS")
        if drawn and max(drawn) / max(min(drawn), 1e-9) > 20:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", ncol=3)
    axes[-1, 0].set_xlabel("seconds into the run")
    fig.tight_layout()
    fig.savefig(os.path.join(res, "timeline.png"), dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
