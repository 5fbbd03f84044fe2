"""Counts passed, failed and skipped test targets from a Bazel build-event JSON file.

Prints "PASSED FAILED SKIPPED". A test target that was requested but has no summary (it did not
build) counts as failed. Bazel 4.2 has no "skipped" status, so a test that cannot run here (not
root, no `ip netns`, ...) prints a line starting with SKIP_MARKER and exits 0; such a target is
read from each of its test logs (the testResult events' test.log outputs) and counted as skipped,
not passed. The reasons go to stderr.
"""
import json
import sys
from urllib.parse import unquote, urlparse

SKIP_MARKER = "FARM_TEST_SKIPPED:"


def skip_reason(uri):
    """The text after SKIP_MARKER in the log at `uri`, or None (also if the log is unreadable)."""
    path = unquote(urlparse(uri).path)
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith(SKIP_MARKER):
                    return line[len(SKIP_MARKER):].strip() or "no reason given"
    except OSError:
        return None
    return None


def main(path):
    passed, failed = set(), set()
    expected = set()
    reasons = {}  # label -> [skip reason or None, per test result]
    with open(path) as f:
        for line in f:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            ident = event.get("id", {})
            if "targetConfigured" in ident:
                kind = event.get("configured", {}).get("targetKind", "")
                if kind.split(" ")[0].endswith("_test"):
                    expected.add(ident["targetConfigured"]["label"])
            if "testResult" in ident:
                label = ident["testResult"]["label"]
                outputs = event.get("testResult", {}).get("testActionOutput", [])
                logs = [o["uri"] for o in outputs if o.get("name") == "test.log" and "uri" in o]
                reasons.setdefault(label, []).append(skip_reason(logs[0]) if logs else None)
            if "testSummary" in ident:
                label = ident["testSummary"]["label"]
                status = event.get("testSummary", {}).get("overallStatus", "NO_STATUS")
                (passed if status in ("PASSED", "FLAKY") else failed).add(label)
    failed |= expected - passed - failed
    # Skipped: passed, and every run of it (shards, attempts) said it skipped.
    skipped = {l for l in passed if reasons.get(l) and all(r is not None for r in reasons[l])}
    for label in sorted(skipped):
        print(f"skipped: {label}: {reasons[label][0]}", file=sys.stderr)
    print(len(passed - skipped), len(failed), len(skipped))


if __name__ == "__main__":
    main(sys.argv[1])
