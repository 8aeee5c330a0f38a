"""The cost of a cell against its pure training compute, side by side in one process (a benchmark, not a test).

    python benchmarks/anchors.py [--repeat 3] [CELL_ID ...]

For each cell (default: a sample of plain-loop cells of the adapters, peft and full backends), the median of
`--repeat` timings of
- harness: `Runner.run_cell` with an empty baseline cache (the plain baseline, its replay, the checkpointed run,
  probes, the compare, a float64 rerun where asked), as one cell of a run pays it;
- pure: the same plain and checkpointed trainings by `harness repro --minimal`'s loop (the user's calls, the SGD
  steps, no probe, no replay, no compare), the compute any checkpointing test pays;
then harness / pure per cell and over the sample, and the share of a `harness run` of the sample spent outside
its cells (selection, the report), measured by running it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SAMPLE = ("adapters-bert-seq_bn-non_reentrant-masked-gc_first", "adapters-llama-lora-non_reentrant-masked-gc_first",
          "peft-bert-lora-non_reentrant-masked-gc_first", "peft-llama-lora-non_reentrant-masked-gc_first",
          "peft-t5-ia3-non_reentrant-masked-gc_first", "full-gpt2-full-non_reentrant-masked-gc_first",
          "full-vit-full-non_reentrant-unmasked-gc_first")


def pure_runner(cell_id: str):
    """The minimal script's `train` for this cell (its module namespace, not run as a script)."""
    from harness.repro import minimal_script

    namespace: dict = {"__name__": "anchor"}
    exec(compile(minimal_script(cell_id), cell_id, "exec"), namespace)   # noqa: S102 (our own generated script)
    return namespace["train"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cells", nargs="*", default=list(SAMPLE))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    import torch

    from harness import backends
    from harness.cells import find
    from harness.run import Runner

    torch.set_num_threads(1)
    cells = [c for c in args.cells if not backends.get(c.split("-")[0]).missing]
    total_h = total_p = 0.0
    print(f"{'cell':<58}{'harness ms':>11}{'pure ms':>9}{'ratio':>7}")
    for cell_id in cells:
        cell, train = find(cell_id), pure_runner(cell_id)
        harness_t, pure_t = [], []
        for _ in range(args.repeat):
            runner = Runner()   # no cached baseline: the cell pays its own
            t = time.perf_counter()
            runner.run_cell(cell)
            harness_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            train(False, torch.float32)
            train(True, torch.float32)
            pure_t.append(time.perf_counter() - t)
        h, p = statistics.median(harness_t), statistics.median(pure_t)
        total_h, total_p = total_h + h, total_p + p
        print(f"{cell_id:<58}{h * 1000:>11.0f}{p * 1000:>9.0f}{h / p:>7.2f}")
    print(f"{'sample':<58}{total_h * 1000:>11.0f}{total_p * 1000:>9.0f}{total_h / total_p:>7.2f}")

    import contextlib
    import io

    from harness import cli

    out = io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(out):
        cli.main(["run", "--arch", "bert,llama,t5", "--method", "lora", "--backend", "peft", "--inputs", "masked",
                  "--recipe", "loop", "-q"])
    wall = time.perf_counter() - t
    cell_time = float(out.getvalue().rsplit("cell time ", 1)[1].split()[0])
    print(f"a run of {out.getvalue().split(' cells:')[0].splitlines()[-1]} cells (peft lora on bert, llama, t5): "
          f"{wall:.1f} s wall, {cell_time:.0f} s in cells, {1 - cell_time / wall:.0%} outside them (after imports)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
