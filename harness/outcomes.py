"""The outcome taxonomy (docs/design.md section 2). Strings are the JSON contract: do not change them."""
from __future__ import annotations

import enum
import re


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
    Outcome.ERROR: "the baseline itself cannot be built or trained, or its replay ran out of memory (not a "
    "checkpointing finding)",
    Outcome.NOT_CHECKPOINTED: "checkpointing was requested and accepted, but nothing was recomputed "
    "or no activation memory was saved",
    Outcome.UNSUPPORTED: "the library itself declares the combination unsupported",
    Outcome.NONDETERMINISTIC: "the baseline disagrees with itself beyond tolerance",
}


# what checkpointing breaks: the outcomes `--fail-on broken` exits 1 on, known or not
BROKEN = frozenset({Outcome.MISMATCH, Outcome.MISSING_GRAD, Outcome.GC_ERROR})


# a run that exhausted the address-space cap (torch's allocator, oneDNN, Python): what the process held counts (after
# one such run, BOFT on the tiny NeMo SpeechLM, every later run of the process failed so too, 245 of 261 baselines
# on 5.24.0; gc and malloc_trim did not give the memory back), so it says nothing of
# the release by itself. The calibration keeps such baselines out of its tables; the comparator does not call a
# replay that failed so nondeterministic
OUT_OF_MEMORY = re.compile(r"can't allocate memory|Cannot allocate memory|MemoryError|could not create a primitive|"
                           r"out of memory", re.I)
