"""Trace: everything one training run leaves behind. Plain data (tensors on CPU), no model; not changed after the run
(the comparator keeps what it computed of a trace on it)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Trace:
    losses: list[float] = field(default_factory=list)
    # per step: parameter name -> gradient (a copy, CPU, in the run's dtype) or None when .grad stayed None
    grads: list[dict[str, torch.Tensor | None]] = field(default_factory=list)
    # final state dict: trainable and frozen parameters and buffers (CPU, as the trained model leaves them)
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    trainable: list[str] = field(default_factory=list)
    recomputed_segments: int = 0     # top-level module calls re-run during backward
    recomputed_modules: int = 0      # all module calls re-run during backward
    saved_bytes: int = 0             # bytes of tensors saved for backward during the forward passes
    error: str | None = None         # "stage: Type: message" when the run raised
    error_stage: str | None = None   # build | attach | enable_gc | train
    unsupported: bool = False        # the error is the library's documented refusal
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cache_off: int = 0               # configs whose use_cache this (plain) run switched off: the cache triage
    where: str = ""                  # where the error was raised: the innermost frame, "file:line in function"
    # a run over several processes (harness.launch): every rank's own trace, rank 0's fields above (its error: the
    # first rank's that is not a consequence of another's), and what the launch says of how it dealt the data
    ranks: list | None = field(default=None, repr=False)
    launch: str = ""
    # per step: each gradient's largest magnitude, computed once by the comparator (compare.magnitudes)
    magnitudes: list[dict[str, float | None]] | None = field(default=None, repr=False)
    # (the baseline, what of this run differs from it), computed once by the comparator (compare._differences)
    differences: tuple | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None
