"""A quantized base (the qlora backend: bitsandbytes 4-bit / 8-bit, prepare_model_for_kbit_training), and peft's
QLoRA entry point on a model that is not quantized. The qlora backend's own refusals and plain failures come first;
whatever no entry here explains, a qlora cell borrows from peft's entries for the same cell unquantized
(expectations.TWINS)."""
from __future__ import annotations

from ..outcomes import Outcome
from .entry import Expect
from .groups import P, PEFT_SRC

Q = {"backend": "qlora"}
BNB = {"peft": ">=0.18", "bitsandbytes": ">=0.45"}
BNB_DOCS = "https://huggingface.co/docs/peft/developer_guides/quantization"
# peft methods with no bitsandbytes layer that do not refuse a Linear4bit / Linear8bitLt target (those with one:
# LoRA and its variants, AdaLoRA, IA3, HiRA, PVeRA, RandLoRA, RoAd: peft/tuners/*/bnb.py)
NO_BNB_LAYER = ("adamss", "deft", "delora", "frod", "hra", "loha", "lokr", "osf", "peanut", "supertuning", "tinylora",
                "xlora")
IN_PLACE_DELTA = ("c3a", "gralora", "poly")   # add their delta to the base layer's output in place
BIASED = ("bert", "gpt2", "qwen2")            # of the archs run: a bias on the adapted Linear layers
# a task head whose model's last parameter is not a `.weight` (a bias, a head module's output layer): transformers 5
# quantizes it (seen on 5.24.0 over the zoo, LoRA)
BIASED_HEAD = ("apertus", "audio-spectrogram-transformer", "beam", "bert", "big_bird", "camembert", "canine",
               "convbert", "data2vec-text", "deberta", "deberta-v2", "distilbert", "electra", "ernie", "esm",
               "eurobert", "fnet", "gte", "jina_embeddings_v3", "layoutlm", "longformer", "luke", "megatron-bert",
               "mobilebert", "modernbert", "mra", "nomic_bert", "nystromformer", "openai_privacy_filter", "rembert",
               "roberta", "roberta-prelayernorm", "roformer", "t5gemma", "t5gemma2", "tapas", "ultrabert", "umt5",
               "vit", "xlm-roberta", "xlm-roberta-xl", "xmod", "yoso")
# a sequence classifier with a dense layer before its output projection
DENSE_HEAD = ("big_bird", "camembert", "convbert", "data2vec-text", "distilbert", "electra", "esm", "longformer",
              "nystromformer", "roberta", "roberta-prelayernorm", "roformer", "xlm-roberta", "xmod", "yoso")

ENTRIES: list[Expect] = [
    # ---- the plain run fails before anything else: a quantized task head ----------------------------------------
    Expect({**Q, "arch": BIASED_HEAD, "task": ("seq_cls", "token_cls", "image_cls", "audio_cls")}, Outcome.ERROR,
           "transformers 5 quantizes a task head with a bias: get_keys_to_not_convert keeps the module of the "
           "model's last parameter, named by removing a '.weight' suffix (quantizers/base.py L50-61), and BERT's "
           "last parameter is classifier.bias, so no module is kept; peft's modules_to_save then asks the "
           "Linear4bit's uint8 weight to require grad ('only Tensors of floating point dtype can require "
           "gradients'), every method, with or without checkpointing (trainable tokens, which puts no head in "
           "modules_to_save, trains; GLoRA and PSOFT refuse the layers first). A head without a bias (Llama's, "
           "Qwen2's score) stays unquantized; 4.57.6 keeps BERT's (seen on 5.24.0: 43 archs of the zoo, their "
           "sequence and token classifiers)",
           "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/quantizers/base.py#L50",
           {**BNB, "transformers": ">=5"}, unless={"method": ("trainable_tokens", "glora", "psoft")}),
    Expect({**Q, "arch": DENSE_HEAD, "task": "seq_cls"}, Outcome.ERROR,
           "the sequence classifier is a head module with a dense layer before its output projection (RoBERTa's "
           "ClassificationHead, DistilBERT's pre_classifier): transformers keeps unquantized only the module of the "
           "model's last parameter, the output projection, so the dense layer is a Linear4bit, and peft's "
           "modules_to_save of the head asks its uint8 weight to require grad ('only Tensors of floating point dtype "
           "can require gradients'), every method, with or without checkpointing (seen on 4.57.6; BERT's head is one "
           "Linear and trains)", "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/"
           "integrations/bitsandbytes.py", {**BNB, "transformers": "<5"}, unless={"method": ("trainable_tokens",
                                                                                          "glora", "psoft")}),
    Expect({**Q, "arch": ("longt5", "switch_transformers")}, Outcome.ERROR,
           "T5's feed-forward casts its input to its output projection's dtype unless that is int8 "
           "(hidden_states.to(self.wo.weight.dtype)); T5 keeps `wo` unquantized (_keep_in_fp32_modules = ['wo']), "
           "LongT5 and Switch Transformers do not, so the input is cast to the Linear4bit's uint8 ('result type Float "
           "can't be cast to the desired output type Byte'), with or without checkpointing (seen on 4.57.6)",
           "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/models/longt5/"
           "modeling_longt5.py#L279", BNB),
    Expect({**Q, "arch": ("inkling2_text", "inkling2_loop_text"), "task": "causal_lm"}, Outcome.ERROR,
           "Inkling 2's causal LM on a 4-bit base builds a tensor of negative size when loaded, its base model "
           "trains (seen on 5.24.0 over the zoo, LoRA; not traced further)", BNB_DOCS, {**BNB, "transformers": ">=5"}),
    Expect({**Q, "arch": ("encoder-decoder", "gemma3n_text", "longcat_flash", "shieldgemma2", "mamba",
                          "nemo_speechlm", "mixtral")}, Outcome.ERROR,
           "on transformers 5 too the model's own code or loading does not take a 4-bit base, with or without "
           "checkpointing: Gemma 3n casts to a quantized weight's dtype, LongCat-Flash reads its quantized experts' "
           "shapes, the encoder-decoder wrapper and ShieldGemma 2 meet a Parameter without bitsandbytes' "
           "compress_statistics when added, Mamba's and NeMo SpeechLM's "
           "shapes, Mixtral's fused experts leave LoRA no target (seen on 5.24.0 over the zoo, LoRA; not traced "
           "further)", BNB_DOCS, {**BNB, "transformers": ">=5"}),
    Expect({**Q, "arch": ("fun_asr_nano", "gpt_neo", "gradium_phonon_tts", "pocket_tts", "zaya")}, Outcome.ERROR,
           "the tiny config does not pass transformers 5's strict validation when from_pretrained loads the "
           "quantized stand-in (StrictDataclassClassValidationError; building the model from the config object, as "
           "the other backends do, does not validate): a limit of the harness's shrunk configs, not of the "
           "libraries (seen on 5.24.0)", BNB_DOCS, {**BNB, "transformers": ">=5"}),
    Expect({**Q, "arch": "lfm2_vl", "order": "prepare_kbit"}, Outcome.GC_ERROR,
           "prepare_model_for_kbit_training with checkpointing on LFM2-VL: the checkpointed run asks a tensor that "
           "is not floating point to require grad ('only Tensors of floating point dtype can require gradients'), "
           "the plain run trains; transformers 5 hooks its vision tower's embeddings too (the general findings' "
           "VISION_TOWERS_HOOKED_5), where the quantized tower is not traced further (seen on 5.24.0)",
           BNB_DOCS, {**BNB, "transformers": ">=5"}),
    Expect({**Q, "arch": ("aria", "encoder-decoder", "gemma3n_text", "llama4", "longcat_flash", "nezha",
                          "paligemma")}, Outcome.ERROR,
           "the model's own code does not take a 4-bit base, with or without checkpointing: Aria multiplies by a "
           "quantized weight itself ('self and mat2 must have the same dtype, but got Float and Byte'), Gemma 3n "
           "casts to a quantized weight's dtype, Llama 4 and LongCat-Flash read their quantized expert weights' "
           "shapes, PaliGemma builds its mask in a quantized weight's dtype, NEZHA and the encoder-decoder wrapper "
           "fail while loading (seen on 4.57.6 over the zoo, LoRA; where in each model's code was not traced)",
           BNB_DOCS, {**BNB, "transformers": "<5"}),
    # ---- refusals: the method's own error for a quantized layer --------------------------------------------------
    Expect({**Q, "method": ("glora", "psoft")}, Outcome.UNSUPPORTED,
           "the method refuses a quantized base layer when it is added: GLoRA 'Target module Linear4bit(...) is not a "
           "plain torch.nn.Linear (after unwrapping); GLoRA does not support this layer type', PSOFT 'PSOFT init "
           "requires float32/float16/bfloat16. Re-quantize after init if needed' (seen on 4.57.6)",
           f"{PEFT_SRC}/tuners/psoft/layer.py", BNB),
    Expect({**Q, "method": ("prefix_tuning", "cartridge"), "order": "prepare_kbit"}, Outcome.UNSUPPORTED,
           "peft refuses prefix tuning / cartridges on a model that already checkpoints, as prepare_kbit's does "
           "(on transformers 4 the CPU device map fails first: below)", f"{PEFT_SRC}/peft_model.py",
           {**BNB, "transformers": ">=5"}),
    # ---- the plain run fails: not checkpointing findings ---------------------------------------------------------
    Expect({**Q, "method": NO_BNB_LAYER}, Outcome.ERROR,
           "peft has no bitsandbytes layer for the method, yet does not refuse the quantized target: its generic "
           "layer takes the Linear4bit's weight, the packed uint8 Params4bit of shape [out x in / 2, 1], for the dense "
           "weight, and fails with or without checkpointing: when it is added (AdaMSS, FRoD, OSF, TinyLoRA 'Only "
           "Tensors of floating point and complex dtype can require gradients', DeFT's and DeLoRA's shape and dtype "
           "errors) or in the first forward (LoHa, LoKr, HRA, PEANuT, SuperTuning shape errors; ShiRA's dtype; "
           "X-LoRA passes 'scalings' to the Linear4bit's forward); LLM.int8 likewise (seen on 4.57.6 and 5.24.0, "
           "llama, mistral, qwen2, gpt2, bert)", BNB_DOCS, BNB),
    Expect({**Q, "method": "shira"}, Outcome.ERROR,
           "as above for ShiRA on transformers 4: its sparse delta meets the dequantized weight in another dtype "
           "('expected m1 and m2 to have the same dtype'); on 5.24.0 it trains (why was not traced; seen on 4.57.6)",
           BNB_DOCS, {**BNB, "transformers": "<5"}),
    Expect({**Q, "method": IN_PLACE_DELTA, "arch": BIASED}, Outcome.ERROR,
           "C3A, GraLoRA and Poly add their delta to the base layer's output in place (result += ..., "
           "tuners/c3a/layer.py L199, gralora L379, poly L158); on a Linear4bit with a bias bitsandbytes' MatMul4Bit "
           "returns a view, which autograd refuses to modify in place ('Output 0 of MatMul4BitBackward is a view "
           "and is being modified inplace'); without a bias (llama, mistral) they train (seen on 4.57.6)",
           f"{PEFT_SRC}/tuners/c3a/layer.py#L199", BNB),
    Expect({**Q, "method": ("prefix_tuning", "cartridge")}, Outcome.ERROR,
           "peft's prefix tuning maps its cache to the layers' devices (utils/integrations.py get_layer_device_map): "
           "`next(d for d in model.hf_device_map.values() if d not in ['cpu', 'disk'])`, and a model loaded with a "
           "quantization_config on the CPU has hf_device_map {'': 'cpu'}: StopIteration in every forward, with or "
           "without checkpointing; on an accelerator it finds one (seen on 4.57.6, CPU; on 5.24.0 peft's own "
           "refusal of prefix tuning on a checkpointing model, or the findings of peft's prefix tuning)",
           f"{PEFT_SRC}/utils/integrations.py#L160", {**BNB, "transformers": "<5"}),
    Expect({**Q, "method": "unilora", "task": "causal_lm"}, Outcome.ERROR,
           "UniLoRA casts its per-layer scales to the base layer's weight dtype (tuners/unilora/layer.py L116: "
           "target_dtype = base_layer.weight.dtype), uint8 for a Linear4bit, which truncates them to 0: the adapter "
           "adds zero and its one vector never gets a gradient (vacuous baseline); under a head in modules_to_save "
           "the head trains and the cell is `safe, partly` (seen on 4.57.6)",
           f"{PEFT_SRC}/tuners/unilora/layer.py#L116", BNB),
    Expect({**Q, "parallel": "fsdp1"}, Outcome.ERROR,
           "FSDP1 flattens each unit's parameters into one flat parameter and refuses the 4-bit layers' uint8 "
           "storage beside the float ones ('Cannot flatten integer dtype tensors'): FSDP-QLoRA needs "
           "bnb_4bit_quant_storage set to the float dtype (accelerate's and peft's FSDP-QLoRA guides), which a QLoRA "
           "setup for one process does not set (a plain run that fails)",
           "https://huggingface.co/docs/peft/accelerate/fsdp"
           "#use-peft-qlora-and-fsdp-for-finetuning-large-models-on-multiple-gpus",
           BNB),
    Expect({**Q, "recipe": "eval_between"}, Outcome.ERROR,
           "a 4-bit base, on a CPU with AVX512-BF16: Linear4bit.forward in eval mode on an input that does not "
           "require grad "
           "repacks the weight for bitsandbytes' CPU inference kernel (nn/modules.py L612, "
           "_convert_weight_packed_for_cpu), which reshapes the absmax to [out, in / blocksize]: 0 columns for the "
           "tiny model's 32 features against the blocksize of 64 ('shape [32, 0] is invalid'), with or without "
           "checkpointing. At 64 features and more the repack succeeds and is kept: every later training forward "
           "takes the packed path, gemv_4bit, which has no autograd kernel, and the gradient through the base layer "
           "is lost silently, checkpointing or not (cases/bnb_cpu_eval_repack_loses_gradients.py)",
           "https://github.com/bitsandbytes-foundation/bitsandbytes/blob/0.50.2/bitsandbytes/nn/modules.py#L612",
           BNB, machine="bnb_cpu_repacks", unless={"method": "lora_8bit"}),
    # ---- peft's QLoRA entry point on a model that is not quantized -----------------------------------------------
    Expect({**P, "order": "prepare_kbit"}, Outcome.NOT_CHECKPOINTED,
           "prepare_model_for_kbit_training(model, use_gradient_checkpointing=True) enables checkpointing only on a "
           "model loaded in 8 or 4 bits (or GPTQ, AQLM, EETQ, HQQ, torchao): on any other it freezes the parameters "
           "and returns without a word, so nothing is recomputed and no memory saved (utils/other.py L221; peft#513 "
           "proposed decoupling the two; cases/peft_prepare_kbit_unquantized.py). Users who call it 'to be safe' "
           "train without checkpointing",
           f"{PEFT_SRC}/utils/other.py#L221", {"peft": ">=0.14"}),
]
