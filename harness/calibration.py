"""Baseline calibration, the lookup: which plain (not checkpointed) training runs fail on the installed release.

A cell whose plain run already fails, or is vacuous (no trainable tensor ever gets a gradient), cannot say
anything about checkpointing: its outcome is `error` (`unsupported` when the failure is the library's own
refusal of the method). Over the peft x zoo product these are thousands of cells in hundreds of classes, so they
are not hand-written one by one: they are measured (:mod:`harness.calibrate`, ``python -m harness calibrate``)
into a generated table ``harness/tables/baselines_<backend>_v<transformers>.py``, read here.

A table may cover only the keys another backend's table lists as failing (`calibrate --failing-in peft`:
transformers_peft, whose tuners are peft's, calibrated where peft's plain runs fail; CALIBRATED_ON["failing_in"]).

The expectations consult that table for the installed versions (transformers and the backend's library
equal to the calibrated ones): a cell whose baseline is listed there is expected to come out as the plain
run did, unless a hand-written entry says more (an analysed `error`/`unsupported` reason, or a refusal of
checkpointing that comes before any baseline). Matching stays strict: a plain run fixed upstream turns its
cells `equivalent` (or a finding) and the run fails until the table is regenerated. The table says what
failed, not why: `python -m harness list` prints its classes, and a class that is the harness's own fault
is to be fixed in the harness, not kept in the table.
"""
from __future__ import annotations

import re
from functools import lru_cache

from . import tables
from .versions import installed

KEY_FIELDS = ("arch", "method", "inputs", "task")
LIBRARY = {"peft": "peft", "transformers_peft": "peft", "adapters": "adapters",
           "full": None}   # backend -> the library it calibrates
LIST_CLASSES = 40


def table_name(backend: str, transformers_version: str) -> str:
    return tables.name("baselines", transformers_version, backend)


def key_in_shards(backend: str, key: tuple, shards) -> bool:
    """The split of cells.in_shard, for a key (arch, method, inputs, task) of `backend`."""
    from .cells import key_in_shard

    return any(key_in_shard("-".join((backend, *key)), tuple(s)) for s in shards)


@lru_cache(maxsize=None)
def table(backend: str):
    """The generated table of `backend` for the installed versions, or None (then nothing is calibrated)."""
    tf = installed("transformers")
    if tf is None:
        return None
    mod = tables.load(table_name(backend, tf))
    lib = LIBRARY.get(backend)
    if mod is None or lib and mod.CALIBRATED_ON.get(lib) != installed(lib):
        return None
    return mod


@lru_cache(maxsize=None)
def index(backend: str) -> tuple[dict, dict]:
    """The table's failing keys: ({(arch, method, inputs, task): (outcome, detail)}, {(arch, method): ...} for
    the keys that hold for every inputs and task)."""
    mod = table(backend)
    exact, pair = {}, {}
    if mod is not None:
        for outcome, detail, keys in mod.FAILS:
            for k in keys:
                (pair if k[2:] == ("*", "*") else exact)[k if k[2:] != ("*", "*") else k[:2]] = (outcome, detail)
    return exact, pair


def baseline_failure(cell_fields: dict) -> tuple[tuple[str, str, str] | None, str | None]:
    """((outcome, reason, link), the stage it failed in: build | attach | train) for a cell whose plain run the
    installed release's table lists as failing, else (None, None)."""
    backend = cell_fields.get("backend")
    mod = table(backend) if backend else None
    if mod is None:
        return None, None
    key = tuple(str(cell_fields.get(f)) for f in KEY_FIELDS)
    if not key_in_shards(backend, key, mod.CALIBRATED_ON["shards"]):
        return None, None
    other = mod.CALIBRATED_ON.get("failing_in")   # a table of the keys another backend's table lists as failing
    if other and baseline_failure({**cell_fields, "backend": other})[0] is None:
        return None, None
    exact, pair = index(backend)
    hit = exact.get(key) or pair.get(key[:2])
    if hit is None:
        return None, None
    outcome, detail = hit
    m = re.match(r"baseline (\w+):", detail)      # "baseline attach: ValueError: ..."; vacuous: trained
    return (outcome, f"the plain run already fails (measured by `harness calibrate` on transformers "
                     f"{mod.CALIBRATED_ON['transformers']}, not analysed): {detail}",
            f"harness/tables/{mod.__name__.rsplit('.', 1)[-1]}.py"), (m.group(1) if m else "train")


def summary(backend: str) -> list[str]:
    """Lines for `harness list`: what the table covers and its classes."""
    mod = table(backend)
    if mod is None:
        return [f"  baseline calibration: no table for the installed versions "
                f"(`python -m harness calibrate --backend {backend} --json R.json`, then --table-from R.json)"]
    on = mod.CALIBRATED_ON
    keys = f", the keys {on['failing_in']}'s table lists as failing" if on.get("failing_in") else ""
    out = [f"  baseline calibration ({mod.__name__}): {on['failing']} of {on['baselines']} plain runs fail, in "
           f"{len(mod.FAILS)} classes; shards {', '.join(f'{k}/{n}' for k, n in on['shards'])}{keys}"]
    for outcome, detail, keys in mod.FAILS[:LIST_CLASSES]:   # the table lists the widest classes first
        first = "/".join(k for k in keys[0] if k != "*")
        out.append(f"    {outcome}: {detail[:150]} ({len(keys)} entr{'y' if len(keys) == 1 else 'ies'}: {first}"
                   f"{', ...' if len(keys) > 1 else ''})")
    if len(mod.FAILS) > LIST_CLASSES:
        out.append(f"    ... and {len(mod.FAILS) - LIST_CLASSES} narrower classes: {mod.__file__}")
    return out
