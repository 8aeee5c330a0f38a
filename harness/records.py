"""Run records: reading a run's (or a calibration's) --json back, re-judging its cells, resuming it. Shared by the
CLI (`run --resume`, `check`, `calibrate --resume`) and the tools (tools/matrix.py).

A record's outcome is a function of the cell and the installed versions; its expectation is data. So a record
made with the versions installed here can be re-judged against the current expectations without re-running it.
"""
from __future__ import annotations

import json
import os

from . import AXES, AXIS_DEFAULTS
from .cells import SelectionError
from .versions import versions


def read_run(path: str) -> dict:
    """A run's --json, made with the versions installed here; SelectionError (one line) otherwise."""
    try:
        with open(path) as fh:
            data = json.load(fh)
        data["cells"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SelectionError(f"cannot read a run's JSON from {path!r}: {type(exc).__name__}: {exc}") from None
    here = versions()
    differ = {k: (v, here.get(k)) for k, v in data.get("versions", {}).items() if k != "python" and here.get(k) != v}
    if differ:
        raise SelectionError(f"{path} was made with other versions than installed here: " +
                             ", ".join(f"{k} {a} (here {b})" for k, (a, b) in differ.items()))
    return data


def rejudge(record: dict) -> None:
    """Update a run's record with what the current expectations say of its outcome."""
    from .expectations import judge

    record.update(judge({**{a: record.get(a, AXIS_DEFAULTS.get(a)) for a in AXES},
                         "modality": record.get("modality", "text")},
                        record["outcome"]))


def resume_run(path: str | None, options: dict, cells: list) -> list[dict]:
    """The records of `path` (a run of the installed versions with the same options) that belong to the
    selected cells, re-judged against the current expectations."""
    if not path or not os.path.exists(path):
        raise SelectionError("--resume needs --json naming an existing run's JSON")
    data = read_run(path)
    if data.get("options") != options:
        raise SelectionError(f"--resume: {path} was made with other options ({data.get('options')}; "
                             f"here {options})")
    ids = {c.id for c in cells}
    kept = [r for r in data["cells"] if r["id"] in ids]
    for r in kept:
        rejudge(r)
    return kept


def resume_calibration(path: str | None, selection: dict) -> dict:
    """The baseline records of a calibration's --json made here with the same selection."""
    if not path or not os.path.exists(path):
        raise SelectionError("--resume needs --json naming an existing calibration JSON")
    with open(path) as fh:
        data = json.load(fh)
    if data.get("versions") != versions() or data.get("selection") != json.loads(json.dumps(selection)):
        raise SelectionError(f"--resume: {path} was made with other versions or another selection")
    return data["baselines"]
