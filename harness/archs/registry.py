"""The architecture registry: data. One entry per arch; the generic shrink rule does the rest.

Covers every architecture adapters 1.3.0 supports: its own model classes plus the plugin-interface
models it ships (adapters/wrappers/interfaces.py), and an EncoderDecoder bert2bert.
"""
from __future__ import annotations

from .base import ArchSpec, shrink_config

ENC = ("seq_cls", "token_cls")          # encoders: the classification heads users fine-tune
DEC = ("causal_lm", "seq_cls")          # decoder-only models
S2S = ("seq2seq_lm",)

# DeBERTa as its checkpoints ship (microsoft/deberta-base, deberta-v3-base): relative attention with
# c2p/p2c disentangled attention and no absolute position embedding (the config defaults are off).
_DEBERTA = {"relative_attention": True, "max_relative_positions": -1, "position_biased_input": False,
            "pos_att_type": ["c2p", "p2c"]}
_DEBERTA_V3 = {**_DEBERTA, "pos_att_type": ["p2c", "c2p"], "position_buckets": 256,
               "norm_rel_ebd": "layer_norm", "share_att_key": True}


def _bert2bert(task: str):
    """EncoderDecoderModel of a BertModel encoder and a BertLMHeadModel decoder with cross-attention,
    the pair ``EncoderDecoderModel.from_encoder_decoder_pretrained("bert-…", "bert-…")`` builds."""
    from transformers import BertConfig, BertLMHeadModel, BertModel, EncoderDecoderModel

    enc = BertModel(shrink_config(BertConfig()))
    dec = BertLMHeadModel(shrink_config(BertConfig(), {"is_decoder": True, "add_cross_attention": True}))
    model = EncoderDecoderModel(encoder=enc, decoder=dec)
    model.config.decoder_start_token_id = 2   # [CLS] in a real vocab; any free id of the tiny vocab
    model.config.pad_token_id = 0
    return model


ARCHS: dict[str, ArchSpec] = {a.name: a for a in [
    # --- encoders -----------------------------------------------------------------------------
    ArchSpec("albert", tasks=ENC, notes="one shared layer applied num_hidden_layers=2 times; transformers' Albert "
                                         "does not support gradient checkpointing (every cell unsupported)"),
    ArchSpec("bert", tasks=ENC),
    ArchSpec("deberta", tasks=ENC, overrides=_DEBERTA,
             notes="relative attention c2p|p2c, no absolute positions, as deberta-base ships"),
    ArchSpec("deberta-v2", tasks=ENC, overrides=_DEBERTA_V3,
             notes="deberta-v3-base settings: relative attention p2c|c2p, 256 log buckets, shared att key"),
    ArchSpec("distilbert", tasks=ENC),
    ArchSpec("electra", tasks=ENC),
    ArchSpec("roberta", tasks=ENC),
    ArchSpec("xlm-roberta", tasks=ENC),
    ArchSpec("xmod", tasks=ENC, overrides={"default_language": "en_XX"},
             notes="one language (en_XX); default_language set as users do with set_default_language "
                   "(adapters' XmodModel mixin passes lang_ids itself and replaces the language adapters)"),
    ArchSpec("modernbert", tasks=ENC,
             notes="adapters plugin interface; layer 0 global attention, layer 1 local (window 128 > seq)"),
    # --- decoder-only -------------------------------------------------------------------------
    ArchSpec("gpt2", tasks=DEC, decoder_only=True),
    ArchSpec("gptj", tasks=DEC, decoder_only=True, overrides={"rotary_dim": 4},
             notes="rotary_dim 4 of head_dim 8 (partial rotary, like GPT-J's 64 of 256)"),
    ArchSpec("llama", tasks=DEC, decoder_only=True),
    ArchSpec("mistral", tasks=DEC, decoder_only=True),
    ArchSpec("gemma2", tasks=DEC, decoder_only=True,
             notes="adapters plugin interface; layer_types follow the depth: sliding, full"),
    ArchSpec("gemma3_text", tasks=DEC, decoder_only=True,
             overrides={"layer_types": ["sliding_attention", "full_attention"]},
             notes="adapters plugin interface; one sliding (local rope) and one full (global rope) layer, "
                   "as the 5:1 default pattern would give two sliding layers at depth 2"),
    ArchSpec("qwen2", tasks=DEC, decoder_only=True, notes="adapters plugin interface"),
    ArchSpec("qwen3", tasks=DEC, decoder_only=True, notes="adapters plugin interface"),
    ArchSpec("phi", tasks=DEC, decoder_only=True, notes="adapters plugin interface; partial rotary 0.5"),
    ArchSpec("bert-generation", tasks=("causal_lm",), decoder_only=True, overrides={"is_decoder": True},
             notes="BertGenerationDecoder as a standalone causal LM (is_decoder=True, as its docs require); "
                   "the encoder side has no task head"),
    # --- encoder-decoder ----------------------------------------------------------------------
    ArchSpec("t5", tasks=S2S, overrides={"decoder_start_token_id": 0},
             notes="decoder_start_token_id 0 (= pad), as every t5 checkpoint config sets it"),
    ArchSpec("mt5", tasks=S2S, notes="gated-gelu feed-forward, untied lm_head"),
    ArchSpec("bart", tasks=S2S),
    ArchSpec("mbart", tasks=S2S, notes="decoder start = last non-pad label token (mbart shift_tokens_right)"),
    ArchSpec("plbart", tasks=S2S),
    ArchSpec("whisper", tasks=S2S, modality="audio", inputs=("unmasked",),
             head_classes={"seq2seq_lm": "WhisperForConditionalGeneration"},
             overrides={"num_mel_bins": 8, "max_source_positions": 16, "max_target_positions": 64},
             notes="input_features of 8 mel bins x 32 frames (2 x max_source_positions); no attention mask"),
    ArchSpec("bert2bert", model_type="encoder-decoder", tasks=S2S, build=_bert2bert,
             notes="EncoderDecoderModel(BertModel, BertLMHeadModel with cross-attention)"),
    # --- vision / multimodal ------------------------------------------------------------------
    ArchSpec("vit", tasks=("image_cls",), modality="vision", inputs=("unmasked",)),
    ArchSpec("beit", tasks=("image_cls",), modality="vision", inputs=("unmasked",),
             notes="mean pooling, drop_path 0.1 (defaults)"),
    ArchSpec("clip", tasks=("contrastive",), modality="multimodal", head_classes={"contrastive": "CLIPModel"},
             overrides={"projection_dim": 32, "text_config.eos_token_id": 2},
             notes="CLIPModel with return_loss; text pooled at argmax(input_ids) (eos_token_id 2, as the "
                   "openai checkpoints' configs), vision tower 32x32 patch 8"),
]}
