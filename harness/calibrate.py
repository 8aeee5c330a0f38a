"""Baseline calibration, the command: measure which plain runs fail, and write them into the generated table that
:mod:`harness.calibration` reads.

`python -m harness calibrate` runs only the plain baseline of each (backend, arch, method, inputs, task) once -- one
of the six training runs its four cells cost -- and `calibrate --table-from RUN.json...` turns such runs (shards of
one release allowed) into ``harness/tables/baselines_<backend>_v<transformers>.py``.
"""
from __future__ import annotations

import json
import os
import pprint
from collections import defaultdict

from . import tables
from . import calibration
from .calibration import KEY_FIELDS, LIBRARY, key_in_shards
from .outcomes import OUT_OF_MEMORY


def calibrate(cells, runner, out: dict, report_line=print, after=lambda: None) -> dict:
    """Run the plain baseline of each distinct baseline key of `cells` once, filling `out` {key: record}
    as it goes (an interrupted run keeps what finished); `after()` is called after each baseline. A baseline
    that ran out of memory is recorded as `resource` and never becomes a table entry (OUT_OF_MEMORY)."""
    from .compare import baseline_defect

    todo = {}
    for c in sorted(cells, key=lambda c: (c.baseline_key, c.id)):
        todo.setdefault(c.baseline_key, c)
    for i, (key, cell) in enumerate(todo.items()):
        base = runner.plain(cell)
        defect = baseline_defect(base)
        seconds = base.seconds
        del base   # its float64 copy of the state (4 GB: RandLoRA on qwen3_5_text) is not kept through the next run
        out[key] = _mark_resource({"backend": cell.backend, **{f: getattr(cell, f) for f in KEY_FIELDS},
                                   "outcome": defect[0].value if defect else None,
                                   "detail": defect[1] if defect else "", "seconds": round(seconds, 3)})
        if defect:
            report_line(f"[{i + 1}/{len(todo)}] {key}: {out[key]['outcome'] or 'resource'}: {defect[1]}")
        after()
    return out


def failing_in(cells, backend: str) -> list:
    """The cells whose baseline key (arch, method, inputs, task) the installed table of `backend` lists as failing:
    where another backend sharing its methods (transformers_peft: peft's tuners) may fail plainly too. SelectionError
    when there is no such table."""
    from .cells import SelectionError

    if calibration.table(backend) is None:
        raise SelectionError(f"--failing-in {backend}: no baseline table of {backend} for the installed versions")
    return [c for c in cells if calibration.baseline_failure({**c.fields(), "backend": backend})[0] is not None]


def _mark_resource(rec: dict) -> dict:
    """A failing record whose detail is running out of memory becomes `resource` (outcome None: not tabled)."""
    if rec.get("outcome") and OUT_OF_MEMORY.search(rec.get("detail") or ""):
        rec.update(outcome=None, resource=True)
    rec.setdefault("resource", False)
    return rec


def write_json(path: str, records: dict, selection: dict, complete: bool) -> None:
    from .report import dump

    dump(path, complete, indent=0, selection=selection, baselines=records)


class TableError(ValueError):
    """A calibration JSON that cannot make a table (one line for the user)."""


def write_tables(paths: list[str], out_dir: str = tables.HERE) -> list[str]:
    """Merge calibration runs (shards of one release) into one table module per backend, on top of the installed
    table of the same versions if there is one (so a table grows shard by shard; delete it to start afresh).
    Unfiltered runs replace whole shards; filtered runs (e.g. `--task feature` after a harness fix) replace the
    keys they measured, within the shards the table then covers."""
    runs = []
    for p in paths:
        try:
            with open(p) as fh:
                runs.append(json.load(fh))
        except (OSError, ValueError) as exc:
            raise TableError(f"cannot read a calibration JSON from {p!r}: {type(exc).__name__}: {exc}") from None
    for p, r in zip(paths, runs):
        if not r.get("complete"):
            raise TableError(f"{p}: a table needs complete runs; this one is incomplete (`calibrate --resume` finishes it)")
        if r["versions"] != runs[0]["versions"]:
            raise TableError(f"{p}: made with other versions ({r['versions']}) than {paths[0]}")
    versions = runs[0]["versions"]
    by_backend: dict[str, dict] = {}
    shards: dict[str, set] = {}
    seconds: dict[str, float] = {}
    for b in {b for r in runs for b in r["selection"]["backends"]}:
        by_backend[b], shards[b], seconds[b] = _table_records(b, versions)
    # a run over the keys another backend's table lists as failing (--failing-in) makes a table of those keys
    keyed = {r["selection"]["filters"]["failing_in"] for r in runs if set(r["selection"].get("filters") or ()) ==
             {"failing_in"}}
    if len(keyed) > 1:
        raise TableError(f"runs --failing-in different backends ({', '.join(sorted(keyed))}) make no one table")
    base = [r for r in runs if not set(r["selection"].get("filters") or ()) - {"failing_in"}]
    updates = [r for r in runs if r not in base]
    for r in base:
        for rec in r["baselines"].values():
            by_backend[rec["backend"]][tuple(rec[f] for f in KEY_FIELDS)] = rec
            seconds[rec["backend"]] += rec["seconds"]
        for b in r["selection"]["backends"]:
            shards[b].add(tuple(r["selection"]["shard"] or (1, 1)))
    for r in updates:
        for b in r["selection"]["backends"]:
            if not shards[b]:
                raise TableError(f"a filtered calibration run updates a {b} table for transformers "
                                 f"{versions['transformers']}; there is none here: give unfiltered runs too")
        for rec in r["baselines"].values():     # within the calibrated shards only: a table covers whole shards
            key = tuple(rec[f] for f in KEY_FIELDS)
            if key_in_shards(rec["backend"], key, shards[rec["backend"]]):
                by_backend[rec["backend"]][key] = rec
                seconds[rec["backend"]] += rec["seconds"]
    written = []
    for backend, recs in sorted(by_backend.items()):
        for rec in recs.values():   # also what runs and tables made before `resource` was recorded say
            _mark_resource(rec)
        path = os.path.join(out_dir, calibration.table_name(backend, versions["transformers"]) + ".py")
        _write_table(path, backend, recs, sorted(shards[backend]), versions, seconds[backend],
                     next(iter(keyed), None) or _installed_failing_in(backend, versions))
        written.append(path)
    return written


def _installed_failing_in(backend: str, versions: dict) -> str | None:
    mod = calibration.table(backend)
    return mod.CALIBRATED_ON.get("failing_in") if mod is not None and _same_versions(mod, backend, versions) else None


def _same_versions(mod, backend: str, versions: dict) -> bool:
    lib = LIBRARY.get(backend)
    return all(mod.CALIBRATED_ON.get(k) == versions.get(k) for k in ("transformers", "torch", lib) if k)


def _table_records(backend: str, versions: dict) -> tuple[dict, set, float]:
    """The installed table of `backend` for `versions` back as records {key: record} over its shards (a key it
    does not list passed), with its shards and seconds; empty without such a table."""
    from .cells import full_product

    mod = calibration.table(backend)
    if mod is None or not _same_versions(mod, backend, versions):
        return {}, set(), 0.0
    on = mod.CALIBRATED_ON
    exact, pair = calibration.index(backend)
    cells = full_product(backend, recipes=("loop",), parallel="single")   # the keys: every recipe, launch has the same
    if on.get("failing_in"):
        cells = failing_in(cells, on["failing_in"])
    recs = {}
    for c in cells:
        key = tuple(getattr(c, f) for f in KEY_FIELDS)
        if key not in recs and key_in_shards(backend, key, on["shards"]):
            outcome, detail = exact.get(key) or pair.get(key[:2]) or (None, "")
            recs[key] = {"backend": backend, **dict(zip(KEY_FIELDS, key)), "outcome": outcome, "detail": detail,
                         "seconds": 0.0}
    return recs, {tuple(s) for s in on["shards"]}, float(on["seconds"])


def _compress(recs: dict) -> list[tuple]:
    """(outcome, detail, keys): keys as (arch, method, inputs, task), with ('*', '*') for inputs and task when
    every calibrated baseline of that arch and method fails alike."""
    per_pair = defaultdict(set)
    for (arch, method, inputs, task) in recs:
        per_pair[(arch, method)].add((inputs, task))
    groups = defaultdict(lambda: defaultdict(set))
    for key, rec in recs.items():
        if rec["outcome"]:
            groups[(rec["outcome"], rec["detail"])][key[:2]].add(key[2:])
    out = []
    for (outcome, detail), pairs in sorted(groups.items(), key=lambda kv: (-sum(map(len, kv[1].values())), kv[0])):
        keys = []
        for pair, rest in sorted(pairs.items()):
            keys.extend([(*pair, "*", "*")] if rest == per_pair[pair] else [(*pair, *r) for r in sorted(rest)])
        out.append((outcome, detail, tuple(keys)))
    return out


def _write_table(path, backend, recs, shards, versions, seconds, failing_in_backend=None) -> None:
    fails = _compress(recs)
    lib = LIBRARY.get(backend)
    on = {"transformers": versions["transformers"], "torch": versions["torch"],
          **({lib: versions.get(lib)} if lib else {}), "shards": [list(s) for s in shards],
          **({"failing_in": failing_in_backend} if failing_in_backend else {}),
          "baselines": len(recs), "failing": sum(1 for r in recs.values() if r["outcome"]),
          "seconds": round(seconds)}
    lines = []
    for outcome, detail, keys in fails:
        body = pprint.pformat(keys, width=110, compact=True).replace("\n", "\n     ")
        lines.append(f"    ({outcome!r}, {detail!r},\n     {body}),")
    tables.write(path, [f"Baseline calibration of backend {backend}: GENERATED by `python -m harness calibrate "
                        f"--table-from ...`; do not edit.",
                        "",
                        "The plain (not checkpointed) runs that fail or are vacuous, as (outcome, detail, baseline "
                        "keys); a key",
                        "is (arch, method, inputs, task), '*' for every inputs/task calibrated. See "
                        "harness/calibration.py."],
                 ("CALIBRATED_ON", on), ("FAILS", "[", lines, "]"))
