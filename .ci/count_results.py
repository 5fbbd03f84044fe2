"""Counts passed and failed test targets from a Bazel build-event JSON file.

Prints "PASSED FAILED". A test target that was requested but has no summary (it did not build)
counts as failed.
"""
import json
import sys


def main(path):
    passed, failed = set(), set()
    expected = set()
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
            if "testSummary" in ident:
                label = ident["testSummary"]["label"]
                status = event.get("testSummary", {}).get("overallStatus", "NO_STATUS")
                (passed if status in ("PASSED", "FLAKY") else failed).add(label)
    failed |= expected - passed - failed
    print(len(passed), len(failed))


if __name__ == "__main__":
    main(sys.argv[1])
