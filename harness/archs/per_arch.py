"""Per-arch data of the zoo (:mod:`harness.archs.zoo`): the shrink rule's tables, the per-arch corrections and the
composite model types. Data plus :func:`per_arch`, which reads an entry for the installed packages.
"""
from __future__ import annotations

import re
from typing import Any

# ---------------------------------------------------------------------------------------------
# Generic shrink, beyond base.SHRINK: keys present in a (sub-)config are set to these values.
EXTRA_SHRINK: dict[str, Any] = {
    # mixture of experts: few small experts, so that every expert is routed to in 3 steps
    "num_local_experts": 4, "num_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16,
    "expert_ffn_hidden_size": 16, "shared_intermediate_size": 16, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "moe_layer_start_index": 1, "decoder_sparse_step": 1,
    # other widths
    "intermediate_size_mlp": 37, "ffn_hidden_size": 37, "decoder_intermediate_size": 37, "mlp_dim": 37,
    "projection_intermediate_size": 37,   # GLM-5-Next's vision merger: 10240 wide by default
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
    "projection_dim": 16, "classifier_proj_size": 16, "xvector_output_dim": 16, "codevector_dim": 16,
    "proj_codevector_dim": 16, "num_codevectors_per_group": 16, "num_conv_pos_embeddings": 16,
    "output_hidden_size": 32, "encoder_hidden_size": 32, "cross_attention_hidden_size": 32,
    "word_embed_proj_dim": 32, "pooler_output_size": 32, "out_hidden_size": 32, "projection_size": 32,
    # state-space (mamba) blocks: small heads, state and chunks (the naive path pads to a chunk)
    "mamba_n_heads": 4, "mamba_d_head": 8, "mamba_d_ssm": 32, "mamba_d_state": 16, "mamba_chunk_size": 16,
    "mamba_headdim": 8, "mamba_dt_rank": 8, "state_size": 16, "time_step_rank": 8, "chunk_size": 16,
    "depth": 2, "rotary_dim": 8, "decoder_vocab_size": 256, "num_frames": 4, "n_group": 1, "topk_group": 1,
    "mm_tokens_per_image": 4, "vision_feature_layer": -1, "mamba_expand": 1, "expand": 1, "n_groups": 1,
    "moe_k": 2, "entity_vocab_size": 64, "entity_emb_size": 16,
    # speech synthesis (VITS-like): vocoder and flow widths
    "upsample_initial_channel": 16, "flow_size": 16, "spectrogram_bins": 16, "duration_predictor_filter_channels": 16,
    # audio lengths
    "max_source_positions": 16, "max_target_positions": 64, "num_mel_bins": 16,
    # long-sequence attention pads the input to a window (longformer, led) or works in local blocks (longt5);
    # linear attention heads (qwen3_next); projector / latent widths of multimodal models (cohere2_vision splits
    # its projector width in two halves: even)
    "attention_window": 8, "local_radius": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
    "alignment_intermediate_size": 32, "projection_intermediate_dim": 37, "latent_query_num": 8,
    # sliding-window attention layers with their own heads and relative-position extent (inkling: 64 heads of 128
    # left an 8192-wide projection in the "tiny" model, 7.3 GB of activations for HRA)
    "swa_num_attention_heads": 4, "swa_num_key_value_heads": 2, "swa_head_dim": 8, "sliding_window_size": 8,
    "rel_extent": 16,
    # a local-attention window sizes the causal mask (RecurrentGemma: 2048 columns), which reentrant checkpointing
    # saves as an input of every segment: left alone, the "tiny" model saved more with checkpointing than without
    "attention_window_size": 16,
    # speech + text-to-unit + vocoder composites (SeamlessM4T): the sub-models' own depths, widths and vocabularies
    # (left alone, the "tiny" model had 43 M parameters and FRoD's attach ran for >10 min on its vocoder)
    "speech_encoder_layers": 2, "speech_encoder_attention_heads": 4, "speech_encoder_intermediate_size": 37,
    "t2u_encoder_layers": 2, "t2u_decoder_layers": 2, "t2u_encoder_attention_heads": 4,
    "t2u_decoder_attention_heads": 4, "t2u_encoder_ffn_dim": 37, "t2u_decoder_ffn_dim": 37, "t2u_vocab_size": 256,
    "t2u_max_position_embeddings": 64, "t2u_variance_predictor_hidden_dim": 32, "char_vocab_size": 256,
    "unit_hifi_gan_vocab_size": 64, "unit_embed_dim": 32, "lang_embed_dim": 16, "spkr_embed_dim": 16,
    "vocoder_num_spkrs": 4,
}
# keys a default config leaves None although the model needs a value
FILL_NONE: dict[str, Any] = {"head_dim": 8, "num_key_value_heads": 2, "num_experts_per_tok": 2, "n_group": 1,
                             "topk_group": 1}
# boolean switches: pure-PyTorch paths (no CUDA-only kernels)
BOOL_SET: dict[str, bool] = {"use_mamba_kernels": False}
# list-valued keys: every element set to the value (the length, i.e. the number of stages, is kept)
LIST_SHRINK: dict[str, int] = {"conv_dim": 32, "tdnn_dim": 16, "depths": 1, "num_heads": 2, "image_size": 32,
                               "embed_dim": 32, "attention_window": 8}
# layers whose outputs are taken as more features (Qwen3-VL's deepstack): layers within the shrunk depth, so that
# their mergers train (a default like [8, 16, 24] names none of 2 layers)
LAYER_INDEXES: dict[str, list[int]] = {"deepstack_visual_indexes": [0, 1]}
_DROPOUT_KEY = re.compile(r"(dropout|pdrop|drop_prob|drop_rate|drop_path|layerdrop)")
# an initializer range far below any trained weight's scale (1e-10: the vision towers of SAM, BLIP, BLIP-2,
# InstructBLIP, GOT-OCR2, ..., a placeholder their checkpoints overwrite) leaves a random tower's weights ~1e-10:
# its activations vanish and the LayerNorm behind it blows its gradients up (BLIP-2's tower: ~1e7), or they vanish
# below the tolerance (SAM's: ~1e-15, its rel-pos tables' 0): transformers' usual 0.02 instead
MIN_INIT_RANGE, INIT_RANGE = 1e-4, 0.02

# ---------------------------------------------------------------------------------------------
# Per-arch corrections (data). Keys: overrides (config, dotted for sub-configs), task (force the
# primary task), feed, inputs, skip (a not-covered reason), when ({"<package><specifier>": more overrides}:
# overrides for some releases only, e.g. around a bug of one release).
# windowed vision: 64-pixel images in 4-pixel patches, windows of 2, so that every stage has a window
_SWIN = {"overrides": {"image_size": 64, "patch_size": 4, "window_size": 2}}
# multimodal rotary sections (t, h, w) summing to head_dim / 2 = 4; the text configs default to None
_ROPE = {"rope_type": "default", "type": "default", "mrope_section": [2, 1, 1]}
_MROPE = {"overrides": {"rope_scaling": _ROPE}}
# Qwen2-VL-style VLMs: flattened patches + grid (feed vlm_grid), the language model's rotary sections
_GRID = {"feed": "vlm_grid", "overrides": {"text_config.rope_scaling": _ROPE}}
# VLMs that take pixel_values as (batch, images, C, H, W): two images per sample (Idefics2/3 and their kin)
_TILES = {"feed": "vlm_tiles"}
# ... or as an image's any-resolution tiles (LLaVA-NeXT): one 32x32 grid point, so base image + one tile
_ANYRES = {"feed": "vlm_tiles", "overrides": {"image_grid_pinpoints": [[32, 32]]}}
# time series: short context and horizon, one time feature
_TS = {"feed": "time_series", "overrides": {"prediction_length": 4, "context_length": 8, "lags_sequence": [1, 2, 3],
                                            "num_time_features": 1}}
_QFORMER = {"feed": "vlm", "overrides": {"image_token_index": 255}}
_HUNYUAN_POS = {"overrides": {"vision_config.max_image_size": 64}}
# Gemma 3n and Gemma 4 (E-series) share their last layers' K/V with earlier layers of the same attention type: 4
# layers, the last 2 sharing; their per-layer input embeddings narrowed (below)
_KV_SHARED = {"num_hidden_layers": 4, "layer_types": ["sliding_attention", "full_attention"] * 2,
              "num_kv_shared_layers": 2, "vocab_size_per_layer_input": 256, "hidden_size_per_layer_input": 8}
_GEMMA4 = {"overrides": {**_KV_SHARED, "per_layer_config": {"1": {"head_dim": 16}, "3": {"head_dim": 16}}}}
# SAM's image embeddings are its prompt encoder's and mask decoder's width (the vision neck's output_channels) and
# its point encoding is half that width (num_pos_feats), both 256 released; windows of 2 patches on the 4 x 4
# patch grid (14 released, on 64 x 64), the last of the 2 layers global (released 2, 5, 8, 11 of 12); the
# prompt encoder's grid is the tower's (transformers 5 derives it once, from the default image and patch size)
_SAM = {"overrides": {"vision_config.output_channels": 32, "vision_config.num_pos_feats": 16,
                      "vision_config.window_size": 2, "vision_config.global_attn_indexes": [1],
                      "prompt_encoder_config.image_embedding_size": 4}}
PER_ARCH: dict[str, dict[str, Any]] = {
    "swin": _SWIN, "swinv2": _SWIN, "donut-swin": _SWIN, "maskformer-swin": _SWIN, "swin2sr": _SWIN,
    "qwen2_vl_text": _MROPE, "qwen2_5_vl_text": _MROPE, "glm4v_text": _MROPE,
    "qwen3_vl_text": _MROPE, "qwen3_vl_moe_text": _MROPE,
    "glm4v_moe_text": {"overrides": {"rope_scaling": {**_ROPE, "mrope_section": [1, 1, 0]}}},   # half-rotary
    # (transformers 5 sets the VLM's rotary sections by the rule, which 4.x keeps in rope_scaling)
    "glm4v_moe": {"when": {"transformers<5": {"text_config.rope_scaling": {**_ROPE, "mrope_section": [1, 1, 0]}}}},
    "qwen2_vl": _GRID, "qwen2_5_vl": _GRID, "glm4v": _GRID, "qwen3_vl": _GRID,
    "qwen3_vl_moe": _GRID,
    # Llama 4's vision adapter: a pixel shuffle (ratio 0.5) makes 4 x the tower's width (32) the MLP's input; its
    # projector widths are one (the language-model projector reads vision_output_dim); defaults 5632, 4096, 7680
    "llama4": {"overrides": {"vision_config.intermediate_size": 128, "vision_config.projector_input_dim": 32,
                             "vision_config.projector_output_dim": 32, "vision_config.vision_output_dim": 32}},
    # Q-Former VLMs: the language model reads the query outputs at image-token placeholders (the id is unset by
    # default; transformers 5 has no other way in)
    "blip-2": _QFORMER, "instructblip": _QFORMER,
    # Kosmos-2 places its image queries where image_embeds_position_mask says: at placeholders of an id it does
    # not define (its processor's <image> tokens)
    "kosmos-2": {"feed": "vlm", "overrides": {"image_token_id": 255}},
    # Mllama (Llama 3.2 Vision): the text reads the image by cross-attention layers, here layers 0 and 2 of 3 (the
    # default [3, 8, ...] names none of 2; two, so that the image states feed more than one layer); the tower's
    # intermediate layers (default [3, 7, 15, 23, 30]) and global layers within its depth, the projector's input
    # their concatenation (3 x 32); 2 tiles of up to 1 x 2
    "mllama": {"feed": "vlm_cross",
               "overrides": {"text_config.cross_attention_layers": [0, 2],
                             "text_config.num_hidden_layers": 3,
                             "text_config.rope_scaling": {"rope_type": "default"},
                             "vision_config.intermediate_layers_indices": [0, 1], "vision_config.num_global_layers": 1,
                             "vision_config.vision_output_dim": 96, "vision_config.max_num_tiles": 2,
                             "vision_config.supported_aspect_ratios": [[1, 1], [1, 2], [2, 1]]}},
    # Voxtral's projector reads the audio states 4 frames at a time: audio intermediate_size = 4 x the tower's width
    "voxtral": {"overrides": {"audio_config.intermediate_size": 128}},
    # audio LMs' towers at a released checkpoint's proportions: GLM-ASR's projector reads 4 frames at a time (audio
    # intermediate_size = 4 x the tower's width), Qwen3-ASR's projects to the text width, Fun-ASR's last layer
    # predicts timestamps (20 of 70 released)
    "glmasr": {"overrides": {"audio_config.intermediate_size": 128}},
    # (its subsampling convs at the released proportion, 480 channels to a 1024 width: left at 480, the frozen
    # conv stack's activations, which peft's input hook keeps for backward, outweighed the tiny layers' savings)
    "qwen3_asr": {"overrides": {"audio_config.output_dim": 32, "audio_config.downsample_hidden_size": 16}},
    "qwen3_asr_encoder": {"overrides": {"downsample_hidden_size": 16}},
    "fun_asr_nano": {"overrides": {"audio_config.num_timestamp_prediction_layers": 1}},
    "time_series_transformer": _TS, "informer": _TS, "autoformer": _TS,
    "idefics3": _TILES, "smolvlm": _TILES, "modernvbert": _TILES, "ultravbert": _TILES,
    # Idefics2's perceiver resampler: 2 heads of 8 and 8 latents (default 16 x 96 and 64: 100 MB of activations)
    "idefics2": {**_TILES, "overrides": {"perceiver_config.resampler_n_heads": 2,
                                         "perceiver_config.resampler_head_dim": 8,
                                         "perceiver_config.resampler_n_latents": 8}},
    "llava_next": _ANYRES, "llava_next_video": _ANYRES, "llava_onevision": _ANYRES,
    # the projector's output is the language model's width (here 32), not a contrastive projection
    "paligemma": {"overrides": {"vision_config.projection_dim": 32, "projection_dim": 32}},
    "florence2": {"overrides": {"vision_config.projection_dim": 32, "projection_dim": 32}},
    # (Janus's VQ-GAN image generator, which understanding never trains, at its narrowest: GroupNorms of 32 groups)
    "janus": {"overrides": {"vision_config.projection_dim": 32, "vq_config.projection_dim": 32,
                            "vq_config.base_channels": 32, "vq_config.channel_multiplier": [1, 1],
                            "vq_config.num_res_blocks": 1, "vq_config.latent_channels": 32,
                            "vq_config.num_embeddings": 64, "vq_config.image_token_embed_dim": 32}},
    # SigLIP towers of VLMs: the language model reads the patch states; their checkpoints have no pooling head
    "gemma3": {"overrides": {"vision_config.vision_use_head": False}},
    "shieldgemma2": {"overrides": {"vision_config.vision_use_head": False}},
    "cohere2_vision": {"overrides": {"vision_config.vision_use_head": False}},
    "deepseek_vl": {"overrides": {"vision_config.vision_use_head": False}},
    # image + text models the rule takes for text-only
    "git": {"feed": "text+pixels"}, "vilt": {"feed": "text+pixels"},
    "xclip": {"overrides": {"mit_hidden_size": 32, "mit_intermediate_size": 37}},
    "dinov3_vit": {"overrides": {"num_register_tokens": 2}},   # default 0: an empty, never-trained parameter
    "vipllava": {"overrides": {"vision_feature_layers": [-2, -1]}},   # default picks layers of a 24-layer tower
    "esm": {"overrides": {"vocab_size": 33, "pad_token_id": 1, "mask_token_id": 32}},   # default vocab is None
    "xmod": {"overrides": {"default_language": "en_XX"}},   # forward needs a language (XmodConfig field)
    # block-local attention pads the input to a block (default 512). transformers 5's encoder sets the hidden
    # states to None when layerdrop drops a layer (4.57.6 keeps them), so the plain run raises ("'NoneType' object
    # is not subscriptable", seen on 5.24.0): there, no encoder layerdrop (the decoder's and all dropout stay)
    "pegasus_x": {"overrides": {"block_size": 8},
                  "when": {"transformers>=5": {"encoder_layerdrop": 0.0}}},
    # hybrid Mamba / attention models: two layers of their pattern have no attention layer (Bamba and
    # GraniteMoeHybrid have none by default), and transformers 5's cache of such a model raises in the plain run
    # ("get_seq_length can only be called on Attention layers"): one layer of each kind (GraniteMoeHybrid's
    # layer_types default to None on 4.57.6, which its layers index: it did not build there)
    "jamba": {"overrides": {"attn_layer_period": 2, "attn_layer_offset": 1}},
    "bamba": {"overrides": {"attn_layer_indices": [1]}},
    "recurrent_gemma": {"overrides": {"block_types": ["recurrent", "attention"]}},
    # Aria's projector maps a patch count to its query count (released: 1225 -> 128, 4900 -> 256): the rule's
    # 32-pixel images in patches of 8, 16 patches, get 4 queries; DeepSeek-VL hybrid's high-resolution SAM tower
    # reads its global-attention layer's states (released: layers 2, 5, 8, 11 of 12; here the last of 2), and its
    # SigLIP tower has no pooling head (its conversion script sets vision_use_head False)
    "aria": {"overrides": {"projector_patch_to_query_dict": {16: 4}}},
    "deepseek_vl_hybrid": {"overrides": {"high_res_vision_config.global_attn_indexes": [1],
                                         "vision_config.vision_use_head": False}},
    # (SAM-HQ's mask decoder also reads the tower's first global layer: its vit_dim is the tower's width, 768)
    "sam": _SAM, "sam_hq": {"overrides": {**_SAM["overrides"], "mask_decoder_config.vit_dim": 32}},
    # LFM2-VL reads its SigLIP2 tower's patch states (last_hidden_state), never the pooled head: no head to train
    "lfm2_vl": {"overrides": {"vision_config.vision_use_head": False}},
    # dots.llm1's experts default to None ("a dense model", its docstring says), which its MoE layers cannot build
    # with (both releases); the released MoE's layout: the first layer dense, then routed + shared experts
    "dots1": {"overrides": {"n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
                            "first_k_dense_replace": 1}},
    "gemma3n_text": {"overrides": {**_KV_SHARED, "intermediate_size": [37] * 4, "laurel_rank": 4,
                                   "activation_sparsity_pattern": [0.95, 0.0, 0.0, 0.0]}},
    "granitemoehybrid": {"when": {"transformers<5": {"layer_types": ["mamba", "attention"]},
                                  "transformers>=5": {"layer_types": ["linear_attention", "full_attention"]}}},
    # Zamba2's Mamba heads x head width must be its inner width (32 here): transformers 5 no longer derives the
    # head width from the head count (8 heads of the rule's 8 = 64 raised in the plain run)
    "zamba2": {"overrides": {"n_mamba_heads": 4}},
    # transformers 5's DiffLlama refuses attention dropout ("no paper-defined dropout semantics"), its only dropout
    "diffllama": {"when": {"transformers>=5": {"attention_dropout": 0.0}}},
    # transformers 5's DbrxAttention reads attn_config.rope_theta, which DbrxAttentionConfig no longer defines (a
    # hub config.json still carries it), and clamps q/k/v to clip_qkv even when it is None (its default; raises):
    # both set as DBRX's checkpoints set them
    "dbrx": {"overrides": {"attn_config.rope_theta": 500000.0, "attn_config.clip_qkv": 8.0}},
    # transformers 5 types whose widths the rule does not know (the costliest baselines of the 5.24.0 calibration,
    # 9-34 s each against a median well below 1 s): GLM-5-Next's linear attention (64 heads of 128), indexer
    # (32 of 128) and vision merger (10240), 4.4M parameters, 160 s per peft cell; DeepSeek-V4's
    # grouped output projection (8 groups of rank 1024) and indexer; MiniMax-M3-VL's projector (6144) and dense
    # MLP (12288); Muse Spark's experts (4096); NeMo SpeechLM's NemotronH language model, 52 layers (its depth
    # is the list of block types) with 64 Mamba heads of 64
    "glm5_next": {"overrides": {"text_config.linear_num_heads": 4, "text_config.linear_head_dim": 8,
                                "text_config.index_n_heads": 4, "text_config.index_head_dim": 8,
                                "text_config.index_topk": 16, "vision_config.projection_intermediate_size": 40}},
    "deepseek_v4": {"overrides": {"o_lora_rank": 4, "index_n_heads": 4, "index_head_dim": 8, "index_topk": 16}},
    "minimax_m3_vl": {"overrides": {"projector_hidden_size": 32, "text_config.dense_intermediate_size": 37,
                                    "text_config.index_head_dim": 8}},
    "muse_spark_text": {"overrides": {"moe_hidden_size": 16}},
    # Cosmos3-Edge's vision projector (11520 wide: BOFT ran > 10 min); ERNIE 4.5 VL's text and vision experts
    # (1536 and 512), and its rotary sections, which are (h, w, t) with h and w interleaved, so equal (the rule's
    # (t, h, w) [2, 1, 1] failed the plain run: "stack expects each tensor to be equal size"); HunYuan-VL's and
    # HY-V4-VL's vision position table, sized for 2048-pixel images (65,537 rows)
    "cosmos3_edge": {"overrides": {"projector_hidden_size": 37}},
    # Gemma 4's per-layer input embeddings (a 262,144-row table per layer: the plain run could not allocate) and
    # the head width of its full-attention layers, set per layer (512). Its default configs have no vision or
    # audio tower: the VLM classes train as language models
    "gemma4_text": _GEMMA4,
    "gemma4": {"overrides": {f"text_config.{k}": v for k, v in _GEMMA4["overrides"].items()}},
    "gemma4_unified": {"overrides": {f"text_config.{k}": v for k, v in _GEMMA4["overrides"].items()
                                     if "per_layer_input" not in k}},
    "ernie4_5_vl_moe": {"overrides": {"text_config.rope_scaling": {"mrope_section": [1, 1, 2]},
                                      "text_config.moe_intermediate_size": [40, 40]}},
    "hunyuan_vl": _HUNYUAN_POS, "hy_v4_vl": _HUNYUAN_POS,
    # NeMo SpeechLM: its language model as above; its diarization model's speaker head reads that model's audio
    # states (512 wide by default), as in the diarization model and the transcription tower alone
    "nemotron3_diarization": {"overrides": {"head_config.audio_hidden_size": 32}},
    "nemotron3_5_transcribe_audio": {"overrides": {"diarization_config.head_config.audio_hidden_size": 32}},
    "nemo_speechlm": {"overrides": {"audio_config.diarization_config.head_config.audio_hidden_size": 32,
                                    "text_config.layers_block_type": ["linear_attention", "moe", "full_attention"],
                                    "text_config.num_hidden_layers": 3, "text_config.mamba_num_heads": 4,
                                    "text_config.mamba_head_dim": 8, "text_config.ssm_state_size": 16,
                                    "text_config.moe_shared_expert_intermediate_size": 16}},
}

NEEDS_BBOX = ("udop",)   # text models whose forward requires token boxes

# ---------------------------------------------------------------------------------------------
# Composite model types (no default config): an encoder and a decoder model type, each shrunk by the rule
COMPOSITES: dict[str, dict[str, Any]] = {
    "encoder-decoder": {"compose": ("bert", "bert"), "feed": "text", "modality": "text",
                        "head": "EncoderDecoderModel"},
    "vision-encoder-decoder": {"compose": ("vit", "gpt2"), "feed": "pixels", "modality": "vision",
                               "head": "VisionEncoderDecoderModel"},
    "speech-encoder-decoder": {"compose": ("wav2vec2", "bert"), "feed": "waveform", "modality": "audio",
                               "head": "SpeechEncoderDecoderModel"},
}


def per_arch(model_type: str) -> dict[str, Any]:
    """PER_ARCH's entry of a model_type, its `when` overrides merged where the installed packages match."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    fix = dict(PER_ARCH.get(model_type, {}))
    for req, more in fix.pop("when", {}).items():
        r = Requirement(req)
        try:
            if r.specifier.contains(version(r.name), prereleases=True):
                fix["overrides"] = {**fix.get("overrides", {}), **more}
        except PackageNotFoundError:
            pass
    return fix
