"""Known non-equivalent cells, as data (matched like OpInfo's DecorateInfo).

Each entry: a cell pattern (fnmatch per axis), the library versions it holds for (PEP 440
specifiers, all must match the installed versions), the expected outcome, the reason and a link.
The first matching entry wins. Cells no entry matches are expected `equivalent`; an entry may
also say `equivalent` alone, as an exception carved out of a broader entry further down. Matching is
strict: an expected failure that now comes out `equivalent` fails the run, so an upstream fix
shows up.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .outcomes import Outcome


@dataclass(frozen=True)
class Expect:
    match: dict          # field -> fnmatch pattern or tuple of them (backend arch method gc_mode inputs order
                         # task, and the arch's modality)
    outcome: Outcome | tuple[Outcome, ...]   # several: one cause that shows as either (e.g. a loss that no
    reason: str                                 # longer requires grad -> gc_error, else missing_grad)
    link: str = ""
    versions: dict = field(default_factory=dict)   # package -> specifier, e.g. {"adapters": ">=1.0"}
    refuses_checkpointing: bool = False   # the library's refusal in gradient_checkpointing_enable itself: it comes
                                          # before any plain run is needed (see expected())
    below_tolerance: bool = False   # a loss the comparator may not see: a tensor shared by every layer (UniLoRA's
                                    # one vector) keeps the other layers' part of its gradient, so losing some
                                    # layers' part is a value difference of that part's size, `equivalent` when it is
                                    # below the tolerance. The only entries that may list `equivalent` among other
                                    # outcomes: the strict entries of the methods with a tensor per layer still
                                    # show an upstream fix of the same loss. Also a difference whose size varies
                                    # by arch (PVeRA's other noise) when a case script is its strict guard.

    machine: str = ""   # a condition of the machine (a key of MACHINES) the entry holds on, e.g. no accelerator

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        return self.outcome if isinstance(self.outcome, tuple) else (self.outcome,)

    def applies(self, cell_fields: dict) -> bool:
        for axis, pattern in self.match.items():
            patterns = (pattern,) if isinstance(pattern, str) else pattern
            if not any(fnmatch.fnmatchcase(str(cell_fields.get(axis, "")), p) for p in patterns):
                return False
        for pkg, spec in self.versions.items():
            v = installed(pkg)
            if v is None or Version(v) not in SpecifierSet(spec):
                return False
        return not self.machine or MACHINES[self.machine]()


def _no_accelerator() -> bool:
    import torch

    return torch.accelerator.current_accelerator() is None


MACHINES = {"no_accelerator": _no_accelerator}


@lru_cache(maxsize=None)
def installed(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


ADAPTERS_REENTRANT = (
    "adapters' gradient_checkpointing_enable refuses use_reentrant=True: it needs context_fn to hand the "
    "ForwardContext to the recompute, which only the non-reentrant checkpoint supports"
)

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
                       "wav2vec2-conformer")
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
# Fun-ASR-Nano's has no input layer at all (fed audio since 2026-12-04; seen on 5.24.0) ...
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
PEFT_SRC = "https://github.com/huggingface/peft/blob/v0.21.2/src/peft"
CONV1D = ("gpt2", "gpt-sw3")                          # transformers' Conv1D instead of nn.Linear (gpt-sw3 is GPT-2)
# peft methods that adapt weights inside the (checkpointed) layers, none of which touch the inputs
PEFT_WEIGHT_METHODS = (
    "lora", "dora", "rslora", "lora_mts", "adalora", "loha", "lokr", "vera", "pvera", "fourierft", "waveft",
    "vblora", "unilora", "randlora", "shira", "c3a", "road", "delora", "gralora", "hira", "miss", "adamss",
    "lily", "frod", "glora", "tinylora", "psoft", "peanut", "deft", "supertuning", "osf", "poly", "xlora",
    "oft", "boft", "hra", "ia3", "beft", "adaption_prompt")
# the weight methods whose gradients come back when a layer input requires grad (not Poly / X-LoRA, which lose
# theirs through hooks, nor adaption prompt)
PEFT_INPUT_GRAD_METHODS = tuple(m for m in PEFT_WEIGHT_METHODS if m not in ("poly", "xlora", "adaption_prompt"))
# what the KV-sharing models lose under reentrant checkpointing: whatever trains through their layers
KV_SHARING_METHODS = PEFT_INPUT_GRAD_METHODS + ("full", "ln_tuning", "cpt", "multitask_prompt_tuning", "p_tuning",
                                              "prompt_tuning", "trainable_tokens", "pvera_seeded")
PEFT_LINEAR_ONLY = ("beft", "boft", "c3a", "delora", "hra", "miss", "oft", "poly", "shira", "supertuning",
                    "loha", "lokr", "glora", "psoft", "road", "lily", "peanut")
EXPECTATIONS: list[Expect] = [
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
    # ---- the libraries refuse checkpointing, with their own documented error -------------------
    Expect({"arch": "albert"}, Outcome.UNSUPPORTED,
           "AlbertPreTrainedModel.supports_gradient_checkpointing is False: transformers refuses",
           f"{TF_SRC}/models/albert/modeling_albert.py", {"transformers": ">=4.35"}, refuses_checkpointing=True),
    Expect({**A, "arch": "clip"}, Outcome.UNSUPPORTED,
           "adapters' gradient_checkpointing_enable needs enable_input_require_grads, which CLIPModel lacks",
           f"{ADAPTERS_SRC}/model_mixin.py", {"adapters": ">=1.1.0"}, refuses_checkpointing=True),
    Expect({**A, "gc_mode": "reentrant"}, Outcome.UNSUPPORTED, ADAPTERS_REENTRANT,
           "https://github.com/adapter-hub/adapters/pull/759", {"adapters": ">=1.1.0"}, refuses_checkpointing=True),
    # ---- the libraries refuse the method, with their own documented error ----------------------
    Expect({**P, "arch": CONV1D, "method": PEFT_LINEAR_ONLY}, Outcome.UNSUPPORTED,
           "the method supports nn.Linear only and refuses transformers' Conv1D layers",
           f"{PEFT_SRC}/tuners/tuners_utils.py", {"peft": ">=0.17"}),
    Expect({**P, "arch": CONV1D, "method": "osf", "task": "causal_lm"}, Outcome.ERROR,
           "OSF silently skips Conv1D layers: nothing of the causal LM is trainable (the loss has no grad_fn)",
           f"{PEFT_SRC}/tuners/osf", {"peft": ">=0.18"}),
    Expect({**P, "arch": CONV1D, "method": "osf"}, Outcome.NOT_CHECKPOINTED,
           "OSF silently skips Conv1D layers: only the head trains, so nothing inside the checkpointed "
           "layers needs recomputing and checkpointing saves no memory",
           f"{PEFT_SRC}/tuners/osf", {"peft": ">=0.18"}),
    Expect({**P, "method": ("prefix_tuning", "cartridge"), "arch": ("bert",)}, Outcome.UNSUPPORTED,
           "transformers 5 dropped the key/value cache from BERT: peft refuses prefix tuning without past key values",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({**P, "method": ("prefix_tuning", "cartridge"), "order": "gc_first"}, Outcome.UNSUPPORTED,
           "peft refuses prefix tuning / cartridges on a model that already checkpoints",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14"}),
    Expect({**A, "arch": ("modernbert", "gemma2", "gemma3_text", "qwen2", "qwen3", "phi"),
            "method": ("prefix_tuning*", "prompt_tuning", "mam", "unipelt")}, Outcome.UNSUPPORTED,
           "the plugin interface (AdapterModelInterface) of adapters supports no prefix/prompt tuning",
           f"{ADAPTERS_SRC}/interface.py", {"adapters": ">=1.2"}),
    Expect({**A, "arch": NO_PROMPT_TUNING, "method": "prompt_tuning"}, Outcome.UNSUPPORTED,
           "the model's adapters mixin declares support_prompt_tuning = False: add_adapter refuses",
           f"{ADAPTERS_SRC}/models/llama/mixin_llama.py", {"adapters": ">=1.2"}),
    Expect({**A, "arch": ("vit", "beit"), "method": ("seq_bn_inv", "double_seq_bn_inv")}, Outcome.UNSUPPORTED,
           "vision models have no token embeddings for the invertible adapter: add_adapter refuses",
           f"{ADAPTERS_SRC}/model_mixin.py", {"adapters": ">=1.2"}),
    Expect({"arch": "van"}, Outcome.UNSUPPORTED,
           "transformers refuses: VanForImageClassification is not compatible with gradient checkpointing",
           f"{TF_SRC}/models/deprecated/van/modeling_van.py", {"transformers": ">=4.35,<5"}, refuses_checkpointing=True),
    Expect({"backend": "full", "arch": "gemma3n_text", "inputs": "padded"}, Outcome.ERROR,
           "not checkpointing: the plain run's gradients are NaN from step 0. A model built by transformers has a "
           "zero embedding row for the pad id (padding_idx), and AltUp takes the target magnitude as "
           "mean(h ** 2) ** 0.5 with no epsilon: at a pad position that is sqrt(0), whose gradient is infinite, "
           "times the loss's zero there; a failing plain run comes first, so before the offload entry below (the "
           "peft cells: the calibration table; seen on 4.57.6 and 5.24.0)",
           f"{TF_SRC}/models/gemma3n/modeling_gemma3n.py#L1699", {"transformers": ">=4.57"}),
    # ---- transformers 5's activation-checkpointing options (the `full` backend's extra gc modes), after the
    # refusals of checkpointing itself ----
    Expect({"gc_mode": "non_reentrant_offload"}, Outcome.GC_ERROR,
           "offload=True wraps each checkpoint in save_on_cpu(pin_memory=True, device_type=<accelerator or "
           "'cpu'>); without an accelerator torch.cpu.is_available() is True, so save_on_cpu pins and the forward "
           "raises 'pin_memory=True requires a CUDA or other accelerator backend' although the code means "
           "'nothing to copy off a device' (every release with offload, 5.17.0 to 5.25.0, bisected; PR #48590 "
           "added the cpu fallback; cases/offload_pin_memory_without_accelerator.py)", f"{TF5}/modeling_utils.py#L3160", {"transformers": ">=5.17"},
           machine="no_accelerator"),
    # ---- the baseline itself fails inside the library (not checkpointing findings) ------------
    Expect({**P, "arch": ("clip_text_model", "flava")}, Outcome.ERROR,
           "peft's task wrapper (SEQ_CLS / FEATURE_EXTRACTION) passes inputs_embeds, which CLIPTextModel and FlavaModel "
           "do not take: every method's plain run fails", f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.18"}),
    Expect({**P, "arch": "mamba2", "method": ("miss", "osf")}, Outcome.ERROR,
           "no linear layer of the tiny Mamba2 that peft accepts (out_proj is refused) has dims divisible by the "
           "block size of the block-structured methods: nothing to adapt", f"{PEFT_SRC}/tuners/tuners_utils.py",
           {"peft": ">=0.18"}),
    Expect({**P, "arch": "mixtral", "method": ("lora", "dora", "rslora", "lora_mts", "xlora")}, Outcome.ERROR,
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
            "method": ("lora", "dora", "rslora", "lora_mts")},
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
           "the feature model trains (4.57.6 product part 33)",
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
    Expect({**P, "arch": VISION_TOWER_5 + AUDIO_TOWER_5, "method": PEFT_WEIGHT_METHODS, "gc_mode": "reentrant"},
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
           "(seen on 5.24.0, product part 15, both orders; reentrant: the entry above)",
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
    Expect({**P, "arch": BATCHNORM + BATCHNORM_5, "method": PEFT_WEIGHT_METHODS + ("ln_tuning", "pvera_seeded"),
            "gc_mode": "reentrant", "order": "adapter_first"}, (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH),
           "the reentrant adapter_first loss of gradients (below) on a model whose BatchNorm statistics also differ",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14"}),
    Expect({**P, "arch": tuple(a for a in BATCHNORM + BATCHNORM_5 if a in NO_INPUT_EMBEDDINGS_5),
            "method": PEFT_WEIGHT_METHODS + ("pvera_seeded",), "gc_mode": "reentrant"},
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
            "method": PEFT_INPUT_GRAD_METHODS, "gc_mode": "reentrant"}, Outcome.EQUIVALENT,
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
    Expect({"backend": "full", "arch": "zamba2", "inputs": "padded", "task": "seq_cls"}, Outcome.MISMATCH,
           "not recompute: checkpointing forces use_cache off, and Zamba2MambaMixer.torch_forward zeroes the pad "
           "positions after the causal conv1d only when a cache exists (L761-764); the no-cache branch (L770) lets "
           "silu(conv1d.bias) at the pads into the SSM scan of the real tokens (Mamba2's torch path and Zamba2's "
           "CUDA path mask it). The bias starts at zero, so it shows once full fine-tuning has moved it (step 1-2, "
           "4e-6, the same in float64). Probed: a plain run with use_cache=False is bit-identical to the "
           "checkpointed one; the post-conv mask added to the no-cache branch makes them agree (seen on 4.57.6)",
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
           f"{PEFT_SRC}/tuners/ln_tuning", {"peft": ">=0.14"}),
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
    Expect({**P, "arch": EMBEDDINGS_NOT_CALLED, "method": PEFT_WEIGHT_METHODS + ("ln_tuning",), "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "get_input_embeddings() returns a module the encoder never calls (BART's `shared`; the encoder calls its "
           "own embed_tokens sharing the weight), so enable_input_require_grads' hook never fires: with reentrant "
           "checkpointing no layer input requires grad, in either order (fixed in transformers 5)",
           "https://github.com/huggingface/transformers/pull/41821", {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": ENCODER_NOT_HOOKED, "method": PEFT_WEIGHT_METHODS + ("ln_tuning",), "gc_mode": "reentrant"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR),
           "get_input_embeddings() is the decoder's token embedding: enable_input_require_grads hooks only that, and "
           "the encoder (audio / pixel input) feeds its reentrant-checkpointed layers an input that requires no grad: "
           "its adapters get none, in either order", f"{TF_SRC}/modeling_utils.py#L2856",
           {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": "speech_to_text", "method": PEFT_WEIGHT_METHODS + ("ln_tuning",), "gc_mode": "reentrant"},
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
    Expect({**P, "arch": FEATURE_ENCODER_GRAD, "method": PEFT_INPUT_GRAD_METHODS, "gc_mode": "reentrant"},
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
    Expect({"arch": KV_SHARING, "gc_mode": "reentrant", "method": KV_SHARING_METHODS}, Outcome.MISMATCH,
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
    Expect({**P, "arch": "qwen3_asr_encoder", "order": "gc_first", "method": tuple(
            m for m in PEFT_INPUT_GRAD_METHODS + ("ln_tuning",)
            if m not in ("boft", "deft", "dora", "hra", "osf", "shira", "waveft"))}, Outcome.NOT_CHECKPOINTED,
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
           f"{TF5}/models/qwen3_asr/modeling_qwen3_asr.py#L366", {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({**P, "arch": FRONT_PATCH_EMBED, "method": PEFT_INPUT_GRAD_METHODS, "gc_mode": "reentrant"},
           Outcome.EQUIVALENT,
           "the generic targets adapt the vision tower's patch embedding (a Linear in front of the first checkpointed "
           "layer): its grad-requiring output is the layers' input, so reentrant checkpointing works in both orders "
           "though the tower has no input embeddings to hook (seen on 5.24.0; SigLIP2's tower on 4.57.6 too)",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14", "transformers": ">=4.57"}),
    Expect({**P, "arch": VISION_TOWERS_HOOKED_5, "method": PEFT_INPUT_GRAD_METHODS + ("ln_tuning",),
            "gc_mode": "reentrant"}, Outcome.EQUIVALENT,
           "these vision towers declare main_input_name 'input_ids' and have input embeddings (the patch embedding): "
           "transformers 5's gradient_checkpointing_enable hooks them as it does text models, so unlike other vision "
           "models they keep the adapters' gradients in the adapter_first order too (seen on 5.24.0)",
           f"{TF5}/modeling_utils.py#L3190", {"peft": ">=0.14", "transformers": ">=5"}),
    Expect({**P, "arch": FRONT_PROJECTION, "method": PEFT_INPUT_GRAD_METHODS + ("ln_tuning",), "gc_mode": "reentrant"},
           Outcome.EQUIVALENT,
           "the arch-generic targets adapt the projection between the embeddings / features and the first "
           "checkpointed layer; its grad-requiring output is the layers' input, so reentrant checkpointing works "
           "(probed: with that projection left out of the targets the gradients are lost)",
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
    Expect({**P, "arch": NO_INPUT_EMBEDDINGS_5, "method": PEFT_WEIGHT_METHODS + ("ln_tuning",), "gc_mode": "reentrant"},
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
    Expect({**P, "arch": ("idefics2", "idefics3", "smolvlm"), "method": PEFT_INPUT_GRAD_METHODS + ("ln_tuning",),
            "gc_mode": "reentrant", "order": "gc_first"}, Outcome.EQUIVALENT,
           "these VLMs override enable_input_require_grads to hook the vision model's patch embeddings as well as the "
           "text embeddings (peft issue 1402), so the vision tower's adapters keep their gradients in this order "
           "(seen on 4.57.6: Idefics2, every weight method; Idefics3, LN tuning too)",
           f"{TF_SRC}/models/idefics2/modeling_idefics2.py#L795", {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "arch": "instructblip", "method": PEFT_WEIGHT_METHODS + ("ln_tuning",), "gc_mode": "reentrant",
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
    Expect({**P, "modality": "multimodal", "method": PEFT_WEIGHT_METHODS + ("ln_tuning",), "gc_mode": "reentrant",
            "order": "gc_first"}, (Outcome.MISSING_GRAD, Outcome.MISMATCH),
           "enable_input_require_grads hooks only the text embeddings of a vision- or audio-language model: the "
           "adapters inside the reentrant-checkpointed vision (audio) tower get no gradient (a parameter shared "
           "with the text side, e.g. UniLoRA's, gets only part of it: mismatch; the audio towers of Qwen2-Audio and "
           "Voxtral, fed audio since 2026-12-04, likewise)", f"{TF_SRC}/modeling_utils.py#L2856",
           {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "method": "unilora", "gc_mode": "reentrant", "order": "adapter_first"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH, Outcome.EQUIVALENT, Outcome.NOT_CHECKPOINTED),
           "the reentrant adapter_first loss of gradients (below) inside the checkpointed layers; UniLoRA's one shared "
           "vector keeps the part of adapted modules outside them, so it shows as a value difference of the lost "
           "part's size (Mistral3: below tolerance), or, when no checkpointed layer is recomputed at all, as "
           "not_checkpointed (CANINE; seen on 4.57.6)", f"{PEFT_SRC}/peft_model.py",
           {"peft": ">=0.18"}, below_tolerance=True),
    Expect({**P, "method": PEFT_WEIGHT_METHODS, "gc_mode": "reentrant", "order": "adapter_first"},
           (Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH),
           "peft calls enable_input_require_grads only when the model already checkpoints at get_peft_model; "
           "PeftModel.gradient_checkpointing_enable afterwards does not, so with reentrant checkpointing no "
           "input of a checkpointed layer requires grad and the adapters inside get none (gc_error when "
           "nothing outside the layers trains: the loss has no grad_fn; mismatch for a parameter shared with "
           "modules outside the layers, e.g. UniLoRA's)",
           f"{PEFT_SRC}/peft_model.py", {"peft": ">=0.14", "transformers": "<5"}),
    Expect({**P, "modality": ("vision", "audio"), "method": PEFT_WEIGHT_METHODS + ("ln_tuning",),
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
    Expect({**P, "method": "xlora", "gc_mode": "non_reentrant"}, Outcome.GC_ERROR,
           "X-LoRA injects the per-token expert scalings with hooks removed after forward: the recompute runs "
           "plain LoRA and saves a different number of tensors (CheckpointError)",
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
    Expect({**P, "method": "pvera_seeded", "gc_mode": "non_reentrant"},
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
           "passed: gradient_checkpointing forces use_cache off in training, and Doge's unmasked forward computes "
           "something else without a cache (probed: a plain run with use_cache=False is equivalent)",
           f"{TF_SRC}/models/doge/modeling_doge.py", {"transformers": ">=4.57,<5"}),

]


def expected(cell_fields: dict, table: list[Expect] | None = None,
             calibrated: bool = True) -> tuple[tuple[Outcome, ...], Expect | None]:
    """(acceptable outcomes, the entry that says so) for a cell; (equivalent,) when no entry matches.

    With `calibrated`, the generated baseline-calibration table of the installed release is consulted
    too (harness/calibration.py): when it lists the cell's plain run as failing, the cell comes out as
    that run did, so only an entry naming that outcome (one that explains the failure) still wins over
    the table's bare measurement; entries about checkpointing findings are passed over."""
    failing, stage = None, None
    if calibrated:
        from .calibration import baseline_failure

        failing, stage = baseline_failure(cell_fields)
    # a refusal of checkpointing itself shows unless the checkpointed run fails before it, as the plain one did:
    # in gc_first order checkpointing is enabled right after building, in adapter_first after attaching
    refusal_first = stage != "build" and (cell_fields.get("order") == "gc_first" or stage == "train")
    for e in EXPECTATIONS if table is None else table:
        if e.applies(cell_fields):
            if failing is not None and failing.outcome not in e.outcomes and not (
                    e.refuses_checkpointing and refusal_first):
                continue
            return e.outcomes, e
    if failing is not None:
        return failing.outcomes, failing
    return (Outcome.EQUIVALENT,), None


def judge(cell_fields: dict, outcome: str) -> dict:
    """The expectation part of a result record: `expected` ("a|b"), `matches`, `reason`, `link`."""
    want, why = expected(cell_fields)
    return {"expected": "|".join(w.value for w in want), "matches": outcome in {w.value for w in want},
            "reason": why.reason if why else "", "link": why.link if why else ""}
