"""Backend `adapters` (AdapterHub): every named config, sized for hidden-32 models.

Users' path: ``adapters.init(model)``; ``model.add_adapter(name, config)``;
``model.train_adapter(name)``; ``model.gradient_checkpointing_enable(...)`` (adapters' override,
which hands the ForwardContext to the recompute and calls ``enable_input_require_grads``).
`gc_first` enables checkpointing after ``adapters.init`` and before the adapter is added and
activated; `adapter_first` after.
"""
from __future__ import annotations

import textwrap

from ..archs.base import ArchSpec
from .base import Backend, MethodSpec

NAME = "cell"
NAMES = (NAME, "cell2")   # the switch recipe's two adapters

# Bottleneck width 8 on hidden 32 (divisible by compacter's phm_dim 4); narrower bottlenecks leave
# every ReLU unit dead on some batches. par_bn keeps its library default (2 -> 16 units).
_BN = {"reduction_factor": 4}
_PAR = {"reduction_factor": 2}
# ReFT: the library default suffix_positions=0 leaves the suffix unit's parameters unused
_REFT = {"r": 2, "prefix_positions": 3, "suffix_positions": 2}
_PREFIX = {"prefix_length": 5, "bottleneck_size": 16}
_LORA = {"r": 4, "alpha": 8}


def _cfg(cls_name: str, **kw):
    def make(arch: ArchSpec, task: str):
        import adapters

        return getattr(adapters, cls_name)(**kw)
    return make


def _needs_torchvision(arch, task):
    from importlib.util import find_spec

    try:
        if find_spec("torchvision") is not None:
            import torchvision  # noqa: F401  (a torchvision built for another torch fails here)
            return None
    except Exception:  # noqa: BLE001
        pass
    return "needs an importable torchvision (StochasticDepth); none here"


def _mam(arch, task):
    import adapters

    return adapters.MAMConfig(adapters.PrefixTuningConfig(**_PREFIX), adapters.ParBnConfig(**_PAR))


def _unipelt(arch, task):
    import adapters

    return adapters.UniPELTConfig(adapters.PrefixTuningConfig(**_PREFIX),
                                  adapters.SeqBnConfig(**_BN),
                                  adapters.LoRAConfig(**_LORA))


METHODS = {m.name: m for m in [
    MethodSpec("seq_bn", _cfg("SeqBnConfig", **_BN)),
    MethodSpec("seq_bn_inv", _cfg("SeqBnInvConfig", **_BN)),
    MethodSpec("double_seq_bn", _cfg("DoubleSeqBnConfig", **_BN)),
    MethodSpec("double_seq_bn_inv", _cfg("DoubleSeqBnInvConfig", **_BN)),
    MethodSpec("par_bn", _cfg("ParBnConfig", **_PAR)),
    MethodSpec("scaled_par_bn", _cfg("ParBnConfig", scaling="learned", **_PAR)),
    MethodSpec("adapter+", _cfg("AdapterPlusConfig", **_BN), applies=_needs_torchvision,
               notes="stochastic_depth (default 0.1) is torchvision.ops.StochasticDepth"),
    MethodSpec("compacter", _cfg("CompacterConfig", **_BN)),
    MethodSpec("compacter++", _cfg("CompacterPlusPlusConfig", **_BN)),
    MethodSpec("prefix_tuning", _cfg("PrefixTuningConfig", **_PREFIX)),
    MethodSpec("prefix_tuning_flat", _cfg("PrefixTuningConfig", flat=True, prefix_length=5)),
    MethodSpec("prompt_tuning", _cfg("PromptTuningConfig", prompt_length=4)),
    MethodSpec("lora", _cfg("LoRAConfig", **_LORA)),
    MethodSpec("dora", _cfg("DoRAConfig", **_LORA)),
    MethodSpec("dvora", _cfg("DvoRAConfig", **_LORA)),
    MethodSpec("ia3", _cfg("IA3Config")),
    MethodSpec("vera", _cfg("VeraConfig", r=4)),
    MethodSpec("loreft", _cfg("LoReftConfig", **_REFT)),
    MethodSpec("noreft", _cfg("NoReftConfig", **_REFT)),
    MethodSpec("direft", _cfg("DiReftConfig", **_REFT)),
    MethodSpec("mam", _mam),
    MethodSpec("unipelt", _unipelt),
]}


class AdaptersBackend(Backend):
    def setup(self, model, method=None):
        import adapters

        adapters.init(model)
        return model

    def attach(self, model, arch, task, method):
        model.add_adapter(NAME, config=method.make_config(arch, task))
        model.train_adapter(NAME)
        return model

    def attach_second(self, model, arch, task, method):
        model.add_adapter(NAMES[1], config=method.make_config(arch, task))
        model.train_adapter(list(NAMES))   # both trainable
        return model

    def activate(self, model, index):
        model.set_active_adapters(NAMES[index])

    def composes(self, recipe, method, arch=None):
        if self.missing:   # the layers' declarations are the library's
            return self.missing
        block, layers = BLOCKS[recipe], LAYERS.get(method.name, ())
        if not layers:
            return f"{method.name} makes no adapter layer that composes (none declares supported_compositions)"
        refusing = [layer.rsplit(".", 1)[1] for layer in layers if block not in _supported(layer)]
        if refusing:
            return f"{block} is not among the supported_compositions of {', '.join(refusing)}"
        if recipe == "compose_split" and arch is not None and (arch.modality != "text" or "seq2seq_lm" in arch.tasks):
            return "Split's splits sum to the sequence length: the 10 tokens of an encoder's text batch"
        return None

    def compose(self, model, arch, task, method, recipe):
        from adapters.composition import Average, BatchSplit, Fuse, Split, Stack

        model.add_adapter(NAMES[1], config=method.make_config(arch, task))
        exec(COMPOSE[recipe], {"model": model, "NAMES": NAMES, "Average": Average, "BatchSplit": BatchSplit,
                               "Fuse": Fuse, "Split": Split, "Stack": Stack})
        return model

    def trainer_class(self):
        from adapters import AdapterTrainer

        return AdapterTrainer

    def cast(self, model, dtype):
        # adapters makes its modules under the default dtype (LoRAConfig / ReftConfig dtype=None; nn.Linear in the
        # bottlenecks), whatever the model's: its own call moves them to the model's dtype
        exec(CAST, {"model": model, "dtype": dtype})
        return model

    def repro(self, method, arch, task, model) -> dict:
        return {"imports": "import adapters", "config": method.make_config(arch, task).to_dict(), "setup": "adapters.init(model)",
                "attach": f"model.add_adapter({NAME!r}, config=adapters.AdapterConfig.load(METHOD_CONFIG))\n"
                          f"model.train_adapter({NAME!r})\n"
                          f"if DTYPE != 'float32':\n    model.adapter_to({NAME!r}, dtype=getattr(torch, DTYPE))",
                "second": f"model.add_adapter({NAMES[1]!r}, config=adapters.AdapterConfig.load(METHOD_CONFIG))\n"
                          f"model.train_adapter({list(NAMES)!r})\n"
                          f"if DTYPE != 'float32':\n    model.adapter_to({NAMES[1]!r}, dtype=getattr(torch, DTYPE))",
                "activate": f"model.set_active_adapters({NAMES!r}[index])", "trainer": "adapters.AdapterTrainer",
                "compose": {r: f"from adapters.composition import Average, BatchSplit, Fuse, Split, Stack\n"
                               f"NAMES = {NAMES!r}\n"
                               f"model.add_adapter(NAMES[1], config=adapters.AdapterConfig.load(METHOD_CONFIG))\n{src}\n"
                               f"if DTYPE != 'float32':\n    dtype = getattr(torch, DTYPE)\n"
                               + textwrap.indent(CAST, "    ")
                            for r, src in COMPOSE.items()}}


# the compose_* recipes, as the statements a user writes (a repro script holds the same text)
COMPOSE = {
    "compose_stack": "model.train_adapter(Stack(*NAMES))",
    "compose_fuse": "model.add_adapter_fusion(Fuse(*NAMES))\nmodel.train_adapter_fusion(Fuse(*NAMES))",
    "compose_average": "model.train_adapter(Average(*NAMES, weights=[0.5, 0.5]))",
    "compose_batchsplit": "model.train_adapter(BatchSplit(*NAMES, batch_sizes=[1, 1]))",
    "compose_split": "model.train_adapter(Split(*NAMES, splits=[4, 6]))",
}
# after attaching, in a run that is not float32: every adapter and fusion layer in the model's dtype
CAST = ("for name in model.adapters_config.adapters:\n    model.adapter_to(name, dtype=dtype)\n"
        "for fusion in model.adapters_config.fusions:\n    model.adapter_fusion_to(fusion.split(','), dtype=dtype)")
BLOCKS = {"compose_stack": "Stack", "compose_fuse": "Fuse", "compose_average": "Average",
          "compose_batchsplit": "BatchSplit", "compose_split": "Split"}
# the adapter layers a method's config makes (their classes declare the composition blocks they support)
_BOTTLENECK = ("seq_bn", "seq_bn_inv", "double_seq_bn", "double_seq_bn_inv", "par_bn", "scaled_par_bn", "adapter+",
               "compacter", "compacter++")
LAYERS = {**dict.fromkeys(_BOTTLENECK, ("bottleneck.BottleneckLayer",)),
          **dict.fromkeys(("lora", "dora", "dvora", "ia3", "vera"), ("lora.LoRALinear",)),
          **dict.fromkeys(("prefix_tuning", "prefix_tuning_flat"), ("prefix_tuning.PrefixTuningLayer",)),
          "mam": ("prefix_tuning.PrefixTuningLayer", "bottleneck.BottleneckLayer"),
          "unipelt": ("prefix_tuning.PrefixTuningLayer", "bottleneck.BottleneckLayer", "lora.LoRALinear")}


def _supported(layer: str) -> set[str]:
    """The composition blocks an adapters layer class declares (supported_compositions)."""
    import importlib

    module, cls = layer.rsplit(".", 1)
    return {c.__name__ for c in getattr(importlib.import_module(f"adapters.methods.{module}"), cls).supported_compositions}


def make() -> Backend:
    try:
        import adapters  # noqa: F401
        missing = None
    except Exception as exc:  # noqa: BLE001
        missing = f"adapters not importable: {type(exc).__name__}: {exc}"
    return AdaptersBackend(
        name="adapters",
        methods=METHODS,
        missing=missing,
        compositions=tuple(COMPOSE),
        compositions_missing="peft's composition (several adapters active, add_weighted_adapter), not adapters'; "
                             "adapters' Parallel is no recipe: it replicates the batch, whose outputs need "
                             "AdapterModel heads, and the matrix's models carry transformers' heads",
        unsupported_patterns=(
            r"use_reentrant=True is not supported",          # adapters' gradient_checkpointing_enable
            r"not supported by (the|this) model|does not support|is not supported for",  # method refusals
            r"Model has no enable_input_require_grads",
            r"Invalid adapter setup\. Cannot use \w+\[",   # a composition block the layer does not take
        ),
    )
