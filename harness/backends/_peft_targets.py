"""Arch-generic ``target_modules`` for the `peft` backend, when peft has no default for a model_type.

peft's own per-model_type defaults (``TRANSFORMERS_MODELS_TO_<METHOD>_TARGET_MODULES_MAPPING``) are
used whenever they list the model_type. Otherwise a config carries a *marker* string and
:func:`resolve` turns it into an explicit list of module names once the model exists:

* ``harness:linear``     every ``nn.Linear`` / ``Conv1D`` of the backbone (the head excluded);
* ``harness:linear/N``   the same, restricted to layers whose in and out features divide by N
                         (block-structured methods: OFT, BOFT, C3A, VB-LoRA, MiSS, RoAd, ...);
* ``harness:linear/N:a,b`` peft's default names a, b for the model_type, kept where the dims divide by N
                         (``harness:linear/N:re:R`` where that default is one regex R of full module names);
* ``harness:norm``       every normalisation layer (LayerNorm, RMSNorm, ...) of the model;
* ``harness:blocks``     the transformer blocks (transformers' GradientCheckpointingLayer children) of
                         the first ``nn.ModuleList`` holding them (ShadowPEFT wraps whole blocks).

This only chooses which layers a method adapts; it changes nothing the libraries compute.
"""
from __future__ import annotations

import functools
import re

import torch

MARK = "harness:"
# heads never adapted by a fallback: they are either trained whole (modules_to_save) or are the
# language-model output layer, which peft's "all-linear" leaves alone too.
HEAD_NAMES = ("lm_head", "classifier", "score", "qa_outputs", "cls", "projector")
# modules peft refuses to adapt in some model types (peft.tuners.tuners_utils._check_lora_target_modules_mamba:
# "Module 'out_proj' is incompatible with Mamba-based models"); the fallback leaves them out, as users must
INCOMPATIBLE: dict[str, tuple[str, ...]] = {
    mt: ("out_proj", "conv1d") for mt in ("falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h")}


def default_or(mapping_name: str | None, mtype: str, fallback: str):
    """None (peft's own default) when the mapping lists the model_type, else the fallback marker.

    For a shape-constrained fallback (``linear/N``) peft's default list is kept but filtered on the
    model to the layers whose dims divide by N (e.g. t5's default includes ``wi``/``wo``, 32 <-> 37)."""
    if mapping_name is not None:
        from peft.utils import constants

        names = getattr(constants, mapping_name, {}).get(mtype)
        if names:
            if "/" in fallback:   # peft's default is a list of names, or one regex of full names (Gemma 4's)
                return MARK + fallback + ":" + ("re:" + names if isinstance(names, str) else ",".join(names))
            return None
    return MARK + fallback


def _linear_like(module) -> tuple[int, int] | None:
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf"):  # transformers' GPT-2 Conv1D
        return module.weight.shape[0], module.nf
    return None


def _head_prefixes(model) -> list[str]:
    """Top-level modules that are not the backbone: the task head(s) (``classifier``, ``pre_classifier``,
    ``lm_head``, ``head``, ...). When the model has its ``base_model_prefix`` backbone, everything beside
    it is head; otherwise the output embedding and the usual head names."""
    prefix = getattr(model, "base_model_prefix", "")
    backbone = getattr(model, prefix, None) if prefix else None
    if isinstance(backbone, torch.nn.Module) and backbone is not model:
        return [name for name, _ in model.named_children() if name != prefix]
    heads = []
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for name, mod in model.named_modules():
        if not name:
            continue
        if (out_emb is not None and mod is out_emb) or ("." not in name and any(h in name for h in HEAD_NAMES)):
            heads.append(name)
    return heads


def resolve(marker: str, model) -> list[str]:
    kind = marker[len(MARK):]
    kind, _, only = kind.partition(":")
    pattern = only[len("re:"):] if only.startswith("re:") else None
    only = tuple(only.split(",")) if only and pattern is None else ()
    heads = _head_prefixes(model)

    def in_head(name):
        return any(name == h or name.startswith(h + ".") for h in heads)

    names = []
    if kind == "norm":
        for name, mod in model.named_modules():
            if name and not in_head(name) and re.search(r"norm", type(mod).__name__, re.I) \
                    and any(True for _ in mod.parameters(recurse=False)):
                names.append(name)
    elif kind == "blocks":
        from transformers.modeling_layers import GradientCheckpointingLayer

        def block(c) -> bool:   # a layer, or torch's CheckpointWrapper around one (a torch_* gc mode, gc_first)
            return isinstance(getattr(c, "_checkpoint_wrapped_module", c), GradientCheckpointingLayer)

        for lname, mod in model.named_modules():
            if isinstance(mod, torch.nn.ModuleList) and not in_head(lname) and any(block(c) for c in mod):
                names = [f"{lname}.{i}" for i, c in enumerate(mod) if block(c)]
                break
    elif kind.startswith("linear"):
        div = int(kind.split("/", 1)[1]) if "/" in kind else 1
        refused = INCOMPATIBLE.get(getattr(getattr(model, "config", None), "model_type", None), ())
        for name, mod in model.named_modules():
            dims = _linear_like(mod)
            if dims and not in_head(name) and dims[0] % div == 0 and dims[1] % div == 0 and (
                    not only or any(name == o or name.endswith("." + o) for o in only)) and \
                    (pattern is None or re.fullmatch(pattern, name)) and \
                    name.rsplit(".", 1)[-1] not in refused:
                names.append(name)
    else:
        raise ValueError(f"unknown target marker {marker!r}")
    if not names:
        raise ValueError(f"no module of the model matches target marker {marker!r}")
    return names


def fill_prompt_dims(config, model):
    """Prompt learning: peft reads token_dim / num_layers / num_attention_heads from ``model.config.to_dict()``
    under a few key names and otherwise asks for them ("Please specify `token_dim`"); give them from the
    config's canonical attributes (which honour its attribute_map, e.g. distilbert's dim / n_layers)."""
    if not getattr(config, "is_prompt_learning", False):
        return config
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for field, attr in (("token_dim", "hidden_size"), ("num_layers", "num_hidden_layers"),
                        ("num_attention_heads", "num_attention_heads")):
        if getattr(config, field, "absent") is None and isinstance(getattr(cfg, attr, None), int):
            setattr(config, field, getattr(cfg, attr))
    return config


EXPERTS = MARK + "experts"   # target_parameters: the 3-D expert weights of a mixture-of-experts model


class NoExpertParameters(ValueError):
    """LoRA on expert parameters for a model that keeps its experts as modules."""


def expert_parameters(model) -> list[str]:
    """The names of a mixture-of-experts model's 3-D expert weights (fused experts: `...experts.gate_up_proj`), as
    target_parameters takes them: the part after the layer index, once each."""
    import re

    names = {re.sub(r"^.*?\.\d+\.", "", n) for n, p in model.named_parameters() if p.dim() == 3 and ".experts." in n}
    return sorted(names)


def resolve_config(config, model):
    """Replace a marker in ``config.target_modules`` (and IA3's feedforward_modules, LoRA's target_parameters) in
    place."""
    if getattr(config, "target_parameters", None) == [EXPERTS]:
        config.target_parameters = expert_parameters(model)
        if not config.target_parameters:
            raise NoExpertParameters("target_parameters: the model keeps its experts as modules, it has no 3-D "
                                     "expert parameters")
    tm = getattr(config, "target_modules", None)
    if isinstance(tm, str) and tm.startswith(MARK):
        config.target_modules = set(resolve(tm, model))
        ff = getattr(config, "feedforward_modules", None)
        if isinstance(ff, str) and ff.startswith(MARK):
            config.feedforward_modules = set()
    _no_dropout_on_fused_experts(config, model)
    return config


def _no_dropout_on_fused_experts(config, model):
    """transformers 5 stores MoE experts as fused parameters; get_peft_model then converts LoRA targets on them to
    ``target_parameters``, adapted by ``lora.ParamWrapper``, which refuses any LoRA dropout ("lora.ParamWrapper
    does not work with lora_dropout != 0"). As a user must, LoRA dropout is 0 exactly there (the model's own
    dropout stays on). Asks peft's own conversion, on a copy of the config."""
    conversion = _peft_conversion()
    if not getattr(config, "lora_dropout", 0) or conversion is None:
        return
    try:
        import copy

        convert, mapping = conversion
        probe = copy.deepcopy(config)
        convert(probe, model=model, conversions=mapping(model))
    except Exception:  # noqa: BLE001 - transformers 4: nothing is converted
        return
    if getattr(probe, "target_parameters", None):
        config.lora_dropout = 0.0


@functools.cache
def _peft_conversion():
    """peft's conversion of configs for transformers 5's fused parameters (convert, mapping), or None for a peft
    without it (asked once: a failing import searches the path again on every call)."""
    try:
        from peft.utils.transformers_weight_conversion import (convert_peft_config_for_transformers,
                                                               get_model_conversion_mapping)
    except ImportError:
        return None
    return convert_peft_config_for_transformers, get_model_conversion_mapping
