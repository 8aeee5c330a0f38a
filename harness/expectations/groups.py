"""Named groups the entries match: archs that share a cause, the links they cite, and the method traits.

A group of archs is named for what its members share (a mechanism), not for a finding; each entry that uses it says
what follows. Method groups are not lists here: a method's traits are fields of its MethodSpec
(harness/backends/base.py), matched as "trait:NAME" in the method axis.
"""
from __future__ import annotations

# method traits (MethodSpec.traits), matched in the "method" axis
WEIGHT = "trait:weight"                  # adapts weights inside the (checkpointed) layers, not their inputs
INPUT_GRAD = "trait:input_grad"          # ... whose gradients come back when a layer input requires grad
LINEAR_ONLY = "trait:linear_only"        # adapts nn.Linear only (peft refuses transformers' Conv1D)
THROUGH_LAYERS = "trait:through_layers"  # trains through the layers (what KV-sharing models lose, reentrant)

ADAPTERS_REENTRANT = (
    "adapters' gradient_checkpointing_enable refuses use_reentrant=True: it needs context_fn to hand the "
    "ForwardContext to the recompute, which only the non-reentrant checkpoint supports"
)

# adapters' methods whose modules read parameters shared across layers from the ForwardContext by adapter name
SHARED_PARAMETERS = ("compacter", "compacter++", "dvora", "vera", "mam", "prefix_tuning", "prefix_tuning_flat",
                     "unipelt")
FORWARD_CONTEXT = SHARED_PARAMETERS + ("loreft", "noreft", "direft")   # ... and ReFT's positions

ADAPTERS_SRC = "https://github.com/adapter-hub/adapters/blob/v1.3.0/src/adapters"
TF_SRC = "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers"
TF5 = "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers"
ENC_DEC = ("t5", "mt5", "bart", "mbart", "plbart", "whisper")       # adapters' own encoder-decoder classes
PREFIX_CACHE_ARCHS = ("gpt2", "llama", "mistral")
FUSED_QKV = ("deberta", "gpt2", "modernbert")                       # one projection computes q, k and v
GQA = ("gemma2", "gemma3_text", "llama", "mistral", "phi", "qwen2", "qwen3")  # k/v narrower than q here
NO_PROMPT_TUNING = ("bart", "mbart", "plbart", "t5", "mt5", "whisper", "gpt2", "gptj", "llama", "mistral",
                    "bert2bert")
# transformers models (the zoo): findings of full fine-tuning, which hold for every backend
BATCHNORM = ("informer", "mobilevit", "parakeet_ctc", "parakeet_encoder", "wav2vec2-conformer")
BATCHNORM_5 = ("canary", "cohere_asr", "lasr_ctc", "lasr_encoder", "parakeet_rnnt", "parakeet_tdt", "pp_lcnet",
               "swiftformer")
# models whose get_input_embeddings is not implemented (audio, composite vision-text)
NO_INPUT_EMBEDDINGS = ("altclip", "canine", "chinese_clip", "clip", "clipseg", "data2vec-audio", "groupvit",
                       "hubert", "metaclip_2", "owlv2", "owlvit", "parakeet_ctc", "parakeet_encoder", "sew",
                       "sew-d", "siglip", "siglip2", "unispeech", "unispeech-sat", "wav2vec2", "wav2vec2-bert", "wavlm",
                       "informer", "mobilevit", "pvt_v2", "swiftformer", "time_series_transformer",
                       "wav2vec2-conformer",
                       "flava", "vits")   # seen through transformers_peft on 4.57.6 (peft's plain runs fail first)
# VLMs' vision towers that transformers 5 registers as model types (fed flattened patches + their grid): most have no
# get_input_embeddings (NotImplementedError; a warning when peft asks), so nothing hooks their input (seen on 5.24.0)
VISION_TOWERS_NO_EMBEDDINGS_5 = ("cohere_compass_vision", "cosmos3_edge_vision", "glm4v_moe_vision", "glm4v_vision",
                                 "glm5_next_vision", "glm_image_vision", "glm_ocr_vision", "hunyuan_vl_vision",
                                 "hy_v4_vl_vision", "qwen3_5_moe_vision", "qwen3_5_vision", "qwen3_vl_moe_vision",
                                 "qwen3_vl_vision", "qwen4_exp_vision")
# ... those with input embeddings whose class declares main_input_name "input_ids" (copied from the text side):
# transformers 5's gradient_checkpointing_enable hooks them as text models, so adapter_first keeps its gradients too
# (Idefics3's, SmolVLM's and Granite-Docling's towers, fed pixels, keep PreTrainedModel's default "input_ids")
VISION_TOWERS_HOOKED_5 = ("exaone4_5_vision", "lfm3_vl_vision", "qwen2_5_vl_vision", "idefics3_vision",
                          "smolvlm_vision", "granite_docling_vision")
# ... those whose patch embedding is a Linear that the weight methods' generic targets adapt (the projection case);
# SigLIP2's native-resolution tower too (fed its patches: 4.57.6 and 5.24.0), and LFM2-VL's, which is one
# (and Qwen3-ASR's audio encoder: the Linear conv_out after its subsampling convs)
FRONT_PATCH_EMBED = ("cosmos3_edge_vision", "muse_glimmer_vision", "muse_spark_vision", "siglip2_vision_model",
                     "lfm2_vl", "qwen3_asr_encoder")
# Gemma 3n and Gemma 4 shrunk with KV sharing (num_kv_shared_layers=2 of 4 layers, as the E-series checkpoints share
# their last layers' K/V): transformers 5 hands the shared K/V over in a dict
KV_SHARING = ("gemma3n_text", "gemma4_text", "gemma4", "gemma4_unified")
# vision-language models whose language model reads the image states by cross-attention layers, handed the states by
# keyword (Mllama, shrunk with 2 cross-attention layers of 3)
CROSS_ATTENTION_IMAGE = ("mllama",)
# audio LMs of transformers 5 whose audio encoder has no input embeddings to hook: GLM-ASR's lacks the
# `_input_embed_layer = "conv1"` its Whisper-derived siblings (Qwen2-Audio, Voxtral, AudioFlamingo3, MOSS) declare,
# Fun-ASR-Nano's has no input layer at all (seen on 5.24.0) ...
AUDIO_TOWER_5 = ("glmasr", "fun_asr_nano")
# ... and the encoders alone
AUDIO_TOWERS_NO_EMBEDDINGS_5 = ("glmasr_encoder", "fun_asr_nano_encoder")
# models with no parameter in front of their first checkpointed layer (transformers 5)
NO_FRONT_PARAMETERS_5 = ("fun_asr_nano", "fun_asr_nano_encoder")
# on transformers 5, enable_input_require_grads hooks the input embeddings of every PreTrainedModel inside the model:
# CLIP-like models whose towers are such models lose nothing (LoRA, reentrant, both orders, 5.24.0); VITS keeps its
# embeddings in a plain module and loses
NO_INPUT_EMBEDDINGS_5 = tuple(a for a in NO_INPUT_EMBEDDINGS if a not in (
    "altclip", "chinese_clip", "clip", "clipseg", "metaclip_2", "siglip", "siglip2")) + ("vits", "segformer") + \
    VISION_TOWERS_NO_EMBEDDINGS_5 + AUDIO_TOWERS_NO_EMBEDDINGS_5
# models whose input-embedding module returns a tuple (patch embeddings with their spatial shape)
TUPLE_EMBEDDINGS = ("beit", "data2vec-vision", "donut-swin", "focalnet", "hiera", "internvl_vision",
                    "maskformer-swin", "swin", "swinv2", "timesformer")
# (TimeSformer on 5.24.0: covered once its int-typed drop_path_rate is left at its default)
TUPLE_EMBEDDINGS_5 = ("data2vec-vision", "donut-swin", "focalnet", "hiera", "maskformer-swin", "swin", "swinv2",
                      "timesformer")
# MoE models whose experts transformers 5 fuses into parameters (peft converts LoRA targets on them to
# target_parameters; the harness then sets lora_dropout=0, as ParamWrapper requires)
FUSED_EXPERTS_5 = ("afmoe", "beam", "ernie4_5_moe", "exaone_moe", "glm4_moe", "qwen3_next", "solar_open")
# models whose get_input_embeddings() is not the module their forward calls (probed on 4.57.6 by hooking it)
EMBEDDINGS_NOT_CALLED = ("bart", "bigbird_pegasus", "longt5", "m2m_100", "mbart", "nllb-moe", "plbart",
                         "switch_transformers", "seamless_m4t", "seamless_m4t_v2")
# speech models whose conv feature encoder sets `hidden_states.requires_grad = True` itself when training ("make sure
# hidden_states require grad for gradient_checkpointing"; a Python flag peft's freezing does not clear), and the
# speech-encoder-decoder built on wav2vec2 (probed on 4.57.6: the flag set to False brings the loss of gradients back)
FEATURE_ENCODER_GRAD = ("data2vec-audio", "hubert", "sew", "sew-d", "speecht5", "unispeech", "unispeech-sat",
                        "wav2vec2", "wav2vec2-conformer", "wavlm", "speech-encoder-decoder")
# models with an adapted module between the inputs and the first checkpointed layer: the harness's arch-generic targets
# take in RemBERT's embedding_hidden_mapping_in, W2V-BERT's feature_projection (probed: left out of the targets, the
# loss of gradients comes back), RoCBERT's map_inputs_layer and Florence-2's vision tower and projector, which are not
# checkpointed (listed from the adapted modules; equivalent with LoRA, LoHa, IA3, HRA, MiSS, SuperTuning)
# vision-language models of transformers 5 whose vision tower the weight methods' generic targets adapt, with no
# grad-requiring input in front of it (seen on 5.24.0)
VISION_TOWER_5 = ("cosmos3_omni", "glm46v", "glm4v", "glm4v_moe", "glm5_next", "glm_ocr", "glmga", "minimax_m3_vl",
                  "ovis2", "qwen3_5", "qwen3_5_moe", "qwen3_omni_moe_thinker", "qwen3_vl", "qwen3_vl_moe",
                  "hunyuan_vl", "hy_v4_vl")
FRONT_PROJECTION = ("rembert", "wav2vec2-bert", "roc_bert", "florence2",
                    "radio",   # its patch_projection (transformers 5, probed: left out, the loss comes back)
                    # the feature stacking's projection (transformers 5; seen on 5.24.0, every weight method)
                    "nemotron3_5_transcribe_asr_audio", "nemotron3_diarization_audio",
                    # ... and the diarization model and transcription tower around those (seen on 5.24.0)
                    "nemotron3_diarization", "nemotron3_5_transcribe_audio",
                    # its per-layer-input projection and norm, and its AltUp projections, all in front of the
                    # layers (seen on 4.57.6: every weight method and LN tuning keeps its gradients; not probed)
                    "gemma3n_text")
# models whose encoder calls its GradientCheckpointingLayers with hidden_states=... (a keyword): no tensor input reaches
# the reentrant checkpoint (probed on 4.57.6 with full fine-tuning; cases/keyword_hidden_states_reentrant.py)
KEYWORD_HIDDEN_STATES = ("altclip", "chinese_clip", "layoutlm", "mlcd", "splinter")
# encoder-decoders whose get_input_embeddings() is the decoder's token embedding while the encoder takes audio / pixels
# (seen on 4.57.6: the encoder's adapters get no gradient under reentrant checkpointing in the gc_first order too;
# Speech2Text and Moonshine with the LoRA family, once the harness fed their decoders under peft's wrapper)
ENCODER_NOT_HOOKED = ("whisper", "vision-encoder-decoder", "speech_to_text", "moonshine")
# models whose LN-tuning targets include a normalisation layer in front of the first checkpointed layer (probed on
# 4.57.6 with forward pre-hooks: BERT's embeddings.LayerNorm, MBART's layernorm_embedding, ...). Not BART and BLOOM:
# peft's LN-tuning mapping names their in-layer norms only (seen: adapter_first loses the gradients)
NORM_BEFORE_LAYERS = (
    "bert", "bert-generation", "bert2bert", "big_bird", "blenderbot-small", "camembert", "canine",
    "convbert", "data2vec-text", "deberta", "deberta-v2", "distilbert", "electra", "encoder-decoder", "ernie", "flava",
    "fnet", "git", "layoutlm", "led", "longformer", "luke", "mbart", "modernbert", "modernbert-decoder", "mra", "mvp",
    "nezha", "nystromformer", "open-llama", "plbart", "prophetnet", "rembert", "roberta", "roberta-prelayernorm",
    "roc_bert", "roformer", "splinter", "tapas", "trocr", "vilt", "visual_bert", "xlm-prophetnet", "xlm-roberta",
    "xmod", "yoso",
    # vision-language models: a norm in front of the vision layers (Pixtral's ln_pre, CLIP's pre_layrnorm), and the
    # text layers take the projected image features (probed on Mistral3: ln_pre and the projector norm adapted)
    "mistral3", "llava", "vipllava", "llava_next", "llava_next_video",   # (LLaVA-OneVision's SigLIP tower has none)
    "video_llava",   # its CLIP image tower's pre_layrnorm (seen on 4.57.6, feature model, both orders)
    # vision encoders: a norm on the patch embeddings (CLIP's pre_layrnorm, Pixtral's ln_pre, AIMv2's rms_norm, the
    # Swin family's and FocalNet's embeddings norm); speech encoders: the feature projection's layer_norm (wav2vec2
    # family), Moonshine's conv-stem GroupNorm (seen on 4.57.6, adapter_first: equivalent where the rule for
    # their modality predicts the gradients lost); SegFormer, MLCD, two Nemotron audio encoders: seen on 5.24.0
    "aimv2_vision_model", "chinese_clip_vision_model", "clip_vision_model", "pixtral", "donut-swin", "focalnet",
    "maskformer-swin", "swin", "swinv2", "data2vec-audio", "hubert", "sew", "unispeech", "unispeech-sat", "wav2vec2",
    "speech-encoder-decoder", "moonshine", "segformer", "mlcd", "mlcd_vision_model", "nemotron3_5_transcribe_asr_audio",
    "nemotron3_diarization_audio",
    # VLM vision towers (transformers 5): GLM-4V's post_conv_layernorm, MUSE's ln_pre (seen on 5.24.0, both orders)
    "glm4v_vision", "glm4v_moe_vision", "muse_glimmer_vision", "muse_spark_vision",
    # query-transformer VLMs: Kosmos-2's CLIP pre_layrnorm; BLIP-2's Q-Former layernorm on its learned queries (LN
    # tuning adapts none of its vision tower's norms), whose output feeds the language model too (seen on 4.57.6
    # and 5.24.0, adapter_first, where the rule for their modality predicts the gradients lost)
    "blip-2", "kosmos-2")
A = {"backend": "adapters"}
P = {"backend": "peft"}
TP = {"backend": "transformers_peft"}   # peft's methods through transformers' add_adapter
PEFT_SRC = "https://github.com/huggingface/peft/blob/v0.21.2/src/peft"
CONV1D = ("gpt2", "gpt-sw3")                          # transformers' Conv1D instead of nn.Linear (gpt-sw3 is GPT-2)
