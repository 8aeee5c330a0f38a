"""Backend registry: name -> Backend. A backend whose library is missing stays listed, with why."""
from __future__ import annotations

from functools import lru_cache

from .base import GC_MODES, ORDERS, Backend, MethodSpec  # noqa: F401

BACKEND_NAMES = ("adapters", "peft", "transformers_peft", "qlora", "full")


def _module(name: str):
    """The module of backend `name`: its METHODS and make(); importing it imports no library."""
    if name == "adapters":
        from . import adapters as mod
    elif name == "full":
        from . import full as mod
    elif name == "peft":
        from . import peft as mod
    elif name == "transformers_peft":
        from . import transformers_peft as mod
    elif name == "qlora":
        from . import qlora as mod
    else:
        raise KeyError(name)
    return mod


@lru_cache(maxsize=None)
def get(name: str) -> Backend:
    return _module(name).make()


@lru_cache(maxsize=None)
def method_traits(backend: str, method: str) -> frozenset[str]:
    """The traits of a backend's method (MethodSpec.traits), read from its module's METHODS without importing the
    library; empty for an unknown backend or method."""
    if backend not in BACKEND_NAMES:
        return frozenset()
    spec = _module(backend).METHODS.get(method)
    return spec.traits if spec else frozenset()
