"""What a user hits before a refusal of checkpointing: the method already fails when it is added or trained."""
from __future__ import annotations

from ..outcomes import Outcome
from .entry import Expect
from .groups import (A, ADAPTERS_SRC, FUSED_QKV, P, PEFT_SRC)

ENTRIES: list[Expect] = [
    # Outcome precedence follows what a user hits first: a refusal of checkpointing itself
    # (gradient_checkpointing_enable raising) is `unsupported` without a baseline being needed,
    # unless adding the adapter already failed before it (adapter_first order).
    Expect({**A, "method": ("dora", "dvora"), "arch": FUSED_QKV, "order": "adapter_first"}, Outcome.ERROR,
           "adapters' DoRA/DVoRA on a fused qkv projection fails when the adapter is added (see below), "
           "before checkpointing is enabled in this order", f"{ADAPTERS_SRC}/methods/lora.py", {"adapters": ">=1.2"}),
    # prefix tuning that fails even without checkpointing: before peft's refusal of it with checkpointing,
    # which comes after the baseline in the gc_first order
    Expect({**P, "arch": "canine", "method": ("prefix_tuning", "cartridge")}, Outcome.ERROR,
           "peft's prefix tuning reads config.vocab_size, which CANINE (character level) does not have",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.18"}),
    Expect({**P, "arch": "big_bird", "method": ("prefix_tuning", "cartridge"), "task": "seq_cls"}, Outcome.ERROR,
           "prefix tuning / cartridges on BigBird's classifier: the plain run fails ('too many indices for tensor of "
           "dimension 2'), with or without a mask; its causal LM trains", f"{PEFT_SRC}/peft_model.py",
           {"peft": ">=0.18", "transformers": "<5"}),
    Expect({**P, "arch": ("dbrx", "deepseek_v2", "bigbird_pegasus"), "method": ("prefix_tuning", "cartridge"),
            "inputs": ("masked", "padded")}, Outcome.ERROR,
           "prefix tuning / cartridges with an attention mask: the plain run already fails (shape / index errors "
           "in the attention); not analysed further", f"{PEFT_SRC}/peft_model.py",
           {"peft": ">=0.18", "transformers": "<5"}),
    Expect({**P, "arch": ("camembert", "data2vec-text"), "method": "prefix_tuning", "inputs": ("masked", "padded"),
            "task": ("seq_cls", "causal_lm", "feature")},
           Outcome.ERROR,
           "prefix tuning with an attention mask: the plain run fails in the model's mask handling ('<' not "
           "supported between instances of 'tuple' and 'int')", f"{PEFT_SRC}/peft_model.py",
           {"peft": ">=0.18", "transformers": "<5"}),
]
