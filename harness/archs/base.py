"""ArchSpec: how to build a tiny random-weight model of one architecture (its inputs and loss are
:mod:`harness.archs.inputs`'s).

One generic rule (shrink the installed transformers' default config of a model_type) plus small
per-arch overrides held as data in :mod:`harness.archs.registry`. Nothing is fetched from a hub.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

# ArchSpec's input and loss rules
from .inputs import NUM_LABELS, VOCAB, make_batch
from .losses import loss_of

# ---------------------------------------------------------------------------------------------
# Tasks: the head that is trained. Each maps to a transformers auto-mapping (for the generic
# lookup of the head class) and to the kind of batch that head needs.
TASKS = ("seq_cls", "token_cls", "causal_lm", "seq2seq_lm", "image_cls", "audio_cls", "contrastive", "feature")

_TASK_AUTO_MAPPING = {
    "seq_cls": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "token_cls": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "causal_lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "seq2seq_lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "image_cls": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "audio_cls": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "feature": "MODEL_MAPPING_NAMES",
}

INPUTS = ("masked", "unmasked", "padded")

# Generic shrink rule: every key that exists in the default config of a model_type is set to the
# small value. Dropout keys are set to 0.1 so that checkpointing must restore the RNG state.
SHRINK: dict[str, Any] = {
    # widths
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32, "embedding_size": 32,
    "intermediate_size": 37, "d_ff": 37, "n_inner": 37, "hidden_dim": 37,
    "encoder_ffn_dim": 37, "decoder_ffn_dim": 37, "ffn_dim": 37,
    "d_kv": 8, "head_dim": 8, "pooler_hidden_size": 32,
    # depth
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2,
    "encoder_layers": 2, "decoder_layers": 2, "num_decoder_layers": 2,
    # heads
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "num_key_value_heads": 2,
    # positions / vocab
    "vocab_size": VOCAB, "max_position_embeddings": 64, "n_positions": 64,
    # vision
    "image_size": 32, "patch_size": 8, "num_channels": 3,
    # dropout on
    "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "hidden_dropout": 0.1,
    "attention_dropout": 0.1, "activation_dropout": 0.1, "dropout": 0.1, "dropout_rate": 0.1,
    "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "summary_first_dropout": 0.1,
    "classifier_dropout": 0.1, "seq_classif_dropout": 0.1, "qa_dropout": 0.1,
    "embedding_dropout": 0.1, "mlp_dropout": 0.1, "pooler_dropout": 0.1,
}
_TOKEN_ID_KEYS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
                  "cls_token_id", "unk_token_id", "mask_token_id")


@dataclass(frozen=True)
class ArchSpec:
    """One architecture of the matrix (data; the behaviour is in the functions below)."""

    name: str                                   # cell arch id: the transformers model_type, or a composite name
    model_type: str | None = None               # transformers model_type (defaults to name)
    tasks: tuple[str, ...] = ("seq_cls",)       # first is the primary task (its cell ids carry no task suffix)
    modality: str = "text"                      # text | vision | audio | multimodal
    decoder_only: bool = False                  # padded inputs are left-padded
    inputs: tuple[str, ...] = INPUTS            # input variants this arch accepts
    overrides: Mapping[str, Any] = field(default_factory=dict)   # config attributes after the shrink rule
    head_classes: Mapping[str, str] = field(default_factory=dict)  # task -> class name, when not the auto one
    build: Callable[[str], torch.nn.Module] | None = None   # custom builder (task -> model), e.g. bert2bert
    notes: str = ""

    @property
    def mtype(self) -> str:
        return self.model_type or self.name

    @property
    def primary_task(self) -> str:
        return self.tasks[0]

    # The generic input and loss rules; a registry with other modalities overrides these (zoo.ZooSpec).
    def make_batch(self, task: str, model, inputs: str, step: int, seed: int = 0) -> dict[str, Any]:
        return make_batch(self, task, model, inputs, step, seed)

    def loss(self, task: str, output) -> torch.Tensor:
        return loss_of(task, output)


def read_only(obj, name: str) -> bool:
    """A property without a setter on obj's class (or what its attribute_map aliases the name to): a value the
    config derives from its other fields."""
    name = (getattr(type(obj), "attribute_map", None) or {}).get(name, name)
    attr = getattr(type(obj), name, None)
    return isinstance(attr, property) and attr.fset is None


def _set_nested(cfg, key: str, value):
    obj = cfg
    *path, last = key.split(".")
    for p in path:
        obj = getattr(obj, p)
    old = getattr(obj, last, None)
    if isinstance(value, dict) and isinstance(old, dict) and old and all(isinstance(k, int) for k in old):
        value = {int(k): v for k, v in value.items()}   # JSON (the zoo's tables) keeps string keys only (Aria's)
    setattr(obj, last, value)


def shrink_config(cfg, overrides: Mapping[str, Any] = ()):
    """Apply the generic shrink rule to a config (and its text/vision/audio sub-configs)."""
    for sub in ("text_config", "vision_config", "audio_config", "encoder", "decoder"):
        subcfg = getattr(cfg, sub, None)
        if subcfg is not None and hasattr(subcfg, "to_dict"):
            shrink_config(subcfg)
    d = cfg.to_dict()
    for k, v in SHRINK.items():
        if k in d and not isinstance(d[k], (dict, list)) and d[k] is not None:
            setattr(cfg, k, v)
        elif k in ("attention_dropout", "hidden_dropout") and k in d:
            setattr(cfg, k, v)
    # per-layer lists sized for the default depth (e.g. layer_types) follow the shrunk depth
    n_layers = getattr(cfg, "num_hidden_layers", None)
    if isinstance(getattr(cfg, "layer_types", None), list) and isinstance(n_layers, int) \
            and not read_only(cfg, "layer_types"):   # transformers 5 derives some (Mamba's) from other fields
        cfg.layer_types = cfg.layer_types[:n_layers]
    vocab = getattr(cfg, "vocab_size", None)
    if isinstance(vocab, int):
        for i, k in enumerate(_TOKEN_ID_KEYS):
            tid = getattr(cfg, k, None)
            if isinstance(tid, int) and tid >= vocab:
                setattr(cfg, k, i + 1)
    if getattr(cfg, "pad_token_id", None) is None and "pad_token_id" in d:
        cfg.pad_token_id = 0
    for k, v in dict(overrides).items():
        _set_nested(cfg, k, v)
    return cfg


def tiny_config(spec: ArchSpec, task: str, **config_kwargs):
    """`config_kwargs`: what a user passes to AutoConfig beside the model type (attn_implementation)."""
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(spec.mtype, **config_kwargs)
    shrink_config(cfg, spec.overrides)
    fit_positions(cfg)
    if task in ("seq_cls", "token_cls", "image_cls", "audio_cls"):
        cfg.num_labels = NUM_LABELS
    return cfg


def fit_positions(cfg) -> None:
    """Position tables of at least twice the batches' length (inputs.SEQ_LEN; the shrink rule's 64 holds the
    default 10 tokens, a `--seq-len` may need more)."""
    from .inputs import SEQ_LEN

    for c in config_and_subs(cfg):
        for k in ("max_position_embeddings", "n_positions"):
            v = getattr(c, k, None)
            if isinstance(v, int) and not isinstance(v, bool) and v < 2 * SEQ_LEN and not read_only(c, k):
                setattr(c, k, 2 * SEQ_LEN)


@functools.lru_cache(maxsize=None)
def _routes_experts(model_type: str) -> bool:
    """Whether the model type's config, or its text / decoder / encoder sub-config, has output_router_logits: read
    from the config classes' source where it says (no import: the default tier asks it of every model type, 3.4 s
    of imports on 5.24.0), else from the default config built (a sub-config that is any AutoConfig, a class
    defined elsewhere). The two agree on every model type of 4.48.3, 4.57.6 and 5.24.0 where the source says."""
    said = _routes_experts_in_source(model_type)
    if said is not None:
        return said
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.for_model(model_type)
    except Exception:  # noqa: BLE001 - a type without a default config: a custom builder's
        return False
    return any(hasattr(c, "output_router_logits") for c in config_and_subs(cfg))


def model_source(model_type: str, kind: str) -> str | None:
    """The text of the installed transformers' `<kind>_<module>.py` of a model type (kind: modeling, configuration,
    modular), read without importing it; None when there is none."""
    import os
    import sys

    import transformers
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    module = model_type_to_module_name(model_type)
    paths = [os.path.join(os.path.dirname(transformers.__file__), "models", module, f"{kind}_{module}.py")]
    try:   # a file named otherwise (Data2Vec's text model: models/data2vec/modeling_data2vec_text.py): its config's
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        config_file = sys.modules[CONFIG_MAPPING[model_type].__module__].__file__
        paths.append(os.path.join(os.path.dirname(config_file),
                                  os.path.basename(config_file).replace("configuration_", f"{kind}_", 1)))
    except Exception:  # noqa: BLE001 - not a transformers model type
        pass
    for path in paths:
        try:
            with open(path) as fh:
                return fh.read()
        except OSError:
            continue
    return None


def _routes_experts_in_source(model_type: str) -> bool | None:
    import re

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    text = model_source(model_type, "configuration")
    if text is None:
        return None

    def body(name: str) -> str | None:
        m = re.search(rf"^class {name}\b.*?(?=^class |\Z)", text, re.M | re.S)
        return m.group(0) if m else None

    main = body(CONFIG_MAPPING_NAMES.get(model_type, "-"))
    if main is None:
        return None
    if re.search(r"\boutput_router_logits\b", main):
        return True
    for key in ("text_config", "decoder", "encoder"):
        m = re.search(rf"[\"']{key}[\"']\s*:\s*(\w+)", main)
        if m:
            sub = body(m.group(1)) if m.group(1) != "AutoConfig" else None
            if sub is None:
                return None
            if re.search(r"\boutput_router_logits\b", sub):
                return True
    return False


# what an arch does that known failures match on ("trait:NAME" in an expectation's arch axis), read from the installed
# transformers' source without importing the model
ARCH_TRAITS = {
    "records_attentions": "returns attentions collected by forward hooks on its attention modules "
                          "(_can_record_outputs; a vision-language model: its language model's), not through the "
                          "layers' outputs",
    "routes_experts": "a mixture-of-experts model whose config has output_router_logits",
    "caches_in_training": "its forward builds a key/value cache (DynamicCache) whenever use_cache is on, its "
                          "config's default, training or not: only transformers' own checkpointing switch turns it "
                          "off (GradientCheckpointingLayer.__call__), not torch's checkpoint_wrapper",
}


@functools.lru_cache(maxsize=None)
def arch_traits(model_type: str) -> frozenset[str]:
    """The ARCH_TRAITS of a transformers model type (empty for a name that is none)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    traits = set()
    if _records_attentions(model_type):
        traits.add("records_attentions")
    if model_type in CONFIG_MAPPING_NAMES and _routes_experts(model_type):   # the config's, not the file's text
        traits.add("routes_experts")
    if _caches_in_training(model_type):
        traits.add("caches_in_training")
    return frozenset(traits)


@functools.lru_cache(maxsize=None)
def _records_attentions(model_type: str) -> bool:
    """Its model file records attentions with hooks: declares them among the outputs it records
    (_can_record_outputs), records them (a check_model_inputs / capture_outputs decorator), and does not collect them
    from its layers' outputs itself (Gemma 2 and 3, Granite, Phi, GPT-NeoX on 4.57.6 declare them and still collect
    them so: their attentions keep the graph). Or its language model records them (a vision-language model returns
    its language model's attentions: LLaVA, Mistral 3, PaliGemma). A model type without a file of its own reads its
    config class's (code_llama: llama); one defined in its modular file alone, its parents'."""
    import re

    source_type = _source_type(model_type)
    src = model_source(source_type, "modeling")
    if src is None:   # a model defined in its modular file alone: its parents' way
        modular = model_source(source_type, "modular") or ""
        if any(_records_attentions(parent) for parent in
               dict.fromkeys(re.findall(r"from \.\.(\w+)\.modeling_\w+ import", modular))):
            return True
    elif (re.search(r"_can_record_outputs\s*=\s*\{[^}]*[\"']attentions[\"']", src)
            and re.search(r"@(check_model_inputs|capture_outputs)\b", src)
            and not re.search(r"\+=\s*\(layer_outputs\[1\],?\)|\+\s*\(outputs\[1\],?\)", src)):
        return True
    return any(_records_attentions(sub) for sub in _sub_model_types(model_type))


@functools.lru_cache(maxsize=None)
def _caches_in_training(model_type: str) -> bool:
    """Its config turns use_cache on by default and its model file makes a DynamicCache under a test of use_cache
    (an `if` of the ten lines above it: Llama's `if use_cache and past_key_values is None`; a decoder stack's, T5's and BART's), not only for a decoder
    configuration of an encoder (BERT's `use_cache and self.config.is_decoder`)."""
    import re

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        if not getattr(CONFIG_MAPPING[model_type](), "use_cache", False):
            return False
    except Exception:  # noqa: BLE001 - not a transformers model type, or a config that needs arguments
        return False
    source_type = _source_type(model_type)
    src = model_source(source_type, "modeling") or model_source(source_type, "modular") or ""
    lines = src.splitlines()
    for i, line in enumerate(lines):
        if "DynamicCache(" in line:
            guards = [g for g in lines[max(i - 10, 0):i + 1] if re.match(r"\s*(el)?if\b", g)]
            if any("use_cache" in g for g in guards) and not any("config.is_decoder" in g for g in guards):
                return True
    return False


def _source_type(model_type: str) -> str:
    """The model type whose files hold `model_type`'s model: itself; or the one whose config class its base model
    class goes with (EXAONE on 5.24.0 is a LlamaModel); or another of the same config class (code_llama: llama)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    if model_source(model_type, "modeling") is not None or model_type not in CONFIG_MAPPING_NAMES:
        return model_type
    base = MODEL_MAPPING_NAMES.get(model_type)
    configs = {CONFIG_MAPPING_NAMES[model_type]}
    if isinstance(base, str) and base.endswith("Model"):
        configs.add(base[: -len("Model")] + "Config")
    return next((t for t, c in CONFIG_MAPPING_NAMES.items()
                 if c in configs and t != model_type and model_source(t, "modeling") is not None), model_type)


def _sub_model_types(model_type: str) -> list[str]:
    """The model type of the language model of a composite model type's default config (its text_config): the
    attentions a composite returns are its language model's."""
    from transformers import PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        cfg = CONFIG_MAPPING[model_type]()
    except Exception:  # noqa: BLE001 - no default config (encoder-decoder wrappers): none known
        return []
    return [v.model_type for k, v in vars(cfg).items()
            if k == "text_config" and isinstance(v, PretrainedConfig) and v.model_type and v.model_type != model_type]


def routes_experts(spec: ArchSpec) -> bool:
    """A mixture-of-experts model whose router logits can be returned (output_router_logits in its config)."""
    return spec.build is None and _routes_experts(spec.mtype)


def head_class(spec: ArchSpec, task: str):
    import transformers
    from transformers.models.auto import modeling_auto

    name = spec.head_classes.get(task)
    if name is None:
        mapping = getattr(modeling_auto, _TASK_AUTO_MAPPING[task])
        name = mapping.get(spec.mtype)
        if isinstance(name, (list, tuple)):
            name = name[0]
    if name is None:
        raise LookupError(f"{spec.mtype} has no {task} head in this transformers")
    return getattr(transformers, name)


def build_model(spec: ArchSpec, task: str, dtype: torch.dtype = torch.float32, device: str = "cpu",
                **config_kwargs):
    """Build the tiny random-weight model (call under a fixed torch seed); `config_kwargs` go to AutoConfig. An
    attn_implementation is also set on the model (set_attn_implementation, where there is one), as from_pretrained's
    and from_config's argument sets it: on every sub-model, which AutoConfig's alone leaves to some composites
    (Cohere2-Vision's and DeepSeek-VL's language models stayed on SDPA and returned no attentions)."""
    if spec.build is not None:
        model = spec.build(task)
    else:
        cfg = tiny_config(spec, task, **config_kwargs)
        model = head_class(spec, task)(cfg)
    attn = config_kwargs.get("attn_implementation")
    if attn and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(attn)
    return to_dtype(model, device, dtype)


def cache_off(model) -> int:
    """Switch use_cache off in every config of `model` that has it on, as checkpointing does in training (the
    models' `if self.gradient_checkpointing and self.training: use_cache = False`); how many were on."""
    switched = 0
    for cfg in model_configs(model):
        if not hasattr(cfg, "use_cache"):
            continue
        for sub in config_and_subs(cfg):
            if getattr(sub, "use_cache", False) is True:
                sub.use_cache = False
                switched += 1
    return switched


def checkpointed_layers(model) -> tuple[type, ...]:
    """The classes of the layers transformers' gradient checkpointing checkpoints in `model`: its
    GradientCheckpointingLayer subclasses (transformers >= 4.52); on a transformers without that class, the layers
    in the ModuleLists of the modules that hold a `gradient_checkpointing` switch (the loop that checkpoints them);
    else the classes its `_no_split_modules` names that it instantiates, which accelerate's FSDP plugin wraps and
    checkpoints by default (FullyShardedDataParallelPlugin.set_auto_wrap_policy). What torch's own checkpoint API
    (the torch_* gc modes) and the FSDP launches wrap."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:
        GradientCheckpointingLayer = None
    found = {}
    if GradientCheckpointingLayer is not None:
        found = {type(m): None for m in model.modules() if isinstance(m, GradientCheckpointingLayer)}
    if not found:   # transformers < 4.52: the layers a module that holds the `gradient_checkpointing` switch loops over
        for m in model.modules():
            if isinstance(getattr(m, "gradient_checkpointing", None), bool):
                found.update({type(getattr(layer, "_checkpoint_wrapped_module", layer)): None
                              for c in m.children() if isinstance(c, torch.nn.ModuleList) for layer in c})
    if not found:
        names = set(getattr(model, "_no_split_modules", None) or ())
        for m in model.modules():
            inner = type(getattr(m, "_checkpoint_wrapped_module", m))
            if inner.__name__ in names:
                found[inner] = None
    return tuple(found)


def model_configs(model) -> list:
    """Every distinct config of `model`'s modules (the parts of a composite model hold their own)."""
    return list({id(c): c for m in model.modules() if (c := getattr(m, "config", None)) is not None}.values())


def config_and_subs(cfg) -> list:
    """A config and the text, decoder and encoder sub-configs it has."""
    return [c for c in (cfg, *(getattr(cfg, k, None) for k in ("text_config", "decoder", "encoder"))) if c is not None]


def to_dtype(model, device, dtype):
    """`model.to(device, dtype)`, keeping in float32 what the model keeps so when a user loads it in another dtype
    (`from_pretrained(dtype=...)` builds it under that default dtype): the modules it declares must stay float32
    (`_keep_in_fp32_modules_strict`, matched as transformers matches them), and the parameters and buffers its
    construction makes float32 explicitly (`nn.Parameter(torch.empty(..., dtype=torch.float32))`: DeepSeek-V3's
    and Inkling 2's routers). A forward may rely on either (ERNIE-4.5-MoE's `self.gate(hidden_states.float())`);
    cast, they broke the float64 rerun of such models' mismatches and a bfloat16 run."""
    import re

    model = model.to(device=device, dtype=dtype)
    if dtype == torch.float32:
        return model
    for owner in model.modules():
        names = getattr(owner, "_keep_in_fp32_modules_strict", None) or ()
        if names:
            keep = re.compile("|".join(rf"((^|\.){re.escape(n)}($|\.))" for n in names))
            for name, sub in owner.named_modules():
                if name and keep.search(name):
                    sub.float()
    experts = getattr(getattr(model, "config", None), "_experts_implementation", None)
    if dtype == torch.float64 and experts == "grouped_mm":
        # torch's grouped_mm has no float64 kernel ("Expected mat_a to be Float32, BFloat16 or Float16"): the
        # mixture-of-experts layers of transformers 5 run their experts one by one instead, the same arithmetic
        model.set_experts_implementation("eager")
    for name in declared_float32(model, dtype):
        owner, _, leaf = name.rpartition(".")
        sub = model.get_submodule(owner)
        if leaf in sub._parameters:
            sub._parameters[leaf].data = sub._parameters[leaf].data.float()
        else:
            sub._buffers[leaf] = sub._buffers[leaf].float()
    if dtype == torch.float64:
        # transformers' losses "upcast" the logits with `logits.float()` (ForCausalLMLoss, ForMaskedLMLoss,
        # ForTokenClassification), which rounds float64 logits to float32: a float64 rerun would carry float32
        # rounding in every gradient, and one logit rounding the other way in one run "confirms" a mismatch that
        # is rounding (Blenderbot + WaveFT). A float64 user would not want it either: kept float64 there
        for sub in model.modules():
            if isinstance(getattr(type(sub), "loss_function", None), property):   # a transformers model
                sub.loss_function = KeepFloat64(sub.loss_function)
    return model


class KeepFloat64(torch.overrides.TorchFunctionMode):
    """Calls `loss` with `Tensor.float()` a no-op on float64 tensors (and only that)."""

    def __init__(self, loss):
        super().__init__()
        self.loss = loss

    def __call__(self, *args, **kwargs):
        with self:
            return self.loss(*args, **kwargs)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.float and args[0].dtype == torch.float64:
            return args[0]
        return func(*args, **(kwargs or {}))


def declared_float32(model, dtype: torch.dtype) -> list[str]:
    """The names of the parameters and buffers of `model` (a transformers model) that its construction makes float32
    under default dtype `dtype`: the model built again on the meta device (no memory, no init cost: ~20 ms). Empty
    when it cannot be rebuilt so: then only the declared modules stay float32."""
    config = getattr(model, "config", None)
    if config is None:
        return []
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dtype)
        with torch.device("meta"):
            twin = type(model)(config)
    except Exception:  # noqa: BLE001 - a model that cannot be rebuilt so keeps the plain cast
        return []
    finally:
        torch.set_default_dtype(old)
    return [n for n, t in (*twin.named_parameters(), *twin.named_buffers()) if t.dtype == torch.float32]


def replace(spec: ArchSpec, **kw) -> ArchSpec:
    return dataclasses.replace(spec, **kw)

