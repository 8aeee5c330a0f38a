"""Run a whole matrix on one machine as N shards in fresh processes, then one merged summary.

    python tools/matrix.py --backend peft --parts 64 --jobs 2 --out runs/peft
    python tools/matrix.py --backend peft --parts 64 --out runs/peft --only 1-8   # some parts now, the rest later
    python tools/matrix.py --backend peft --parts 64 --out runs/peft --rerun arch=marian,pegasus
    python tools/matrix.py --backend peft --parts 64 --out runs/peft --rerun outcome=mismatch --rerun method=lora
    python tools/matrix.py --backend peft --parts 64 --out runs/peft --rerun 'detail~float64 rerun'
    python tools/matrix.py --backend peft --parts 64 --out runs/peft --refresh   # add newly covered types
    python tools/matrix.py --backend peft --parts 64 --out runs/peft --ledger data/product/peft.json

What a CI matrix of `python -m harness run --shard K/N` jobs does, for a machine without one: each part is
its own process (a run that exhausts the memory cap leaves later parts unharmed) writing OUT/r_K_of_N.json;
parts whose JSON is already complete are not run again, and a part cut short resumes where it stopped
(`harness run --resume`: same versions and options required), so an interrupted matrix resumes. At the end it
prints each part's wall time and `python -m harness check -q` over every part found (the histogram). A part's
cells that ran out of memory (their run, baseline or replay exhausted the memory cap, to which all the part's
process held before counts) are dropped when the part ends and run again once, in a fresh process that runs only
them; what they give there stands.

--rerun KEY=V1,V2 first drops the matching cells from the parts' JSONs (repeated: a cell must match each; KEY is a
field of a cell record, e.g. arch, method, gc_mode, outcome, matches; KEY~TEXT: the field contains TEXT, e.g.
detail~float64 for the cells whose mismatch was rerun in float64), so that they run again: after a change to
the zoo or the harness that alters their results. The parts are otherwise kept. --refresh resumes every part,
complete or not: the cells of its shard not in it yet run (model types the zoo has come to cover since), the rest
is kept. Neither while another matrix process writes the same folder.

--ledger FILE keeps the product's figures where a lost run folder cannot take them: each complete part's histogram
(re-judged in a fresh process, against the expectations on disk then, not those this long-lived process imported),
its cells not as expected and its cell time go into FILE (a small JSON, committed), keyed by part, as each part
ends and for every complete part at the end, where the table of all parts it holds is printed. One ledger holds one
set of versions and options; a part rerun replaces its entry. With every part complete, it only updates the ledger.
"""
from __future__ import annotations

import argparse
import fcntl
import glob
import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import AXIS_DEFAULTS  # noqa: E402  (the package's light top level: no torch)

# the README tables' column order; an outcome not listed here (a new one) still gets its column
SHOWN = ("equivalent", "missing_grad", "gc_error", "error", "unsupported", "not_checkpointed", "mismatch")


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


RERUN_KEYS = ("id", "backend", "arch", "method", "gc_mode", "inputs", "order", "task", "recipe", "modality",
              "outcome", "expected", "matches", "detail")


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
        field = str(cell.get(key, AXIS_DEFAULTS.get(key))).lower()   # a record made before an axis: its default
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
        from harness.report import atomic

        with atomic(path) as fh:
            json.dump(data, fh, indent=1)
    return dropped


def out_of_memory(path: str) -> set[str]:
    """The ids (lower case, as drop_cells matches them) of the cells of the run JSON at `path` whose run, baseline
    or replay ran out of memory: an address-space cap exhausted with what the process held before counts, so such
    a cell says nothing of the release until it has run in a process of its own (5.24.0 product: Phi-4-MM + FRoD's
    replays in parts 51, 54, 58, 60, all equivalent alone)."""
    from harness.outcomes import OUT_OF_MEMORY

    try:
        with open(path) as fh:
            cells = json.load(fh)["cells"]
    except (OSError, ValueError, KeyError):
        return set()
    return {c["id"].lower() for c in cells if OUT_OF_MEMORY.search(c.get("detail") or "")}


def complete(path: str) -> bool:
    try:
        with open(path) as fh:
            return bool(json.load(fh).get("complete"))
    except (OSError, ValueError):
        return False


MERGE = "--merge-into-ledger"   # ledger_add's child process: argv LEDGER BACKEND N RUNS-as-JSON


def ledger_add(ledger: str, backend: str, n: int, runs: dict[int, str]) -> dict:
    """Merge the summaries of the complete runs {part: path} into the ledger file (created if missing); returns it.
    The cells are re-judged in a fresh process, with the expectations on disk now: a matrix runs for hours, and
    an expectations change pulled meanwhile must count (this process keeps what it imported at its start).
    The read-merge-write holds an exclusive lock on LEDGER.lock: the parts running in threads, and another matrix
    process on the same ledger (a --rerun of finished parts beside the product), each add their entries."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), MERGE, ledger, backend, str(n),
                           json.dumps(runs)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else
                         f"error: --ledger {ledger}: merging exited {done.returncode}")
    with open(ledger) as fh:
        return json.load(fh)


def _ledger_locked(ledger: str, backend: str, n: int, runs: dict[int, str]) -> None:
    with open(ledger + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _ledger_merge(ledger, backend, n, runs)


def _ledger_merge(ledger: str, backend: str, n: int, runs: dict[int, str]) -> None:
    from harness.cells import SelectionError
    from harness.records import read_run, rejudge

    try:
        with open(ledger) as fh:
            book = json.load(fh)
    except FileNotFoundError:
        book = {"backend": backend, "parts": n, "versions": None, "options": None, "entries": {}}
    for k, path in sorted(runs.items()):
        try:
            data = read_run(path)
        except SelectionError as exc:
            raise SystemExit(f"error: --ledger {ledger}: {exc}") from None
        if not data.get("complete"):
            continue
        versions = {p: v for p, v in data["versions"].items() if p != "python"}
        for key, have in (("backend", backend), ("parts", n), ("versions", versions),
                          ("options", data.get("options"))):
            if book[key] is None:
                book[key] = have
            elif book[key] != have:
                raise SystemExit(f"error: --ledger {ledger}: it holds {key} {book[key]}, part {k} has {have}")
        for r in data["cells"]:
            rejudge(r)
        book["entries"][str(k)] = {
            "cells": len(data["cells"]), "outcomes": dict(Counter(r["outcome"] for r in data["cells"])),
            "not_as_expected": sorted(r["id"] for r in data["cells"] if not r["matches"]),
            "cell_seconds": round(sum(r.get("seconds", 0.0) for r in data["cells"]), 1),
            "added": time.strftime("%Y-%m-%d")}
    book["entries"] = dict(sorted(book["entries"].items(), key=lambda kv: int(kv[0])))
    from harness.report import atomic

    with atomic(ledger) as fh:
        json.dump(book, fh, indent=1)
        fh.write("\n")


def spans(ks: list[int]) -> str:
    """[1, 2, 3, 5] -> '1-3,5'"""
    out: list[str] = []
    for k in sorted(ks):
        if out and int(out[-1].split("-")[-1]) == k - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{k}"
        else:
            out.append(str(k))
    return ",".join(out)


def ledger_table(book: dict) -> str:
    """The ledger as one markdown row under its header: parts, cells, outcomes, not as expected, cell time."""
    entries = book["entries"].values()
    if not entries:
        return "(no complete part yet)"
    total = Counter()
    for e in entries:
        total.update(e["outcomes"])
    shown = [*SHOWN, *sorted(set(total) - set(SHOWN))]
    head = ["transformers", "parts", "cells", *shown, "not as expected", "cell time"]
    row = [book["versions"]["transformers"], f"{spans([int(k) for k in book['entries']])} of {book['parts']}",
           f"{sum(e['cells'] for e in entries):,}", *(f"{total[o]:,}" for o in shown),
           str(sum(len(e["not_as_expected"]) for e in entries)),
           f"{sum(e['cell_seconds'] for e in entries):,.0f} s"]
    return "\n".join("| " + " | ".join(r) + " |" for r in (head, ["---"] * len(head), row))


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
    ap.add_argument("--ledger", metavar="FILE", help="merge each complete part's summary into this JSON ledger "
                                                     "and print its table")
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

    def run_part(k: int) -> int:
        resume = ["--resume"] if os.path.exists(path(k, "json")) else []
        with open(path(k, "log"), "a" if resume else "w") as log:
            return subprocess.call([sys.executable, "-m", "harness", "run", "--backend", args.backend, "--shard",
                                    f"{k}/{n}", "--json", path(k, "json"), "-q", *resume, *args.run_args],
                                   stdout=log, stderr=subprocess.STDOUT)

    def one(k: int) -> None:
        t0 = time.perf_counter()
        rc = run_part(k)
        starved = out_of_memory(path(k, "json")) if complete(path(k, "json")) else set()
        if starved:   # what the part's process held decided these: run them again in a process of their own
            drop_cells(path(k, "json"), [("id", "=", starved)])
            rc = run_part(k)
            again = len(out_of_memory(path(k, "json")) & starved)
            print(f"part {k}/{n}: {len(starved)} cells ran out of memory, run again in a fresh process: "
                  f"{len(starved) - again} ran, {again} ran out of memory again", flush=True)
        print(f"part {k}/{n}: exit {rc}, {time.perf_counter() - t0:.0f} s wall", flush=True)
        if args.ledger and complete(path(k, "json")):   # as each part ends: a matrix cut short keeps its figures
            ledger_add(args.ledger, args.backend, n, {k: path(k, "json")})

    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, todo))
    print(f"# {len(todo)} parts in {time.perf_counter() - t0:.0f} s wall", flush=True)
    found = sorted(glob.glob(os.path.join(args.out, f"r_*_of_{n}.json")))
    if not found:
        return 1
    print(f"# {len(found)} of {n} parts found", flush=True)
    rc = subprocess.call([sys.executable, "-m", "harness", "check", "-q", *found])
    if args.ledger:
        book = ledger_add(args.ledger, args.backend, n, {k: path(k, "json") for k in range(1, n + 1)
                                                          if os.path.exists(path(k, "json"))})
        print(f"# ledger {args.ledger}: {len(book['entries'])} of {n} parts\n{ledger_table(book)}", flush=True)
    return rc


if __name__ == "__main__":
    if sys.argv[1:2] == [MERGE]:
        _ledger_locked(sys.argv[2], sys.argv[3], int(sys.argv[4]),
                       {int(k): p for k, p in json.loads(sys.argv[5]).items()})
    else:
        sys.exit(main())
