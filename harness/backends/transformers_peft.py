"""Backend `transformers_peft`: transformers' built-in PEFT integration, the peft methods through
``model.add_adapter(peft_config)``.

Users' path: build the transformers model; ``model.add_adapter(config, adapter_name=...)`` (peft's
``inject_adapter_in_model`` underneath: only the adapter trains, no PeftModel wrapper, no task wrapper);
``model.set_adapter(name)``; ``model.enable_adapters()``; ``model.gradient_checkpointing_enable(...)``, which calls
``enable_input_require_grads`` itself once an adapter is loaded. `gc_first` enables checkpointing before
``add_adapter``, `adapter_first` after. The integration refuses some methods (prompt learning): `unsupported`, with
its message. The same method configs as the peft backend.
"""
from __future__ import annotations

import copy

from ..archs.base import ArchSpec
from . import _peft_targets as T
from .base import Backend, MethodSpec
from .peft import METHODS as PEFT_METHODS
from .peft import NAMES, TRAIN_BOTH, train_both, train_both_way

# methods that only a PeftModel can run: X-LoRA loads its experts through a PeftModel, Poly and multitask prompt
# tuning take task_ids in PeftModel's forward
_WRAPPER_ONLY = {"xlora": "X-LoRA loads its LoRA experts through a PeftModel (get_peft_model), not add_adapter",
                 "poly": "Poly takes task_ids in PeftModel's forward, which add_adapter has none of",
                 "multitask_prompt_tuning": "takes task_ids in PeftModel's forward, which add_adapter has none of",
                 "alora": "aLoRA's invocation offsets are found in PeftModel's forward: through add_adapter the "
                          "adapter never activates (nothing trains)"}


def _applies(method: MethodSpec):
    def applies(arch: ArchSpec, task: str) -> str | None:
        return _WRAPPER_ONLY.get(method.name) or method.applies(arch, task)
    return applies


METHODS = {n: MethodSpec(n, m.make_config, applies=_applies(m), notes=m.notes, traits=m.traits, batch=m.batch,
                         no_float64=m.no_float64) for n, m in PEFT_METHODS.items()}


class TransformersPeftBackend(Backend):
    def attach(self, model, arch, task, method):
        config = method.make_config(arch, task)
        T.resolve_config(config, model)
        model.add_adapter(config, adapter_name=NAMES[0])
        model.set_adapter(NAMES[0])
        model.enable_adapters()
        return model

    def attach_second(self, model, arch, task, method):
        model.add_adapter(copy.deepcopy(model.peft_config[NAMES[0]]), adapter_name=NAMES[1])
        return model

    def activate(self, model, index):
        model.set_adapter(NAMES[index])

    def train_both(self, model, method):
        train_both(model, method.name)

    def repro(self, method, arch, task, model) -> dict:
        config = method.make_config(arch, task)
        T.resolve_config(config, model)
        return {"imports": "import copy\nimport peft", "config": config.to_dict(), "setup": "",
                "attach": f"model.add_adapter(peft.get_peft_config(METHOD_CONFIG), adapter_name={NAMES[0]!r})\n"
                          f"model.set_adapter({NAMES[0]!r})\nmodel.enable_adapters()",
                "second": f"model.add_adapter(copy.deepcopy(model.peft_config[{NAMES[0]!r}]), "
                          f"adapter_name={NAMES[1]!r})",
                "activate": f"model.set_adapter({NAMES!r}[index])",
                "train_both": f"NAMES = {NAMES!r}\n{TRAIN_BOTH[train_both_way(False, method.name)]}"}


def _integration_missing() -> str | None:
    """Why transformers' PEFT integration cannot run with the installed peft (its own MIN_PEFT_VERSION), or None."""
    try:
        import peft
        import transformers
        from packaging.version import Version
        from transformers.integrations.peft import MIN_PEFT_VERSION
    except Exception as exc:  # noqa: BLE001
        return f"transformers' PEFT integration not importable: {type(exc).__name__}: {exc}"
    if Version(peft.__version__) < Version(MIN_PEFT_VERSION):
        return (f"transformers {transformers.__version__}'s PEFT integration needs peft >= {MIN_PEFT_VERSION} "
                f"(MIN_PEFT_VERSION); peft {peft.__version__} is installed")
    return None


def make() -> Backend:
    from .peft import make as make_peft

    peft_backend = make_peft()
    return TransformersPeftBackend(
        name="transformers_peft",
        activation_freezes=True,   # set_adapter makes only the active adapter trainable
        methods={n: m for n, m in METHODS.items() if n in peft_backend.methods},
        missing=peft_backend.missing or _integration_missing(),
        # the peft backend's default tier tries every arch with these methods; this one, its own calls on bert
        every_arch_in_default=False,
        compositions_missing="its calls are transformers' add_adapter / set_adapter: the compositions are the "
                             "peft and adapters backends'",
        unsupported_patterns=peft_backend.unsupported_patterns + (
            # transformers' add_adapter -> peft's inject_adapter_in_model
            r"`create_and_replace` does not support prompt learning",
            r"`inject_adapter_in_model` does not support PeftType",
        ),
    )
