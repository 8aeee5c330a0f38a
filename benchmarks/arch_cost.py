"""Which architectures the matrix's time goes to: baseline seconds per arch, from calibration or run JSONs.

    python benchmarks/arch_cost.py cal_*.json            # `harness calibrate --json` files (plain runs)
    python benchmarks/arch_cost.py runs/peft/r_*.json    # `harness run --json` files (whole cells)

A tiny model's run takes well under a second; an arch far above the median usually keeps a width the shrink
rule does not know (GLM-5-Next's linear attention: 34 s per baseline on 5.24.0 before its PER_ARCH entry), and
every cell of it pays that again. Records seen in several files count once (by cell or baseline id).
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json_paths", nargs="+", metavar="JSON")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    seconds: dict[str, dict[str, float]] = defaultdict(dict)
    for path in args.json_paths:
        with open(path) as fh:
            data = json.load(fh)
        records = data["baselines"] if "baselines" in data else {r["id"]: r for r in data["cells"]}
        for key, r in records.items():
            seconds[r["arch"]][key] = r.get("seconds", 0.0)
    per_arch = {a: sum(s.values()) for a, s in seconds.items()}
    every = [t for s in seconds.values() for t in s.values()]
    total = sum(every)
    if not every:
        print("no records")
        return 1
    print(f"# {len(every)} records, {total:.0f} s; median {statistics.median(every):.2f} s per record")
    print(f"{'arch':<32}{'seconds':>9}{'records':>9}{'per record':>12}{'share':>8}")
    for arch, s in sorted(per_arch.items(), key=lambda kv: -kv[1])[:args.top]:
        n = len(seconds[arch])
        print(f"{arch:<32}{s:>9.0f}{n:>9}{s / n:>11.2f}s{100 * s / total:>7.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
