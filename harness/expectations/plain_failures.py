"""The plain run itself fails inside the library: not checkpointing findings."""
from __future__ import annotations

from ..outcomes import Outcome
from .entry import Expect
from .groups import (A, ADAPTERS_SRC, TF_SRC, ENC_DEC, FUSED_EXPERTS_5, FUSED_QKV, GQA, P, PEFT_SRC, PREFIX_CACHE_ARCHS, TF5)

ENTRIES: list[Expect] = [
    # with the aux_outputs recipe's settings (eager attention, attentions and router logits returned); the heads that
    # add no load-balancing loss of their own train (seen on 4.57.6 and 5.24.0, full fine-tuning over the zoo)
    Expect({"recipe": "aux_outputs", "arch": "dbrx"}, Outcome.ERROR,
           "with the recipe's settings the plain run fails in transformers: DBRX's eager attention clamps its qkv "
           "with clip_qkv None ('At least one of min or max must not be None'; seen on 4.57.6)",
           f"{TF_SRC}/models/dbrx/modeling_dbrx.py", {"transformers": "<5"}),
    Expect({"recipe": "aux_outputs", "arch": "pegasus_x"}, Outcome.ERROR,
           "PEGASUS-X's encoder appends layer_outputs[2] to the returned attentions also for a layer LayerDrop "
           "skipped, whose outputs are (None, None): IndexError without checkpointing (the tiny model keeps LayerDrop "
           "on; seen on 4.57.6)", f"{TF_SRC}/models/pegasus_x/modeling_pegasus_x.py#L1157", {"transformers": "<5"}),
    Expect({"recipe": "aux_outputs", "arch": "internvl_vision"}, Outcome.ERROR,
           "transformers' check_model_inputs decorator raises when output_attentions reaches a forward without "
           "**kwargs, and InternVLVisionModel.forward has none ('Missing `**kwargs` in the signature'; seen on "
           "4.57.6)", f"{TF_SRC}/utils/generic.py#L1082", {"transformers": "<5"}),
    Expect({"recipe": "aux_outputs", "arch": ("doge", "nllb-moe"), "task": ("causal_lm", "seq2seq_lm")},
           Outcome.ERROR,
           "with the recipe's settings the language-model head's load-balancing loss fails without checkpointing: "
           "Doge adds it as `aux_loss.to(...)` where the loss function returned the int 0; NLLB-MoE's multiplies "
           "router probabilities and expert counts of other shapes (seen on 4.57.6; their heads without a "
           "load-balancing loss, sequence classification and the base model, train)",
           f"{TF_SRC}/models/doge/modeling_doge.py#L795", {"transformers": "<5"}),
    Expect({"recipe": "aux_outputs", "arch": ("flint", "nllb-moe"), "task": ("causal_lm", "seq2seq_lm")},
           Outcome.ERROR,
           "with the recipe's settings the language-model head's load-balancing loss fails in transformers 5: it "
           "indexes the router logits it collected, an empty tuple ('tuple index out of range' at gate_logits[0]; "
           "seen on 5.24.0; the base model without a head trains)",
           f"{TF5}/models/nllb_moe/modeling_nllb_moe.py#L975", {"transformers": ">=5"}),
    Expect({"recipe": "aux_outputs", "arch": ("nemo_speechlm", "nemotron3_5_transcribe_audio",
                                               "nemotron3_5_transcribe_asr_audio", "nemotron3_diarization",
                                               "nemotron3_diarization_audio")}, Outcome.ERROR,
           "with the recipe's settings the plain run fails in transformers 5: the audio encoder of NeMo SpeechLM "
           "(models/nemotron3_5_transcribe; the transcription and diarization audio towers run the same "
           "eager_attention_forward) multiplies 4-head attention weights with 8-head values ('The size of tensor a "
           "(4) must match the size of tensor b (8)'; seen on 5.24.0)",
           f"{TF5}/models/nemotron3_5_transcribe/modeling_nemotron3_5_transcribe.py#L242", {"transformers": ">=5"}),
    Expect({"recipe": "aux_outputs", "arch": "evolla"}, Outcome.ERROR,
           "with the recipe's eager attention the plain run fails in transformers: Evolla's language model has grouped "
           "key/value heads, and the module's eager_attention_forward, copied from its SaProt protein encoder, has no "
           "repeat_kv ('The size of tensor a (4) must match the size of tensor b (2)'; seen on 4.57.6; 5.24.0 repeats "
           "them there)", f"{TF_SRC}/models/evolla/modeling_evolla.py#L234", {"transformers": "<5"}),
    Expect({"recipe": "aux_outputs", "arch": ("prophetnet", "xlm-prophetnet"), "inputs": "padded"}, Outcome.ERROR,
           "ProphetNetAttention returns as its attentions the scores before the softmax with the additive mask in them "
           "(attn_weights_reshaped = attn_weights ahead of the softmax; its docstring says after it): a padded "
           "batch's encoder and cross attentions hold the float32 minimum at the pads, and a loss on them (the "
           "recipe's, as distillation's) is NaN from step 0 without checkpointing (seen on 4.57.6 and 5.24.0; "
           "batches without pads train)", f"{TF_SRC}/models/prophetnet/modeling_prophetnet.py#L512",
           {"transformers": ">=4.57"}),
    Expect({"recipe": "aux_outputs", "arch": ("nemotron3_5_asr", "nemotron_asr_streaming",
                                               "nemotron_asr_streaming_encoder")}, Outcome.ERROR,
           "with the recipe's eager attention the plain run is NaN from its first forward: the streaming encoder's "
           "attention masks its positional scores with attention_mask.logical_not(), written for the boolean mask "
           "SDPA gets; eager attention gets the additive float mask (0 where a key is attended), so every attended "
           "key is filled with -inf and every softmax row is NaN (seen on 5.24.0; Parakeet's copy fills the float "
           "minimum there instead, finite)",
           f"{TF5}/models/nemotron_asr_streaming/modeling_nemotron_asr_streaming.py#L615", {"transformers": ">=5"}),
    Expect({"backend": "full", "arch": "gemma3n_text", "inputs": "padded"}, Outcome.ERROR,
           "not checkpointing: the plain run's gradients are NaN from step 0. A model built by transformers has a "
           "zero embedding row for the pad id (padding_idx); SDPA gives a query row whose keys are all masked (a "
           "left pad under the causal mask) a zero output, so the pads' hidden states stay exactly zero through "
           "every layer, and AltUp takes the target magnitude as mean(h ** 2) ** 0.5 with no epsilon: sqrt(0), whose "
           "gradient is infinite, times the loss's zero there. Eager attention (the aux_outputs recipe) spreads such "
           "a row over every key, the pads leave zero and the run trains (probed: the last hidden state at the pads "
           "is 0 under SDPA, about 6 under eager; the peft cells' plain runs: the calibration table; seen on 4.57.6 "
           "and 5.24.0)",
           f"{TF_SRC}/models/gemma3n/modeling_gemma3n.py#L1699", {"transformers": ">=4.57"},
           unless={"recipe": "aux_outputs"}),
    Expect({"arch": "deberta", "recipe": "autocast"}, Outcome.ERROR,
           "DeBERTa's attention fills masked scores with torch.finfo(query_layer.dtype).min, the float32 minimum, "
           "into bfloat16 scores under autocast ('value cannot be converted to type c10::BFloat16 without "
           "overflow'), without checkpointing (4.48.3 to 5.24.0; DeBERTa-v2 takes the scores' own dtype)",
           f"{TF_SRC}/models/deberta/modeling_deberta.py#L276", {"transformers": ">=4.48"}),
    Expect({"backend": "transformers_peft", "method": "adalora"}, Outcome.ERROR,
           "transformers' add_adapter passes low_cpu_mem_usage to the tuner, which peft 0.14's AdaLoraModel does not "
           "take (TypeError), without checkpointing", f"{PEFT_SRC}/tuners/adalora/model.py", {"peft": "<0.15"}),
    Expect({"backend": "transformers_peft", "recipe": ("switch", "switch_frozen"),
            "method": ("randlora", "vera", "vblora")},
           Outcome.ERROR,
           "a second adapter of a method with tensors shared across layers, added through transformers' add_adapter, "
           "leaves the first without them: RandLoRA's random bases (KeyError on the first adapter's name in "
           "get_scaled_bases; peft 0.21.2), VeRA's projections and VB-LoRA's vector bank (peft 0.14, which "
           "add_adapter later refuses for them), without checkpointing; get_peft_model's add_adapter keeps them",
           f"{PEFT_SRC}/tuners/randlora/layer.py#L272", {"peft": ">=0.14"}),
    Expect({"backend": "transformers_peft", "arch": "llama4_text",
            "method": ("adalora", "beft", "deft", "delora", "dora", "fourierft", "hira", "ia3", "lily", "loha", "lokr",
                       "lora", "lora_mts", "lora_bias", "peanut", "psoft", "randlora", "rslora", "shira",
                       "supertuning", "waveft")}, Outcome.ERROR,
           "Llama 4's router is an nn.Linear subclass whose forward returns a tuple (scores, logits): the linear "
           "targets (as 'all-linear' picks them) include it, and the adapted layer adds its delta to a tuple ('tuple' "
           "object has no attribute 'dtype', 'can only concatenate tuple'; SHiRA's rank is too large for the router's "
           "4 outputs), without checkpointing (the peft backend's task wrapper fails on this model before; seen on "
           "4.57.6)", f"{TF_SRC}/models/llama4/modeling_llama4.py#L159", {"transformers": "<5"}),
    Expect({"backend": "transformers_peft", "arch": "llama4_text", "method": "glora"}, Outcome.UNSUPPORTED,
           "GLoRA refuses Llama 4's router ('Target module Llama4Router ... is not supported')",
           f"{PEFT_SRC}/tuners/glora", {"transformers": "<5"}),
    Expect({**P, "arch": "qwen3_moe", "method": "alora"}, Outcome.ERROR,
           "aLoRA on a model whose LoRA targets include token-routed expert layers fails without checkpointing: the "
           "invocation mask is per sequence, the expert sees a subset of the tokens ('The shape of the mask [2] at "
           "index 0 does not match'; seen on 4.57.6; 5's fused experts are no LoRA target)",
           f"{PEFT_SRC}/tuners/lora/variants.py", {"peft": ">=0.18", "transformers": "<5"}),
    Expect({"backend": ("peft", "transformers_peft"), "method": "lora_experts"}, Outcome.UNSUPPORTED,
           "target_parameters adapts 3-D expert weights; a mixture of experts that keeps its experts as nn.Linear "
           "modules (transformers 4's Mixtral, Qwen3-MoE, ...) has none (GPT-OSS and Llama 4 have them, Llama 4's "
           "vision-language model in its language model)",
           f"{PEFT_SRC}/tuners/lora/layer.py", {"transformers": "<5"},
           unless={"arch": ("gpt_oss", "llama4_text", "llama4")}),
    # ---- with a training recipe's settings (harness/train.py RECIPES) --------------------------
    Expect({**A, "recipe": "compose_stack", "arch": "llama", "method": ("lora", "dora", "unipelt")}, Outcome.ERROR,
           "adapters' Stack of two LoRAs feeds the first LoRA's output to the second as its input, which only fits a "
           "square projection: Llama's k/v projections (32 -> 16, grouped-query attention) fail without "
           "checkpointing ('mat1 and mat2 shapes cannot be multiplied (20x16 and 32x4)'; seen on 4.57.6)",
           f"{ADAPTERS_SRC}/methods/lora.py", {"adapters": ">=1.2"}),
    Expect({**A, "recipe": "compose_stack", "arch": ("t5", "bart"), "method": ("lora", "vera")}, Outcome.ERROR,
           "adapters' Stack of two LoRAs on its encoder-decoder models trains nothing without checkpointing: adapters "
           "warns 'There are adapters available but none are activated for the forward pass' and no LoRA gets a "
           "gradient (a vacuous baseline; seen on 4.57.6)", f"{ADAPTERS_SRC}/methods/lora.py", {"adapters": ">=1.2"}),
    Expect({**A, "recipe": "compose_fuse", "arch": ("gpt2", "llama", "t5", "bart"),
            "method": ("par_bn", "scaled_par_bn")}, Outcome.ERROR,
           "AdapterFusion of two parallel bottlenecks: the fusion layer, the only thing train_adapter_fusion trains, "
           "gets no non-zero gradient in plain training (a vacuous baseline; BERT's does; seen on 4.57.6); under a "
           "head, which trains beside it, the cell is `safe, partly`",
           f"{ADAPTERS_SRC}/methods/bottleneck.py", {"adapters": ">=1.2"}, unless={"task": ("seq_cls", "token_cls")}),
    Expect({**P, "recipe": "compose_active", "arch": "llama", "method": "c3a"}, Outcome.ERROR,
           "two active C3A adapters on Llama fail without checkpointing ('shape [2, 10, 4, 8] is invalid for input "
           "of size 320': the grouped-query k/v projection; seen on 4.57.6)", f"{PEFT_SRC}/tuners/c3a",
           {"peft": ">=0.18"}),
    Expect({**P, "recipe": ("compose_active", "switch", "switch_frozen"), "method": "xlora"}, Outcome.ERROR,
           "model.base_model.set_adapter([...]) on X-LoRA, and add_adapter of a second adapter (the switch recipes), "
           "call XLoraModel._mark_only_adapters_as_trainable with an argument it does not take (TypeError), without "
           "checkpointing", f"{PEFT_SRC}/tuners/xlora/model.py", {"peft": ">=0.18"}),
    # ---- the baseline itself fails inside the library (not checkpointing findings) ------------
    Expect({**P, "arch": ("clip_text_model", "flava")}, Outcome.ERROR,
           "peft's task wrapper (SEQ_CLS / FEATURE_EXTRACTION) passes inputs_embeds, which CLIPTextModel and FlavaModel "
           "do not take: every method's plain run fails", f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.18"}),
    Expect({**P, "arch": "mamba2", "method": ("miss", "osf")}, Outcome.ERROR,
           "no linear layer of the tiny Mamba2 that peft accepts (out_proj is refused) has dims divisible by the "
           "block size of the block-structured methods: nothing to adapt", f"{PEFT_SRC}/tuners/tuners_utils.py",
           {"peft": ">=0.18"}),
    Expect({**P, "arch": "mixtral", "method": ("lora", "dora", "rslora", "lora_mts", "lora_bias", "alora", "xlora")},
           Outcome.ERROR,
           "on transformers 5 get_peft_model(mixtral, LoraConfig()) fails without checkpointing ('No `target_modules` "
           "passed but also no `target_parameters` found'): inject_adapter converts the config for v5's fused MoE "
           "(_convert_peft_config_moe) before _prepare_adapter_config fills in the default targets, and the "
           "conversion turns target_modules None into an empty set, so Mixtral's default q_proj/v_proj are never "
           "applied (the only type with default LoRA targets and a conversion pattern; a peft bug, checkpointing "
           "not involved)", f"{PEFT_SRC}/utils/transformers_weight_conversion.py#L438",
           {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "arch": ("fnet", "vits", "mra"),
            "method": ("lora", "dora", "rslora", "lora_mts")},
           Outcome.ERROR,
           "peft's task wrapper passes attention_mask / inputs_embeds / output_attentions, which this model's "
           "forward does not take on transformers 4 (it does on 5)", f"{PEFT_SRC}/peft_model.py",
           {"peft": ">=0.18", "transformers": "<5"}),
    Expect({**P, "arch": ("clip_text_model", "llama4_text", "flava"),
            "method": ("lora", "dora", "rslora", "lora_mts", "lora_bias", "alora")},
           Outcome.ERROR,
           "peft's task wrapper passes inputs this model does not take (attention_mask, inputs_embeds, "
           "decoder ids, output_attentions) or reaches a method it lacks: the peft baseline fails, the full "
           "one trains", f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.18"}),
    Expect({**P, "arch": "deepseek_v4", "method": ("lora", "dora", "rslora", "lora_mts")}, Outcome.ERROR,
           "the plain run fails: the arch-generic targets include o_a_proj, a DeepseekV4GroupedLinear (an nn.Linear "
           "subclass applying its weight per group of heads), which peft wraps as a plain Linear, so the adapter's "
           "output has the ungrouped shape ('The size of tensor a (4) must match the size of tensor b (32)'; every "
           "weight method of peft, seen in the 5.24.0 calibration); a peft / transformers mismatch, not "
           "checkpointing", f"{TF5}/models/deepseek_v4/modeling_deepseek_v4.py#L314",
           {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "arch": FUSED_EXPERTS_5, "method": "dora"}, Outcome.UNSUPPORTED,
           "transformers 5 stores MoE experts as fused parameters; peft adapts them with lora.ParamWrapper, which "
           "refuses DoRA ('lora.ParamWrapper does not work with use_dora=True')",
           f"{PEFT_SRC}/tuners/lora/layer.py", {"peft": ">=0.18", "transformers": ">=5"}),
    Expect({**P, "method": "multitask_prompt_tuning", "task": "feature"}, Outcome.ERROR,
           "peft's PeftModelForFeatureExtraction.forward takes task_ids but calls get_prompt(batch_size) without "
           "them, and the multitask prompt needs them ('task_ids cannot be None'): fails without checkpointing",
           f"{PEFT_SRC}/peft_model.py#L3221", {"peft": ">=0.18"}),
    Expect({**P, "arch": "aria_text", "method": "poly", "task": "feature"}, Outcome.ERROR,
           "Poly under the FEATURE_EXTRACTION wrapper fails without checkpointing ('batch1 must be a 3D tensor')",
           f"{PEFT_SRC}/tuners/poly", {"peft": ">=0.18", "transformers": "<5"}),
    Expect({**P, "arch": "aya_vision", "method": "gralora", "task": "causal_lm"}, Outcome.ERROR,
           "GraLoRA on a layer of the aya_vision causal LM fails without checkpointing ('too many values to unpack'); "
           "the feature model trains (seen on 4.57.6)",
           f"{PEFT_SRC}/tuners/gralora", {"peft": ">=0.18", "transformers": "<5"}),
    Expect({**P, "arch": "cohere2_vision", "method": "oft", "task": "causal_lm"}, Outcome.ERROR,
           "OFT on a layer of cohere2_vision's causal LM fails without checkpointing (a reshape to its blocks is "
           "invalid: shape [774, 16, 8] for an input of size 0); the feature model trains",
           f"{PEFT_SRC}/tuners/oft", {"peft": ">=0.18", "transformers": "<5"}),
    # These come first: they hold in every gc mode, also where adapters would refuse reentrant.
    Expect({**A, "method": ("dora", "dvora"), "arch": FUSED_QKV}, Outcome.ERROR,
           "adapters' DoRA/DVoRA on a fused qkv projection sizes the magnitude for the whole output but the "
           "low-rank delta for the selected q/v slices: shape error when the adapter is added",
           f"{ADAPTERS_SRC}/methods/lora.py", {"adapters": ">=1.2"}),
    Expect({**A, "method": "vera", "arch": FUSED_QKV}, Outcome.ERROR,
           "adapters' VeRA on a fused qkv projection: 'Vera' object has no attribute 'lora_A' in forward",
           f"{ADAPTERS_SRC}/methods/lora.py", {"adapters": ">=1.2"}),
    Expect({**A, "method": ("vera", "dvora"), "arch": GQA}, Outcome.ERROR,
           "adapters' VeRA/DVoRA share one frozen A/B pair sized for the query projection; the narrower k/v "
           "projections of grouped-query attention cannot be multiplied with it",
           f"{ADAPTERS_SRC}/methods/lora.py", {"adapters": ">=1.2"}),
    Expect({**A, "method": ("par_bn", "scaled_par_bn"), "arch": "phi"}, Outcome.ERROR,
           "adapters' plugin interface for phi hands the parallel adapter no input (linear(): input is None)",
           f"{ADAPTERS_SRC}/wrappers/interfaces.py", {"adapters": ">=1.2"}),
    Expect({**A, "arch": PREFIX_CACHE_ARCHS, "method": ("prefix_tuning", "prefix_tuning_flat"), "inputs": "padded",
            "task": "causal_lm"}, Outcome.ERROR,
           "with a padding mask adapters' prefix is masked out even without checkpointing: no prefix tensor "
           "ever gets a gradient (vacuous baseline)", f"{ADAPTERS_SRC}/methods/prefix_tuning.py",
           {"adapters": ">=1.2", "transformers": ">=4.57,<5"}),
    Expect({**A, "method": "prompt_tuning", "arch": "bert-generation"}, Outcome.ERROR,
           "adapters' prompt tuning on BertGenerationDecoder: the causal mask keeps the unprompted length",
           f"{ADAPTERS_SRC}/models/bert_generation", {"adapters": ">=1.2"}),
    Expect({**A, "method": "prompt_tuning", "task": "token_cls"}, Outcome.ERROR,
           "prompt tuning prepends prompt tokens to the input but not to token labels: shape mismatch in the loss",
           f"{ADAPTERS_SRC}/methods/prompt_tuning.py", {"adapters": ">=1.2"}),
    Expect({**A, "arch": ENC_DEC, "method": ("loreft", "noreft", "direft"), "inputs": ("masked", "padded")},
           Outcome.ERROR,
           "adapters' ReFT takes the sequence lengths from the encoder's attention mask and indexes the "
           "shorter decoder sequence with them (index out of bounds), with or without checkpointing",
           f"{ADAPTERS_SRC}/methods/reft.py", {"adapters": ">=1.2"}),
]
