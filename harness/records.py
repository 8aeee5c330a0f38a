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
        data = _load_run(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SelectionError(f"cannot read a run's JSON from {path!r}: {type(exc).__name__}: {exc}") from None
    here = versions()
    differ = {k: (v, here.get(k)) for k, v in data.get("versions", {}).items() if k != "python" and here.get(k) != v}
    if differ:
        raise SelectionError(f"{path} was made with other versions than installed here: " +
                             ", ".join(f"{k} {a} (here {b})" for k, (a, b) in differ.items()))
    return data


def _load_run(path: str) -> dict:
    """A run's --json as it is (OSError, ValueError, KeyError or TypeError when it is not one)."""
    with open(path) as fh:
        data = json.load(fh)
    data["cells"][:0]   # noqa: B018  (a run has its cells)
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


# The per-cell ledger: what `harness report` renders without rerunning, a few bytes per cell. Gzipped JSON Lines:
# a header line {"ledger": 1, versions, complete, label, causes: [[reason, link], ...]}, then one line per cell with
# its axes, outcome, expected, matches, the index of its cause in the header (-1: none), its seconds (0.01 s), and
# its detail (cut to DETAIL characters) where the outcome is not `equivalent` and no recorded cause explains it, and
# where an `equivalent` cell is `safe, partly` (the detail says what is not vouched for).
LEDGER = 1
DETAIL = 300
_KEPT = ("id", *AXES, "modality", "outcome", "expected", "matches")


def write_ledger(path: str, runs: list[dict], label: str = "") -> int:
    """Write the cells of `runs` (read run JSONs of one set of versions) to a ledger at `path`; the cell count."""
    import gzip

    from .report import atomic, partly

    vers = {json.dumps(r.get("versions", {}), sort_keys=True) for r in runs}
    if len(vers) > 1:
        raise SelectionError(f"a ledger holds one set of versions; these runs have {len(vers)}")
    causes: dict[tuple[str, str], int] = {}
    lines = []
    for run in runs:
        for r in run["cells"]:
            cause = (r.get("reason", ""), r.get("link", ""))
            idx = causes.setdefault(cause, len(causes)) if any(cause) else -1
            out = {k: r.get(k, AXIS_DEFAULTS.get(k)) for k in _KEPT}
            out.update(cause=idx, seconds=round(r.get("seconds", 0.0), 2))
            if r["outcome"] != "equivalent" and (idx < 0 or not r["matches"]):   # a recorded cause says the rest
                out["detail"] = r.get("detail", "")[:DETAIL]
            elif partly(r):   # the clause that says what is not vouched for
                detail = r["detail"]
                out["detail"] = detail[detail.rfind(";", 0, detail.index("not vouched for")) + 1:].strip()[:DETAIL]
            lines.append(json.dumps(out, separators=(",", ":")))
    header = {"ledger": LEDGER, "versions": runs[0].get("versions", {}) if runs else versions(),
              "complete": all(r.get("complete", True) for r in runs), "label": label,
              "causes": [list(c) for c in causes]}
    with atomic(path, "wt", lambda p, mode: gzip.open(p, mode, compresslevel=9)) as fh:
        fh.write(json.dumps(header, separators=(",", ":")) + "\n")
        fh.writelines(line + "\n" for line in lines)
    return len(lines)


def read_any(path: str) -> dict:
    """A run's --json or a ledger (any versions: rendered as recorded, not re-judged) as {versions, complete,
    label, cells}; SelectionError (one line) if it is neither."""
    import gzip

    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rt") as fh:
                header = json.loads(fh.readline())
                if header.get("ledger") != LEDGER:
                    raise ValueError(f"not a ledger of format {LEDGER}")
                causes = header["causes"]
                cells = []
                for line in fh:
                    r = json.loads(line)
                    reason, link = causes[r.pop("cause")] if r["cause"] >= 0 else ("", "")
                    cells.append({**r, "reason": reason, "link": link, "detail": r.get("detail", "")})
            return {**header, "cells": cells}
        data = _load_run(path)
        for r in data["cells"]:
            r["outcome"], r["expected"], r["matches"]   # noqa: B018  (a run's records have these)
        return {"label": "", **data}
    except (OSError, ValueError, KeyError, TypeError, IndexError, EOFError) as exc:
        raise SelectionError(f"cannot read a run's JSON or a ledger from {path!r}: {type(exc).__name__}: {exc}") \
            from None
