"""How many operations of the API document the fuzzer got a success (2xx) from, over the HAR
reports of its runs; lists the rest and fails below the bar.

    fuzz_coverage.py OPENAPI.json MIN_PERCENT RUN.har [RUN.har ...]
"""

import json
import re
import sys
from urllib.parse import urlparse


def operations(doc):
    """(method, path template, pattern) of every operation."""
    ops = []
    for path, item in doc["paths"].items():
        pattern = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$")
        for method in item:
            if method in ("get", "put", "post", "delete", "patch"):
                ops.append((method.upper(), path, pattern))
    # Literal segments before parameters: `/agent/my` is not `/agent/{id}`.
    ops.sort(key=lambda op: op[1].count("{"))
    return ops


def main():
    doc_path, bar, *hars = sys.argv[1:]
    with open(doc_path) as f:
        ops = operations(json.load(f))
    seen = {(m, p): set() for m, p, _ in ops}
    for har in hars:
        with open(har) as f:
            entries = json.load(f)["log"]["entries"]
        for e in entries:
            method = e["request"]["method"]
            path = urlparse(e["request"]["url"]).path
            for m, p, pattern in ops:
                if m == method and pattern.match(path):
                    seen[(m, p)].add(e["response"]["status"])
                    break
    missed = sorted((k, v) for k, v in seen.items() if not any(200 <= s < 300 for s in v))
    reached = len(seen) - len(missed)
    percent = 100.0 * reached / len(seen)
    print(f"fuzz: {reached} of {len(seen)} operations answered a 2xx ({percent:.1f}%, at least {bar}% required)")
    for (m, p), statuses in missed:
        print(f"  no 2xx: {m} {p} (got {sorted(statuses) or 'no request'})")
    return 0 if percent >= float(bar) else 1


if __name__ == "__main__":
    sys.exit(main())
