"""The probe of a training run: module calls re-run during backward, bytes saved for backward during forward, and
the guard against a recompute without end. It only observes: hooks that change nothing computed."""
from __future__ import annotations

import contextlib

import torch


class RunawayRecompute(RuntimeError):
    """A backward re-ran far more module calls than the forward made: checkpointing recomputes in a loop."""


RUNAWAY_FACTOR = 4   # a checkpointed backward re-runs each module of the forward about once (nested: a few times)


def _address(t: torch.Tensor) -> int:
    """The address of a parameter's or buffer's storage: of its local shard where it is a DTensor (FSDP2)."""
    return getattr(t, "_local_tensor", t).untyped_storage().data_ptr()


class Probe:
    """Counts module calls re-run during backward, and bytes saved for backward during forward: the memory the saved
    tensors hold, so each storage once per forward, none of the model's parameters and buffers (saving a weight
    costs nothing), a sparse tensor at its values and indices (FRoD's frozen basis and sparse matrix were counted
    dense, once per use: RoCBert looked not checkpointed).

    Also a guard: a backward that re-runs more than RUNAWAY_FACTOR times the module calls of the run's first forward
    is stopped with RunawayRecompute (WavLM under reentrant checkpointing recomputes a layer without end until
    threads or memory run out, ~2 min; the guard says so in well under a second).

    Global module hooks slow every module call (a tenth of a tiny model's plain run), so they are on only where they
    count: in a checkpointed run (`recompute`), during its first forward (the guard's measure) and its backwards. The
    modules holding a trainable tensor have their own hook (`watch`): whether a forward ran any of them."""

    def __init__(self, recompute: bool = True):
        self.recompute = recompute
        self.in_backward = False
        self.depth = 0
        self.segments = 0
        self.modules = 0
        self.saved = 0
        self._global = []    # the global module hooks, while on
        self._watching = []  # the hooks on the modules holding a trainable tensor
        self._forward_calls = 0
        self._backward_calls = 0
        self.holder_ran = False   # the current step's forward ran a module holding a trainable tensor
        # address -> storage: those counted this forward, kept alive until the backward starts (see _pack), and
        # the model's own (None)
        self._held: dict[int, object] = {}
        self._own: tuple = (None, ())   # (the model, the addresses of its parameters' storages)

    def watch(self, model, named):
        """The run trains `named` (name, parameter) of `model`: hook the modules that hold them."""
        ids = {id(p) for _, p in named}
        paths = {n.rpartition(".")[0] for n, p in model.named_parameters(remove_duplicate=False) if id(p) in ids}
        self._watching = [model.get_submodule(path).register_forward_pre_hook(self._holder) for path in paths]

    def _holder(self, module, args):
        self.holder_ran = True

    def step(self, model):
        """A training step begins. The model's own storages: its parameters' looked up at its first step (SGD
        updates them in place), its buffers' at every step (a model may replace one in its forward: Wav2Vec2-
        Conformer's relative positions)."""
        self.holder_ran = False
        if self._own[0] is not model:
            self._own = (model, tuple(_address(p) for p in model.parameters()))
        self._held = dict.fromkeys((*self._own[1], *(_address(b) for b in model.buffers())))

    def _pre(self, module, args):
        if not self.in_backward:
            self._forward_calls += 1
            return
        if self.depth == 0:
            self.segments += 1
        self.modules += 1
        self.depth += 1
        self._backward_calls += 1
        if self._backward_calls > RUNAWAY_FACTOR * self._forward_calls + 100:
            raise RunawayRecompute(
                f"runaway recomputation: {self._backward_calls} module calls re-run in one backward for "
                f"{self._forward_calls} in the run's first forward (last {type(module).__name__})")

    def _post(self, module, args, output):
        if self.in_backward and self.depth > 0:
            self.depth -= 1

    def _pack(self, t):
        if t.layout == torch.sparse_coo:
            parts = (t._indices(), t._values())
        else:
            parts = (t,)
        for part in parts:
            try:
                storage = part.untyped_storage()
                key, size = storage.data_ptr(), storage.nbytes()
            except (RuntimeError, NotImplementedError):  # no storage of its own (e.g. another sparse layout)
                key, size = None, part.numel() * part.element_size()
            if key not in self._held:
                self.saved += size
                if key is not None:
                    # a storage counted by its address must outlive the forward: one freed early (a saved tensor
                    # of a graph branch the loss never reaches) hands its address to a later saved tensor, which
                    # then went uncounted -- NeMo's streaming ASR "saved" 11.9 to 16.8 MB run to run, and its
                    # checkpointed runs looked not checkpointed as often as not
                    self._held[key] = storage
        # detached: `t` may be the op's own output, whose grad_fn owns this saved tensor -- keeping `t` would close
        # a cycle through C++ that no gc can see, leaking the whole graph of a forward that never reaches its
        # backward (a run failing mid-forward: every later run of the process then ran out of memory)
        return t.detach()

    def _hooks(self, on: bool):
        reg = torch.nn.modules.module
        if on and self.recompute and not self._global:
            self._global = [reg.register_module_forward_pre_hook(self._pre),
                            reg.register_module_forward_hook(self._post, always_call=True)]
        elif not on:
            for h in self._global:
                h.remove()
            self._global = []

    def __enter__(self):
        self._hooks(True)   # the first forward is counted
        return self

    def __exit__(self, *exc):
        self._hooks(False)
        for h in self._watching:
            h.remove()
        self._held = dict.fromkeys(self._held)   # the addresses stay counted, the storages are let go
        self._own = (None, ())

    def saving(self):
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    @contextlib.contextmanager
    def backward(self):
        self.begin_backward()
        try:
            yield
        finally:
            self.end_backward()

    def begin_backward(self):
        """What follows re-runs modules for the backward (a Trainer's step: from its forward's end to its next)."""
        self._hooks(True)
        self.in_backward, self.depth, self._backward_calls = True, 0, 0
        self._held = dict.fromkeys(self._held)

    def end_backward(self):
        """The backward is over (a no-op when none began: the run's first forward is still counted)."""
        if self.in_backward:
            self.in_backward = False
            self._hooks(False)
