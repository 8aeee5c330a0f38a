"""Report: versions, one line per cell, the outcome histogram, the JSON contract (docs/design.md section 5)."""
from __future__ import annotations

import json
import os
from collections import Counter

from .versions import versions


def line(result: dict) -> str:
    mark = "ok  " if result["matches"] else "FAIL"
    exp = "" if result["expected"] == "equivalent" else f" (expected {result['expected']})"
    return f"{mark} {result['id']}: {result['outcome']}{exp} [{result['seconds']:.2f}s] {result['detail']}"


def histogram(results: list[dict]) -> str:
    c = Counter(r["outcome"] for r in results)
    return ", ".join(f"{k}: {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))


def summary(results: list[dict]) -> str:
    bad = sum(not r["matches"] for r in results)
    return (f"{len(results)} cells: {histogram(results)}; "
            f"{len(results) - bad} as expected, {bad} not as expected; "
            f"cell time {sum(r.get('seconds', 0.0) for r in results):.0f} s")


def write_json(path: str, results: list[dict], complete: bool = True, options: dict | None = None) -> None:
    """`complete` is False for the interim files of a running or interrupted run; `options` (steps, dtype,
    device) let `run --resume` refuse to mix runs made otherwise."""
    dump(path, complete, **({"options": options} if options else {}), cells=results)


def dump(path: str, complete: bool, indent: int = 1, **fields) -> None:
    """Write {versions, complete, **fields} to `path` atomically (a reader never sees half a file)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"versions": versions(), "complete": complete, **fields}, fh, indent=indent)
    os.replace(tmp, path)
