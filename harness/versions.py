"""The installed versions of the libraries a cell depends on (read from package metadata, no import)."""
from __future__ import annotations

import platform
from functools import lru_cache
from importlib import metadata

PACKAGES = ("torch", "transformers", "adapters", "peft")


@lru_cache(maxsize=None)
def installed(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    """{python, torch, transformers, adapters, peft}: what a run's JSON records and `check` compares."""
    return {"python": platform.python_version(), **{p: installed(p) for p in PACKAGES}}
