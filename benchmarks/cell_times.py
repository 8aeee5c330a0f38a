"""Per-cell timing figures (a benchmark, not a test).

    python benchmarks/cell_times.py --backend adapters --tier default       # run and time
    python benchmarks/cell_times.py --from-json results.json                 # figures of a finished run
    python benchmarks/cell_times.py --from-json cal_*.json --by-arch 20      # where the time goes, per arch

Prints the number of cells, total, median and 90th-percentile seconds per cell, the share of
cells that reused a cached baseline, and the import cost of torch+transformers+libraries.
`--from-json` reads `harness run --json` files (the shards of one matrix) or `harness calibrate --json` files
(plain runs); a record in several files counts once. `--by-arch N` adds the N costliest archs: a tiny model's
run takes well under a second, and an arch far above the median usually keeps a width the shrink rule does not
know (GLM-5-Next's linear attention: 34 s per baseline on 5.24.0 before its PER_ARCH entry), which every cell
of it pays again.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def figures(seconds: list[float]) -> str:
    s = sorted(seconds)
    p90 = s[min(len(s) - 1, int(0.9 * len(s)))]
    return (f"{len(s)} cells, total {sum(s):.1f} s, median {statistics.median(s) * 1000:.0f} ms, "
            f"p90 {p90 * 1000:.0f} ms, max {s[-1]:.2f} s")


def by_arch(records: dict[str, dict], top: int) -> str:
    """The `top` archs by total seconds of their records: seconds, records, seconds per record, share."""
    per: dict[str, list[float]] = {}
    for r in records.values():
        per.setdefault(r["arch"], []).append(r.get("seconds", 0.0))
    total = sum(map(sum, per.values())) or 1.0
    lines = [f"{'arch':<32}{'seconds':>9}{'records':>9}{'per record':>12}{'share':>8}"]
    for arch, s in sorted(per.items(), key=lambda kv: -sum(kv[1]))[:top]:
        lines.append(f"{arch:<32}{sum(s):>9.0f}{len(s):>9}{sum(s) / len(s):>11.2f}s{100 * sum(s) / total:>7.1f}%")
    return "\n".join(lines)


def read_records(paths: list[str]) -> dict[str, dict]:
    """Records by id from run JSONs (`cells`) or calibration JSONs (`baselines`)."""
    records: dict[str, dict] = {}
    for path in paths:
        with open(path) as fh:
            data = json.load(fh)
        records.update(data["baselines"] if "baselines" in data else {c["id"]: c for c in data["cells"]})
    return records


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--from-json", nargs="+", metavar="JSON")
    ap.add_argument("--by-arch", type=int, default=0, metavar="N", help="with --from-json: the N costliest archs")
    ap.add_argument("--backend", default="adapters")
    ap.add_argument("--arch")
    ap.add_argument("--method")
    ap.add_argument("--tier", default="default")
    args = ap.parse_args()
    if args.from_json:
        records = read_records(args.from_json)
        print(figures([r.get("seconds", 0.0) for r in records.values()]))
        if args.by_arch:
            print(by_arch(records, args.by_arch))
        return 0
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import transformers  # noqa: F401

    from harness.cells import select
    from harness.run import Runner
    print(f"import + selection: {time.perf_counter() - t0:.2f} s")
    cells = sorted(select(args.backend, args.arch, args.method, tier=args.tier), key=lambda c: (c.baseline_key, c.id))
    runner = Runner()
    t0 = time.perf_counter()
    results = [runner.run_cell(c) for c in cells]
    wall = time.perf_counter() - t0
    print(figures([r["seconds"] for r in results]))
    print(f"wall {wall:.1f} s for {len({c.baseline_key for c in cells})} distinct baselines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
