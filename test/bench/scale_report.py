#!/usr/bin/env python3
"""The scale bench's table and plot (test/bench/scale.sh): results.md and
scale.png in RESULTS_DIR, from its results.csv (size,tier_pages,metric,value).

    python3 test/bench/scale_report.py RESULTS_DIR
"""
import csv
import os
import sys

# metric, label, format; the table's rows in this order.
ROWS = [
    ("map_bytes_per_page", "shared memory per tier page (B, bpext_configuration)", "{:.0f}"),
    ("shared_memory_MB", "shared memory of the server (MB)", "{:.0f}"),
    ("allocated_pages_at_stop", "tier pages in use at the stop", "{:,.0f}"),
    ("start_without_bpext_s", "start without bpext (s)", "{:.2f}"),
    ("start_cold_s", "start with bpext, cold (s)", "{:.2f}"),
    ("start_warm_s", "start with bpext, warm: first connection (s)", "{:.2f}"),
    ("warm_load_wall_s", "warm load done, from pg_ctl start (s)", "{:.2f}"),
    ("warm_load_logged_s", "warm load, as logged (s)", "{:.2f}"),
    ("stop_without_bpext_s", "clean stop without bpext (s)", "{:.2f}"),
    ("stop_s", "clean stop with bpext (s)", "{:.2f}"),
    ("stop_save_logged_ms", "map save, as logged (ms)", "{:.0f}"),
    ("enable_s", "bpext_enable (s)", "{:.2f}"),
    ("enable_stall_ms", "longest pgbench -S transaction during enable (ms)", "{:.1f}"),
    ("resize_down_s", "bpext_resize to half (s)", "{:.2f}"),
    ("resize_down_stall_ms", "longest pgbench -S transaction during it (ms)", "{:.1f}"),
    ("resize_up_s", "bpext_resize back up (s)", "{:.2f}"),
    ("resize_up_stall_ms", "longest pgbench -S transaction during it (ms)", "{:.1f}"),
    ("resize_up_baseline_max_ms", "longest pgbench -S transaction before an operation (ms)", "{:.1f}"),
    ("lookup_hit_ns", "lookup, hit (ns)", "{:.0f}"),
    ("lookup_miss_ns", "lookup, miss (ns)", "{:.0f}"),
    ("lookup_line_ns", "one index line, each read waiting for the last (ns)", "{:.0f}"),
    ("lookup_huge_hit_ns", "lookup, hit, huge_pages = on (ns)", "{:.0f}"),
    ("lookup_huge_miss_ns", "lookup, miss, huge_pages = on (ns)", "{:.0f}"),
    ("lookup_huge_line_ns", "one index line, each read waiting for the last, huge_pages = on (ns)",
     "{:.0f}"),
    ("lookup_hit_instructions", "lookup, hit (instructions, callgrind)", "{:.0f}"),
    ("lookup_miss_instructions", "lookup, miss (instructions, callgrind)", "{:.0f}"),
    ("lookup_hit_llc_misses", "lookup, hit (data reads missing the last-level cache, callgrind)", "{:.2f}"),
    ("lookup_miss_llc_misses", "lookup, miss (data reads missing the last-level cache, callgrind)", "{:.2f}"),
    ("worker_cpu_per_s", "tier worker CPU under pgbench -S (s/s)", "{:.3f}"),
    ("pgbench_S_tps", "pgbench -S, 4 clients (TPS)", "{:,.0f}"),
    ("descriptors_count_s", "count(*) of bpext_buffer_descriptors (s)", "{:.2f}"),
    ("descriptors_rows_per_s", "bpext_buffer_descriptors (rows/s)", "{:,.0f}"),
    ("relation_buffers_s", "count(*) of bpext_relation_buffers (s)", "{:.2f}"),
    ("buffer_summary_s", "count(*) of bpext_buffer_summary (s)", "{:.2f}"),
    ("synthetic_fill_s", "bpext_test_fill of the whole map (s)", "{:.1f}"),
    ("prewarm_MB_per_s", "bpext_prewarm (MB/s)", "{:.0f}"),
    ("flush_s", "bpext_flush (s)", "{:.2f}"),
    ("drop_clean_buffers_s", "bpext_drop_clean_buffers (s)", "{:.2f}"),
    ("drop_clean_buffers_stall_ms", "longest pgbench -S transaction during it (ms)", "{:.1f}"),
    ("drop_clean_worker_written_MB", "written by the tier worker and its helpers, the drop and 15 s after (MB)", "{:,.0f}"),
    ("drop_clean_tier_pages_written_MB", "of which tier pages, as bpext_stats counts them (MB)", "{:,.0f}"),
    ("drop_database_s", "DROP DATABASE, the sweep included (s)", "{:.2f}"),
]

# Plotted against tier pages: seconds (left), nanoseconds (right).
PLOT_SECONDS = ["start_warm_s", "warm_load_wall_s", "stop_s", "enable_s",
                "resize_down_s", "descriptors_count_s", "relation_buffers_s",
                "buffer_summary_s", "drop_database_s", "drop_clean_buffers_s",
                "flush_s"]
PLOT_NS = ["lookup_hit_ns", "lookup_miss_ns", "lookup_line_ns", "lookup_huge_hit_ns",
           "lookup_huge_miss_ns", "lookup_huge_line_ns"]


def size_label(gb, fill):
    name = f"{gb // 1024} TB" if gb >= 1024 and gb % 1024 == 0 else f"{gb} GB"
    return name + (" (synthetic)" if fill == "synthetic" else "")


def main(results):
    rows = list(csv.DictReader(open(os.path.join(results, "results.csv"))))
    # Columns: one per measured size; lookup figures join the column of
    # the same size.
    columns = []
    values = {}
    pages = {}
    for r in rows:
        gb = int(r["size"].split("GB")[0])
        fill = r["size"].split("-", 1)[1]
        if fill != "lookup" and (gb, fill) not in columns:
            columns.append((gb, fill))
        pages[gb] = int(r["tier_pages"])
    for r in rows:
        gb = int(r["size"].split("GB")[0])
        fill = r["size"].split("-", 1)[1]
        if fill == "lookup":
            col = next((c for c in columns if c[0] == gb), None)
            if col is None:
                col = (gb, "synthetic")
                columns.append(col)
        else:
            col = (gb, fill)
        try:
            values[(col, r["metric"])] = float(r["value"])
        except ValueError:
            pass
    columns.sort()

    out = []
    params = os.path.join(results, "params.txt")
    if os.path.exists(params):
        out += ["  \n".join(open(params).read().strip().splitlines()), ""]
    out.append("| | " + " | ".join(size_label(*c) for c in columns) + " |")
    out.append("|---|" + "---|" * len(columns))
    out.append("| tier pages | " + " | ".join(f"{pages[c[0]]:,}" for c in columns) + " |")
    for metric, label, fmt in ROWS:
        cells = [fmt.format(values[(c, metric)]) if (c, metric) in values else ""
                 for c in columns]
        if any(cells):
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    text = "\n".join(out) + "\n"
    open(os.path.join(results, "results.md"), "w").write(text)
    print(text)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot", file=sys.stderr)
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.5))
    labels = dict((m, l) for m, l, _ in ROWS)
    for axis, metrics, unit in ((ax1, PLOT_SECONDS, "seconds"), (ax2, PLOT_NS, "ns per lookup")):
        for m in metrics:
            pts = sorted((pages[c[0]], values[(c, m)]) for c in columns
                         if (c, m) in values and values[(c, m)] > 0)
            if pts:
                axis.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                          label=labels[m])
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("tier pages (8 kB)")
        axis.set_ylabel(unit)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    ax1.set_title("operations against tier size")
    ax2.set_title("map lookup cost against tier size")
    fig.tight_layout()
    fig.savefig(os.path.join(results, "scale.png"), dpi=110)
    print("plot:", os.path.join(results, "scale.png"))


if __name__ == "__main__":
    main(sys.argv[1])
