"""Checks that every aggswitch metric a dashboard or a rules file queries is
one that a live switch exposes.

    curl -s http://127.0.0.1:9477/metrics | python3 tests/lib/queried_metrics.py \
        deploy/grafana/aggswitch.json deploy/prometheus/aggswitch-alerts.yml

Reads the exposition on stdin and takes every aggswitch_* name in the files
(a histogram's _bucket, _sum and _count count as its family). Prints how many
it found and each name the exposition has no family for; exits 1 if any.
"""

import re
import sys


def families(exposition):
    """{name: type} of the exposition's # TYPE lines."""
    out = {}
    for line in exposition.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[:2] == ["#", "TYPE"]:
            out[parts[2]] = parts[3]
    return out


def family_of(name, known):
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and known.get(base) in ("histogram", "summary"):
            return base
    return name


def main():
    known = families(sys.stdin.read())
    if not known:
        print("no # TYPE line on stdin: not a Prometheus exposition")
        return 1
    missing = []
    queried = set()
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as f:
            for name in re.findall(r"\baggswitch_[a-z0-9_]+", f.read()):
                queried.add((path, name))
    for path, name in sorted(queried):
        if family_of(name, known) not in known:
            missing.append(f"{path}: {name}")
    print(f"{len(queried)} metric names queried, {len(missing)} missing from /metrics")
    for m in missing:
        print("missing", m)
    return 1 if missing or not queried else 0


if __name__ == "__main__":
    sys.exit(main())
