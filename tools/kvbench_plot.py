#!/usr/bin/python3
"""Plots //tools:kvbench's --json lines: throughput and latency per target, as a PNG.

    bazel run //tools:kvbench -- --json ... > kv.jsonl
    tools/kvbench_plot.py kv.jsonl -o kvbench.png [--threads 1] [--workloads ycsb-b,ycsb-c]

(It runs on Debian's /usr/bin/python3 with python3-matplotlib, which install_deps.sh installs.)

With --markdown it prints the comparison as a Markdown table (the README's) instead.

One row of panels per farm provider (shm; tcp;ofi_rxm), each with the peers that ran over the
matching transport. Left: operations per second (log scale), one group of bars per workload,
distribution and operations in flight, one bar per target. Right: the same groups' p50 latency
as bars and p99 as a dot above each bar (log scale). Reads stdin when no file is given.
Exit status: 0 ok, 1 no usable lines, 2 bad arguments.
"""

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display: write the file only
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

# farm's MultiGet paths asked by name (kvbench --multi_get=read,rpc) are targets of their own
# ("farm/read", "farm/rpc"); --multi_get=auto's lines stay "farm".
FARMS = ["farm", "farm/read", "farm/rpc"]
TARGETS = (FARMS + ["farm-rpc"] + [t + "/adaptive" for t in FARMS + ["farm-rpc"]]
           + ["memcached", "memcached-buf", "redis"])
PEERS = ("memcached", "memcached-buf", "redis")
COLOURS = {"farm": "#1f77b4", "farm/read": "#17becf", "farm/rpc": "#393b79",
           "farm-rpc": "#9ecae1", "farm/adaptive": "#2ca02c", "farm/read/adaptive": "#bcbd22",
           "farm/rpc/adaptive": "#637939", "farm-rpc/adaptive": "#98df8a",
           "memcached": "#ff7f0e", "memcached-buf": "#ffbb78", "redis": "#d62728"}
REQUIRED = ["target", "provider", "transport", "workload", "distribution", "threads", "in_flight",
            "ops_per_s", "p50_us", "p99_us"]


def read_rows(paths):
    rows = []
    streams = [open(p) for p in paths] if paths else [sys.stdin]
    for stream in streams:
        for line in stream:
            line = line.strip()
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            missing = [k for k in REQUIRED if k not in row]
            if missing:
                raise ValueError("a line lacks %s: %s" % (", ".join(missing), line))
            if row["target"] == "farm" and row.get("multi_get_asked") in ("read", "rpc"):
                row["target"] += "/" + row["multi_get_asked"]
            # farm measured with adaptive polling (kvbench --poll=busy,adaptive) is a target of
            # its own here, beside busy polling's.
            if row.get("poll") == "adaptive":
                row["target"] += "/adaptive"
            rows.append(row)
    # Repeated runs (kvbench --repeat N): the summary lines (repeat 0, the runs' medians) stand
    # for their points.
    if any(r.get("repeat") == 0 for r in rows):
        rows = [r for r in rows if r.get("repeat") == 0]
    return rows


def group_label(key):
    workload, dist, in_flight = key
    return "%s\n%s\n%d in flight" % (workload, dist, in_flight)


def plot(rows, threads, out):
    providers = sorted({r["provider"] for r in rows}, key=lambda p: (p != "shm", p))
    fig, axes = plt.subplots(len(providers), 2, figsize=(16, 5.2 * len(providers)), squeeze=False)
    for row_axes, provider in zip(axes, providers):
        mine = [r for r in rows if r["provider"] == provider and r["threads"] == threads]
        groups = sorted({(r["workload"], r["distribution"], r["in_flight"]) for r in mine})
        targets = [t for t in TARGETS if any(r["target"] == t for r in mine)]
        width = 0.8 / max(1, len(targets))
        for i, target in enumerate(targets):
            by_group = {(r["workload"], r["distribution"], r["in_flight"]): r
                        for r in mine if r["target"] == target}
            xs = [g + (i - (len(targets) - 1) / 2) * width for g in range(len(groups))]
            found = [by_group.get(g) for g in groups]
            transport = next((r["transport"] for r in found if r), "")
            label = "%s (%s)" % (target, transport)
            row_axes[0].bar(xs, [r["ops_per_s"] if r else 0 for r in found], width,
                            color=COLOURS[target], label=label)
            row_axes[1].bar(xs, [r["p50_us"] if r else 0 for r in found], width,
                            color=COLOURS[target], label=label + " p50")
            row_axes[1].plot([x for x, r in zip(xs, found) if r],
                             [r["p99_us"] for r in found if r], "o", color="black",
                             markersize=3, label="p99" if i == 0 else None)
        for ax, title, unit in ((row_axes[0], "throughput", "operations per second"),
                                (row_axes[1], "latency: p50 (bars), p99 (dots)", "µs")):
            ax.set_yscale("log")
            bottom, top = ax.get_ylim()
            ax.set_ylim(bottom, top * 6)  # room for the legend above the bars
            ax.set_xticks(range(len(groups)))
            ax.set_xticklabels([group_label(g) for g in groups], fontsize=7)
            ax.set_ylabel(unit)
            ax.set_title("farm on %s, peers over %s, %d client thread%s: %s"
                         % (provider, "Unix sockets" if provider == "shm" else "TCP", threads,
                            "" if threads == 1 else "s", title), fontsize=9)
            ax.grid(axis="y", which="both", alpha=0.3)
            ax.legend(fontsize=7, ncol=3, loc="upper left")
    keys = rows[0].get("keys", "?")
    fig.suptitle("kvbench: %s keys of %s B, values of %s B; store on CPUs %s, clients on CPUs %s"
                 % (keys, rows[0].get("key_size", "?"), rows[0].get("value_size", "?"),
                    rows[0].get("store_cpus") or "any", rows[0].get("client_cpus") or "any"))
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def fmt_ops(v):
    return "{:,.0f}".format(v) if v is not None else "-"


def markdown(rows):
    """One table of every point: the targets' ops/s, farm's ratios, p50 / p99."""
    providers = sorted({r["provider"] for r in rows}, key=lambda p: (p != "shm", p))
    names = [t for t in TARGETS if any(r["target"] == t for r in rows)]
    farms = [t for t in FARMS if t in names]
    peers = [t for t in PEERS if t in names]
    head = ["farm on (peers over)", "workload", "distribution", "threads", "in flight"]
    head += ["%s ops/s" % t for t in names]
    head += ["%s / %s" % (f, p) for f in farms for p in peers]
    head += ["%s p50 / p99 µs" % t for t in names]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|")
    for provider in providers:
        mine = [r for r in rows if r["provider"] == provider]
        transport = next((r["transport"] for r in mine if r["target"] in PEERS),
                         "unix" if provider == "shm" else "tcp")
        points = sorted({(r["workload"], r["distribution"], r["threads"], r["in_flight"])
                         for r in mine})
        by = {(r["target"], r["workload"], r["distribution"], r["threads"], r["in_flight"]): r
              for r in mine}
        for pt in points:
            got = {t: by.get((t,) + pt) for t in names}
            cells = ["%s (%s)" % (provider, transport), pt[0], pt[1], str(pt[2]), str(pt[3])]
            cells += [fmt_ops(got[t]["ops_per_s"] if got[t] else None) for t in names]
            for farm, peer in ((f, p) for f in farms for p in peers):
                f, p = got[farm], got[peer]
                cells.append("%.2f" % (f["ops_per_s"] / p["ops_per_s"])
                             if f and p and p["ops_per_s"] > 0 else "-")
            cells += ["%.1f / %.0f" % (got[t]["p50_us"], got[t]["p99_us"]) if got[t] else "-"
                      for t in names]
            print("| " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="kvbench --json output (default: stdin)")
    parser.add_argument("-o", "--output", default="kvbench.png", help="the PNG to write")
    parser.add_argument("--threads", type=int, default=0,
                        help="client threads to plot (default: the smallest in the data)")
    parser.add_argument("--markdown", action="store_true",
                        help="print a Markdown table of every point instead of plotting")
    parser.add_argument("--workloads", default="",
                        help="comma-separated workloads to plot (default: all in the data)")
    args = parser.parse_args()
    try:
        rows = read_rows(args.files)
    except (OSError, ValueError) as e:
        print("kvbench_plot: %s" % e, file=sys.stderr)
        return 1
    if args.workloads:
        wanted = set(args.workloads.split(","))
        rows = [r for r in rows if r["workload"] in wanted]
    if not rows:
        print("kvbench_plot: no kvbench JSON lines to plot", file=sys.stderr)
        return 1
    if args.markdown:
        markdown(rows)
        return 0
    threads = args.threads or min(r["threads"] for r in rows)
    if not any(r["threads"] == threads for r in rows):
        print("kvbench_plot: no lines with %d threads" % threads, file=sys.stderr)
        return 1
    plot(rows, threads, args.output)
    print("kvbench_plot: wrote %s" % args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
