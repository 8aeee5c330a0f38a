"""What torch's own checkpoint API (the torch_* gc modes) and the launches (Cell.parallel, harness/launch/) show.

torch's checkpoint_wrapper is applied as accelerate's FSDP plugin, torchtune and torchtitan apply it: on the layer
class, with nothing else done to the model. transformers does not know checkpointing is on, so it neither turns the
key/value cache off (GradientCheckpointingLayer.__call__ does only under its own switch) nor, where an adapter
library would ask it to, makes the layers' inputs require grad. These entries stand above the models' and the
general findings, which name transformers' own gc modes and hold for every launch as they stand.
"""
from __future__ import annotations

from ..outcomes import Outcome
from .entry import Expect
from .groups import P, PEFT_SRC

TORCH_SRC = "https://github.com/pytorch/pytorch/blob/v2.13.0/torch"
CACHES = "trait:caches_in_training"
HEAD_TASKS = ("seq_cls", "token_cls", "image_cls", "audio_cls")   # a head trained beside the adapter
ADAPTER_BACKENDS = ("peft", "adapters", "transformers_peft")     # the base frozen, its embeddings too
CACHE = ("torch's checkpoint_wrapper on a model whose config keeps use_cache=True (its default, as such users leave "
         "it): transformers turns the cache off only under its own checkpointing switch (the layer's "
         "gradient_checkpointing flag, modeling_layers.py GradientCheckpointingLayer.__call__), so the forward makes "
         "a DynamicCache and each layer writes its keys and values into it; the recompute writes them again, and "
         "the layer attends to twice the keys (20 for 10 tokens)")
NO_INPUT_GRADS = ("torch's reentrant checkpoint_wrapper with the base model frozen: peft and adapters make the layers' "
                  "inputs require grad (enable_input_require_grads) only when transformers says the model checkpoints "
                  "(is_gradient_checkpointing), which torch's wrapper does not set, so no input of a checkpointed "
                  "layer requires grad, the reentrant checkpoint returns outputs outside the graph and the adapters "
                  "inside the layers get no gradient")
DDP_REENTRANT = ("DistributedDataParallel(find_unused_parameters=True) with reentrant checkpointing: at the end of the "
                 "forward DDP walks the outputs' autograd graph for the parameters that took part "
                 "(Reducer.prepare_for_backward); the reentrant checkpoint ran the layers under no_grad, so their "
                 "parameters are not in it and are marked ready (unused) at once; the recompute in backward then "
                 "uses them and their gradient hooks mark them ready a second time ('Expected to mark a variable "
                 "ready only once'; torch's DDP note: reentrant checkpointing works only without "
                 "find_unused_parameters). Trainer picks find_unused_parameters=True for a model that is not a "
                 "PreTrainedModel (a PeftModel)")

TWO_FORWARDS = ("two_forwards", "switch", "switch_frozen")   # the recipes that run two forwards before one backward
# where peft never makes the layers' inputs require grad, no layer is recomputed (the general findings' entry)
NO_RECOMPUTE = {"backend": "peft", "gc_mode": "reentrant", "order": "adapter_first"}
TWO_FORWARDS_DDP = ("two forwards before one backward under DistributedDataParallel's defaults, reentrant checkpointing: "
                    "each checkpointed layer's recompute runs a backward of its own inside the outer one, so a "
                    "parameter used by both forwards fires DDP's hook once per forward. When its bucket completes "
                    "inside one of those inner backwards, DDP finalizes there (the averaged gradients written back, no "
                    "more hooks expected), and the other forward's recompute adds its part to the rank's own .grad "
                    "after, unaveraged: the ranks' gradients differ from each other and from the plain run's, "
                    "silently ('ranks diverge'). Where a parameter outside the layers that both forwards use trains "
                    "(a head, the embeddings), the other forward's hooks come while DDP still expects them: 'Expected "
                    "to mark a variable ready only once'. static_graph=True trains it equivalently")
TWO_FORWARDS_FSDP = ("two forwards before one backward under FSDP2 with transformers' reentrant checkpointing, whose "
                     "layer checkpoints its whole Module.__call__, fully_shard's hooks inside: the real forwards run "
                     "under no_grad, so only "
                     "the recomputes register the post-backward reduce-scatter; the first recompute's backward "
                     "reduce-scatters the layer's gradient, and the second, finding the state PRE_BACKWARD, only "
                     "unshards (_fsdp_state.py _pre_forward), so the other forward's part is never reduced: silently "
                     "other gradients. torch's wrapper sharded as accelerate and torchtitan shard it, fully_shard(checkpoint_wrapper("
                     "layer)), trains equivalently (torch_reentrant)")
TWO_FORWARDS_FSDP1 = ("two forwards before one backward under FSDP1, reentrant checkpointing: the first recompute's "
                      "backward reaches the flat parameter's AccumulateGrad, whose post-backward hook reshards (the "
                      "original parameters become 1-D views of the local shard), and the other forward's pre-backward "
                      "hook returns at once (_ran_pre_backward_hook), so its recompute runs on the shards: 'mat2 must "
                      "be a matrix, got 1-D tensor'")

ENTRIES: list[Expect] = [
    Expect({"recipe": ("switch", "switch_frozen"), "parallel": "ddp_find_unused", "backend": ("peft", "adapters")},
           Outcome.ERROR,
           "two adapters trained at once under DistributedDataParallel(find_unused_parameters=True), checkpointing or "
           "not: at each forward DDP marks the parameters that forward's graph lacks as unused, ready at once; the "
           "second forward (the second adapter active) lacks the first adapter's, which the backward then gives a "
           "gradient: 'Expected to mark a variable ready only once' (a plain run that fails)",
           f"{TORCH_SRC}/nn/parallel/distributed.py"),
    Expect({"gc_mode": "torch_non_reentrant", "arch": CACHES}, Outcome.GC_ERROR,
           f"{CACHE}: the non-reentrant checkpoint's metadata check stops it ('Recomputed values for the following "
           "tensors have different metadata'; every launch; cases/torch_checkpoint_wrapper_use_cache.py). On "
           "5.24.0 the same cells train equivalently (measured, every launch; the case's non-reentrant half passes "
           "there, its reentrant half still fails); what in transformers 5 lets the recompute pass torch's check is "
           "not established",
           "https://github.com/huggingface/transformers/issues/34928", {"transformers": ">=4.36,<5"}),
    # two forwards before one backward (the two_forwards and switch recipes) under a launch, reentrant checkpointing
    Expect({"recipe": TWO_FORWARDS, "gc_mode": ("reentrant", "torch_reentrant"), "parallel": "fsdp1"},
           Outcome.GC_ERROR,
           f"{TWO_FORWARDS_FSDP1} (cases/fsdp_two_forwards_reentrant.py)", f"{TORCH_SRC}/distributed/fsdp/_runtime_utils.py"),
    # the adapter backends under the reentrant wrapper: no recompute at all where no layer input requires grad
    Expect({"backend": ("peft", "adapters"), "gc_mode": "torch_reentrant", "parallel": "fsdp1", "task": HEAD_TASKS,
            "arch": CACHES}, (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "FSDP1 (use_orig_params) makes the frozen embeddings views of the root unit's flat parameter, which "
           "requires grad for the trained head beside them, so the layers' inputs require grad as "
           f"enable_input_require_grads would make them (the entry below); the recompute then meets the cache: {CACHE}",
           "https://github.com/huggingface/transformers/issues/34928", {"transformers": ">=4.36"}),
    Expect({"backend": ("peft", "adapters"), "gc_mode": "torch_reentrant", "parallel": "fsdp1", "task": HEAD_TASKS},
           Outcome.EQUIVALENT,
           "FSDP1 with use_orig_params: in forward the original parameters are views of the unsharded flat parameter "
           "(FlatParamHandle._use_unsharded_views), and the root unit's flat parameter, holding the frozen "
           "embeddings beside the trained head, requires grad: the embedding output requires grad, which is what "
           "enable_input_require_grads would have done, and the adapters train (not so for a causal LM, whose root "
           "unit holds nothing trained: the entries below)",
           f"{TORCH_SRC}/distributed/fsdp/_flat_param.py"),
    Expect({"backend": ADAPTER_BACKENDS, "gc_mode": "torch_reentrant", "parallel": "ddp"}, Outcome.GC_ERROR,
           f"{NO_INPUT_GRADS}. Under DistributedDataParallel's defaults the adapters that got no gradient stop the "
           "next step ('Expected to have finished reduction in the prior iteration'), or the loss has no gradient "
           "at all (a causal LM: nothing outside the layers trains; cases/torch_checkpoint_wrapper_adapters.py)",
           f"{PEFT_SRC}/peft_model.py#L184", {"peft": ">=0.14"}),
    Expect({"backend": ("peft", "adapters"), "gc_mode": "torch_reentrant", "task": HEAD_TASKS}, Outcome.MISSING_GRAD,
           f"{NO_INPUT_GRADS}; the head beside them trains (cases/torch_checkpoint_wrapper_adapters.py)",
           f"{PEFT_SRC}/peft_model.py#L184", {"peft": ">=0.14"}),
    Expect({"backend": ADAPTER_BACKENDS, "gc_mode": "torch_reentrant"}, Outcome.GC_ERROR,
           f"{NO_INPUT_GRADS}; nothing outside the layers trains (a causal LM; transformers_peft trains no head), so "
           "the loss has no gradient ('element 0 of tensors does not require grad'; "
           "cases/torch_checkpoint_wrapper_adapters.py)", f"{PEFT_SRC}/peft_model.py#L184",
           {"peft": ">=0.14"}),
    # transformers' own reentrant checkpointing where peft never makes the layers' inputs require grad (adapter_first:
    # the general findings' entry), under the launches that change how it shows
    Expect({**P, "gc_mode": "reentrant", "order": "adapter_first", "parallel": "fsdp1", "task": HEAD_TASKS},
           Outcome.EQUIVALENT,
           "the general findings' lost layer-input gradients of adapter_first, undone by FSDP1 as for torch's wrapper "
           "above: the frozen embeddings are views of the root unit's flat parameter, which requires grad for the "
           "trained head", f"{TORCH_SRC}/distributed/fsdp/_flat_param.py", {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "gc_mode": "reentrant", "order": "adapter_first", "parallel": "ddp_find_unused"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "the general findings' lost layer-input gradients of adapter_first: no layer is recomputed, so nothing is "
           "marked ready twice (the entry below); the adapters get no gradient, or the loss none",
           f"{PEFT_SRC}/peft_model.py#L184", {"peft": ">=0.14", "transformers": "<5"}),
    Expect({"recipe": TWO_FORWARDS, "gc_mode": ("reentrant", "torch_reentrant"), "parallel": "ddp"},
           (Outcome.MISMATCH, Outcome.GC_ERROR), f"{TWO_FORWARDS_DDP} (cases/ddp_two_forwards_reentrant.py)",
           f"{TORCH_SRC}/csrc/distributed/c10d/reducer.cpp", unless=NO_RECOMPUTE),
    Expect({"recipe": TWO_FORWARDS, "gc_mode": "reentrant", "parallel": "fsdp"},
           Outcome.MISMATCH, f"{TWO_FORWARDS_FSDP}. transformers 5 checkpoints the layer's forward, not its "
           "__call__, so that module hooks (FSDP2's) stay outside the checkpoint (modeling_layers.py, "
           "GradientCheckpointingLayer): equivalent on 5.24.0 (cases/fsdp_two_forwards_reentrant.py)",
           f"{TORCH_SRC}/distributed/fsdp/_fully_shard/_fsdp_state.py", {"transformers": "<5"},
           unless=NO_RECOMPUTE),
    Expect({"gc_mode": ("reentrant", "torch_reentrant"), "parallel": "ddp_find_unused"}, Outcome.GC_ERROR,
           f"{DDP_REENTRANT} (cases/ddp_find_unused_reentrant.py)",
           "https://github.com/pytorch/pytorch/issues/24005"),
    Expect({"gc_mode": ("torch_reentrant", "torch_non_reentrant"), "arch": CACHES, "inputs": "padded"},
           Outcome.GC_ERROR,
           f"{CACHE}: the padding mask holds 10 keys, the recompute's attention 20 ('The size of tensor a (20) must "
           "match the size of tensor b (10)'; cases/torch_checkpoint_wrapper_use_cache.py)",
           "https://github.com/huggingface/transformers/issues/34928", {"transformers": ">=4.36"}),
    Expect({"gc_mode": ("torch_reentrant", "torch_non_reentrant"), "arch": CACHES, "recipe": "aux_outputs"},
           Outcome.GC_ERROR,
           f"{CACHE}: eager attention (the recipe's, for the attentions) adds its causal mask of 10 keys to the "
           "recompute's 20 (the size mismatch of padded inputs)",
           "https://github.com/huggingface/transformers/issues/34928", {"transformers": ">=4.36"}),
    Expect({"gc_mode": "torch_reentrant", "arch": CACHES}, Outcome.MISSING_GRAD,
           f"{CACHE}: without a padding mask SDPA's causal mask aligns the 10 queries with the first 10 keys, which "
           "are the forward's, written under no_grad, so the recompute's own keys and values are never attended: "
           "the loss and the other gradients are unchanged and the key and value projections get a zero gradient, "
           "silently (cases/torch_checkpoint_wrapper_use_cache.py)",
           "https://github.com/huggingface/transformers/issues/34928", {"transformers": ">=4.36"}),
]

__all__ = ["ENTRIES"]
