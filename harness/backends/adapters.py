"""Backend `adapters` (AdapterHub): every named config, sized for hidden-32 models.

Users' path: ``adapters.init(model)``; ``model.add_adapter(name, config)``;
``model.train_adapter(name)``; ``model.gradient_checkpointing_enable(...)`` (adapters' override,
which hands the ForwardContext to the recompute and calls ``enable_input_require_grads``).
`gc_first` enables checkpointing after ``adapters.init`` and before the adapter is added and
activated; `adapter_first` after.
"""
from __future__ import annotations

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
    def setup(self, model):
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

    def trainer_class(self):
        from adapters import AdapterTrainer

        return AdapterTrainer

    def cast(self, model, dtype):
        # adapters makes its modules under the default dtype (LoRAConfig / ReftConfig dtype=None; nn.Linear in the
        # bottlenecks), whatever the model's: its own call moves them to the model's dtype
        for name in model.adapters_config.adapters:
            model.adapter_to(name, dtype=dtype)
        return model

    def repro(self, method, arch, task, model) -> dict:
        return {"imports": "import adapters", "config": method.make_config(arch, task).to_dict(), "setup": "adapters.init(model)",
                "attach": f"model.add_adapter({NAME!r}, config=adapters.AdapterConfig.load(METHOD_CONFIG))\n"
                          f"model.train_adapter({NAME!r})\n"
                          f"if DTYPE != 'float32':\n    model.adapter_to({NAME!r}, dtype=getattr(torch, DTYPE))",
                "second": f"model.add_adapter({NAMES[1]!r}, config=adapters.AdapterConfig.load(METHOD_CONFIG))\n"
                          f"model.train_adapter({list(NAMES)!r})\n"
                          f"if DTYPE != 'float32':\n    model.adapter_to({NAMES[1]!r}, dtype=getattr(torch, DTYPE))",
                "activate": f"model.set_active_adapters({NAMES!r}[index])", "trainer": "adapters.AdapterTrainer"}


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
        unsupported_patterns=(
            r"use_reentrant=True is not supported",          # adapters' gradient_checkpointing_enable
            r"not supported by (the|this) model|does not support|is not supported for",  # method refusals
            r"Model has no enable_input_require_grads",
        ),
    )
