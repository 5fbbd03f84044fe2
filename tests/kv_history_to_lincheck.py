#!/usr/bin/env python3
"""Merges the per-node logs of tests/kv_history_app.cc into one history in the format of
//tools/lincheck (tools/lincheck/README.md): a call with a return is a completed operation, a
call without one has an unknown outcome ("return": null), and a call marked "fail" certainly did
not happen and is left out.

  kv_history_to_lincheck.py OUT.json node0.jsonl node1.jsonl ...
"""
import json
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: kv_history_to_lincheck.py OUT.json LOG...")
    calls, rets, failed = {}, {}, set()
    for path in sys.argv[2:]:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    # A process killed in the middle of a write leaves a torn last line.
                    print(f"{path}:{n}: skipping a torn line", file=sys.stderr)
                    continue
                kind = ev.pop("ev")
                if kind == "call":
                    calls[ev["id"]] = ev
                elif kind == "ret":
                    rets[ev["id"]] = ev
                elif kind == "fail":
                    failed.add(ev["id"])
    ops = []
    unknown = 0
    for op_id, call in calls.items():
        if op_id in failed:
            continue
        op = {k: v for k, v in call.items() if k not in ("id", "time")}
        op["call"] = call["time"]
        ret = rets.get(op_id)
        if ret is None:
            op["return"] = None
            unknown += 1
        else:
            op["return"] = ret["time"]
            op.update({k: v for k, v in ret.items() if k not in ("id", "time")})
        ops.append(op)
    ops.sort(key=lambda o: o["call"])
    with open(sys.argv[1], "w") as f:
        json.dump({"operations": ops}, f)
    print(f"{len(ops)} operations ({unknown} with unknown outcome, {len(failed)} failed)")


if __name__ == "__main__":
    main()
