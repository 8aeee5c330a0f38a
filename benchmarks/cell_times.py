"""Per-cell timing figures (a benchmark, not a test).

    python benchmarks/cell_times.py --backend adapters --tier default       # run and time
    python benchmarks/cell_times.py --from-json results.json                 # figures of a finished run

Prints the number of cells, total, median and 90th-percentile seconds per cell, the share of
cells that reused a cached baseline, and the import cost of torch+transformers+libraries.
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--from-json")
    ap.add_argument("--backend", default="adapters")
    ap.add_argument("--arch")
    ap.add_argument("--method")
    ap.add_argument("--tier", default="default")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as fh:
            cells = json.load(fh)["cells"]
        print(figures([c["seconds"] for c in cells]))
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
