"""Backend `full`: no adapter, every weight trainable. The control that tells a checkpointing bug
of the model itself from a bug of an adapter method."""
from __future__ import annotations

from .base import GC_MODES, TORCH_GC_MODES, Backend, MethodSpec, extra_gc_modes


class FullBackend(Backend):
    def attach(self, model, arch, task, method):
        for p in model.parameters():
            p.requires_grad_(True)
        return model

    def repro(self, method, arch, task, model) -> dict:
        return {"imports": "", "config": None, "setup": "",
                "attach": "for p in model.parameters():\n    p.requires_grad_(True)"}


METHODS = {"full": MethodSpec("full", lambda arch, task: None, traits=frozenset({"through_layers"}))}


def make() -> Backend:
    return FullBackend(name="full", methods=METHODS, gc_modes=GC_MODES + extra_gc_modes() + tuple(TORCH_GC_MODES), second_adapter=False,
                       compositions_missing="no adapters to compose: full fine-tuning trains the model itself")
