"""Checkpointing findings over modalities and methods; the broadest rules last (a model's own difference shows
where no method-specific outcome comes first)."""
from __future__ import annotations

from ..outcomes import Outcome
from .entry import Expect
from .groups import (A, ADAPTERS_SRC, CROSS_ATTENTION_IMAGE, ENC_DEC, FRONT_PATCH_EMBED, FRONT_PROJECTION, INPUT_GRAD, KV_SHARING, NO_INPUT_EMBEDDINGS_5, P, PEFT_SRC, PREFIX_CACHE_ARCHS, TF5, TF_SRC, THROUGH_LAYERS, VISION_TOWERS_HOOKED_5, WEIGHT)

ENTRIES: list[Expect] = [
    Expect({**P, "method": "alora", "gc_mode": "non_reentrant", "order": "adapter_first"}, Outcome.GC_ERROR,
           "aLoRA with checkpointing enabled after get_peft_model: torch's checkpoint finds the recompute saving other "
           "tensors than the forward ('Recomputed values ... have different metadata', 'A different number of tensors "
           "was saved'): the invocation offsets reach the LoRA layers through hooks that peft registers per forward "
           "(tuners/lora/model.py, for checkpointed layers too); enabled before get_peft_model it trains, and on "
           "transformers 5.24.0 both orders train (seen on 4.57.6, peft 0.21.2; why the order matters is not probed "
           "further; cases/alora_checkpointing_enabled_after_get_peft_model.py)", "https://github.com/huggingface/peft/pull/2860", {"peft": ">=0.18", "transformers": "<5"}),
    Expect({"arch": KV_SHARING, "gc_mode": "reentrant", "method": THROUGH_LAYERS}, Outcome.MISMATCH,
           "the KV-sharing layers (the last num_kv_shared_layers) reuse the keys and values of an earlier layer, "
           "handed over in shared_kv_states, a dict passed by keyword: reentrant checkpointing runs each layer "
           "under no_grad and recomputes them one by one, last first, so the sharing layers read the producer's "
           "no-grad K/V and the gradient they send into it (its k/v projections and everything upstream) is lost; "
           "the loss is unchanged. Full fine-tuning and every method training through the layers, in both orders "
           "(Poly, prefix tuning, Cartridge lose theirs as on other models, below); non-reentrant keeps it (seen on "
           "5.24.0; unsloth-zoo#813 found it on 5.12.1; cases/gemma_kv_sharing_reentrant.py)",
           "https://github.com/unslothai/unsloth-zoo/pull/813", {"transformers": ">=5"}),
    Expect({"arch": CROSS_ATTENTION_IMAGE, "gc_mode": "reentrant", "method": "full"}, Outcome.GC_ERROR,
           "the text model hands the projected image states to every decoder layer by keyword "
           "(cross_attention_states=...), which reentrant checkpointing does not take as an input: each "
           "cross-attention layer's recompute differentiates through the closed-over states into the vision tower "
           "and frees its graph, and the next cross-attention layer's backward fails ('Trying to backward through the "
           "graph a second time'); with one cross-attention layer it trains. Both orders; non-reentrant trains (seen "
           "on 4.57.6 and 5.24.0; cases/mllama_cross_attention_reentrant.py)",
           f"{TF_SRC}/models/mllama/modeling_mllama.py#L1259", {"transformers": ">=4.57"}),
    Expect({**P, "arch": CROSS_ATTENTION_IMAGE, "gc_mode": "reentrant", "order": "gc_first"}, Outcome.GC_ERROR,
           "as above: every method covered on it adapts the vision tower, whose adapters' graph each cross-attention "
           "layer's recompute runs into (on 4.57.6 the adapter_first order loses the layers' gradients first: the "
           "rules below; seen on 4.57.6 and 5.24.0)",
           f"{TF_SRC}/models/mllama/modeling_mllama.py#L1259", {"peft": ">=0.14", "transformers": ">=4.57"}),
    Expect({**P, "arch": CROSS_ATTENTION_IMAGE, "gc_mode": "reentrant", "order": "adapter_first"}, Outcome.GC_ERROR,
           "as above in this order too: transformers 5's gradient_checkpointing_enable calls enable_input_require_grads "
           "itself (seen on 5.24.0)", f"{TF5}/modeling_utils.py#L3198", {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({**P, "arch": "qwen3_asr_encoder", "order": "gc_first", "method": (INPUT_GRAD, "ln_tuning")},
           Outcome.NOT_CHECKPOINTED,
           "more memory with checkpointing, from the input-grad hook: Qwen3-ASR's encoder returns the first of its "
           "three subsampling convs (conv2d1) as input embeddings, so peft's enable_input_require_grads in gc_first "
           "order makes the frozen conv stack keep its activations (the mel x frame grid at 1/2, 1/4, 1/8, 480 "
           "channels released) for backward, which the plain peft run does not: 456 against 441 KB saved without "
           "checkpointing (tiny config, its convs at the released proportion to the width, LoRA), and at the "
           "released size with LoRA on q/v 17.1 MB against 14.1 MB per "
           "100-frame chunk, 136.7 against 112.8 MB for 8 (non-parameter tensors kept for backward; "
           "cases/qwen3_asr_encoder_checkpointing_costs_memory.py, one chunk). Both gc modes; adapter_first is not "
           "hooked and saves memory, and so do the methods that keep more per layer (BOFT, DeFT, DoRA, HRA, OSF, "
           "SHiRA, WaveFT: the layers' savings outweigh the stack in the tiny config; seen on 5.24.0)",
           f"{TF5}/models/qwen3_asr/modeling_qwen3_asr.py#L366", {"peft": ">=0.14", "transformers": ">=5"},
           unless={"method": ("boft", "deft", "dora", "hra", "osf", "shira", "waveft")}),
    Expect({**P, "arch": FRONT_PATCH_EMBED, "method": INPUT_GRAD, "gc_mode": "reentrant"},
           Outcome.EQUIVALENT,
           "the generic targets adapt the vision tower's patch embedding (a Linear in front of the first checkpointed "
           "layer): its grad-requiring output is the layers' input, so reentrant checkpointing works in both orders "
           "though the tower has no input embeddings to hook (seen on 5.24.0; SigLIP2's tower on 4.57.6 too)",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14", "transformers": ">=4.57"}),
    Expect({**P, "arch": VISION_TOWERS_HOOKED_5, "method": (INPUT_GRAD, "ln_tuning"),
            "gc_mode": "reentrant"}, Outcome.EQUIVALENT,
           "these vision towers declare main_input_name 'input_ids' and have input embeddings (the patch embedding): "
           "transformers 5's gradient_checkpointing_enable hooks them as it does text models, so unlike other vision "
           "models they keep the adapters' gradients in the adapter_first order too (seen on 5.24.0)",
           f"{TF5}/modeling_utils.py#L3190", {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({**P, "arch": FRONT_PROJECTION, "method": (INPUT_GRAD, "ln_tuning"), "gc_mode": "reentrant"},
           Outcome.EQUIVALENT,
           "the arch-generic targets adapt the projection between the embeddings / features and the first "
           "checkpointed layer; its grad-requiring output is the layers' input, so reentrant checkpointing works "
           "(probed: with that projection left out of the targets the gradients are lost)",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14"}),
    Expect({**P, "arch": "fnet", "gc_mode": "reentrant"}, Outcome.EQUIVALENT,
           "every method covered on FNet adapts its embeddings' projection (a Linear between the embeddings and the "
           "first checkpointed layer): its grad-requiring output is the layers' input, so reentrant checkpointing "
           "keeps the gradients in both orders (seen on 4.57.6 through transformers' add_adapter, every method; peft's "
           "task wrapper passes FNet inputs it does not take, so peft's own plain runs fail first)",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14"}),
    Expect({**P, "arch": "time_series_transformer",
            "method": ("lora", "dora", "rslora", "lora_mts", "unilora", "adalora", "beft", "deft", "delora", "fourierft",
                       "frod", "glora", "hira", "ia3", "lily", "ln_tuning", "loha", "lokr", "peanut", "psoft", "pvera",
                       "randlora", "shira", "supertuning", "tinylora", "vera", "waveft"),
            "gc_mode": "reentrant"}, Outcome.EQUIVALENT,
           "probed: these methods adapt the value embedding's value_projection (LN tuning: layernorm_embedding) in "
           "front of the first checkpointed layer; its output requires grad, so reentrant checkpointing keeps the "
           "gradients, as above. The block-structured ones (BOFT, C3A, HRA, VBLoRA, RoAd, MiSS, GraLoRA, OSF, OFT) "
           "do not adapt that one-feature projection and lose them (seen on 4.57.6 adapter_first, 5.24.0 both orders)",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14"}),
    Expect({**P, "arch": NO_INPUT_EMBEDDINGS_5, "method": "unilora", "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH, Outcome.EQUIVALENT, Outcome.NOT_CHECKPOINTED),
           "the loss of gradients below, in the checkpointed layers only: UniLoRA's one shared vector keeps the part "
           "of its gradient from adapted modules outside them (CANINE's initial character encoder: a mismatch of "
           "1.3e-6; seen on 5.24.0), below the tolerance where that part is small; where no checkpointed layer is "
           "recomputed at all, not_checkpointed (CANINE's masked causal LM, both orders, as on 4.57.6 in adapter_first)",
           f"{TF5}/modeling_utils.py#L2147", {"peft": ">=0.18", "transformers": ">=5"}, below_tolerance=True),
    Expect({**P, "arch": NO_INPUT_EMBEDDINGS_5, "method": (WEIGHT, "ln_tuning"), "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "transformers 5 tolerates models without get_input_embeddings in enable_input_require_grads (a warning, no "
           "hook): with reentrant checkpointing the adapters inside the layers then get no gradient, in either order",
           "https://github.com/huggingface/transformers/pull/42558", {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({**P, "modality": "multimodal", "method": "unilora", "gc_mode": "reentrant", "order": "gc_first"},
           (Outcome.MISSING_GRAD, Outcome.MISMATCH, Outcome.EQUIVALENT),
           "the vision (audio) tower's adapters lose their gradient (the vision-language rule below) but share "
           "UniLoRA's one vector with the text side: the loss shows only as a value difference the size of that part, "
           "below the tolerance where that part is small (InternVL feature: 5e-9; seen on 4.57.6)",
           f"{TF_SRC}/modeling_utils.py#L2856", {"peft": ">=0.18", "transformers": ">=4.57,<5"}, below_tolerance=True),
    Expect({**P, "arch": ("idefics2", "idefics3", "smolvlm"), "method": (INPUT_GRAD, "ln_tuning"),
            "gc_mode": "reentrant", "order": "gc_first"}, Outcome.EQUIVALENT,
           "these VLMs override enable_input_require_grads to hook the vision model's patch embeddings as well as the "
           "text embeddings (peft issue 1402), so the vision tower's adapters keep their gradients in this order "
           "(seen on 4.57.6: Idefics2, every weight method; Idefics3, LN tuning too)",
           f"{TF_SRC}/models/idefics2/modeling_idefics2.py#L795", {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": "instructblip", "method": (WEIGHT, "ln_tuning"), "gc_mode": "reentrant",
            "order": "gc_first"}, (Outcome.MISSING_GRAD, Outcome.MISMATCH),
           "the vision-language rule below, for a VLM whose main input is pixel_values: enable_input_require_grads "
           "hooks the language model's embeddings, not InstructBLIP's vision embeddings, so the adapters of its "
           "reentrant-checkpointed vision layers get no gradient (seen on 4.57.6: LoRA, BOFT, LN tuning; 5.24.0 hooks "
           "the vision embeddings too: equivalent)", f"{TF_SRC}/modeling_utils.py#L2856",
           {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": "blip-2", "method": ("adalora", "beft", "ia3", "osf", "vblora"), "gc_mode": "reentrant",
            "order": "gc_first"}, Outcome.MISSING_GRAD,
           "the same for BLIP-2, whose vision tower only these methods adapt (peft's BLIP-2 defaults for the others "
           "name the language model's and Q-Former's projections; seen on 4.57.6, every method, masked causal LM)",
           f"{TF_SRC}/modeling_utils.py#L2856", {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "modality": "multimodal", "method": (WEIGHT, "ln_tuning"), "gc_mode": "reentrant",
            "order": "gc_first"}, (Outcome.MISSING_GRAD, Outcome.MISMATCH),
           "enable_input_require_grads hooks only the text embeddings of a vision- or audio-language model: the "
           "adapters inside the reentrant-checkpointed vision (audio) tower get no gradient (a parameter shared "
           "with the text side, e.g. UniLoRA's, gets only part of it: mismatch; the audio towers of Qwen2-Audio and "
           "Voxtral likewise)", f"{TF_SRC}/modeling_utils.py#L2856",
           {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "method": "unilora", "gc_mode": "reentrant", "order": "adapter_first"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH, Outcome.EQUIVALENT, Outcome.NOT_CHECKPOINTED),
           "the reentrant adapter_first loss of gradients (below) inside the checkpointed layers; UniLoRA's one shared "
           "vector keeps the part of adapted modules outside them, so it shows as a value difference of the lost "
           "part's size (Mistral3: below tolerance), or, when no checkpointed layer is recomputed at all, as "
           "not_checkpointed (CANINE; seen on 4.57.6)", f"{PEFT_SRC}/peft_model.py",
           {"peft": ">=0.18"}, below_tolerance=True),
    Expect({**P, "method": WEIGHT, "gc_mode": "reentrant", "order": "adapter_first"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH),
           "peft calls enable_input_require_grads only when the model already checkpoints at get_peft_model; "
           "PeftModel.gradient_checkpointing_enable afterwards does not, so with reentrant checkpointing no "
           "input of a checkpointed layer requires grad and the adapters inside get none (gc_error when "
           "nothing outside the layers trains: the loss has no grad_fn; mismatch for a parameter shared with "
           "modules outside the layers, e.g. UniLoRA's)",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "modality": ("vision", "audio"), "method": (WEIGHT, "ln_tuning"),
            "gc_mode": "reentrant", "order": "adapter_first"}, (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "transformers 5's gradient_checkpointing_enable calls enable_input_require_grads itself, but only for "
           "models whose main input is input_ids: vision and audio models still lose the adapters' gradients",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({**P, "method": "ln_tuning", "gc_mode": "reentrant", "order": "adapter_first"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "as for the weight methods: no adapted norm in front of the layers feeds them a grad-requiring input "
           "(models with one are listed above as equivalent)", f"{PEFT_SRC}/peft_model.py",
           {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "method": ("poly", "xlora", "adaption_prompt")}, Outcome.ERROR,
           "peft 0.14 cannot train these on transformers 4.48 even without checkpointing (poly: 'batch1 must be "
           "a 3D tensor'; xlora: ModulesToSaveWrapper.forward() missing x; adaption prompt: LlamaAttention has "
           "no hidden_size)", f"{PEFT_SRC}/tuners", {"peft": "<=0.14.0"}),
    Expect({**P, "method": "poly"}, Outcome.GC_ERROR,
           "Poly hands task_ids to its layers through forward hooks that live only during forward(); the "
           "layers recomputed in backward find task_ids None", f"{PEFT_SRC}/tuners/poly/model.py",
           {"peft": ">=0.14"}),
    Expect({**P, "method": "xlora", "gc_mode": ("non_reentrant", "torch_non_reentrant")}, Outcome.GC_ERROR,
           "X-LoRA injects the per-token expert scalings with hooks removed after forward: the recompute runs "
           "plain LoRA and saves a different number of tensors (CheckpointError; torch's wrapper too)",
           f"{PEFT_SRC}/tuners/xlora/model.py", {"peft": ">=0.14"}),
    Expect({**P, "arch": "gemma4_text", "method": "xlora", "gc_mode": "reentrant"}, Outcome.MISMATCH,
           "as below, but the generic targets also adapt Gemma 4's per-layer-input projection "
           "(model.per_layer_model_projection), which runs outside the checkpointed layers: the X-LoRA classifier "
           "keeps that part of its gradient, so the loss shows as a value difference (rel 1.1 at step 0; seen on "
           "5.24.0; the VLM classes take peft's default targets, inside the layers: missing_grad)",
           f"{PEFT_SRC}/tuners/xlora/model.py", {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({**P, "method": "xlora", "gc_mode": "reentrant"}, Outcome.MISSING_GRAD,
           "X-LoRA's scalings come from hooks removed after forward: the reentrant recompute cuts the X-LoRA "
           "classifier out of the graph", f"{PEFT_SRC}/tuners/xlora/model.py", {"peft": ">=0.14"}),
    Expect({**P, "method": ("prefix_tuning", "cartridge"), "order": "adapter_first"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.UNSUPPORTED),
           "peft's refusal of prefix tuning with checkpointing runs only in get_peft_model; enabled afterwards, "
           "transformers' GradientCheckpointingLayer drops past_key_values (the prefix) in every layer "
           "(unsupported: a model that takes no past key values at all, refused by peft even without checkpointing)",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14", "transformers": ">=4.54"}),
    Expect({**A, "arch": "beit", "gc_mode": "non_reentrant"}, Outcome.GC_ERROR,
           "adapters' gradient_checkpointing_enable calls enable_input_require_grads, whose hook does "
           "output.requires_grad_(); BeitPatchEmbeddings returns a tuple, so the first forward raises",
           f"{TF_SRC}/modeling_utils.py#L2856", {"adapters": ">=1.1.0", "transformers": ">=4.57,<5"}),
    Expect({**A, "arch": PREFIX_CACHE_ARCHS, "method": ("prefix_tuning*", "mam", "unipelt"),
            "gc_mode": "non_reentrant", "inputs": "unmasked"}, Outcome.MISSING_GRAD,
           "checkpointing forces use_cache=False; transformers 4.57 then builds a 4D bool mask and adapters' "
           "inverted prefix mask becomes all False, so the prefix is masked out and gets no gradient",
           f"{ADAPTERS_SRC}/methods/prefix_tuning.py", {"adapters": ">=1.2", "transformers": ">=4.57,<5"}),
    Expect({**A, "arch": ENC_DEC, "method": ("loreft", "noreft", "direft"),
            "gc_mode": "non_reentrant", "inputs": "unmasked"}, Outcome.MISMATCH,
           "ReFT keeps its position indices in the shared ForwardContext; the decoder overwrites them and "
           "the encoder layers recomputed in backward intervene at the decoder's positions",
           f"{ADAPTERS_SRC}/methods/reft.py", {"adapters": ">=1.2"}),
    Expect({**P, "arch": "evolla", "method": "shadow"}, Outcome.NOT_CHECKPOINTED,
           "ShadowPEFT trains a shadow network beside the frozen model: in the plain run no frozen layer is on the "
           "gradient path, so nothing in them needs saving. adapter_first: still none, and none is recomputed "
           "(checkpointing has nothing to do). gc_first: get_peft_model's enable_input_require_grads puts the frozen "
           "layers on the graph, so the checkpointed run saves their boundaries and the LM head's input (300,072 vs "
           "206,940 bytes over 3 steps); against a plain run with that hook, checkpointing does save (probed, 4.57.6)",
           f"{PEFT_SRC}/peft_model.py#L184", {"peft": ">=0.18", "transformers": ">=4.57,<5"}),
    Expect({**P, "arch": "evolla", "method": "shadow"}, Outcome.NOT_CHECKPOINTED,
           "as above, in both orders: transformers 5's gradient_checkpointing_enable calls enable_input_require_grads "
           "itself for models whose main input is input_ids (seen on 5.24.0: the same 300,072 vs 206,940 bytes)",
           f"{TF5}/modeling_utils.py#L3198", {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "arch": "zamba2", "method": ("pvera", "beft"), "inputs": "padded", "task": "causal_lm"},
           Outcome.MISMATCH,
           "the Zamba2 no-cache pad leak (the full fine-tuning entry above): Zamba2 zeroes the pad rows before in_proj, "
           "but these adapters of in_proj add a term that does not vanish at a zero input (PVeRA's sampled lambda_b * "
           "B @ eps with mean 0 and std 1; BEFT's bias), and the no-cache branch carries it through the causal conv1d "
           "into the real tokens. Both start at zero, so it shows from step 1, in float64 too. Probed: a plain run "
           "with use_cache=False is bit-identical to the checkpointed one, the post-conv mask makes them agree; the "
           "checkpoint replays PVeRA's draws exactly (seq_cls: the same leak, 2e-10)",
           f"{TF_SRC}/models/zamba2/modeling_zamba2.py#L770", {"peft": ">=0.18", "transformers": ">=4.57,<5"}),
    # PVeRA with its own generator: after the rules above (a model's own outcome, a loss of gradients)
    Expect({**P, "method": "pvera_seeded", "gc_mode": ("non_reentrant", "torch_non_reentrant")},
           (Outcome.MISMATCH, Outcome.GC_ERROR, Outcome.EQUIVALENT),
           "PVeRA samples its noise from a private torch.Generator when generator_seed is set; checkpointing restores "
           "the global RNG for the recompute, not that generator, so the recompute draws other noise than the "
           "forward (and advances it a second time): the gradients are those of another sample, from step 0 "
           "(cases/pvera_generator_seed_recompute.py, the strict guard; generator_seed since peft 0.20). On an MoE "
           "model the other noise routes tokens to other experts in the recompute, and non-reentrant checkpointing "
           "raises on the tensors' other shapes (CheckpointError); where the loss barely depends on the noise "
           "(lambda_b starts at zero; Florence-2, SAM, Splinter) the difference stays below the tolerance",
           f"{PEFT_SRC}/tuners/pvera/layer.py#L169", {"peft": ">=0.20"}, below_tolerance=True),
    Expect({**P, "method": "pvera_seeded", "gc_mode": "reentrant"},
           (Outcome.MISMATCH, Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.EQUIVALENT),
           "as above where reentrant checkpointing keeps the gradients (cases/pvera_generator_seed_recompute.py); "
           "where it loses them (the layer inputs do not require grad: the rules for the other weight methods) that "
           "shows first", f"{PEFT_SRC}/tuners/pvera/layer.py#L169", {"peft": ">=0.20"}, below_tolerance=True),
    # last: the model's own difference shows where no method-specific outcome comes first
    Expect({"arch": ("qwen3_vl", "qwen3_vl_moe")}, (Outcome.MISMATCH, Outcome.MISSING_GRAD),
           "checkpointing forces use_cache off, and without an attention mask and a cache transformers 4.57 builds "
           "Qwen3-VL's causal mask from the temporal M-RoPE row (text_position_ids = position_ids[0]), in which "
           "masking_utils finds 'packed sequences' at every image token: a block-diagonal mask, so text after the "
           "image no longer sees the prompt. The plain run keeps a cache and the full causal mask; a plain run "
           "with use_cache=False is bit-identical to the checkpointed one, with a mask both agree (probed; "
           "cases/qwen3_vl_packed_mask_without_cache.py; fixed on 5.x, likely by PR 44158). A parameter whose only "
           "path to the loss runs through the cut attention gets a zero gradient instead: missing_grad (GLoRA's "
           "vision-tower E; equivalent when both runs have use_cache off, probed)",
           f"{TF_SRC}/models/qwen3_vl/modeling_qwen3_vl.py#L831", {"transformers": ">=4.57,<5"}),
    Expect({"arch": "doge", "inputs": "unmasked"}, Outcome.MISMATCH,
           "the loss differs already at step 0 with checkpointing on, full fine-tuning too, with no attention mask "
           "passed: with a cache (use_cache on: the plain training run) create_causal_mask returns None for SDPA, "
           "leaving causality to SDPA's is_causal, but Doge hands SDPA its dynamic mask as attn_mask, so the plain "
           "run attends to later tokens; checkpointing forces use_cache off, the causal mask is built and the "
           "checkpointed run is the causal one (probed: a plain run with use_cache=False is equivalent; the mask "
           "reaching prepare_dynamic_mask is None with a cache, 4-D without). Eager attention always gets the mask "
           "(the aux_outputs recipe: equivalent)",
           f"{TF_SRC}/models/doge/modeling_doge.py#L345", {"transformers": ">=4.57,<5"},
           unless={"recipe": "aux_outputs"}),
]
