"""Architecture registries: hand-tuned entries (adapters' architectures) plus, for backends that
take any transformers model, the zoo derived from the installed transformers."""
from __future__ import annotations

from functools import lru_cache

from .base import ArchSpec  # noqa: F401


@lru_cache(maxsize=None)
def zoo_survey() -> tuple[dict, dict]:
    """(covered specs, not covered model_type -> reason) of the installed transformers."""
    try:
        from .zoo import discover
    except ImportError:
        return {}, {}
    return discover()


@lru_cache(maxsize=None)
def archs_for(backend: str) -> dict[str, ArchSpec]:
    from .registry import ARCHS

    if backend == "adapters":
        return dict(ARCHS)
    covered, _ = zoo_survey()
    out = dict(ARCHS)
    for name, spec in covered.items():
        out.setdefault(name, spec)
    return out
