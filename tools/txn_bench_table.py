#!/usr/bin/env python3
"""Turns //tools:txn_bench's --json lines into the README's bank table (Markdown).

  bazel run //tools:txn_bench -- ... --repeat=3 --json > busy.jsonl
  tools/txn_bench_table.py busy.jsonl [adaptive.jsonl ...]

One row per provider, distribution and threads per node: farm's bank transfers per second (one
column per farm poll mode and placement found in the files) and each peer's (Redis, Redis Lua,
PostgreSQL, PostgreSQL fn), then farm over each store's best variant. With --repeat the summary
lines (repeat 0: the runs' medians) stand for their points and the cells show the spread (min-max).
Farm's columns are compared with the peers measured beside them (same clients per point); a farm
column with no peers in its files is shown without ratios. Open-loop lines (--rate: their tx/s is
the offered rate's, not the target's capacity) are left out, with a note on stderr. Also prints the 1-write commit lines:
the remote commits' p50 against two RPC round trips of the same run.
"""

import argparse
import json
import os
import sys

PEERS = ["redis", "redis-lua", "postgres", "postgres-fn"]
PEER_NAMES = {"redis": "Redis", "redis-lua": "Redis Lua", "postgres": "PostgreSQL",
              "postgres-fn": "PostgreSQL fn"}
BEST = {"redis": ["redis", "redis-lua"], "postgres": ["postgres", "postgres-fn"]}


def read_rows(paths):
    rows = []
    skipped_open = [0]
    for path in paths:
        mine = []
        with open(path) as stream:
            for line in stream:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                row = json.loads(line)
                if row.get("kind") == "lease" or "tx_per_s" not in row:
                    continue
                if row.get("loop") == "open":
                    skipped_open[0] += 1
                    continue
                row["file"] = path
                mine.append(row)
        if any(r.get("repeat") == 0 for r in mine):
            mine = [r for r in mine if r.get("repeat") == 0]
        rows += mine
    if skipped_open[0]:
        print(f"txn_bench_table: left out {skipped_open[0]} open-loop line(s) (--rate): a closed "
              "loop's tx/s is a capacity, an open loop's the offered rate", file=sys.stderr)
    return rows


def farm_label(r):
    # Lines from before txn_bench printed "poll" are told apart by their file.
    poll = r.get("poll") or os.path.splitext(os.path.basename(r["file"]))[0]
    return "farm %s%s" % (poll, ", client node" if r.get("placement") == "client_node" else "")


def cell(r):
    if r is None:
        return "-"
    if "tx_per_s_min" in r:
        return "{:,.0f} ({:,.0f}–{:,.0f})".format(r["tx_per_s"], r["tx_per_s_min"],
                                                  r["tx_per_s_max"])
    return "{:,.0f}".format(r["tx_per_s"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", help="txn_bench --json output")
    args = parser.parse_args()
    try:
        rows = read_rows(args.files)
    except (OSError, ValueError) as e:
        print("txn_bench_table: %s" % e, file=sys.stderr)
        return 1
    bank = [r for r in rows if r["kind"] == "bank"]
    if not bank:
        print("txn_bench_table: no bank lines", file=sys.stderr)
        return 1
    farms = []
    for r in bank:
        if r["target"] == "farm" and farm_label(r) not in farms:
            farms.append(farm_label(r))
    peers = [p for p in PEERS if any(r["target"] == p for r in bank)]
    providers = sorted({r["provider"] for r in bank}, key=lambda p: (p != "shm", p))
    head = ["provider (peers over)", "choice", "threads/node (clients)"]
    head += ["%s tx/s" % f for f in farms] + [PEER_NAMES[p] for p in peers]
    stores = [s for s in BEST if any(p in peers for p in BEST[s])]
    head += ["%s / %s best" % (f, PEER_NAMES[s]) for f in farms for s in stores]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
    for provider in providers:
        mine = [r for r in bank if r["provider"] == provider]
        points = sorted({(r["dist"], r["threads"]) for r in mine})
        for dist, threads in points:
            at = [r for r in mine if r["dist"] == dist and r["threads"] == threads]
            farm = {f: next((r for r in at if r["target"] == "farm" and farm_label(r) == f), None)
                    for f in farms}
            got = {p: next((r for r in at if r["target"] == p), None) for p in peers}
            transport = next((r["transport"] for r in at if r["target"] != "farm"),
                             "unix" if provider == "shm" else "tcp")
            clients = sorted({r["clients"] for r in at})
            cells = ["%s (%s)" % (provider, transport), dist, "%d (%s)" % (
                threads, "/".join(str(c) for c in clients))]
            cells += [cell(farm[f]) for f in farms] + [cell(got[p]) for p in peers]
            for f in farms:
                for s in stores:
                    fr = farm[f]
                    # Ratios only against peers with the same clients, from the same file.
                    best = [got[p] for p in BEST[s] if got.get(p) is not None and fr is not None
                            and got[p]["clients"] == fr["clients"] and got[p]["file"] == fr["file"]]
                    best = max(best, key=lambda r: r["tx_per_s"]) if best else None
                    cells.append("%.2f" % (fr["tx_per_s"] / best["tx_per_s"])
                                 if best and best["tx_per_s"] > 0 else "-")
            print("| " + " | ".join(cells) + " |")
    print()
    for r in rows:
        if r["target"] != "farm" or r["kind"] != "write_1" or r.get("rpc_rtt_p50_us", 0) <= 0:
            continue
        bound = 2 * r["rpc_rtt_p50_us"]
        print("- %s %s %d thr (%s): remote 1-write commit p50 %.1f µs = %.1f× 2 × %.2f µs; "
              "all commits %.1f µs; %s tx/s" % (
                  r["provider"], r["dist"], r["threads"], farm_label(r), r["remote_p50_us"],
                  r["remote_p50_us"] / bound, r["rpc_rtt_p50_us"], r["p50_us"], cell(r)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
