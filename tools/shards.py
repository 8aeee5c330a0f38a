"""The shards of the product workflow (.github/workflows/product.yml): how many, and whether they cover the product.

    python tools/shards.py size [--minutes 20] [filters]                 # shards for the installed release
    python tools/shards.py complete RUN.json                             # exit 0 when the run's JSON is complete
    python tools/shards.py verify --shards N [filters] RUN-K.json...     # the merge job: every shard K/N there, whole
    python tools/shards.py merge -o OUT.json RUN.json...                 # the merge job's artifact: one JSON

Filters are those of `harness run` (`--recipe loop`, `--backend peft`, ...), and select what the workflow's
`harness run --shard K/N` selects: every backend installed unless told otherwise.

size: the ledger of the installed transformers (data/product/*.json) gives the cell time of one cell (its cell
seconds / its cells), times the cells selected here gives the release's cell time; divided by the budget of one job
(one `harness run` process per job) and rounded up, the number of shards.

verify: each RUN-K.json (K from its name) holds exactly the cells of shard K/N of the selection, is complete, and no
K of 1..N is missing; one line per problem, exit 1 if any. `harness check` judges the cells; this says whether they
are the whole product.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
LEDGERS = os.path.join(ROOT, "data", "product")
SHARD_OF_PATH = re.compile(r"-(\d+)\.json$")


def owners(cells, n: int, ks) -> dict[str, list[int]]:
    """baseline key -> the K of `ks` whose `--shard K/N` holds it (harness.cells.in_shard, asked for one cell of each
    key: cells sharing a baseline stay together)."""
    from harness.cells import in_shard

    out: dict[str, list[int]] = {}
    for cell in cells:
        if cell.baseline_key not in out:
            out[cell.baseline_key] = [k for k in ks if in_shard(cell, (k, n))]
    return out


def coverage(cells, n: int, shards, owner: dict[str, list[int]] | None = None) -> list[str]:
    """What keeps the jobs `shards` (the K of each job of `--shard K/N`, in any order) from covering `cells` exactly
    once; [] when each cell is in exactly one job. Asks harness.cells.in_shard for every K, per baseline key, and
    for each cell whether it is in its key's shard. `owner`: owners(cells, n, set(shards)), when at hand."""
    from harness.cells import in_shard

    shards = list(shards)
    valid = [k for k in shards if isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= n]
    problems = [f"shard {k!r} is not one of 1..{n}" for k in shards if k not in valid]
    problems += [f"shard {k} is in {c} jobs" for k, c in sorted(Counter(valid).items()) if c > 1]
    owner = owner if owner is not None else owners(cells, n, sorted(set(valid)))
    none = [c.id for c in cells if not owner[c.baseline_key]]
    many = [c.id for c in cells if len(owner[c.baseline_key]) > 1]
    apart = [c.id for c in cells if len(owner[c.baseline_key]) == 1 and not in_shard(c, (owner[c.baseline_key][0], n))]
    for ids, what in ((none, "in no job"), (many, "in more than one job"), (apart, "not in their baseline's shard")):
        if ids:
            problems.append(f"{len(ids)} of {len(cells)} cells {what}, e.g. {ids[0]}")
    return problems


def add_filters(ap: argparse.ArgumentParser) -> None:
    from harness import options

    for option in options.FILTERS:
        option.add(ap.add_argument)


def selected(args) -> list:
    from harness import AXES
    from harness.cells import select

    return select(**{a: getattr(args, a) for a in AXES}, tier="full")


def ledger_for(transformers: str) -> tuple[str, dict]:
    for name in sorted(os.listdir(LEDGERS)):
        with open(os.path.join(LEDGERS, name)) as fh:
            data = json.load(fh)
        if data.get("versions", {}).get("transformers") == transformers:
            return name, data
    raise SystemExit(f"error: no ledger in {LEDGERS} of transformers {transformers}")


def size(cells: int, transformers: str, minutes: float) -> tuple[int, list[str]]:
    """(shards, the arithmetic as lines) for `cells` cells of the release whose ledger is `transformers`'s."""
    name, data = ledger_for(transformers)
    seconds = sum(e["cell_seconds"] for e in data["entries"].values())
    ledger_cells = sum(e["cells"] for e in data["entries"].values())
    per_cell = seconds / ledger_cells
    total = cells * per_cell
    budget = minutes * 60
    shards = math.ceil(total / budget)
    return shards, [
        f"transformers {transformers}: data/product/{name}: {seconds:,.0f} s of cell time / {ledger_cells:,} cells "
        f"= {per_cell:.4f} s a cell",
        f"selected here: {cells:,} cells x {per_cell:.4f} s = {total:,.0f} s of cell time",
        f"one job, one process: {minutes:g} min = {budget:,.0f} s; {total:,.0f} / {budget:,.0f} = {total / budget:.1f} "
        f"-> {shards} shards ({total / shards / 60:.1f} min each)"]


def is_complete(path: str) -> bool:
    try:
        with open(path) as fh:
            return json.load(fh).get("complete") is True
    except (OSError, ValueError, AttributeError):
        return False


def verify(paths: list[str], n: int, cells) -> list[str]:
    owner, found = owners(cells, n, range(1, n + 1)), {}
    problems = coverage(cells, n, range(1, n + 1), owner)
    for path in paths:
        m = SHARD_OF_PATH.search(path)
        k = int(m.group(1)) if m else None
        if k is None or not 1 <= k <= n:
            problems.append(f"{path}: not named ...-K.json with K in 1..{n}")
        elif k in found:
            problems.append(f"{path}: shard {k} is also {found[k]}")
        else:
            found[k] = path
    by_shard: dict[int, set[str]] = {}
    for c in cells:
        for k in owner[c.baseline_key]:
            by_shard.setdefault(k, set()).add(c.id)
    for k in range(1, n + 1):
        if k not in found:
            problems.append(f"shard {k}/{n}: no JSON")
            continue
        try:
            with open(found[k]) as fh:
                data = json.load(fh)
            ids = [r["id"] for r in data["cells"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"shard {k}/{n}: {found[k]}: cannot read: {type(exc).__name__}: {exc}")
            continue
        want = by_shard.get(k, set())
        missing, extra, twice = want - set(ids), set(ids) - want, len(ids) - len(set(ids))
        if data.get("complete") is not True:
            problems.append(f"shard {k}/{n}: {found[k]} is incomplete ({len(ids)} of {len(want)} cells)")
        elif missing:
            problems.append(f"shard {k}/{n}: {len(missing)} of its {len(want)} cells missing, e.g. {min(missing)}")
        if extra:
            problems.append(f"shard {k}/{n}: {len(extra)} cells not of this shard, e.g. {min(extra)}")
        if twice:
            problems.append(f"shard {k}/{n}: {twice} cells twice")
    return problems


def merge(paths: list[str], out: str) -> int:
    """One JSON of the runs' cells, written one run at a time (a whole product does not fit twice in memory)."""
    from harness.report import atomic

    head, cells, complete = None, 0, True
    with atomic(out) as fh:
        for path in sorted(paths, key=lambda p: int(m.group(1)) if (m := SHARD_OF_PATH.search(p)) else 0):
            with open(path) as f:
                data = json.load(f)
            if head is None:
                head = {k: v for k, v in data.items() if k not in ("cells", "complete")}
                fh.write(json.dumps(head)[:-1] + ', "runs": ' + json.dumps([os.path.basename(p) for p in paths])
                         + ', "cells": [\n')
            complete &= data.get("complete") is True
            for r in data["cells"]:
                fh.write((",\n" if cells else "") + json.dumps(r))
                cells += 1
        if head is None:
            raise SystemExit("error: merge: no run given")
        fh.write('\n], "complete": ' + json.dumps(complete) + "}\n")
    print(f"{out}: {cells} cells of {len(paths)} runs{'' if complete else ' (some incomplete)'}")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python tools/shards.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sz = sub.add_parser("size", help="shards for the installed release, from its ledger")
    sz.add_argument("--minutes", type=float, default=20.0, help="cell time of one job (default 20)")
    add_filters(sz)
    ck = sub.add_parser("complete", help="exit 0 when the run's JSON is complete")
    ck.add_argument("json_path")
    vf = sub.add_parser("verify", help="the runs are shards 1..N of the selection, each whole and complete")
    vf.add_argument("--shards", type=int, required=True, metavar="N")
    add_filters(vf)
    vf.add_argument("json_paths", nargs="+", metavar="RUN-K.json")
    mg = sub.add_parser("merge", help="one JSON of the runs' cells")
    mg.add_argument("-o", "--output", required=True)
    mg.add_argument("json_paths", nargs="+", metavar="RUN.json")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.cmd == "complete":
        return 0 if is_complete(args.json_path) else 1
    if args.cmd == "merge":
        return merge(args.json_paths, args.output)
    from harness.versions import installed

    cells = selected(args)
    if args.cmd == "size":
        shards, lines = size(len(cells), installed("transformers"), args.minutes)
        print("\n".join(lines))
        print(shards)
        return 0
    problems = verify(args.json_paths, args.shards, cells)
    print("\n".join(problems) if problems else
          f"shards 1..{args.shards}: every one there and complete, together exactly the {len(cells):,} cells selected")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
