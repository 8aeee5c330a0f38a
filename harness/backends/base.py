"""Backend and MethodSpec: how a library attaches a method and enables checkpointing.

A backend calls the library exactly as its users do and adds no workaround of its own.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from ..archs.base import ArchSpec

GC_MODES = ("non_reentrant", "reentrant")
REENTRANT = ("reentrant", "unset")   # transformers' switch with torch's reentrant checkpoint (UNSET: its default)
ORDERS = ("gc_first", "adapter_first")
# transformers 5's activation_checkpointing_enable also takes every_n_layers and offload (what Trainer passes from
# activation_checkpointing_kwargs): more modes, non-reentrant, where the installed transformers has them. They
# are the model's machinery (which layers checkpoint, where saved tensors live), the same under any adapter (checked
# on 5.24.0: 176 peft cells, 6 archs x 5 methods, come out as in non_reentrant, or raising as offload does under full
# fine-tuning): the `full` backend has them in its product; other backends do not offer them.
EXTRA_GC_MODES = {"non_reentrant_every2": {"every_n_layers": 2}, "non_reentrant_offload": {"offload": True}}
# torch's own checkpoint API instead of transformers' switch, as accelerate's FSDP plugin (activation_checkpointing),
# Trainer's fsdp_config and torchtune / torchtitan apply it: apply_activation_checkpointing with a checkpoint_wrapper
# of this CheckpointImpl on each of the model's checkpointed layers (archs.base.checkpointed_layers). transformers does
# not know checkpointing is on, so the model's config keeps its own use_cache, as such users leave it. Every backend
# has them, under every launch.
TORCH_GC_MODES = {"torch_reentrant": "REENTRANT", "torch_non_reentrant": "NO_REENTRANT"}
# use_reentrant not passed at all (gradient_checkpointing_kwargs left out, or prepare_model_for_kbit_training's {}):
# the libraries' default, reentrant on the pinned stack (transformers' {"use_reentrant": True}; torch's own, with its
# warning, where an empty dict reaches it). The qlora backend's, whose users mostly leave it out.
UNSET = "unset"
# checkpointing enabled by peft's prepare_model_for_kbit_training(model, use_gradient_checkpointing=True,
# gradient_checkpointing_kwargs=...) before get_peft_model, as QLoRA users enable it: it enables checkpointing only on
# a quantized model (on any other it freezes the model and returns)
KBIT_ORDER = "prepare_kbit"
BEFORE_ADAPTER = ("gc_first", KBIT_ORDER)   # the orders that enable checkpointing before the adapter is attached
KBIT_GC_MODES = GC_MODES + (UNSET,)   # what prepare_model_for_kbit_training's gradient_checkpointing_kwargs pass


def gc_kwargs(gc_mode: str) -> dict | None:
    """The gradient_checkpointing_kwargs of a gc mode of transformers' switch; None where it passes none."""
    return None if gc_mode == UNSET else {"use_reentrant": gc_mode == "reentrant"}


def torch_checkpointing(model, gc_mode: str) -> None:
    """torch's checkpoint wrapper on `model`'s checkpointed layers (a torch_* gc mode), as accelerate applies it."""
    import functools

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (CheckpointImpl,
                                                                             apply_activation_checkpointing,
                                                                             checkpoint_wrapper)

    from ..archs.base import checkpointed_layers

    layers = checkpointed_layers(model)
    impl = getattr(CheckpointImpl, TORCH_GC_MODES[gc_mode])
    apply_activation_checkpointing(model, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, checkpoint_impl=impl),
                                   check_fn=lambda module: isinstance(module, layers))


def extra_gc_modes() -> tuple[str, ...]:
    """The EXTRA_GC_MODES the installed transformers' activation_checkpointing_enable accepts."""
    import inspect

    from transformers import PreTrainedModel

    enable = getattr(PreTrainedModel, "activation_checkpointing_enable", None)
    params = inspect.signature(enable).parameters if enable else {}
    return tuple(m for m, kw in EXTRA_GC_MODES.items() if set(kw) <= set(params))


# what a method does that known failures match on ("trait:NAME" in an expectation's method axis)
TRAITS = {
    "weight": "adapts weights inside the (checkpointed) layers and touches none of their inputs",
    "input_grad": "a weight method whose gradients come back when a layer input requires grad",
    "linear_only": "adapts nn.Linear layers only (peft refuses other layer types, e.g. transformers' Conv1D)",
    "through_layers": "trains something whose gradient flows through the layers (weights, norms, prompt tokens)",
}


@dataclass(frozen=True)
class MethodSpec:
    name: str
    make_config: Callable[[ArchSpec, str], Any]          # (arch, task) -> library config object
    # (arch, task) -> None when the method applies, else the reason it does not
    applies: Callable[[ArchSpec, str], str | None] = lambda arch, task: None
    notes: str = ""
    traits: frozenset[str] = frozenset()   # keys of TRAITS
    # (batch) -> batch: what the method needs its inputs to hold (aLoRA: its invocation tokens), as a user's data has it
    batch: Callable[[dict], dict] | None = None
    no_float64: str = ""   # why the method cannot train in float64 (a float64 rerun cannot settle rounding)


@dataclass
class Backend:
    name: str
    methods: dict[str, MethodSpec]
    # regexes of the library's own documented refusals: an exception matching one is `unsupported`
    unsupported_patterns: tuple[str, ...] = ()
    gc_modes: tuple[str, ...] = GC_MODES + tuple(TORCH_GC_MODES)
    orders: tuple[str, ...] = ORDERS
    # (arch) -> None when the backend supports the arch, else why not
    arch_support: Callable[[ArchSpec], str | None] = lambda arch: None
    missing: str | None = None   # why the library cannot be imported, if it cannot
    quantized: bool = False   # the base model is loaded quantized (qlora): prepare_kbit is its users' way
    no_float64: str = ""   # why a float64 rerun cannot settle rounding (layers computing in float32 whatever the dtype)
    reference_arch: str = "bert"  # where the default tier tries every method and axis value
    every_arch_in_default: bool = True   # the default tier tries every arch once (not where another backend does)
    default_archs: tuple[str, ...] = ()   # ... or, given, only these archs besides the reference arch
    second_adapter: bool = True   # a second adapter of a method can go on the model (the switch recipe)
    activation_freezes: bool = False   # activate() leaves the inactive adapter frozen (the switch_frozen recipe)
    compositions: tuple[str, ...] = ()   # the compose_* recipes the library has (harness.train.RECIPES)
    compositions_missing: str = ""       # why it has none of the others

    # The three calls a run makes, overridden per backend:
    def setup(self, model, method: MethodSpec | None = None):
        """Make the model ready for the library (adapters.init; qlora: load it quantized, as `method` asks);
        returns the model."""
        return model

    def attach(self, model, arch: ArchSpec, task: str, method: MethodSpec):
        """Add and activate the method, make only its parameters trainable; returns the model to train."""
        raise NotImplementedError

    def attach_second(self, model, arch: ArchSpec, task: str, method: MethodSpec):
        """Add a second adapter of the method (the switch recipe), both trainable; returns the model."""
        raise NotImplementedError(f"backend {self.name} has no second adapter")

    def compose(self, model, arch: ArchSpec, task: str, method: MethodSpec, recipe: str):
        """Add a second adapter of the method and compose the two as the compose_* `recipe` says; returns the
        model to train."""
        raise NotImplementedError(f"backend {self.name} composes no adapters")

    def composes(self, recipe: str, method: MethodSpec, arch: ArchSpec | None = None) -> str | None:
        """None when `method` (on `arch`, when given) can be composed by the compose_* `recipe` (one of
        `compositions`), else why not."""
        return None

    def activate(self, model, index: int):
        """Make the index-th adapter (0: attach's, 1: attach_second's) the active one, as the library's users do."""
        raise NotImplementedError(f"backend {self.name} has no second adapter")

    def train_both(self, model, method: MethodSpec):
        """Make both adapters trainable again after an activation that froze the inactive one (`activation_freezes`:
        the switch recipe, as users who train several adapters at once do); nothing where activation does not."""

    def trainer_class(self):
        """The Trainer its users train with."""
        from transformers import Trainer

        return Trainer

    def cast(self, model, dtype):
        """After attach, in a run that is not float32: cast what the library added and left in float32 to the
        model's dtype, as a user casting the adapted model does (peft follows the base layer's dtype itself)."""
        return model

    def enable_gc(self, model, gc_mode: str, order: str = "gc_first"):
        """Enable checkpointing in `gc_mode` as the cell's `order` does it (the same code in repro scripts:
        harness/repro_scripts.py)."""
        kwargs = gc_kwargs(gc_mode)
        if order == KBIT_ORDER:
            from peft import prepare_model_for_kbit_training

            prepare_model_for_kbit_training(model, use_gradient_checkpointing=True,
                                            gradient_checkpointing_kwargs=kwargs)
        elif gc_mode in TORCH_GC_MODES:
            torch_checkpointing(model, gc_mode)
        elif gc_mode in EXTRA_GC_MODES:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs, **EXTRA_GC_MODES[gc_mode])
        elif kwargs is None:
            model.gradient_checkpointing_enable()
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)

    def repro(self, method: MethodSpec, arch: ArchSpec, task: str, model) -> dict:
        """Source for a standalone repro script: {"imports", "config" (a literal-able dict held in
        METHOD_CONFIG), "setup", "attach" (statements acting on `model`), optional "batch_extra" (an
        expression of extra forward kwargs)}. `model` is the freshly built model."""
        raise NotImplementedError(f"backend {self.name} has no repro support")

    def is_unsupported(self, exc: BaseException) -> bool:
        msg = f"{type(exc).__name__}: {exc}"
        return any(re.search(p, msg) for p in self.unsupported_patterns + COMMON_UNSUPPORTED)


# transformers' own refusal, shared by every backend
COMMON_UNSUPPORTED = (r"does not support (gradient|activation) checkpointing",
                      r"is not compatible with gradient checkpointing")
