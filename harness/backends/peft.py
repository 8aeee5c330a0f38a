"""Backend `peft` (Hugging Face PEFT): one MethodSpec per PeftType, sized for hidden-32 models.

Users' path:

* `gc_first`: ``model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": ...})``
  on the transformers model, then ``get_peft_model(model, config)`` (whose ``PeftModel.__init__``
  calls ``enable_input_require_grads`` when the model reports ``is_gradient_checkpointing``);
* `adapter_first`: ``get_peft_model(model, config)`` first, then
  ``peft_model.gradient_checkpointing_enable(...)`` on the PeftModel (forwarded by ``__getattr__`` to
  the transformers model).

Nothing is patched: whatever ``enable_input_require_grads`` does or does not happen is the libraries'
behaviour. Sizes: hidden 32, intermediate 37, 4 heads (head_dim 8), 2 kv-heads on llama (so
``v_proj`` is 32 -> 16), vocab 256. Every block-structured method is sized to divide 8.

Target modules: peft's own default for the model_type when it has one, else an arch-generic
fallback resolved on the model (:mod:`._peft_targets`).
"""
from __future__ import annotations

import tempfile

from ..archs.base import ArchSpec
from . import _peft_targets as T
from .base import KBIT_ORDER, Backend, MethodSpec

NAME = "default"
NAMES = (NAME, "second")   # the switch recipe's two adapters
# how a user makes both adapters trainable again after set_adapter froze the inactive one (the switch recipe): peft's
# own set_requires_grad (PeftModel's; the tuners' function on a model holding peft layers, as transformers'
# integration makes it), or, where peft has neither or refuses it (prompt learning), requires_grad set on the
# adapters' tensors by name, as users of older peft do
TRAIN_BOTH = {
    "peft_model": "model.set_requires_grad(list(NAMES))",
    "tuners": "peft.tuners.tuners_utils.set_requires_grad(model, list(NAMES))",
    "by_name": ("for n, p in model.named_parameters():\n"
                "    if set(n.split('.')) & set(NAMES):\n"
                "        p.requires_grad_(True)"),
}


def train_both_way(peft_model: bool, method: str) -> str:
    """The TRAIN_BOTH way a user of the installed peft takes on a PeftModel (`peft_model`) or on a model holding peft
    layers, of `method`."""
    import peft
    import peft.tuners.tuners_utils as tuners

    if peft_model:
        # PeftModel.set_requires_grad refuses prompt learning ("not supported for prompt learning methods") and, for
        # adaption prompt, calls its base_model's: the transformers model (ONE_ACTIVE), which has none
        return "peft_model" if hasattr(peft.PeftModel, "set_requires_grad") and method not in ONE_ACTIVE else "by_name"
    return "tuners" if hasattr(tuners, "set_requires_grad") else "by_name"


def train_both(model, method: str) -> None:
    import peft
    import peft.tuners.tuners_utils  # noqa: F401

    way = train_both_way(isinstance(model, peft.PeftModel), method)
    exec(TRAIN_BOTH[way], {"model": model, "NAMES": NAMES, "peft": peft})


_TASK_TYPE = {
    "causal_lm": "CAUSAL_LM",
    "seq_cls": "SEQ_CLS",
    "seq2seq_lm": "SEQ_2_SEQ_LM",
    "token_cls": "TOKEN_CLS",
    "feature": "FEATURE_EXTRACTION",
}
# tasks without a peft TaskType: peft's image-classification guide passes no task_type and trains
# the new head through modules_to_save.
_HEAD_TO_SAVE = {"image_cls": ["classifier"], "audio_cls": ["classifier", "projector"]}
# the head of each task, for `lora_mts`
_HEADS = {
    "causal_lm": ["lm_head"], "seq2seq_lm": ["lm_head"], "seq_cls": ["classifier", "score"],
    "token_cls": ["classifier"], "image_cls": ["classifier"], "audio_cls": ["classifier", "projector"],
}
_TEXT_TASKS = ("causal_lm", "seq_cls", "seq2seq_lm", "token_cls", "feature")
# token ids 0..4 are never drawn by the harness; 5.. are content tokens
_TOKENS = list(range(5, 69))


# ---------------------------------------------------------------------------------------------
# helpers
def _fields(cls) -> set[str]:
    import dataclasses

    return {f.name for f in dataclasses.fields(cls)}


def _common(cls, arch: ArchSpec, task: str, extra_save: list[str] | None = None) -> dict:
    """task_type for text models only: peft's task wrappers (PeftModelForSeq2SeqLM, ...ForFeatureExtraction)
    pass input_ids / attention_mask, which vision and audio models do not take; peft's guides for those
    (image classification, Whisper) give no task_type."""
    kw = {}
    if task in _TASK_TYPE and arch.modality == "text":
        kw["task_type"] = _TASK_TYPE[task]
    save = list(_HEAD_TO_SAVE.get(task, [])) + list(extra_save or [])
    if save and "modules_to_save" in _fields(cls):
        kw["modules_to_save"] = save
    return kw


def _cfg(cls_name: str, mapping: str | None, fallback: str = "linear", **kw):
    """A config factory: peft's `cls_name(**kw)` with task_type, head saving and target_modules.

    mapping: the name of peft's TRANSFORMERS_MODELS_TO_*_TARGET_MODULES_MAPPING, or None to leave
    target_modules to the method (prompt learning, adaption prompt); fallback: the :mod:`._peft_targets`
    marker used when the mapping lacks the model_type (``linear/8`` also filters peft's default list).
    """
    def make(arch: ArchSpec, task: str):
        import peft

        cls = getattr(peft, cls_name)
        args = _common(cls, arch, task)
        if mapping is not None and "target_modules" in _fields(cls) and "target_modules" not in kw:
            args["target_modules"] = T.default_or(mapping, arch.mtype, fallback)
        args.update(kw)
        return cls(**args)
    return make


def _map(short: str) -> str:
    return f"TRANSFORMERS_MODELS_TO_{short}_TARGET_MODULES_MAPPING"


def _prompt_only(arch: ArchSpec, task: str) -> str | None:
    if arch.modality != "text" or task not in _TEXT_TASKS:
        return f"prompt-learning methods prepend virtual tokens to input_ids/word embeddings; {arch.modality} {task} has none"
    return None


def _prompt_tokens(arch: ArchSpec, task: str) -> str | None:
    """Prompt methods that prepend virtual tokens to the sequence (not prefix tuning, which uses the KV cache)."""
    if task == "token_cls":
        return ("peft's PeftModelForTokenClassification prepends the virtual tokens to inputs_embeds but not to the "
                "labels (ValueError: Expected input batch_size (28) to match target batch_size (20))")
    return _prompt_only(arch, task)


def _trainable_tokens_applies(arch: ArchSpec, task: str) -> str | None:
    if task == "token_cls":
        return ("peft's PeftModelForTokenClassification.__init__ iterates self.modules_to_save, which is None for "
                "TrainableTokensConfig (TypeError: 'NoneType' object is not iterable)")
    if arch.modality != "text" or task not in _TEXT_TASKS:
        return f"trainable_tokens adapts rows of the input token embedding; {arch.modality} {task} has no token ids"
    return None


def _poly_applies(arch: ArchSpec, task: str) -> str | None:
    if task not in _TASK_TYPE or arch.modality != "text":
        return ("Poly needs task_ids routed through PolyModel.forward; the task-less base PeftModel.forward (what "
                "non-text models and tasks without a peft TaskType get) calls the transformers model directly, so "
                "task_ids never reach the Poly layers ('task_ids should not be None')")
    return None


def _causal_only(arch: ArchSpec, task: str) -> str | None:
    if task != "causal_lm":
        return "CPT only supports task_type CAUSAL_LM (peft CPTConfig)"
    return _prompt_only(arch, task)


def _adaption_prompt_applies(arch: ArchSpec, task: str) -> str | None:
    from peft.tuners.adaption_prompt.config import TRANSFORMERS_MODEL_CONFIG

    if arch.mtype not in TRANSFORMERS_MODEL_CONFIG:
        return f"adaption_prompt only supports model types {sorted(TRANSFORMERS_MODEL_CONFIG)} (peft)"
    return None


def _has_head(arch: ArchSpec, task: str) -> str | None:
    return None if task in _HEADS else f"task {task} has no head to put in modules_to_save"


def _shadow(arch, task):
    import peft

    # peft finds the blocks itself only in `.layers` / `.h`; every backbone gets its block list explicitly
    # (bert's encoder.layer, bert-generation's decoder, ...), as peft's error message asks
    tm = T.MARK + "blocks"
    return peft.ShadowConfig(r=4, shadow_num_hidden_layers=1, target_modules=tm, **_common(peft.ShadowConfig, arch, task))


def _shadow_applies(arch: ArchSpec, task: str) -> str | None:
    if arch.modality != "text":
        return "ShadowPEFT's mirror backbone is fed the base model's input embeddings (text models)"
    if task == "seq2seq_lm":
        return ("ShadowPEFT calls its mirror backbone with inputs_embeds only; an encoder-decoder mirror also needs "
                "decoder inputs (ValueError: You have to specify either decoder_input_ids or decoder_inputs_embeds)")
    return None


def _xlora_applies(arch: ArchSpec, task: str) -> str | None:
    if arch.modality != "text":
        return "X-LoRA's classifier runs on the text model's hidden states"
    from ..archs.base import head_class

    try:
        prefix = getattr(head_class(arch, task), "base_model_prefix", None)
    except Exception:  # noqa: BLE001 - custom builders: let the run tell
        return None
    if prefix != "model":
        return (f"peft's X-LoRA expert loader rewrites adapter keys to 'model.model.<...>', so it only loads experts "
                f"into models whose backbone attribute is 'model' (this one: {prefix!r}; 'Got unexpected keys')")
    return None


def _sklearn(arch: ArchSpec, task: str) -> str | None:
    import importlib.util

    if importlib.util.find_spec("sklearn") is None:
        return "scikit-learn is not installed (peft's AdaMSS imports it for its subspace clustering)"
    return None


# ---------------------------------------------------------------------------------------------
# config factories needing more than keyword arguments
def _lora_mts(arch, task):
    import peft

    args = _common(peft.LoraConfig, arch, task, _HEADS.get(task))
    args["modules_to_save"] = sorted(set(args.get("modules_to_save", [])))
    return peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1,
                           target_modules=T.default_or(_map("LORA"), arch.mtype, "linear"), **args)


def _ia3(arch, task):
    import peft

    tm = T.default_or(_map("IA3"), arch.mtype, "linear")
    ff = None if tm is None else T.MARK + "none"
    return peft.IA3Config(target_modules=tm, feedforward_modules=ff, **_common(peft.IA3Config, arch, task))


def _cpt(arch, task):
    import peft

    return peft.CPTConfig(task_type="CAUSAL_LM", cpt_token_ids=list(range(5, 13)), cpt_mask=[1] * 8,
                          cpt_tokens_type_mask=[1, 2, 2, 2, 3, 3, 3, 4])


def _trainable_tokens(arch, task):
    import peft

    return peft.TrainableTokensConfig(token_indices=_TOKENS, **_common(peft.TrainableTokensConfig, arch, task))


def _xlora(arch, task):
    import peft

    # `adapters` is filled in attach (X-LoRA loads its LoRA experts from saved checkpoints)
    return peft.XLoraConfig(hidden_size=32, adapters={"0": "", "1": ""}, xlora_depth=1, xlora_size=16,
                            **_common(peft.XLoraConfig, arch, task))


ALORA_INVOCATION = [7, 8]   # aLoRA's invocation tokens: the adapter acts from where they occur on


def _alora_applies(arch: ArchSpec, task: str) -> str | None:
    return None if task == "causal_lm" else "aLoRA activates on invocation tokens in a causal LM's prompt"


def _with_invocation(batch: dict) -> dict:
    """The batch with aLoRA's invocation tokens in every row, 4 tokens before its end (content under left padding
    too), in the labels as well, as a prompt that invokes the adapter holds them."""
    import torch

    ids = batch.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[1] < 6:
        return batch
    at = ids.shape[1] - 4
    out = dict(batch)
    for key in ("input_ids", "labels"):
        t = batch.get(key)
        if isinstance(t, torch.Tensor) and t.shape == ids.shape:
            t = t.clone()
            t[:, at:at + len(ALORA_INVOCATION)] = torch.tensor(ALORA_INVOCATION)
            out[key] = t
    return out


def _moe(arch: ArchSpec, task: str) -> str | None:
    from ..archs.base import arch_traits

    return None if "routes_experts" in arch_traits(arch.mtype) else "LoRA on expert parameters: not a mixture of experts"


def _lora_kw(**kw):
    return {"r": 4, "lora_alpha": 8, "lora_dropout": 0.1, **kw}


_PROMPT = {"num_virtual_tokens": 4}

# traits (backends/base.py TRAITS): weight methods adapt weights inside the layers; their gradients come back when a
# layer input requires grad, except Poly's and X-LoRA's (lost through hooks) and adaption prompt's
W = frozenset({"weight", "input_grad", "through_layers"})
WL = W | {"linear_only"}
THROUGH = frozenset({"through_layers"})

METHODS = {m.name: m for m in [
    # --- LoRA family
    MethodSpec("lora", _cfg("LoraConfig", _map("LORA"), **_lora_kw()), traits=W),
    MethodSpec("dora", _cfg("LoraConfig", _map("LORA"), **_lora_kw(use_dora=True)), traits=W),
    MethodSpec("rslora", _cfg("LoraConfig", _map("LORA"), **_lora_kw(use_rslora=True)), traits=W),
    MethodSpec("lora_bias", _cfg("LoraConfig", _map("LORA"), **_lora_kw(lora_bias=True)),
               notes="LoRA with a trainable bias on lora_B (lora_bias=True)", traits=W),
    MethodSpec("lora_experts", _cfg("LoraConfig", None, **_lora_kw(target_modules=[], lora_dropout=0.0,
                                                                   target_parameters=[T.EXPERTS])),
               applies=_moe, notes="LoRA on a mixture-of-experts model's 3-D expert weights (target_parameters; "
                                   "lora.ParamWrapper refuses LoRA dropout)", traits=W),
    MethodSpec("alora", _cfg("LoraConfig", _map("LORA"), **_lora_kw(alora_invocation_tokens=ALORA_INVOCATION)),
               applies=_alora_applies, batch=_with_invocation,
               notes=f"activated LoRA: alora_invocation_tokens={ALORA_INVOCATION}, held by every batch", traits=W),
    MethodSpec("lora_mts", _lora_mts, applies=_has_head, notes="LoRA + modules_to_save of the task head", traits=W),
    MethodSpec("adalora", _cfg("AdaLoraConfig", _map("ADALORA"), init_r=4, target_r=2, lora_alpha=8,
                               tinit=0, tfinal=0, deltaT=1, total_step=3), traits=W),
    MethodSpec("loha", _cfg("LoHaConfig", _map("LOHA"), r=4, alpha=8), traits=WL),
    MethodSpec("lokr", _cfg("LoKrConfig", _map("LOKR"), r=4, alpha=8), traits=WL),
    MethodSpec("vera", _cfg("VeraConfig", _map("VERA"), r=8), traits=W),
    MethodSpec("pvera", _cfg("PveraConfig", _map("PVERA"), r=8), traits=W),
    MethodSpec("pvera_seeded", _cfg("PveraConfig", _map("PVERA"), r=8, generator_seed=0),
               notes="PVeRA sampling from its own seeded generator (generator_seed)", traits=THROUGH),
    MethodSpec("fourierft", _cfg("FourierFTConfig", _map("FOURIERFT"), n_frequency=64, scaling=10.0), traits=W),
    MethodSpec("waveft", _cfg("WaveFTConfig", _map("WAVEFT"), n_frequency=64), traits=W),
    MethodSpec("vblora", _cfg("VBLoRAConfig", _map("VBLORA"), "linear/8", r=4, num_vectors=32,
                              vector_length=8, topk=2), traits=W),
    MethodSpec("unilora", _cfg("UniLoraConfig", _map("UNILORA"), r=4, theta_d_length=64), traits=W),
    MethodSpec("randlora", _cfg("RandLoraConfig", _map("RANDLORA"), r=4, randlora_alpha=16), traits=W),
    MethodSpec("shira", _cfg("ShiraConfig", _map("SHIRA"), r=4, random_seed=42), traits=WL),
    MethodSpec("c3a", _cfg("C3AConfig", _map("C3A"), "linear/8", block_size=8), traits=WL),
    MethodSpec("road", _cfg("RoadConfig", _map("ROAD"), "linear/8", group_size=8), traits=WL),
    MethodSpec("delora", _cfg("DeloraConfig", _map("DELORA"), r=4), traits=WL),
    MethodSpec("gralora", _cfg("GraloraConfig", _map("GRALORA"), "linear/8", r=8, alpha=16, gralora_k=2), traits=W),
    MethodSpec("hira", _cfg("HiraConfig", _map("HIRA"), r=4), traits=W),
    MethodSpec("miss", _cfg("MissConfig", _map("MISS"), "linear/8", r=8), traits=WL),
    MethodSpec("adamss", _cfg("AdamssConfig", _map("ADAMSS"), r=8, num_subspaces=2, subspace_rank=1),
               applies=_sklearn, traits=WL),   # refuses Conv1D: nn.Linear only
    MethodSpec("lily", _cfg("LilyConfig", _map("LILY"), r=4, num_B=2, stride_A=1), traits=WL),
    MethodSpec("frod", _cfg("FrodConfig", _map("FROD"), sparse_rate=0.1, progressbar=False), traits=W),
    MethodSpec("glora", _cfg("GloraConfig", _map("GLORA"), r=4), traits=WL),
    MethodSpec("tinylora", _cfg("TinyLoraConfig", _map("TINYLORA"), r=2, u=8), traits=W),
    MethodSpec("psoft", _cfg("PsoftConfig", _map("PSOFT"), r=4, psoft_alpha=4), traits=WL,
               no_float64="PSOFT refuses a float64 base layer when it is added ('PSOFT init requires "
                          "float32/float16/bfloat16')"),
    MethodSpec("peanut", _cfg("PeanutConfig", _map("PEANUT"), r=4), traits=WL),
    MethodSpec("deft", _cfg("DeftConfig", _map("DEFT"), r=4), traits=W),
    MethodSpec("supertuning", _cfg("SupertuningConfig", _map("SUPERTUNING"), sparsity=0.9), traits=WL),
    MethodSpec("osf", _cfg("OSFConfig", _map("OSF"), "linear/8", effective_rank=4), traits=W),
    MethodSpec("poly", _cfg("PolyConfig", _map("POLY"), r=4, n_tasks=1, n_skills=2, n_splits=1),
               applies=_poly_applies, notes="task_ids (all 0) passed with every batch, as Poly requires",
               traits=frozenset({"weight", "linear_only"})),
    MethodSpec("xlora", _xlora, applies=_xlora_applies,
               notes="two LoRA experts (random non-zero init) saved to a temp dir and loaded by X-LoRA; "
                     "use_cache=False as X-LoRA requires", traits=frozenset({"weight"})),
    # --- orthogonal / multiplicative
    MethodSpec("oft", _cfg("OFTConfig", _map("OFT"), "linear/8", r=0, oft_block_size=8), traits=WL),
    MethodSpec("boft", _cfg("BOFTConfig", _map("BOFT"), "linear/8", boft_block_size=8,
                            boft_n_butterfly_factor=2), traits=WL),
    MethodSpec("hra", _cfg("HRAConfig", _map("HRA"), "linear/8", r=8), traits=WL),
    MethodSpec("ia3", _ia3, traits=W),
    MethodSpec("beft", _cfg("BeftConfig", _map("BEFT")), traits=WL),
    MethodSpec("ln_tuning", _cfg("LNTuningConfig", _map("LNTUNING"), "norm"), traits=THROUGH),
    MethodSpec("trainable_tokens", _trainable_tokens, applies=_trainable_tokens_applies, traits=THROUGH),
    MethodSpec("shadow", _shadow, applies=_shadow_applies),
    # --- prompt learning
    MethodSpec("prompt_tuning", _cfg("PromptTuningConfig", None, **_PROMPT), applies=_prompt_tokens, traits=THROUGH),
    MethodSpec("p_tuning", _cfg("PromptEncoderConfig", None, encoder_hidden_size=16, **_PROMPT),
               applies=_prompt_tokens, traits=THROUGH),
    MethodSpec("prefix_tuning", _cfg("PrefixTuningConfig", None, **_PROMPT), applies=_prompt_only),
    MethodSpec("cartridge", _cfg("CartridgeConfig", None, num_frozen_tokens=1, **_PROMPT), applies=_prompt_only),
    MethodSpec("multitask_prompt_tuning", _cfg("MultitaskPromptTuningConfig", None, num_tasks=1, **_PROMPT),
               applies=_prompt_tokens, notes="task_ids (all 0) passed with every batch, as MPT requires",
               traits=THROUGH),
    MethodSpec("cpt", _cpt, applies=_causal_only, traits=THROUGH),
    MethodSpec("adaption_prompt", _cfg("AdaptionPromptConfig", None, adapter_len=4, adapter_layers=2),
               applies=_adaption_prompt_applies, traits=frozenset({"weight"})),
]}

# methods whose forward needs `task_ids`; the backend hands it in with every batch as users do
_NEEDS_TASK_IDS = ("poly", "multitask_prompt_tuning")

# PeftType name -> methods covering it
_COVERS = {
    "LORA": ("lora", "dora", "rslora", "lora_mts", "lora_bias", "alora", "lora_experts"), "ADALORA": ("adalora",), "LOHA": ("loha",),
    "LOKR": ("lokr",), "VERA": ("vera",), "PVERA": ("pvera", "pvera_seeded"), "FOURIERFT": ("fourierft",),
    "WAVEFT": ("waveft",), "VBLORA": ("vblora",), "UNILORA": ("unilora",), "RANDLORA": ("randlora",),
    "SHIRA": ("shira",), "C3A": ("c3a",), "ROAD": ("road",), "DELORA": ("delora",), "GRALORA": ("gralora",),
    "HIRA": ("hira",), "MISS": ("miss",), "BONE": ("bone",), "ADAMSS": ("adamss",), "LILY": ("lily",),
    "FROD": ("frod",), "GLORA": ("glora",), "TINYLORA": ("tinylora",), "PSOFT": ("psoft",),
    "PEANUT": ("peanut",), "DEFT": ("deft",), "SUPERTUNING": ("supertuning",), "OSF": ("osf",),
    "POLY": ("poly",), "XLORA": ("xlora",), "OFT": ("oft",), "BOFT": ("boft",), "HRA": ("hra",),
    "IA3": ("ia3",), "BEFT": ("beft",), "LN_TUNING": ("ln_tuning",), "TRAINABLE_TOKENS": ("trainable_tokens",),
    "SHADOW": ("shadow",), "PROMPT_TUNING": ("prompt_tuning",), "P_TUNING": ("p_tuning",),
    "PREFIX_TUNING": ("prefix_tuning",), "CARTRIDGE": ("cartridge",),
    "MULTITASK_PROMPT_TUNING": ("multitask_prompt_tuning",), "CPT": ("cpt",),
    "ADAPTION_PROMPT": ("adaption_prompt",),
}
# PeftTypes that exist but cannot be a cell of this matrix
_NOT_COVERED_REASON: dict[str, str] = {}


def peft_type_status() -> dict[str, str]:
    """Every ``peft.PeftType`` member -> "covered by ...", "unsupported: ...", "not applicable: ..." or
    "not covered" (a PeftType this backend does not know yet, e.g. one added by a newer peft)."""
    import peft

    out = {}
    for t in peft.PeftType:
        names = [m for m in _COVERS.get(t.name, ()) if m in METHODS]
        if names:
            out[t.name] = "covered by " + ", ".join(names)
        elif t.name in _NOT_COVERED_REASON:
            out[t.name] = _NOT_COVERED_REASON[t.name]
        else:
            out[t.name] = "not covered"
    return out


# ---------------------------------------------------------------------------------------------
class PeftBackend(Backend):
    def attach(self, model, arch, task, method):
        from peft import get_peft_model

        config = method.make_config(arch, task)
        T.resolve_config(config, model)
        T.fill_prompt_dims(config, model)
        if method.name == "xlora":
            return self._attach_xlora(model, arch, task, config)
        peft_model = get_peft_model(model, config, adapter_name=NAME)
        if method.name in _NEEDS_TASK_IDS:
            peft_model.register_forward_pre_hook(_pass_task_ids, with_kwargs=True)
        return peft_model

    def attach_second(self, model, arch, task, method):
        import copy

        model.add_adapter(NAMES[1], copy.deepcopy(model.peft_config[NAME]))   # the same config once more
        return model

    def activate(self, model, index):
        model.set_adapter(NAMES[index])

    def train_both(self, model, method):
        train_both(model, method.name)

    def composes(self, recipe, method, arch=None):
        if recipe == "compose_weighted" and method.name not in WEIGHTED:
            return "add_weighted_adapter combines LoRA adapters (LoraConfig methods) only"
        if recipe == "compose_active" and method.name in ONE_ACTIVE:
            return ("a prompt-learning method: model.base_model is the transformers model, whose set_adapter is "
                    "transformers' own (adaption prompt's takes one name)")
        return None

    def compose(self, model, arch, task, method, recipe):
        exec(COMPOSE[recipe], {"model": model, "NAMES": NAMES, "NAME": NAME, "copy": __import__("copy")})
        return model

    def repro(self, method, arch, task, model) -> dict:
        if method.name == "xlora":
            raise NotImplementedError("xlora loads its LoRA experts from disk: no standalone repro")
        config = method.make_config(arch, task)
        T.resolve_config(config, model)
        T.fill_prompt_dims(config, model)
        extra = "{}"
        if method.name in _NEEDS_TASK_IDS:
            extra = "{'task_ids': torch.zeros(len(next(iter(BATCHES[step].values()))), dtype=torch.long)}"
        return {"imports": "import copy\nimport peft", "config": config.to_dict(), "setup": "",
                "attach": f"model = peft.get_peft_model(model, peft.get_peft_config(METHOD_CONFIG), "
                          f"adapter_name={NAME!r})", "batch_extra": extra,
                "second": f"model.add_adapter({NAMES[1]!r}, copy.deepcopy(model.peft_config[{NAME!r}]))",
                "activate": f"model.set_adapter({NAMES!r}[index])",
                "train_both": f"NAMES = {NAMES!r}\n{TRAIN_BOTH[train_both_way(True, method.name)]}",
                "compose": {r: f"NAMES, NAME = {NAMES!r}, {NAME!r}\n{src}" for r, src in COMPOSE.items()}}

    def _attach_xlora(self, model, arch, task, config):
        """X-LoRA mixes LoRA experts loaded from checkpoints: save two (non-zero) LoRA adapters of this
        model to a temp dir first, as a user would have them on disk. Uses a copy of the model so the
        model to train is untouched; the copy draws from the same seeded RNG in every run."""
        import copy

        from peft import LoraConfig, get_peft_model

        model.config.use_cache = False  # X-LoRA refuses use_cache=True
        text_cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        config.hidden_size = text_cfg.hidden_size
        with tempfile.TemporaryDirectory() as tmp:
            adapters = {}
            for i in range(2):
                # experts carry LoRA weights only (no task head: X-LoRA's loader rejects modules_to_save keys)
                lcfg = LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                  target_modules=T.default_or(_map("LORA"), arch.mtype, "linear"))
                donor = copy.deepcopy(model)
                T.resolve_config(lcfg, donor)
                get_peft_model(donor, lcfg).save_pretrained(f"{tmp}/{i}")
                adapters[str(i)] = f"{tmp}/{i}"
                del donor
            config.adapters = adapters
            return get_peft_model(model, config, adapter_name=NAME)


def _pass_task_ids(module, args, kwargs):
    if kwargs.get("task_ids") is None:
        import torch

        ref = next(kwargs[k] for k in ("input_ids", "inputs_embeds", "pixel_values", "input_features", "input_values")
                   if kwargs.get(k) is not None)
        kwargs["task_ids"] = torch.zeros(ref.shape[0], dtype=torch.long, device=ref.device)
    return args, kwargs


WEIGHTED = ("lora", "dora", "rslora", "lora_mts")   # the LoraConfig methods: what add_weighted_adapter combines
# LoRA variants picked by a LoraConfig field: offered where the installed peft's LoraConfig has it
NEEDS_FIELD = {"lora_bias": "lora_bias", "alora": "alora_invocation_tokens", "lora_experts": "target_parameters"}
# prompt learning and adaption prompt: no tuner layers that several adapters can be active in
ONE_ACTIVE = ("prompt_tuning", "p_tuning", "prefix_tuning", "cartridge", "multitask_prompt_tuning", "cpt",
              "adaption_prompt")
# the compose_* recipes, as the statements a user writes (a repro script holds the same text)
COMPOSE = {
    "compose_active": "model.add_adapter(NAMES[1], copy.deepcopy(model.peft_config[NAME]))\n"
                      "model.base_model.set_adapter(list(NAMES))",
    "compose_weighted": "model.add_adapter(NAMES[1], copy.deepcopy(model.peft_config[NAME]))\n"
                        "model.add_weighted_adapter(list(NAMES), [0.5, 0.5], 'combined', combination_type='cat')\n"
                        "model.set_adapter('combined')",
}


def make() -> Backend:
    try:
        import peft  # noqa: F401
        missing = None
    except Exception as exc:  # noqa: BLE001
        missing = f"peft not importable: {type(exc).__name__}: {exc}"
    methods = METHODS
    if missing is None:   # a method of a PeftType the installed (older) peft does not have is not offered
        have = set(peft.PeftType.__members__)
        methods = {n: m for n, m in METHODS.items()
                   if any(n in names for t, names in _COVERS.items() if t in have)}
        methods = {n: m for n, m in methods.items()
                   if n not in NEEDS_FIELD or NEEDS_FIELD[n] in _fields(peft.LoraConfig)}
    return PeftBackend(
        name="peft",
        # prepare_model_for_kbit_training, QLoRA's entry point, on the unquantized model (backends.qlora: quantized)
        orders=("gc_first", KBIT_ORDER, "adapter_first"),
        activation_freezes=True,   # set_adapter makes only the active adapter trainable
        methods=methods,
        missing=missing,
        compositions=tuple(COMPOSE),
        compositions_missing="adapters' composition blocks (Stack, Fuse, ...) are not peft's",
        unsupported_patterns=(
            # peft_model._setup_prompt_encoder: prefix tuning / cartridge with checkpointing on
            r"does not work with gradient checkpointing",
            # adaption_prompt / cpt / ... method-arch refusals
            r"Unsupported model type for adaption prompt",
            r"supports only 1 trainable adapter",   # AdaLoRA: a second adapter (the switch recipe)
            r"does not support multiple adapters when",   # ShadowPEFT with a sequence classifier
            # several adapters active at once (the compose_active recipe), refused:
            r"Only one adapter can be set at a time for ModulesToSaveWrapper",   # a task head in modules_to_save
            r"does not allow inference with more than one adapter",   # LN tuning
            r"requires exactly one active adapter",   # ShadowPEFT
            r"Only disjunct token indices are currently supported",   # trainable tokens
            r"Cannot add weighted adapters if they target the same module with modules_to_save",
            r"NoExpertParameters",   # lora_experts on a model whose experts are modules
            r"only supports task_type",
            # lora forward hooks (aLoRA) under checkpointing
            r"Multiple invocations of PEFT forward hooks before \.backward\(\) with enabled gradient checkpointing",
            # peft's layer-type refusals (e.g. transformers' Conv1D of gpt2 for Linear-only methods):
            # "Target module ... is not supported. Currently, only ...", "... does not support target modules of type"
            r"Target module.{0,200}not supported",
            # "<Method> does not support DoRA / target modules of type ... / this layer type / ..." and prefix
            # tuning / cartridge on a model whose forward takes no past_key_values (not Python's
            # "object does not support item assignment", which is a bug)
            r"does not support (DoRA|LOFTQ|VeLoRA|KaSA|aLoRA|mixed|target modules of type|this layer type"
            r"|nested base layers|adapting conv layers|past key values|megatron)",
            # MoE experts fused into parameters (transformers 5): "lora.ParamWrapper does not work with use_dora=True"
            r"ParamWrapper does not work with",
        ),
    )
