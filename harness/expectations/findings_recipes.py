"""What only a training recipe shows (Cell.recipe, harness/train.py RECIPES): an entry without a recipe holds for
every recipe and stands above these."""
from __future__ import annotations

from ..outcomes import Outcome
from .entry import Expect
from .groups import A, ADAPTERS_SRC, P, PEFT_SRC, SHARED_PARAMETERS, TF5, TF_SRC, TP

# transformers' non-reentrant switch and torch's non-reentrant wrapper: the same recompute, at backward time
NON_REENTRANT = ("non_reentrant", "torch_non_reentrant")
REENTRANT = ("reentrant", "torch_reentrant")
SWITCH_ADAPTERS = (
    "two adapters trained at once, a forward with each active, one backward: checkpointing recomputes a layer with "
    "the adapters active at backward time (the second), not those of its forward. adapters hands the forward's "
    "ForwardContext to the recompute (context_fn) but not its active setup")

SWITCH_BOTH = ("two peft adapters trained at once (the switch recipe: set_adapter before each forward, then "
               "set_requires_grad on both, one backward): each adapted layer reads its active adapter when it runs "
               "(BaseTunerLayer.active_adapters), and checkpointing recomputes the first forward's layers at backward "
               "time, with the second adapter active")

ENTRIES: list[Expect] = [
    Expect({**P, "recipe": ("switch", "switch_frozen"), "method": "adaption_prompt",
            "gc_mode": ("reentrant", "non_reentrant", "torch_non_reentrant")}, (Outcome.MISMATCH, Outcome.MISSING_GRAD),
           f"{SWITCH_BOTH} (switch_frozen: set_adapter alone): adaption prompt's gate starts at zero, so its prompts "
           "get a zero gradient in the first step; the recompute through the other adapter shows first as a gate "
           "of another value or as prompts that get no gradient, by step and task (seen on Llama, 4.57.6)",
           "https://github.com/huggingface/peft/issues/2832", {"peft": ">=0.14"}),
    Expect({**TP, "recipe": ("switch", "switch_frozen"), "gc_mode": "reentrant", "order": "gc_first",
            "method": ("trait:weight", "ln_tuning")}, (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "transformers' add_adapter after checkpointing is on: nothing makes the layers' inputs require grad, so "
           "the reentrant checkpoint gives the adapters inside the layers no gradient (missing_grad where a head "
           "trains beside them, gc_error where nothing else trains: a causal LM), before the recompute through the "
           "other adapter could show; LN tuning on BERT, whose embedding LayerNorm keeps the layers' inputs "
           "requiring grad, shows it (the entries below)", "https://github.com/huggingface/peft/issues/2832",
           {"peft": ">=0.14"}, unless={"method": "ln_tuning", "arch": "bert"}),
    Expect({"backend": ("peft", "transformers_peft"), "recipe": "switch", "gc_mode": "torch_non_reentrant",
            "method": "beft", "arch": "llama"}, Outcome.EQUIVALENT,
           "torch's wrapper leaves Llama's cache on (the torch gc modes' entries), and on transformers 5 the "
           "attention then reads the values the forward wrote into the cache, made through the first adapter, and "
           "the gradient reaches it through the forward's graph; BEFT adapts only v_proj on Llama (peft's default "
           "targets), so the recompute through the second adapter changes nothing it trains (LoRA, which adapts "
           "q_proj too, shows the mismatch; seen on 5.24.0)", "https://github.com/huggingface/peft/issues/2832",
           {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({"backend": ("peft", "transformers_peft"), "recipe": "switch", "gc_mode": NON_REENTRANT,
            "method": ("frod", "psoft", "tinylora"), "arch": "bert"}, Outcome.EQUIVALENT,
           "as below, but on BERT these adapters' gradients are ~1e-7 in the first steps, so the second adapter's "
           "change is still below float32's tolerance when the first forward is recomputed through it (mismatch on "
           "Llama)", "https://github.com/huggingface/peft/issues/2832", {"peft": ">=0.14"}),
    Expect({"backend": ("peft", "transformers_peft"), "recipe": "switch", "gc_mode": NON_REENTRANT,
            "method": ("trait:weight", "ln_tuning")}, Outcome.MISMATCH,
           f"{SWITCH_BOTH}: the non-reentrant recompute runs the first forward through the second adapter, whose "
           "tensors have the first's shapes, so torch's metadata check passes and both adapters get other gradients, "
           "silently (every method that adapts inside the layers; prompt learning, whose prompts are made outside "
           "them, and trainable tokens train equivalently; cases/peft_switch_adapters_recompute.py)",
           "https://github.com/huggingface/peft/issues/2832",
           {"peft": ">=0.14"}),
    Expect({"backend": ("peft", "transformers_peft"), "recipe": "switch", "gc_mode": REENTRANT,
            "method": ("trait:weight", "ln_tuning")}, Outcome.MISSING_GRAD,
           f"{SWITCH_BOTH}: the reentrant recompute of the first forward runs through the second adapter, so the "
           "first adapter, which trains in the plain run, gets no gradient (cases/peft_switch_adapters_recompute.py)",
           "https://github.com/huggingface/peft/issues/2832",
           {"peft": ">=0.14"}),
    Expect({"backend": ("peft", "transformers_peft"), "recipe": "autocast", "method": "psoft", "gc_mode": "reentrant",
            "arch": "bert", "task": "token_cls"}, Outcome.MISMATCH,
           "PSOFT under autocast with reentrant checkpointing: the recompute's gradients differ from the forward's "
           "by bfloat16 rounding's size (max rel 6.2e-3 of the tensor against bfloat16's eps of 7.8e-3; 1.2e-6 on "
           "BERT's token classification, 7e-9 on its sequence classification; non-reentrant: 0); the float64 rerun "
           "that settles autocast's rounding cannot run, PSOFT refusing float64 (MethodSpec.no_float64), so the "
           "float32 verdict stands: mismatch where the difference passes float32's atol. Why the reentrant "
           "recompute rounds otherwise under autocast is not established (seen on 4.57.6 and 5.24.0)",
           f"{PEFT_SRC}/tuners/psoft/layer.py", {"peft": ">=0.18"}),
    Expect({"recipe": "aux_outputs", "gc_mode": ("reentrant", "torch_reentrant"), "arch": "trait:records_attentions"},
           Outcome.MISMATCH,
           "a loss term on outputs.attentions gets no gradient under reentrant checkpointing (transformers' or torch's "
           "wrapper): these models collect "
           "attentions with forward hooks on their attention modules (_can_record_outputs / OutputRecorder), inside "
           "the checkpointed layer, whose forward the reentrant checkpoint runs under no_grad, so the recorded "
           "attentions carry no graph (requires_grad False); attentions returned through a layer's outputs (BERT) "
           "keep it, non-reentrant keeps it (cases/recorded_attentions_reentrant.py)",
           f"{TF_SRC}/utils/generic.py#L918", {"transformers": ">=4.56"}),
    Expect({**A, "recipe": "switch", "gc_mode": "non_reentrant", "method": SHARED_PARAMETERS}, Outcome.GC_ERROR,
           f"{SWITCH_ADAPTERS}: a method whose modules read parameters shared across layers from the context by "
           "name finds only the first adapter's there ('KeyError: cell2', adapters/methods/modeling.py; "
           "cases/adapters_switch_active_adapter_recompute.py)",
           "https://github.com/adapter-hub/adapters/pull/759", {"adapters": ">=1.2"}),
    Expect({**A, "recipe": "switch", "gc_mode": NON_REENTRANT, "method": "ia3", "arch": "bert", "task": "seq_cls"},
           Outcome.EQUIVALENT,
           "IA3's two adapters on BERT's sequence classification: the recompute through the other adapter stays "
           "within float32 rounding (1.5e-11, settled in float64); mismatch on its token classification and on "
           "Llama (the entry below)", "https://github.com/adapter-hub/adapters/pull/759", {"adapters": ">=1.2"}),
    Expect({**A, "recipe": "switch", "gc_mode": NON_REENTRANT}, Outcome.MISMATCH,
           f"{SWITCH_ADAPTERS}: the first adapter's forward is recomputed through the second, silently "
           "(bottleneck, LoRA, ReFT methods; cases/adapters_switch_active_adapter_recompute.py)",
           "https://github.com/adapter-hub/adapters/pull/759",
           {"adapters": ">=1.2"}, unless={"method": "prompt_tuning"}),
    Expect({**TP, "recipe": "switch_frozen", "gc_mode": "non_reentrant", "arch": "trait:routes_experts",
            "method": ("c3a", "delora", "dora", "fourierft", "gralora", "lokr", "lora", "lora_bias", "lora_mts", "miss",
                       "rslora", "shira", "waveft")}, Outcome.GC_ERROR,
           "as for peft below, through transformers' integration: the recompute through the second adapter routes "
           "tokens to other experts (torch's metadata check). Only where the trained adapter's change flips a "
           "token's top-k routing in the tiny model: these methods, and BEFT and SuperTuning with the "
           "classification head; the OFT family, LoHa, IA3, ... stay on the same experts and train equivalently "
           "(measured on Mixtral, 4.57.6, peft 0.21.2)", "https://github.com/huggingface/peft/issues/2832",
           {"peft": ">=0.18", "transformers": "<5"}),
    Expect({**TP, "recipe": "switch_frozen", "gc_mode": "non_reentrant", "arch": "trait:routes_experts",
            "method": ("beft", "supertuning"), "task": "seq_cls"}, Outcome.GC_ERROR,
           "as above (the routing flips with the classification head's gradients, not the language model's)",
           "https://github.com/huggingface/peft/issues/2832", {"peft": ">=0.18", "transformers": "<5"}),
    Expect({**P, "recipe": "switch_frozen", "gc_mode": "non_reentrant", "arch": "trait:routes_experts",
            "method": "trait:weight"}, Outcome.GC_ERROR,
           "as below, non-reentrant: the recompute of the first forward through the second adapter routes tokens to "
           "other experts, so the recomputed tensors have other shapes and torch's checkpoint stops it ('Recomputed "
           "values ... have different metadata'; seen on Mixtral, 4.57.6)",
           "https://github.com/huggingface/peft/issues/2832", {"peft": ">=0.18", "transformers": "<5"},
           unless={"method": "ia3"}),   # IA3's two adapters start equal (ones): the same experts, both runs
    Expect({**P, "recipe": "switch_frozen", "gc_mode": REENTRANT, "method": ("trait:weight", "ln_tuning")},
           Outcome.MISMATCH,
           "two adapters trained at once, a forward with each active (set_adapter), one backward: the reentrant "
           "checkpoint recomputes the first forward's layers with the adapter active at backward time, the second, "
           "whose gradient then gets the first forward's part too, silently (set_adapter also turns requires_grad "
           "off on the inactive adapter, so the first adapter gets no gradient in either run); non-reentrant "
           "recompute feeds only the first adapter's graph, which gets nothing. Weight methods and LN tuning, both "
           "orders (in adapter_first the lost layer-input gradients of the general entries come first; seen on "
           "4.48.3 to 5.24.0, peft 0.14 and 0.21.2; cases/peft_switch_adapters_recompute.py)",
           "https://github.com/huggingface/peft/issues/2832", {"peft": ">=0.14"}),
    Expect({**TP, "recipe": "switch_frozen", "gc_mode": "reentrant", "method": ("trait:weight", "ln_tuning")},
           Outcome.MISMATCH,
           "two adapters trained at once through transformers' integration (add_adapter, set_adapter between the "
           "forwards, one backward): the same silent recompute through the adapter active at backward time as "
           "peft's set_adapter above (transformers' set_adapter calls peft's). In gc_first the general entry of "
           "add_adapter after checkpointing comes first, but for LN tuning where an adapted LayerNorm before the "
           "layers (BERT's embedding one) keeps their inputs requiring grad (seen on 4.57.6, peft 0.21.2: 30 "
           "methods on BERT, Llama, T5, Mistral, Mixtral)", "https://github.com/huggingface/peft/issues/2832",
           {"peft": ">=0.14"}),
]

__all__ = ["ENTRIES", "ADAPTERS_SRC", "PEFT_SRC"]
