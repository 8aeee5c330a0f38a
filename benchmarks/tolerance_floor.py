"""What the absolute tolerance may hide: `equivalent` cells whose difference is a large share of the tensor.

    python benchmarks/tolerance_floor.py runs/peft/r_*_of_64.json               # max_rel_diff by decade, the top
    python benchmarks/tolerance_floor.py runs/peft/r_*_of_64.json --float64     # rerun those above --rel in float64

The comparator passes a tensor whose largest difference is within atol + rtol x the largest magnitude of the
baseline's tensor (float32: 1e-6 + 1e-5 x scale). Where a whole tensor's gradient is small, atol decides, and a
difference of a large share of that tensor passes. Rounding around a true zero does that (a gradient of 1e-10
that is 1e-9 with checkpointing), and so can a real loss of part of a gradient (UniLoRA's one shared vector: the
expectations flag such entries `below_tolerance`). A record's max_rel_diff is that share; this script lists the
`equivalent` cells above --rel and, with --float64, reruns each in float64 (rounding ~1e-9 smaller, atol 1e-10):
`equivalent` there was rounding, a `mismatch` there is a difference the float32 tolerance hid. A figure for the
tolerance's design, read from finished runs; it changes no verdict.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


# what the float64 rerun of a float32 `equivalent` says about its difference
KIND = {"equivalent": "rounding", "mismatch": "confirmed", "missing_grad": "confirmed"}


def decade(x: float) -> str:
    return "0" if not x else ">=1" if x >= 1 else f"1e{math.floor(math.log10(x))}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="`harness run --json` files (the parts of one matrix)")
    ap.add_argument("--rel", type=float, default=1e-3, help="list equivalent cells above this max_rel_diff "
                                                           "(default 1e-3: 100 x float32's rtol)")
    ap.add_argument("--float64", action="store_true", help="rerun the listed cells in float64 and say which "
                                                           "difference float64 confirms")
    args = ap.parse_args()
    from harness.cells import SelectionError
    from harness.records import read_run

    cells: dict[str, dict] = {}
    try:
        for path in args.runs:
            cells.update((r["id"], r) for r in read_run(path)["cells"])
    except SelectionError as exc:
        raise SystemExit(f"error: {exc}") from None
    eq = [r for r in cells.values() if r["outcome"] == "equivalent"]
    hist = Counter(decade(r.get("max_rel_diff") or 0.0) for r in eq)
    order = sorted(hist, key=lambda d: (d != "0", d == ">=1", int(d[2:]) if d.startswith("1e") else 0))
    print(f"{len(cells):,} cells, {len(eq):,} equivalent; their max_rel_diff by decade: "
          + ", ".join(f"{d}: {hist[d]:,}" for d in order))
    top = sorted((r for r in eq if (r.get("max_rel_diff") or 0.0) > args.rel), key=lambda r: -r["max_rel_diff"])
    print(f"{len(top)} above {args.rel:g}" + (":" if top else ""))
    if not args.float64:
        for r in top:
            print(f"  rel {r['max_rel_diff']:.3g} abs {r['max_abs_diff']:.3g}  {r['id']}")
        return 0
    import torch

    from harness.cells import find
    from harness.run import Options, Runner

    torch.set_num_threads(1)
    runner, said = Runner(Options(dtype="float64")), Counter()
    for r in top:
        x = runner.run_cell(find(r["id"]))
        kind = KIND.get(x["outcome"], "unsettled")
        said[kind] += 1
        print(f"  rel {r['max_rel_diff']:.3g} abs {r['max_abs_diff']:.3g}  {r['id']}: float64 {x['outcome']}, abs "
              f"{x['max_abs_diff']:.3g} rel {x['max_rel_diff']:.3g}" +
              (f" ({x['detail'][:90]})" if kind == "unsettled" else "") +
              (f"; expected {r['expected']}: {r['reason'][:70]}..." if r.get("reason") else ""), flush=True)
    print(f"float64: {said['rounding']} rounding (equivalent), {said['confirmed']} confirmed (mismatch, "
          f"missing_grad), {said['unsettled']} unsettled (float64 could not judge: its baseline is not finite, ...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
