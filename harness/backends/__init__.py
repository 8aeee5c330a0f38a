"""Backend registry: name -> Backend. A backend whose library is missing stays listed, with why."""
from __future__ import annotations

from functools import lru_cache

from .base import GC_MODES, ORDERS, Backend, MethodSpec  # noqa: F401

BACKEND_NAMES = ("adapters", "peft", "full")


@lru_cache(maxsize=None)
def get(name: str) -> Backend:
    if name == "adapters":
        from . import adapters as mod
    elif name == "full":
        from . import full as mod
    elif name == "peft":
        from . import peft as mod
    else:
        raise KeyError(name)
    return mod.make()
