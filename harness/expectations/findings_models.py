"""Checkpointing findings of model families: layer inputs that do not require grad, embeddings a hook does not
reach, BatchNorm statistics, recompute-time errors."""
from __future__ import annotations

from ..outcomes import Outcome
from .entry import Expect
from .groups import (AUDIO_TOWER_5, BATCHNORM, BATCHNORM_5, EMBEDDINGS_NOT_CALLED, ENCODER_NOT_HOOKED, FEATURE_ENCODER_GRAD, INPUT_GRAD, KEYWORD_HIDDEN_STATES, NORM_BEFORE_LAYERS, NO_FRONT_PARAMETERS_5, NO_INPUT_EMBEDDINGS, NO_INPUT_EMBEDDINGS_5, P, PEFT_SRC, TF5, TF_SRC, TUPLE_EMBEDDINGS, TUPLE_EMBEDDINGS_5, VISION_TOWER_5, WEIGHT)

ENTRIES: list[Expect] = [
    # ---- transformers 5's activation-checkpointing options (the `full` backend's extra gc modes): they fail in the
    # checkpointed forward, so after the plain runs that fail (plain_failures.py), before the findings ----
    Expect({"gc_mode": "non_reentrant_offload"}, Outcome.GC_ERROR,
           "offload=True wraps each checkpoint in save_on_cpu(pin_memory=True, device_type=<accelerator or "
           "'cpu'>); without an accelerator torch.cpu.is_available() is True, so save_on_cpu pins and the forward "
           "raises 'pin_memory=True requires a CUDA or other accelerator backend' although the code means "
           "'nothing to copy off a device' (every release with offload, 5.17.0 to 5.25.0, bisected; PR #48590 "
           "added the cpu fallback; cases/offload_pin_memory_without_accelerator.py)", f"{TF5}/modeling_utils.py#L3160", {"transformers": ">=5.17"},
           machine="no_accelerator"),
    # ---- checkpointing findings (real bugs) ----------------------------------------------------
    # UniLoRA trains one vector shared by every adapted layer: where some layers lose their gradient (below), the
    # shared vector still gets the others' part, a value difference; where the lost part is zero anyway, none
    Expect({**P, "arch": KEYWORD_HIDDEN_STATES, "method": "unilora", "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH, Outcome.EQUIVALENT),
           "the keyword hidden_states loss of gradients (below) in the layers of one tower; UniLoRA's one shared "
           "vector keeps the other tower's part of its gradient: mismatch (Chinese-CLIP on 4.57.6), below the "
           "tolerance where the lost part is small (AltCLIP, Chinese-CLIP on 5.24.0: 5e-10)",
           f"{TF_SRC}/modeling_layers.py", {"peft": ">=0.18", "transformers": ">=4.57"}, below_tolerance=True),
    Expect({**P, "arch": "gemma3", "method": "unilora", "gc_mode": "reentrant", "order": "gc_first"},
           Outcome.EQUIVALENT,
           "the vision tower's adapters lose their gradient (the vision-language rule below), but they share "
           "UniLoRA's one vector with the text side, and Gemma3's zero-initialised, frozen projector makes the "
           "vision part of its gradient zero in the plain run too: the same values (seen on 4.57.6)",
           f"{TF_SRC}/models/gemma3/modeling_gemma3.py", {"peft": ">=0.18", "transformers": ">=4.57,<5"}),
    Expect({"arch": KEYWORD_HIDDEN_STATES, "gc_mode": "reentrant"}, (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "the encoder passes hidden_states to each layer by keyword; GradientCheckpointingLayer binds keywords into a "
           "partial, so the reentrant checkpoint gets no tensor input, runs the layer under no_grad and cuts everything "
           "in front of it from the graph (full fine-tuning: the embeddings get no gradient; gc_error when nothing "
           "else trains). Fixed in transformers 5.24.0 (equivalent there, except MLCD below)",
           f"{TF_SRC}/models/layoutlm/modeling_layoutlm.py", {"transformers": ">=4.57,<5"}),
    Expect({"arch": "wavlm", "gc_mode": "reentrant"}, Outcome.GC_ERROR,
           "WavLM hands position_bias to the next layer by keyword; GradientCheckpointingLayer binds keywords into a "
           "partial, so it is no input of the reentrant checkpoint, and the second layer returns it unchanged: its "
           "grad_fn becomes that checkpoint's own node and every recompute's backward re-enters it (without end: "
           "threads and memory run out after ~2 min; the harness's runaway guard stops it). Probed on 4.57.6 and 5.24.0 "
           "without peft or the harness; passing position_bias positionally fixes it",
           f"{TF_SRC}/modeling_layers.py", {"transformers": ">=4.57"}),   # measured on 4.57.6 and 5.24.0
    Expect({**P, "arch": NO_INPUT_EMBEDDINGS, "order": "gc_first"}, Outcome.GC_ERROR,
           "get_peft_model on a checkpointing model calls enable_input_require_grads, which raises "
           "NotImplementedError for models without get_input_embeddings: peft cannot be attached (transformers "
           "5 handles it)", f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14", "transformers": ">=4.48,<5"}),
    # LN tuning on transformers 5 (a sweep of every arch, reentrant, both orders, on 5.24.0)
    Expect({**P, "arch": ("nemotron_h", "nemo_speechlm", "bamba", "granitemoehybrid", "zamba2"), "method": "ln_tuning"},
           Outcome.GC_ERROR,
           "the Mamba2 mixer of NemotronH (and of Bamba, GraniteMoeHybrid, Zamba2: copies of it) takes a fused-kernel "
           "branch in training without a cache, which checkpointing forces: it reads self.norm.variance_epsilon "
           "directly, and LN tuning's wrapper of that norm has none (AttributeError). The plain run keeps its cache "
           "and another branch; a plain run with use_cache off fails too (the cache triage says so). Mamba2 itself "
           "takes that branch in the plain run too (error); Falcon-H1's mixer skips the norm by default (equivalent). "
           "LN tuning swept over these seven archs on 5.24.0", f"{TF5}/models/nemotron_h/modeling_nemotron_h.py#L501",
           {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "arch": BATCHNORM + BATCHNORM_5, "method": "ln_tuning", "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH),
           "the audio encoders: LN tuning adapts norms inside the conformer layers only and nothing in front of them "
           "requires grad (no token embedding to hook), so under reentrant checkpointing they get none in either "
           "order, on a model whose BatchNorm statistics also differ; PP-LCNet: it adapts the BatchNorms inside the "
           "checkpointed conv blocks, which are then recomputed and update their statistics again",
           f"{PEFT_SRC}/tuners/ln_tuning", {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "modality": "multimodal", "method": "unilora", "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH, Outcome.EQUIVALENT),
           "the vision tower's adapters lose their gradient (the rule below) but share UniLoRA's one vector with the "
           "text side: a value difference the size of the tower's part, below the tolerance where small (seen on "
           "5.24.0: CLIP-like models and Qwen3-VL)", f"{TF5}/modeling_utils.py#L3198",
           {"peft": ">=0.18", "transformers": ">=5"}, below_tolerance=True),
    Expect({**P, "modality": "multimodal", "method": "lora_experts", "gc_mode": "reentrant", "order": "gc_first"},
           Outcome.EQUIVALENT,
           "LoRA on the routed experts adapts only the language model's expert weights: the vision and audio towers "
           "route no experts, so nothing trainable sits in the towers the input-grad hook leaves out, and the text "
           "embeddings are hooked (seen on 4.57.6, Llama 4, and 5.24.0, every multimodal mixture of experts of the "
           "zoo)", f"{TF5}/modeling_utils.py#L3198", {"peft": ">=0.18"}),
    Expect({**P, "modality": "multimodal", "method": "lora_experts", "gc_mode": "reentrant", "order": "adapter_first"},
           Outcome.EQUIVALENT,
           "as above in this order too: transformers 5's gradient_checkpointing_enable hooks the text embeddings "
           "itself (seen on 5.24.0; on 4.x the adapter_first loss of the layers' gradients below holds)",
           f"{TF5}/modeling_utils.py#L3198", {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "arch": VISION_TOWER_5 + AUDIO_TOWER_5, "method": WEIGHT, "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "transformers 5's gradient_checkpointing_enable (and peft's call in gc_first order) hook only the text "
           "embeddings of a vision-language model: the adapters inside its reentrant-checkpointed vision tower (a "
           "conv patch embedding in front) get no gradient, in either order (seen on 5.24.0 with DoRA and PSOFT); "
           "likewise an audio tower without input embeddings (GLM-ASR's, Fun-ASR-Nano's; seen on 5.24.0, every "
           "weight method)",
           f"{TF5}/modeling_utils.py#L3198", {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "arch": ("cosmos3_omni", "glm5_next", "glm_ocr", "qwen3_5", "qwen3_5_moe", "qwen3_omni_moe_thinker",
                          "qwen3_vl", "qwen3_vl_moe", "radio", "speech_to_text", "nemotron_asr_streaming_encoder",
                          "nemotron3_5_asr", "nemotron_asr_streaming", "hunyuan_vl", "hy_v4_vl", "cosmos3_edge")
            + AUDIO_TOWER_5, "method": "ln_tuning", "gc_mode": "reentrant"}, (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "LN tuning adapts the norms inside the checkpointed blocks (a vision tower's, as the rule above; an audio "
           "encoder's, behind its subsampling, which the weight methods' generic targets adapt on the Nemotron ASR "
           "encoders but LN tuning does not) and nothing in front of them requires grad: "
           "under reentrant checkpointing they get no gradient in either order (seen on 5.24.0; RADIO: the weight "
           "methods' generic targets adapt its patch_projection, LN tuning has no norm in front to adapt; so do "
           "Cosmos3-Edge's, whose Linear patch embedding keeps the weight methods' gradients; the audio towers without "
           "input embeddings, above)",
           f"{TF5}/modeling_utils.py", {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "arch": "pp_lcnet", "method": "ln_tuning", "gc_mode": "non_reentrant"}, Outcome.MISMATCH,
           "LN tuning adapts the BatchNorms inside PP-LCNet's checkpointed conv blocks, so (unlike with LoRA, below) "
           "they are recomputed and update their running statistics a second time: the final running_mean differs "
           "(seen on 5.24.0, both orders; reentrant: the entry above)",
           f"{PEFT_SRC}/tuners/ln_tuning", {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "arch": "pp_lcnet"}, Outcome.NOT_CHECKPOINTED,
           "LoRA adapts only linear layers outside the checkpointed conv blocks of this convnet: nothing inside "
           "needs a gradient, so nothing is recomputed", f"{PEFT_SRC}/tuners/lora/model.py",
           {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "arch": TUPLE_EMBEDDINGS, "order": "gc_first"}, Outcome.GC_ERROR,
           "enable_input_require_grads' hook calls output.requires_grad_(), but these patch embeddings return "
           "a tuple (embeddings, spatial shape): the first checkpointed forward raises",
           f"{TF_SRC}/modeling_utils.py#L2856", {"transformers": ">=4.48,<5"}),
    Expect({**P, "arch": TUPLE_EMBEDDINGS_5, "order": "gc_first"}, Outcome.GC_ERROR,
           "as above, still on transformers 5 for these (beit and internvl_vision are fixed there)",
           f"{TF_SRC}/modeling_utils.py#L2856", {"transformers": ">=5"}),
    Expect({"arch": "git", "task": "feature"}, Outcome.GC_ERROR,
           "GitModel creates a cache in training (use_cache defaults on; the switch turning it off under "
           "checkpointing skips GitModel, which has no gradient_checkpointing attribute) and GitEncoder hands it to "
           "each layer positionally, where GradientCheckpointingLayer cannot drop it: the recompute appends the keys "
           "a second time and the attention raises in backward, full fine-tuning included "
           "(cases/git_cache_positional_recompute.py; from 5.4.0, bisected)",
           f"{TF5}/models/git/modeling_git.py#L314",
           {"transformers": ">=5.4"}),
    Expect({**P, "arch": ("git", "udop"),
            "method": ("trainable_tokens", "prompt_tuning", "p_tuning", "multitask_prompt_tuning", "cpt")},
           Outcome.EQUIVALENT,
           "the model's embeddings add in place to a tensor with a grad_fn, not to the hooked leaf below: trainable "
           "tokens' wrapped embedding output has one, and the prompt methods hand the model inputs_embeds "
           "concatenated with their virtual tokens (seen on 4.57.6 and 5.24.0; UDOP's plain runs fail)",
           f"{TF_SRC}/models/git/modeling_git.py", {"peft": ">=0.14", "transformers": ">=4.57"}),
    Expect({**P, "arch": ("git", "blip", "udop"), "order": "gc_first"}, Outcome.GC_ERROR,
           "enable_input_require_grads makes the word embeddings output a leaf requiring grad and the "
           "model's embeddings then add to it in place (the DeBERTa bug of transformers PR #35898)",
           f"{TF_SRC}/models/git/modeling_git.py", {"transformers": ">=4.57"}),
    Expect({**P, "arch": "kosmos-2", "order": "gc_first"}, Outcome.GC_ERROR,
           "the same leaf, written into: Kosmos-2's text embedding puts the image features into the word "
           "embeddings output in place (`inputs_embeds[img_input_mask] = image_embeds`), which peft's "
           "enable_input_require_grads has made a leaf requiring grad: every method, both gc modes (seen on 4.57.6 "
           "and 5.24.0; not in adapter_first, where nothing hooks it: its main input is pixel_values)",
           f"{TF_SRC}/models/kosmos2/modeling_kosmos2.py#L971", {"transformers": ">=4.57"}),
    Expect({**P, "arch": ("git", "blip", "udop"), "order": "adapter_first"}, Outcome.GC_ERROR,
           "as above: transformers 5's gradient_checkpointing_enable calls enable_input_require_grads itself for "
           "models whose main input is input_ids, so the in-place add on the grad-requiring embedding output "
           "happens in this order too, on every task (GIT's modeling_git.py#L110, BLIP's modeling_blip_text.py#L86)",
           f"{TF5}/modeling_utils.py#L3198", {"transformers": ">=5"}),
    Expect({**P, "arch": "udop", "order": "adapter_first"}, Outcome.GC_ERROR,
           "as above, on every task of UDOP (seen with the LoRA family once the harness fed its decoder under "
           "peft's wrapper)", f"{TF_SRC}/models/udop/modeling_udop.py", {"transformers": ">=5"}),
    Expect({**P, "arch": ("lfm3_vl_vision", "lfm3_vl", "siglip2", "lfm2_vl"), "method": ("adalora", "c3a", "gralora"),
            "order": "gc_first"},
           Outcome.GC_ERROR,
           "the same in-place add on the hooked leaf, made by the adapter: LFM3-VL's vision tower's input embeddings "
           "are its patch embedding, a Linear the generic targets adapt; enable_input_require_grads hooked it before "
           "peft wrapped it, so the base layer's output is a leaf requiring grad, to which AdaLoRA, C3A and GraLoRA "
           "add in place (`result += ...`; LoRA adds out of place); both gc modes, every task (seen on 5.24.0; the "
           "same tower inside the whole LFM3-VL model, SigLIP2's inside Siglip2Model and LFM2-VL's the same, "
           "peft/tuners/c3a/layer.py:199)",
           f"{PEFT_SRC}/tuners/adalora/layer.py#L195", {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({"backend": "full", "arch": ("deberta-v2", "sew-d"), "gc_mode": "reentrant"}, Outcome.GC_ERROR,
           "the layer-normed relative embeddings (below) on transformers 5 too (seen on 5.24.0)",
           f"{TF_SRC}/models/deberta_v2/modeling_deberta_v2.py#L601", {"transformers": ">=5"}),
    Expect({"backend": "full", "arch": ("deberta-v2", "whisper", "sew-d", "xlm-prophetnet"), "gc_mode": "reentrant"},
           Outcome.GC_ERROR,
           "a tensor computed once outside the layers and handed to each checkpointed layer (DeBERTa-v2's and SEW-D's "
           "layer-normed relative embeddings, Whisper's positions; XLM-ProphetNet's encoder output, which its "
           "decoder hands each checkpointed layer by keyword, so reentrant checkpointing does not cut it off: the "
           "first decoder layer's backward frees the encoder's graph; ProphetNet passes it positionally) "
           "has its graph freed by the first reentrant backward: 'Trying to backward through the graph a second "
           "time' when it is trained",
           "https://pytorch.org/docs/stable/checkpoint.html", {"transformers": ">=4.57,<5"}),
    Expect({"arch": ("gpt_bigcode", "swiftformer")}, Outcome.NOT_CHECKPOINTED,
           "gradient_checkpointing_enable is accepted but no layer is recomputed: the flag is not wired into "
           "the forward", f"{TF_SRC}/models", {"transformers": ">=4.57,<5"}),
    Expect({"backend": "full", "arch": ("mlcd", "mlcd_vision_model"), "gc_mode": "reentrant"}, Outcome.GC_ERROR,
           "'Trying to backward through the graph a second time' when MLCD is fully fine-tuned under reentrant "
           "checkpointing (a grad-requiring tensor reused by several reentrant checkpoints; which: not analysed)",
           "https://github.com/huggingface/transformers/blob/main/src/transformers/models/mlcd/modeling_mlcd.py",
           {"transformers": ">=5"}),
    Expect({**P, "arch": BATCHNORM + BATCHNORM_5, "method": (WEIGHT, "ln_tuning", "pvera_seeded"),
            "gc_mode": "reentrant", "order": "adapter_first"}, (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH),
           "the reentrant adapter_first loss of gradients (below) on a model whose BatchNorm statistics also differ",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14"}),
    Expect({**P, "arch": tuple(a for a in BATCHNORM + BATCHNORM_5 if a in NO_INPUT_EMBEDDINGS_5),
            "method": (WEIGHT, "pvera_seeded"), "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH),
           "transformers 5's loss of gradients in either order for models without input embeddings (below) on a model "
           "whose BatchNorm statistics also differ", "https://github.com/huggingface/transformers/pull/42558",
           {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({"arch": BATCHNORM}, Outcome.MISMATCH,
           "BatchNorm inside a checkpointed layer updates its running statistics again during the recompute "
           "(running_mean/var and num_batches_tracked differ in the final state)",
           "https://pytorch.org/docs/stable/checkpoint.html", {"transformers": ">=4.57"}),
    Expect({"arch": BATCHNORM_5}, Outcome.MISMATCH,
           "BatchNorm statistics updated again during the recompute (model types surveyed on transformers 5; "
           "swiftformer is checkpointed at all only there)",
           "https://pytorch.org/docs/stable/checkpoint.html", {"transformers": ">=5"}),
    Expect({**P, "arch": ("nemotron3_5_transcribe_asr_audio", "nemotron_asr_streaming_encoder", "nemotron3_5_asr",
                          "nemotron_asr_streaming"),
            "method": INPUT_GRAD, "gc_mode": "reentrant"}, Outcome.EQUIVALENT,
           "the generic targets adapt the encoder's subsampling.linear, in front of the first checkpointed layer "
           "(probed on 5.24.0): its output requires grad, so reentrant checkpointing keeps the gradients where the "
           "rule for audio models predicts them lost (seen adapter_first: RoAd, LoRA, DoRA, rsLoRA, PSOFT)",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "arch": "recurrent_gemma", "method": "vblora", "gc_mode": "reentrant", "order": "adapter_first"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "peft's reentrant adapter_first loss of gradients (below) comes first here", f"{PEFT_SRC}/peft_model.py",
           {"peft": ">=0.18", "transformers": ">=4.57,<5"}),
    Expect({"arch": ("glm4v", "glm4v_moe", "imagegpt")}, Outcome.GC_ERROR,
           "the model's checkpointed path raises (GLM-4V and GLM-4.5V: 3-D rope position ids expanded as 2-D; "
           "imagegpt: a None added in the checkpointed branch)", f"{TF_SRC}/models", {"transformers": ">=4.57,<5"}),
    Expect({"arch": ("glm4v_text", "glm4v_moe_text"), "inputs": "unmasked"}, Outcome.GC_ERROR,
           "as GLM-4V: with no mask passed the checkpointed forward (use_cache forced off) expands the 3-D rope "
           "position ids as 2-D and raises, full fine-tuning too (seen on 4.57.6, every gc mode and order)",
           f"{TF_SRC}/models/glm4v/modeling_glm4v.py", {"transformers": ">=4.57,<5"}),
    Expect({"backend": "full", "arch": "pvt_v2", "gc_mode": "reentrant"}, (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "PVTv2 checkpoints each encoder stage with its patch embedding inside, so the first stage's reentrant "
           "checkpoint gets only the pixels (no grad) as input: the parameters inside it get no gradient (feature "
           "loss: nothing requires grad), full fine-tuning included (seen on 4.57.6 and 5.24.0)",
           f"{TF_SRC}/models/pvt_v2/modeling_pvt_v2.py", {"transformers": ">=4.57"}),
    Expect({"backend": "full", "arch": NO_FRONT_PARAMETERS_5, "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "Fun-ASR-Nano's audio encoder has no parameter in front of its first checkpointed layer (stacked mel "
           "frames, scaled, plus fixed sinusoidal positions) and no input embeddings to hook: under reentrant "
           "checkpointing no layer of it gets a gradient, full fine-tuning included (the audio LM: missing_grad; "
           "the encoder alone: gc_error, its loss has no grad_fn; seen on 5.24.0, both orders; "
           "cases/fun_asr_nano_audio_encoder_reentrant.py)",
           f"{TF5}/models/fun_asr_nano/modeling_fun_asr_nano.py#L318", {"transformers": ">=5"}),
    Expect({"backend": "full", "arch": "zamba2", "inputs": "padded", "recipe": "aux_outputs"},
           (Outcome.EQUIVALENT, Outcome.MISMATCH),
           "the no-cache branch of the entry below, under the recipe's loss on attentions and hidden states: the "
           "conv1d bias's gradient is larger there and the same difference (2.8e-6) falls within rtol x "
           "its scale; its float64 rerun cannot settle it (the plain float64 run is NaN from step 0 with eager "
           "attention and pads). The loop's strict entry and cases/zamba2_padding_without_cache.py guard the "
           "mechanism (seen on 4.57.6)",
           f"{TF_SRC}/models/zamba2/modeling_zamba2.py#L770", {"transformers": ">=4.57,<5"}, below_tolerance=True),
    Expect({"backend": "full", "arch": "zamba2", "inputs": "padded"}, Outcome.MISMATCH,
           "not recompute: checkpointing forces use_cache off, and Zamba2MambaMixer.torch_forward zeroes the pad "
           "positions after the causal conv1d only when a cache exists (L761-764); the no-cache branch (L770) lets "
           "silu(conv1d.bias) at the pads into the SSM scan of the real tokens (Mamba2's torch path and Zamba2's "
           "CUDA path mask it). The bias starts at zero, so it shows once full fine-tuning has moved it (step 1-2, "
           "4e-6 with the classification head, 6e-7 with the LM head, confirmed in float64). Probed: a plain run "
           "with use_cache=False is bit-identical to the checkpointed one; the post-conv mask added to the no-cache "
           "branch makes them agree (seen on 4.57.6)",
           f"{TF_SRC}/models/zamba2/modeling_zamba2.py#L770", {"transformers": ">=4.57,<5"}),
    Expect({"arch": "recurrent_gemma", "gc_mode": "non_reentrant"}, Outcome.GC_ERROR,
           "RecurrentGemma's recompute sees other tensor metadata than its forward (non-reentrant checkpointing "
           "checks it); reentrant checkpointing does not check, and trains equivalently where it gets gradients",
           f"{TF_SRC}/models/recurrent_gemma/modeling_recurrent_gemma.py", {"transformers": ">=4.57,<5"}),
    Expect({**P, "arch": "xlm-prophetnet", "method": ("ln_tuning", "trainable_tokens"), "gc_mode": "reentrant"},
           Outcome.GC_ERROR,
           "XLM-ProphetNet's freed-tensor error under reentrant checkpointing (below) in both orders: LN tuning's "
           "adapted norm in front of the layers, and trainable tokens' wrapped embedding, make the layers' input "
           "require grad whatever the order (seen on 4.57.6, every task)",
           f"{TF_SRC}/models/deprecated/xlm_prophetnet/modeling_xlm_prophetnet.py#L1554",
           {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": "deberta-v2", "method": "ln_tuning", "gc_mode": "reentrant"}, Outcome.GC_ERROR,
           "LN tuning trains the encoder's LayerNorm, which DeBERTa-v2 applies to the relative position embeddings "
           "once per forward (get_rel_embedding) and hands to every layer: the full fine-tuning error below ('Trying "
           "to backward through the graph a second time'), in both orders (seen on 4.57.6 and 5.24.0)",
           f"{TF_SRC}/models/deberta_v2/modeling_deberta_v2.py#L601", {"peft": ">=0.14"}),
    Expect({**P, "method": "ln_tuning", "arch": NORM_BEFORE_LAYERS, "gc_mode": "reentrant"}, Outcome.EQUIVALENT,
           "LN tuning adapts the normalisation in front of the first checkpointed layer; its grad-requiring output "
           "is the layers' input, so reentrant checkpointing works whatever enable_input_require_grads did (also on "
           "transformers 5, where CANINE has no input embeddings to hook: seen there in both orders)",
           f"{PEFT_SRC}/tuners/ln_tuning", {"peft": ">=0.14"}, unless={"recipe": "switch*"}),
    # UniLoRA again (see below_tolerance)
    Expect({**P, "arch": EMBEDDINGS_NOT_CALLED + ENCODER_NOT_HOOKED, "method": "unilora", "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH, Outcome.EQUIVALENT),
           "the encoder's adapters lose their gradient (the rules below) but share UniLoRA's one vector with the "
           "decoder's: a value difference the size of the encoder's part, below the tolerance where that is small "
           "(SeamlessM4T: <= 3e-6; Whisper: a mismatch of 2e-6; seen on 4.57.6)",
           f"{TF_SRC}/modeling_utils.py#L2856", {"peft": ">=0.18", "transformers": ">=4.57,<5"}, below_tolerance=True),
    Expect({**P, "arch": "speech_to_text", "method": "unilora", "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH, Outcome.EQUIVALENT),
           "as above on transformers 5, where Speech2Text's encoder is still not hooked (below): 5e-10 in gc_first "
           "(seen on 5.24.0)", f"{TF5}/modeling_utils.py#L2147", {"peft": ">=0.18", "transformers": ">=5"},
           below_tolerance=True),
    Expect({**P, "arch": EMBEDDINGS_NOT_CALLED, "method": (WEIGHT, "ln_tuning"), "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "get_input_embeddings() returns a module the encoder never calls (BART's `shared`; the encoder calls its "
           "own embed_tokens sharing the weight), so enable_input_require_grads' hook never fires: with reentrant "
           "checkpointing no layer input requires grad, in either order (fixed in transformers 5)",
           "https://github.com/huggingface/transformers/pull/41821", {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": ENCODER_NOT_HOOKED, "method": (WEIGHT, "ln_tuning"), "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "get_input_embeddings() is the decoder's token embedding: enable_input_require_grads hooks only that, and "
           "the encoder (audio / pixel input) feeds its reentrant-checkpointed layers an input that requires no grad: "
           "its adapters get none, in either order", f"{TF_SRC}/modeling_utils.py#L2856",
           {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": "speech_to_text", "method": (WEIGHT, "ln_tuning"), "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "transformers 5's enable_input_require_grads hooks the input embeddings of every sub-model, which fixes "
           "Whisper, Moonshine and VisionEncoderDecoder (their encoders expose their stem), but Speech2TextEncoder "
           "exposes none (its Conv1dSubsampler is neither embed_tokens nor an _input_embed_layer): its "
           "reentrant-checkpointed layers still see an input that requires no grad, in either order (seen on 5.24.0)",
           f"{TF5}/modeling_utils.py#L2147", {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({**P, "arch": "xlm-prophetnet", "gc_mode": "reentrant", "order": "gc_first"}, Outcome.GC_ERROR,
           "'Trying to backward through the graph a second time' under reentrant checkpointing in the order where "
           "get_peft_model's enable_input_require_grads makes the embedding output, so the encoder output, require "
           "grad: the decoder hands the encoder output to each checkpointed layer by keyword "
           "(encoder_hidden_states=), which reentrant checkpointing does not cut off, so the first decoder layer's "
           "backward frees the encoder's graph and the next one backs through it again (probed: passed "
           "positionally, as ProphetNet does at modeling_prophetnet.py#L1333, the cells are equivalent)",
           f"{TF_SRC}/models/deprecated/xlm_prophetnet/modeling_xlm_prophetnet.py#L1554",
           {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": "xlm-prophetnet", "method": "multitask_prompt_tuning", "gc_mode": "reentrant",
            "task": "seq2seq_lm"}, Outcome.GC_ERROR,
           "the same error in the other order too: for a seq2seq LM, peft prepends multitask prompt tuning's virtual "
           "tokens to the decoder's input embeddings as well (peft_model.py#L2544), so a decoder layer's input "
           "requires grad whatever enable_input_require_grads did (seen on 4.57.6, probed)",
           f"{PEFT_SRC}/peft_model.py#L2544", {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": "xlm-prophetnet", "method": ("prompt_tuning", "p_tuning"), "gc_mode": "reentrant",
            "order": "adapter_first", "task": "seq2seq_lm"}, Outcome.GC_ERROR,
           "peft gives prompt tuning's / p-tuning's virtual tokens to the encoder only (peft_model.py#L2495), and "
           "XLM-ProphetNet's decoder gets the encoder output only by keyword (above), which reentrant checkpointing "
           "does not track: with nothing hooked in this order, no checkpointed decoder layer's input requires grad, "
           "so the loss has none ('element 0 of tensors does not require grad'). Probed: every decoder layer's "
           "positional input requires no grad, encoder_hidden_states does (seen on 4.57.6)",
           f"{PEFT_SRC}/peft_model.py#L2495", {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": "xlm-prophetnet", "method": ("prompt_tuning", "p_tuning"), "gc_mode": "reentrant",
            "order": "adapter_first", "task": "feature"}, Outcome.MISMATCH,
           "the same untracked keyword: the feature loss reads the encoder output directly too, so the virtual tokens "
           "keep that part of their gradient and lose the part through the decoder's cross-attention, a value "
           "difference (rel ~1e-2 at step 0, confirmed in float64). It passed as `equivalent` while the feature "
           "loss was the mean square of normalised outputs (seen on 4.57.6 once it became a random projection)",
           f"{TF_SRC}/models/deprecated/xlm_prophetnet/modeling_xlm_prophetnet.py#L1554",
           {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": FEATURE_ENCODER_GRAD, "method": INPUT_GRAD, "gc_mode": "reentrant"},
           Outcome.EQUIVALENT,
           "the conv feature encoder of these speech models sets hidden_states.requires_grad = True itself while its "
           "_requires_grad flag is set (peft freezes the weights, not the flag): the checkpointed layers see a "
           "grad-requiring input whatever enable_input_require_grads did (probed: with the flag off they lose it)",
           f"{TF_SRC}/models/wav2vec2/modeling_wav2vec2.py", {"peft": ">=0.14"}),
    Expect({**P, "arch": ("roc_bert", "rembert"), "method": "boft", "order": "gc_first"}, Outcome.NOT_CHECKPOINTED,
           "more memory with checkpointing, from peft's input-grad hook rather than the recompute: in gc_first order "
           "get_peft_model calls enable_input_require_grads, so BOFT on the front projection (RoCBert's "
           "map_inputs_layer, 576 inputs: the 512-wide shape embedding is not shrunk; RemBERT's "
           "embedding_hidden_mapping_in) saves its rotation, built anew each forward, for the input's gradient: "
           "+1.3 MB per step on RoCBert against ~0.2 MB the two tiny checkpointed layers save (probed per saved "
           "tensor; a plain run with the hook saves more still). At real sizes the layers' savings likely dominate "
           "(not measured)",
           f"{PEFT_SRC}/tuners/boft/layer.py#L640", {"peft": ">=0.14", "transformers": ">=4.57,<5"}),
    Expect({**P, "arch": "rembert", "method": "boft"}, Outcome.NOT_CHECKPOINTED,
           "as above (RemBERT; RoCBert is not in transformers 5), in both orders: transformers 5's gradient_checkpointing_enable calls enable_input_require_grads "
           "itself for models whose main input is input_ids (seen on 5.24.0)",
           f"{TF5}/modeling_utils.py#L3198", {"peft": ">=0.14", "transformers": ">=5"}),
]


# outcomes a cell may come out as besides its expected ones (expectations.ALSO): which cell shows them depends on what
# its process ran before
ALSO: list[Expect] = [
    Expect({"arch": "vits"}, Outcome.NONDETERMINISTIC,
           "VITS's WaveNet layers call a @torch.jit.script function (fused_add_tanh_sigmoid_multiply): TorchScript's "
           "profiling executor runs its first calls in a process unoptimised and then a specialised graph whose "
           "results differ in the last bits, so the first VITS training of a process is not reproduced by the next "
           "(MiSS's gradients by 3e-5 at step 1); with torch._C._set_graph_executor_optimize(False), or after one "
           "forward of any VITS model, every run reproduces. The cell that trains VITS first in a process may come "
           "out nondeterministic (probed on 4.57.6 through transformers_peft)",
           f"{TF_SRC}/models/vits/modeling_vits.py#L84", {"transformers": ">=4.48"}),
]

