"""The libraries refuse checkpointing or the method, with their own documented error; transformers 5's
activation-checkpointing options."""
from __future__ import annotations

from ..outcomes import Outcome
from .entry import Expect
from .groups import (A, ADAPTERS_REENTRANT, ADAPTERS_SRC, CONV1D, LINEAR_ONLY, NO_PROMPT_TUNING, P, PEFT_SRC, TF_SRC,
                     TP)

PQ = {"backend": ("peft", "qlora")}   # a PeftModel's refusals, quantized base or not

ENTRIES: list[Expect] = [
    # ---- the aux_outputs recipe does not apply (harness/train.py aux_refused: the plain run refuses it) -------------
    Expect({"recipe": "aux_outputs", "task": "contrastive"}, Outcome.UNSUPPORTED,
           "the aux_outputs recipe does not apply: a contrastive model returns its towers' outputs nested "
           "(text_model_output, vision_model_output) and no attentions, hidden states or router logits of its own, "
           "which the recipe trains on (the harness's NoAuxOutputs; seen on 4.48.3, 4.57.6 and 5.24.0, every "
           "contrastive model of the zoo, full fine-tuning)", f"{TF_SRC}/models/clip/modeling_clip.py",
           {"transformers": ">=4.48"}),
    Expect({"recipe": "aux_outputs", "arch": ("blip-2", "instructblip", "flava")}, Outcome.UNSUPPORTED,
           "as above for these composite models: their outputs nest the vision, Q-Former and language model outputs "
           "(seen on 4.57.6 and 5.24.0)", f"{TF_SRC}/models/blip_2/modeling_blip_2.py", {"transformers": ">=4.57"}),
    Expect({"recipe": "aux_outputs", "arch": ("fnet", "focalnet", "mobilevit", "mra", "swiftformer")},
           Outcome.UNSUPPORTED,
           "the aux_outputs recipe does not apply: the model's forward takes no output_attentions (TypeError, "
           "the harness's aux_refused); transformers 5's forwards take **kwargs and these train (seen on 4.57.6 and "
           "5.24.0)", f"{TF_SRC}/models/fnet/modeling_fnet.py", {"transformers": ">=4.57,<5"}),
    Expect({"recipe": "aux_outputs", "arch": ("mamba", "falcon_mamba", "recurrent_gemma"), "task": "feature"},
           Outcome.UNSUPPORTED,
           "as above for the base model, without a head: its forward takes no output_attentions; the causal LM "
           "head's takes **kwargs (seen on 4.57.6; transformers 5 trains both)",
           f"{TF_SRC}/models/mamba/modeling_mamba.py", {"transformers": ">=4.57,<5"}),
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
    Expect({**PQ, "recipe": "compose_active", "task": ("seq_cls", "token_cls", "image_cls", "audio_cls")},
           Outcome.UNSUPPORTED,
           "peft's task wrapper keeps the task head in modules_to_save, whose wrapper takes one adapter at a time "
           "('Only one adapter can be set at a time for ModulesToSaveWrapper'; peft 0.14 takes two)",
           f"{PEFT_SRC}/utils/other.py", {"peft": ">=0.18"}, unless={"method": "xlora"}),   # X-LoRA fails before
    Expect({**PQ, "recipe": "compose_weighted", "task": ("seq_cls", "token_cls", "image_cls", "audio_cls")},
           Outcome.UNSUPPORTED,
           "add_weighted_adapter refuses adapters whose task head is in modules_to_save ('Cannot add weighted "
           "adapters if they target the same module with modules_to_save')", f"{PEFT_SRC}/tuners/lora/model.py",
           {"peft": ">=0.14"}),
    Expect({**PQ, "recipe": "compose_*", "method": "lora_mts"}, Outcome.UNSUPPORTED,
           "as above: LoRA with modules_to_save, on any task", f"{PEFT_SRC}/utils/other.py", {"peft": ">=0.18"}),
    Expect({**PQ, "recipe": "compose_active", "method": ("ln_tuning", "shadow", "trainable_tokens", "adalora")},
           Outcome.UNSUPPORTED,
           "the method refuses two active adapters (LN tuning: 'does not allow inference with more than one adapter'; "
           "ShadowPEFT: 'requires exactly one active adapter'; trainable tokens: 'Only disjunct token indices'; "
           "AdaLoRA: one trainable adapter)", f"{PEFT_SRC}/tuners", {"peft": ">=0.18"}),
    Expect({**A, "recipe": "compose_*", "arch": "gpt2", "method": ("lora", "ia3", "unipelt")}, Outcome.UNSUPPORTED,
           "adapters' LoRA on GPT-2's fused Conv1D (LoRAMergedLinear) takes no composition block ('Invalid adapter "
           "setup. Cannot use Stack[cell, cell2] with LoRA')", f"{ADAPTERS_SRC}/methods/lora.py#L1065",
           {"adapters": ">=1.2"}),
    Expect({"backend": (P["backend"], TP["backend"], "qlora"), "recipe": ("switch", "switch_frozen"),
            "method": "adalora"},
           Outcome.UNSUPPORTED,
           "AdaLoRA refuses a second trainable adapter ('AdaLoraModel supports only 1 trainable adapter')",
           f"{PEFT_SRC}/tuners/adalora/model.py", {"peft": ">=0.18"}),
    Expect({**PQ, "recipe": ("switch", "switch_frozen", "two_forwards", "eval_between"), "method": "alora",
            "gc_mode": ("reentrant", "non_reentrant")}, Outcome.UNSUPPORTED,
           "aLoRA refuses a second forward before the backward with transformers' checkpointing on ('Multiple "
           "invocations of PEFT forward hooks before .backward() with enabled gradient checkpointing'): a forward per "
           "adapter (switch), the second view's (two_forwards), or eval_between's train-mode forward between steps, "
           "whose output is discarded without a backward, before the next step's", f"{PEFT_SRC}/tuners/lora/model.py",
           {"peft": ">=0.18"}),
    Expect({**PQ, "recipe": ("switch", "switch_frozen"), "method": "shadow", "task": "seq_cls"}, Outcome.UNSUPPORTED,
           "ShadowPEFT refuses a second adapter when one uses sequence classification (its classifier is "
           "shared)", f"{PEFT_SRC}/tuners/shadow", {"peft": ">=0.21"}),
    # transformers' add_adapter (peft's inject_adapter_in_model underneath) refuses what needs a PeftModel
    Expect({**TP, "method": ("frod", "pvera", "pvera_seeded", "tinylora", "unilora", "vblora", "vera")},
           Outcome.UNSUPPORTED,
           "inject_adapter_in_model refuses methods whose adapters share state that a PeftModel keeps ('does not "
           "support PeftType.VERA because ...'): transformers' add_adapter cannot add them",
           f"{PEFT_SRC}/mapping.py", {"peft": ">=0.18"}),
    Expect({**TP, "method": ("adaption_prompt", "cartridge", "cpt", "p_tuning", "prefix_tuning", "prompt_tuning",
                             "shadow")}, Outcome.UNSUPPORTED,
           "create_and_replace refuses prompt learning, adaption prompt and ShadowPEFT ('does not support prompt "
           "learning, adaption prompt ...'): transformers' add_adapter cannot add them",
           f"{PEFT_SRC}/mapping.py", {"peft": ">=0.14"}),
    Expect({**TP, "arch": CONV1D, "method": LINEAR_ONLY}, Outcome.UNSUPPORTED,
           "as with get_peft_model: the method supports nn.Linear only and refuses transformers' Conv1D layers",
           f"{PEFT_SRC}/tuners/tuners_utils.py", {"peft": ">=0.17"}),
    Expect({**TP, "arch": CONV1D, "method": "osf"}, Outcome.ERROR,
           "OSF skips GPT-2's Conv1D layers, so add_adapter injects nothing and transformers raises ('Did not "
           "succeeded in setting the adapter'), without checkpointing", f"{PEFT_SRC}/tuners/osf", {"peft": ">=0.18"}),
    Expect({**P, "arch": CONV1D, "method": LINEAR_ONLY}, Outcome.UNSUPPORTED,
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
    Expect({**P, "method": ("prefix_tuning", "cartridge"), "order": "gc_first",
            "gc_mode": ("non_reentrant", "reentrant")},
           Outcome.UNSUPPORTED,
           "peft refuses prefix tuning / cartridges on a model that already checkpoints (transformers' switch: "
           "is_gradient_checkpointing; torch's wrapper sets nothing it reads, findings_launch)",
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
]
