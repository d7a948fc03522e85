#!/usr/bin/env python3
"""The sizing-accuracy bench's table and plot (test/bench/sizing_accuracy.sh):
accuracy.md and sizing-accuracy.png in RESULTS_DIR, from its accuracy.tsv
and curves.tsv.  The plot has a panel per workload: the curve bpext_sizing
predicted with the tier off (its hot set measured in the same run), and
each measured tier hit ratio with the prediction made during that run.

    python3 test/bench/sizing_report.py RESULTS_DIR
"""
import csv
import os
import sys


def read_tsv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    results = sys.argv[1]
    accuracy = read_tsv(os.path.join(results, "accuracy.tsv"))
    curves = read_tsv(os.path.join(results, "curves.tsv"))

    lines = [
        "| workload | hot set (pages) | tier (share of hot set) | tier pages | misses | measured | predicted | difference (points) | dual-written | admission skips (a full store queue or index group) | sample rate at the end | sampled pages | pushes missed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for row in accuracy:
        diff = float(row["difference_points"])
        worst = max(worst, abs(diff))
        lines.append(
            "| {w} | {hot:,} | {f} | {tp:,} | {m:,} | {meas:.3f} | {pred:.3f} | {d:+.1f} | {dw:,} | {sk:,} | {r} | {sp:,} | {ms} |".format(
                w=row["workload"], hot=int(row["hot_set_pages"]), f=row["fraction"],
                tp=int(row["tier_pages"]), m=int(row["misses"]),
                meas=float(row["measured"]), pred=float(row["predicted"]), d=diff,
                dw=int(row["dual_written"]), sk=int(row["admission_skips"]),
                r=row.get("sample_rate", ""), sp=int(row.get("sampled_pages") or 0),
                ms=row.get("missed_push_share", "")))
    lines.append("")
    lines.append(f"Largest difference: {worst:.1f} points.")
    with open(os.path.join(results, "accuracy.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: the table is written, the plot is not")
        return
    workloads = list(dict.fromkeys(r["workload"] for r in accuracy))
    fig, axes = plt.subplots(1, len(workloads), figsize=(4 * len(workloads), 3.6),
                             sharey=True, squeeze=False)
    for ax, w in zip(axes[0], workloads):
        off = [(int(r["curve_tier_pages"]), float(r["predicted"]))
               for r in curves if r["workload"] == w and float(r["fraction"]) == 0]
        off.sort()
        hot = max(int(r["hot_set_pages"]) for r in accuracy if r["workload"] == w)
        off = [p for p in off if p[0] <= 4 * hot]
        ax.plot([p[0] for p in off], [p[1] for p in off], "-", color="tab:blue",
                label="predicted, tier off")
        runs = [r for r in accuracy if r["workload"] == w]
        ax.plot([int(r["tier_pages"]) for r in runs], [float(r["measured"]) for r in runs],
                "o", color="tab:red", label="measured")
        ax.plot([int(r["tier_pages"]) for r in runs], [float(r["predicted"]) for r in runs],
                "x", color="tab:blue", markersize=8, label="predicted in that run")
        ax.set_xscale("log", base=2)
        ax.set_title(w)
        ax.set_xlabel("tier size (8 kB pages)")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("tier hit ratio (of shared-buffer misses)")
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(results, "sizing-accuracy.png"), dpi=110)


if __name__ == "__main__":
    main()
