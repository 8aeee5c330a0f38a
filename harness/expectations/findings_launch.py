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
from .groups import ADAPTERS_SRC, FORWARD_CONTEXT, TF5, TF_SRC, A, P, PEFT_SRC

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

# peft methods that train something in front of the first layer (prompt tokens, embedding rows, a shadow backbone fed
# the embeddings): the layers' input requires grad without enable_input_require_grads
IN_FRONT = ("prompt_tuning", "p_tuning", "multitask_prompt_tuning", "cpt", "trainable_tokens", "shadow")
# adapters' Llama attention takes the cache as `past_key_value`, its name before transformers 4.56, and 4.57.6's decoder
# layer passes `past_key_values`, which it takes in **kwargs and ignores: the DynamicCache is never written
# (adapters#824), so there is nothing for a recompute to write twice and the cache entries do not hold for it
UNCACHED = {"backend": "adapters", "arch": "llama"}
# peft methods whose trainable tensors live in per-adapter ParameterDicts (the probe watches the modules holding a
# trainable tensor, and a ParameterDict is never called)
HELD_IN_DICTS = ("adamss", "beft", "boft", "c3a", "deft", "delora", "fourierft", "frod", "gralora", "hira", "hra",
                 "ia3", "loha", "lokr", "miss", "osf", "pvera", "pvera_seeded", "randlora", "road", "shira",
                 "supertuning", "tinylora", "unilora", "vblora", "vera", "waveft")
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
    # adapters under torch's wrapper, which bypasses its gradient_checkpointing_enable
    Expect({**A, "gc_mode": "torch_non_reentrant", "method": FORWARD_CONTEXT}, Outcome.GC_ERROR,
           "torch's checkpoint_wrapper bypasses adapters' gradient_checkpointing_enable, whose context_fn hands the "
           "forward's ForwardContext to the recompute (adapters#732, fixed for its own switch by #759): the "
           "recompute runs in backward, after the context was popped, and the methods that read it (parameters "
           "shared across layers: Compacter, VeRA, DVoRA, MAM, UniPELT, prefix tuning; ReFT's positions) fail "
           "(\"'NoneType' object has no attribute 'shared_parameters'\"; seen on 4.57.6, BERT and Llama, every recipe)",
           "https://github.com/adapter-hub/adapters/issues/732", {"adapters": ">=1.1"}),
    Expect({**P, "gc_mode": "torch_non_reentrant", "method": ("prefix_tuning", "cartridge")}, Outcome.GC_ERROR,
           "peft refuses prefix tuning only under transformers' switch (is_gradient_checkpointing), which torch's "
           "wrapper does not set; it hands the virtual tokens' keys and values to the model as a DynamicCache, which "
           "each layer appends its own to, and the recompute appends them again: the metadata check stops it "
           "('Recomputed values ... have different metadata'), BERT too (seen on 4.57.6, every recipe; on 5.24.0, "
           "where peft refuses it on BERT for want of a cache, Llama's recompute meets a mask of other size)",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14"}),
    Expect({**P, "gc_mode": "torch_non_reentrant", "method": "alora"}, Outcome.GC_ERROR,
           "aLoRA's invocation offsets reach its LoRA layers through hooks that peft registers for each forward and "
           "removes after it (tuners/lora/model.py); torch's wrapper recomputes in backward, without them, and saves "
           "fewer tensors ('A different number of tensors was saved'; seen on 5.24.0, where transformers' own "
           "non-reentrant switch trains; on 4.57.6 the cache entry below shows first)",
           f"{PEFT_SRC}/tuners/lora/model.py", {"peft": ">=0.18"}),
    Expect({"gc_mode": "torch_non_reentrant", "arch": CACHES}, Outcome.GC_ERROR,
           f"{CACHE}: the non-reentrant checkpoint's metadata check stops it ('Recomputed values for the following "
           "tensors have different metadata'; every launch; cases/torch_checkpoint_wrapper_use_cache.py). On "
           "5.24.0 the same cells train equivalently (measured, every launch; the case's non-reentrant half passes "
           "there, its reentrant half still fails); what in transformers 5 lets the recompute pass torch's check is "
           "not established",
           "https://github.com/huggingface/transformers/issues/34928", {"transformers": ">=4.36,<5"}, unless=UNCACHED),
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
    Expect({**A, "gc_mode": "torch_reentrant", "method": ("seq_bn_inv", "double_seq_bn_inv"), "recipe": "switch"},
           Outcome.MISSING_GRAD,
           "the invertible adapters make the layers' input require grad (below), and the switch recipe's reentrant "
           "recompute of the first forward runs through the adapter active at backward time, the second: the first "
           "adapter's layers get no gradient (the switch findings; seen on 4.57.6, BERT and Llama)",
           "https://github.com/adapter-hub/adapters/pull/759", {"adapters": ">=1.2"}),
    Expect({**A, "gc_mode": "torch_reentrant", "method": ("seq_bn_inv", "double_seq_bn_inv"),
            "recipe": "compose_fuse"}, (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           f"{NO_INPUT_GRADS}: AdapterFusion trains only the fusion layers, the invertible adapters in front stay "
           "frozen, so nothing makes the layers' input require grad (gc_error where no head trains either)",
           f"{ADAPTERS_SRC}/methods/bottleneck.py", {"adapters": ">=1.2"}),
    Expect({**A, "gc_mode": "torch_reentrant", "method": ("seq_bn_inv", "double_seq_bn_inv"), "recipe": "aux_outputs",
            "arch": "trait:records_attentions"}, Outcome.MISMATCH,
           "the invertible adapters make the layers' input require grad (below), so the layers train, but the loss "
           "term on the attentions loses its gradient: they are recorded by hooks inside the layer, whose forward the "
           "reentrant checkpoint runs under no_grad (the aux_outputs entry; seen on 4.57.6, Llama)",
           f"{TF_SRC}/utils/generic.py#L918", {"adapters": ">=1.2", "transformers": ">=4.56"}),
    Expect({**A, "gc_mode": ("torch_reentrant", "torch_non_reentrant"), "method": "prompt_tuning",
            "recipe": "aux_outputs"}, Outcome.GC_ERROR,
           "adapters' prompt tuning prepends its tokens at the embeddings and records their number in the "
           "ForwardContext (methods/prompt_tuning.py), from which the attention mask is padded for them; eager "
           "attention (the recipe's) in the recompute, which torch's wrapper runs outside that context, meets the "
           "14 keys with a 10-key mask ('The size of tensor a (14) must match the size of tensor b (10)'); SDPA "
           "trains (seen on 4.57.6, BERT; where the mask is padded was not traced further)",
           f"{ADAPTERS_SRC}/methods/prompt_tuning.py", {"adapters": ">=1.2"}),
    Expect({**A, "gc_mode": "torch_reentrant", "method": ("seq_bn_inv", "double_seq_bn_inv", "prompt_tuning")},
           Outcome.EQUIVALENT,
           "a trained module in front of the first layer (the invertible adapter on the embeddings' output, the "
           "prompt tokens) makes the layers' input require grad, which is what enable_input_require_grads would "
           "have done: the reentrant wrapper's recompute trains the adapters inside the layers (seen on 4.57.6, BERT "
           "and Llama; attentions recorded by hooks still lose theirs: the aux_outputs entry)",
           f"{ADAPTERS_SRC}/methods/invertible.py", {"adapters": ">=1.2"},
           unless={"recipe": "aux_outputs", "arch": "trait:records_attentions"}),
    Expect({**P, "gc_mode": "torch_reentrant", "method": IN_FRONT, "arch": CACHES, "recipe": "aux_outputs",
            "parallel": "single"}, Outcome.GC_ERROR,
           "what trains in front of the first layer makes the layers' input require grad (below), so the reentrant "
           f"wrapper recomputes them: {CACHE}, and eager attention (the recipe's) adds its causal mask to twice the "
           "keys ('The size of tensor a (36) must match the size of tensor b (18)'; seen on 4.57.6 and 5.24.0, Llama)",
           "https://github.com/huggingface/transformers/issues/34928", {"peft": ">=0.14"}),
    Expect({**P, "gc_mode": "torch_reentrant", "method": IN_FRONT, "arch": CACHES, "parallel": "single"},
           (Outcome.MISMATCH, Outcome.MISSING_GRAD),
           "what trains in front of the first layer (prompt tokens, embedding rows, ShadowPEFT's backbone) makes the "
           "layers' input require grad, so the reentrant wrapper recomputes with gradients; the model's cache then "
           f"shows: {CACHE}, and the attention of the forward's no-grad keys changes what reaches the trained "
           "tensors in front, or under a pooled head leaves them a zero gradient (seen on 4.57.6 and 5.24.0, Llama)",
           "https://github.com/huggingface/transformers/issues/34928", {"peft": ">=0.14"}),
    Expect({**P, "gc_mode": ("reentrant", "torch_reentrant"), "method": (*IN_FRONT, "ln_tuning"), "arch": "bert",
            "recipe": "aux_outputs"}, Outcome.MISMATCH,
           "what trains in front of the first layer makes the layers' input require grad, so the layers train, but "
           "transformers 5's BERT records its attentions with hooks inside the layer, whose forward the reentrant "
           "checkpoint runs under no_grad: the loss term on them loses its gradient (the aux_outputs entry; seen on "
           "5.24.0; 4.57.6's BERT returns them through the layers' outputs)",
           f"{TF5}/utils/generic.py", {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({**P, "gc_mode": "torch_reentrant", "method": IN_FRONT, "parallel": "single"}, Outcome.EQUIVALENT,
           "what trains in front of the first layer (prompt tokens, embedding rows, ShadowPEFT's backbone) makes the "
           "layers' input require grad, which is what enable_input_require_grads would have done: the reentrant "
           "wrapper trains (seen on 4.57.6, BERT)", f"{PEFT_SRC}/peft_model.py#L184", {"peft": ">=0.14"},
           unless={"recipe": "aux_outputs", "arch": CACHES}),
    # LN tuning trains BERT's embeddings LayerNorm, in front of the first layer: the layers' input requires grad
    Expect({**P, "gc_mode": "torch_reentrant", "method": "ln_tuning", "arch": "bert", "recipe": "switch",
            "parallel": "single"}, Outcome.MISSING_GRAD,
           "LN tuning trains BERT's embeddings LayerNorm, in front of the first layer, so the layers' input requires "
           "grad and the reentrant wrapper recomputes them; two adapters trained at once then show the switch "
           "recipe's finding: the first forward's recompute runs through the second adapter, and the first gets no "
           "gradient (seen on 4.57.6)", "https://github.com/huggingface/peft/issues/2832", {"peft": ">=0.14"}),
    Expect({**P, "gc_mode": "torch_reentrant", "method": "ln_tuning", "arch": "bert", "recipe": "switch_frozen",
            "parallel": "single"}, Outcome.MISMATCH,
           "as above with set_adapter alone: the recompute through the adapter active at backward time gives the "
           "second the first forward's part too, silently (the switch_frozen finding; seen on 4.57.6)",
           "https://github.com/huggingface/peft/issues/2832", {"peft": ">=0.14"}),
    Expect({**P, "gc_mode": "torch_reentrant", "method": "ln_tuning", "arch": "bert", "parallel": "single"},
           Outcome.EQUIVALENT,
           "LN tuning trains BERT's embeddings LayerNorm, in front of the first layer: the layers' input requires "
           "grad, which is what enable_input_require_grads would have done, and the reentrant wrapper trains the "
           "layers' norms too (seen on 4.57.6, every recipe of one adapter)",
           f"{PEFT_SRC}/tuners/ln_tuning/model.py", {"peft": ">=0.14"}),
    Expect({**P, "gc_mode": "torch_reentrant", "method": HELD_IN_DICTS, "task": ("causal_lm", "seq2seq_lm",
                                                                                "feature"), "parallel": "single"},
           Outcome.MISSING_GRAD,
           f"{NO_INPUT_GRADS}; the loss of a causal LM then has no gradient, as for LoRA (gc_error), but these "
           "methods hold their tensors in per-adapter ParameterDicts, which are never called, and the harness skips "
           "a step at which no module holding a trainable tensor ran (LayerDrop's, probe.Probe.watch): the step "
           "counts as one that trained nothing and the adapters show no gradient at all. The same loss as the "
           "entry below, reported otherwise; watching the modules that run with them instead made LayerDrop's "
           "all-decoder-dropped steps of encoder-decoders plain failures (seen on 4.57.6 and 5.24.0, Llama)",
           f"{PEFT_SRC}/peft_model.py#L184", {"peft": ">=0.14"}),
    Expect({**P, "gc_mode": "torch_reentrant", "method": ("adalora", "ln_tuning", "lora_mts"), "parallel": "single"},
           Outcome.MISSING_GRAD,
           f"{NO_INPUT_GRADS}; something after the layers trains, so the loss has a gradient even for a causal LM "
           "and the step runs without the layers' adapters: AdaLoRA's orthogonal regulariser on lora_A / lora_B "
           "(added to the loss outside the layers), LN tuning's final norm, lora_mts's lm_head",
           f"{PEFT_SRC}/tuners/adalora/model.py", {"peft": ">=0.14"}),
    Expect({**P, "gc_mode": "torch_reentrant", "method": ("adaption_prompt", "xlora"), "parallel": "single"},
           Outcome.GC_ERROR,
           f"{NO_INPUT_GRADS}; adaption prompt and X-LoRA leave a task head frozen, so nothing outside the layers "
           "trains under a head either and the loss has no gradient", f"{PEFT_SRC}/peft_model.py#L184",
           {"peft": ">=0.14"}),
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
    Expect({"backend": "transformers_peft", "gc_mode": "reentrant", "order": "gc_first", "parallel": "fsdp1",
            "task": HEAD_TASKS}, Outcome.GC_ERROR,
           "transformers' add_adapter after checkpointing is on: nothing makes the layers' inputs require grad (as "
           "peft's adapter_first), and the integration trains no head (no modules_to_save), so FSDP1's root unit "
           "holds nothing trained: its flat parameter does not require grad, the embeddings' output neither, the "
           "loss has no gradient (seen on 4.57.6, Qwen2, a user's config)",
           f"{TORCH_SRC}/distributed/fsdp/_flat_param.py",
           {"peft": ">=0.14", "transformers": "<5"}),
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
           "https://github.com/huggingface/transformers/issues/34928", {"transformers": ">=4.36"}, unless=UNCACHED),
    Expect({"gc_mode": ("torch_reentrant", "torch_non_reentrant"), "arch": CACHES, "recipe": "aux_outputs"},
           Outcome.GC_ERROR,
           f"{CACHE}: eager attention (the recipe's, for the attentions) adds its causal mask of 10 keys to the "
           "recompute's 20 (the size mismatch of padded inputs)",
           "https://github.com/huggingface/transformers/issues/34928", {"transformers": ">=4.36"}, unless=UNCACHED),
    Expect({"gc_mode": "torch_reentrant", "arch": CACHES}, Outcome.MISSING_GRAD,
           f"{CACHE}: without a padding mask SDPA's causal mask aligns the 10 queries with the first 10 keys, which "
           "are the forward's, written under no_grad, so the recompute's own keys and values are never attended: "
           "the loss and the other gradients are unchanged and the key and value projections get a zero gradient, "
           "silently (cases/torch_checkpoint_wrapper_use_cache.py)",
           "https://github.com/huggingface/transformers/issues/34928", {"transformers": ">=4.36"}, unless=UNCACHED),
]

__all__ = ["ENTRIES"]
