"""The outcome taxonomy (DESIGN section 2). Strings are the JSON contract: do not change them."""
from __future__ import annotations

import enum


class Outcome(str, enum.Enum):
    EQUIVALENT = "equivalent"
    MISMATCH = "mismatch"
    MISSING_GRAD = "missing_grad"
    GC_ERROR = "gc_error"
    ERROR = "error"
    NOT_CHECKPOINTED = "not_checkpointed"
    UNSUPPORTED = "unsupported"
    NONDETERMINISTIC = "nondeterministic"

    def __str__(self) -> str:  # so f"{outcome}" prints the JSON string
        return self.value


MEANING = {
    Outcome.EQUIVALENT: "losses, gradients and state within tolerance; checkpointing engaged; every "
    "trainable parameter got a non-zero gradient at some step of the baseline",
    Outcome.MISMATCH: "loss, gradient or state values differ beyond tolerance",
    Outcome.MISSING_GRAD: "the set of parameters that receive non-zero gradients differs",
    Outcome.GC_ERROR: "the baseline trains, the checkpointed run raises",
    Outcome.ERROR: "the baseline itself cannot be built or trained (not a checkpointing finding)",
    Outcome.NOT_CHECKPOINTED: "checkpointing was requested and accepted, but nothing was recomputed "
    "or no activation memory was saved",
    Outcome.UNSUPPORTED: "the library itself declares the combination unsupported",
    Outcome.NONDETERMINISTIC: "the baseline disagrees with itself beyond tolerance",
}
