"""What a 2-rank cell costs beside the same cell in one process (a benchmark, not a test).

    python benchmarks/launch_cost.py                       # peft LoRA and full fine-tuning on Llama, DDP and FSDP2
    python benchmarks/launch_cost.py --cell peft-bert-lora-non_reentrant-masked-gc_first --parallel fsdp1 -n 5

For each single-process cell and each launch, runs the cell and its distributed twin alternately, `-n` times
each (the baseline cache cleared before every run, so each run pays its plain and checkpointed training), and
prints the median seconds of each and their ratio, measured side by side. The rank pool is started once before
the timed runs (a worker pays it once, not per cell); its start is printed apart.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CELLS = ("peft-llama-lora-non_reentrant-masked-gc_first", "full-llama-full-non_reentrant-masked-gc_first")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", action="append", help="a single-process cell id (repeatable)")
    ap.add_argument("--parallel", default="ddp,fsdp", help="comma-separated launches (default ddp,fsdp)")
    ap.add_argument("-n", type=int, default=5, help="timed runs of each cell (default 5)")
    args = ap.parse_args()

    from harness.cells import SelectionError, find
    from harness.launch import pool as launch_pool
    from harness.run import Runner

    try:
        pairs = [(find(c), find(f"{c}-{p}")) for c in (args.cell or CELLS) for p in args.parallel.split(",")]
    except SelectionError as exc:
        print(exc)
        return 2
    start = time.perf_counter()
    launch_pool.pool().start()
    print(f"rank pool start (2 ranks, imports, process group): {time.perf_counter() - start:.1f} s, once per worker")
    print(f"{'cell':<58}{'single s':>10}{'2 ranks s':>11}{'ratio':>8}")
    for single, twin in pairs:
        times = {single.id: [], twin.id: []}
        for _ in range(args.n):
            for cell in (single, twin):   # alternately: both see the same machine load
                runner = Runner()          # no cached baseline: every run trains plainly and checkpointed
                t0 = time.perf_counter()
                runner.run_cell(cell)
                times[cell.id].append(time.perf_counter() - t0)
        a, b = statistics.median(times[single.id]), statistics.median(times[twin.id])
        print(f"{twin.id:<58}{a:>10.2f}{b:>11.2f}{b / a:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
