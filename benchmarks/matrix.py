"""Run a whole matrix on one machine as N shards in fresh processes, then one merged summary.

    python benchmarks/matrix.py --backend peft --parts 64 --jobs 2 --out runs/peft
    python benchmarks/matrix.py --backend peft --parts 64 --out runs/peft --only 1-8   # some parts now, the rest later
    python benchmarks/matrix.py --backend peft --parts 64 --out runs/peft --rerun arch=marian,pegasus
    python benchmarks/matrix.py --backend peft --parts 64 --out runs/peft --rerun outcome=mismatch --rerun method=lora
    python benchmarks/matrix.py --backend peft --parts 64 --out runs/peft --rerun 'detail~float64 rerun'
    python benchmarks/matrix.py --backend peft --parts 64 --out runs/peft --refresh   # add newly covered types

What a CI matrix of `python -m harness run --shard K/N` jobs does, for a machine without one: each part is
its own process (a run that exhausts the memory cap leaves later parts unharmed) writing OUT/r_K_of_N.json;
parts whose JSON is already complete are not run again, and a part cut short resumes where it stopped
(`harness run --resume`: same versions and options required), so an interrupted matrix resumes. At the end it
prints each part's wall time and `python -m harness check -q` over every part found (the histogram).

--rerun KEY=V1,V2 first drops the matching cells from the parts' JSONs (repeated: a cell must match each; KEY is a
field of a cell record, e.g. arch, method, gc_mode, outcome, matches; KEY~TEXT: the field contains TEXT, e.g.
detail~float64 for the cells whose mismatch was rerun in float64), so that they run again: after a change to
the zoo or the harness that alters their results. The parts are otherwise kept. --refresh resumes every part,
complete or not: the cells of its shard not in it yet run (model types the zoo has come to cover since), the rest
is kept. Neither while another matrix process writes the same folder.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def parts(spec: str | None, n: int) -> list[int]:
    if not spec:
        return list(range(1, n + 1))
    out: list[int] = []
    for piece in spec.split(","):
        lo, _, hi = piece.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    if not out or min(out) < 1 or max(out) > n:
        raise SystemExit(f"error: --only {spec!r}: parts are 1..{n}")
    return out


RERUN_KEYS = ("id", "backend", "arch", "method", "gc_mode", "inputs", "order", "task", "modality", "outcome",
              "expected", "matches", "detail")


def rerun_filter(specs: list[str]) -> list[tuple[str, str, set[str]]]:
    """['arch=marian,pegasus', 'detail~float64'] -> [('arch', '=', {'marian', 'pegasus'}), ('detail', '~',
    {'float64'})]: KEY=V1,V2 the field is one of the values, KEY~T1,T2 it contains one of the texts (any case)."""
    out = []
    for spec in specs:
        cut = min((i for i in (spec.find("="), spec.find("~")) if i >= 0), default=-1)
        key, op, values = spec[:cut], spec[cut:cut + 1], spec[cut + 1:]
        if cut < 0 or key not in RERUN_KEYS or not values.strip(","):
            raise SystemExit(f"error: --rerun {spec!r}: expected KEY=V1,V2 or KEY~TEXT with KEY one of "
                             f"{', '.join(RERUN_KEYS)}")
        out.append((key, op, {v.lower() for v in values.split(",") if v}))
    return out


def _matches(cell: dict, wanted: list[tuple[str, str, set[str]]]) -> bool:
    def one(key, op, values):
        field = str(cell.get(key)).lower()
        return field in values if op == "=" else any(v in field for v in values)
    return all(one(*w) for w in wanted)


def drop_cells(path: str, wanted: list[tuple[str, str, set[str]]]) -> int:
    """Drop the cells of the run JSON at `path` matching every filter of `wanted` and mark it incomplete (so that
    `harness run --resume` runs them again); the number dropped. A file not there or not readable: 0."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return 0
    keep = [c for c in data["cells"] if not _matches(c, wanted)]
    dropped = len(data["cells"]) - len(keep)
    if dropped:
        data["cells"], data["complete"] = keep, False
        with open(path + ".tmp", "w") as fh:
            json.dump(data, fh, indent=1)
        os.replace(path + ".tmp", path)
    return dropped


def complete(path: str) -> bool:
    try:
        with open(path) as fh:
            return bool(json.load(fh).get("complete"))
    except (OSError, ValueError):
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", required=True)
    ap.add_argument("--parts", type=int, required=True, help="N: the number of shards")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes at once (default: cores)")
    ap.add_argument("--out", required=True, help="folder for r_K_of_N.json and r_K_of_N.log")
    ap.add_argument("--only", help="parts to run now, e.g. 1-8,12 (default: all)")
    ap.add_argument("--rerun", action="append", default=[], metavar="KEY=V1,V2",
                    help="first drop the cells matching this (repeatable: all must match; KEY~TEXT: the field "
                         "contains TEXT) from the parts, to run them again")
    ap.add_argument("--refresh", action="store_true",
                    help="resume every part, complete or not, so that cells new to its shard run")
    ap.add_argument("run_args", nargs="*", help="more `harness run` options, after --")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    n = args.parts
    wanted = rerun_filter(args.rerun)

    def path(k: int, ext: str) -> str:
        return os.path.join(args.out, f"r_{k}_of_{n}.{ext}")

    if wanted:
        dropped = {k: drop_cells(path(k, "json"), wanted) for k in parts(args.only, n)}
        print(f"# --rerun: {sum(dropped.values())} cells dropped from {sum(map(bool, dropped.values()))} parts",
              flush=True)
    todo = [k for k in parts(args.only, n) if args.refresh or not complete(path(k, "json"))]
    print(f"# {len(todo)} parts of {n} to run, {args.jobs} at a time", flush=True)

    def one(k: int) -> None:
        t0 = time.perf_counter()
        resume = ["--resume"] if os.path.exists(path(k, "json")) else []
        with open(path(k, "log"), "a" if resume else "w") as log:
            rc = subprocess.call([sys.executable, "-m", "harness", "run", "--backend", args.backend, "--shard",
                                  f"{k}/{n}", "--json", path(k, "json"), "-q", *resume, *args.run_args],
                                 stdout=log, stderr=subprocess.STDOUT)
        print(f"part {k}/{n}: exit {rc}, {time.perf_counter() - t0:.0f} s wall", flush=True)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, todo))
    print(f"# {len(todo)} parts in {time.perf_counter() - t0:.0f} s wall", flush=True)
    found = sorted(glob.glob(os.path.join(args.out, f"r_*_of_{n}.json")))
    if not found:
        return 1
    print(f"# {len(found)} of {n} parts found", flush=True)
    return subprocess.call([sys.executable, "-m", "harness", "check", "-q", *found])


if __name__ == "__main__":
    sys.exit(main())
