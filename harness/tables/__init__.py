"""Generated tables: their one home, naming, writer and loader.

A table is a Python module of literals, written by a command and never edited by hand, one per kind, backend and
transformers release:

- ``zoo_v<transformers>``: the zoo survey (``python -m harness.survey --survey``): which model types build and
  train from a shrunk config, with what overrides, feed and tasks (read by :mod:`harness.archs.zoo`);
- ``baselines_<backend>_v<transformers>``: the baseline calibration (``python -m harness calibrate --table-from``):
  which plain runs fail or are vacuous (read by :mod:`harness.calibration`).

Each module holds a header dict (what it was measured on) and one body (``TABLE`` or ``FAILS``).
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import re
from types import ModuleType

HERE = os.path.dirname(__file__)


def name(kind: str, transformers_version: str, backend: str | None = None) -> str:
    """``zoo_v4_57_6`` for ("zoo", "4.57.6"); ``baselines_peft_v4_57_6`` with backend "peft"."""
    release = "v" + re.sub(r"[^0-9A-Za-z]+", "_", transformers_version)
    return "_".join(p for p in (kind, backend, release) if p)


def names(kind: str, backend: str | None = None) -> list[str]:
    """The tables of that kind (and backend) there are, oldest release first."""
    prefix = "_".join(p for p in (kind, backend) if p) + "_v"
    found = [m.name for m in pkgutil.iter_modules([HERE]) if m.name.startswith(prefix)]
    return sorted(found, key=lambda n: [int(x) if x.isdigit() else x for x in n[len(prefix):].split("_")])


def path(table: str) -> str:
    return os.path.join(HERE, table + ".py")


def load(table: str) -> ModuleType | None:
    """The table module of that name, or None when there is none."""
    if table not in {m.name for m in pkgutil.iter_modules([HERE])}:
        return None
    return importlib.import_module(f"{__name__}.{table}")


def write(table_path: str, doc: list[str], header: tuple[str, dict], body: tuple[str, str, list[str], str]) -> None:
    """Write a table module: its docstring lines, ``HEADER_NAME = {...}`` and ``BODY_NAME = <open> ... <close>``
    with the body's lines as given (each writer formats its own entries)."""
    head_name, head = header
    body_name, opening, lines, closing = body
    text = ['"""' + doc[0], *doc[1:], '"""', "# flake8: noqa", f"{head_name} = {head!r}", "",
            f"{body_name} = {opening}", *lines, closing]
    os.makedirs(os.path.dirname(table_path) or ".", exist_ok=True)
    with open(table_path, "w") as fh:
        fh.write("\n".join(text) + "\n")
