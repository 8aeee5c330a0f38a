"""Architecture registries: hand-tuned entries (adapters' architectures) plus, for backends that
take any transformers model, the zoo derived from the installed transformers."""
from __future__ import annotations

from functools import lru_cache

from .base import ArchSpec  # noqa: F401


@lru_cache(maxsize=None)
def zoo_survey() -> tuple[dict, dict]:
    """(covered specs, not covered model_type -> reason) of the installed transformers."""
    try:
        from .discover import discover
    except ImportError:
        return {}, {}
    return discover()


def _known_model_types() -> set[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return set(CONFIG_MAPPING_NAMES)


def registry_not_in_transformers() -> dict[str, str]:
    """Hand-tuned archs the installed transformers does not have (e.g. qwen3 on 4.48)."""
    import transformers

    from .registry import ARCHS

    known = _known_model_types()
    return {n: f"model_type {a.mtype!r} is not in transformers {transformers.__version__}"
            for n, a in ARCHS.items() if a.build is None and a.mtype not in known}


@lru_cache(maxsize=None)
def archs_for(backend: str) -> dict[str, ArchSpec]:
    from .registry import ARCHS

    known = _known_model_types()
    ARCHS = {n: a for n, a in ARCHS.items() if a.build is not None or a.mtype in known}
    if backend == "adapters":
        return dict(ARCHS)
    covered, _ = zoo_survey()
    out = dict(ARCHS)
    for name, spec in covered.items():
        out.setdefault(name, spec)
    return out


def composite_parts(backend: str, arch: str) -> tuple[str, ...]:
    """The model types a zoo arch built of two is made of (ZooSpec.compose: an encoder-decoder wrapper, e.g.
    vision-encoder-decoder of ViT and GPT-2); () for any other."""
    return tuple(getattr(archs_for(backend).get(arch), "compose", ())) if backend else ()
