"""Backend `qlora`: peft's methods on a bitsandbytes-quantized base, as QLoRA users train it.

Users' path: the (tiny) model saved and loaded back with ``from_pretrained(dir, quantization_config=
BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, ...))`` (8-bit:
``load_in_8bit=True``, the ``lora_8bit`` method), as it comes from the hub; then

* `prepare_kbit`: ``peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=True,
  gradient_checkpointing_kwargs=...)`` (peft's own checkpointing entry point; gc mode `unset` passes none, its
  default), then ``get_peft_model``;
* `adapter_first`: ``prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)``, ``get_peft_model``,
  then ``peft_model.gradient_checkpointing_enable(...)``, as Trainer enables it on the model it is given.

The plain run prepares the model with ``use_gradient_checkpointing=False``. The methods are the peft backend's; a
method peft refuses on bitsandbytes' layers is `unsupported` with its refusal (GLoRA, PSOFT), one it accepts and
fails with is a recorded plain failure (harness/expectations/quantized.py). bitsandbytes computes in
``bnb_4bit_compute_dtype``, float32, whatever the model's dtype: a float64 rerun cannot settle rounding
(docs/outcomes.md, the float64 settle).
"""
from __future__ import annotations

from ..archs.base import ArchSpec
from .base import KBIT_GC_MODES, KBIT_ORDER, MethodSpec
from .peft import METHODS as PEFT_METHODS
from .peft import PeftBackend
from .peft import make as make_peft

# BitsAndBytesConfig per method: QLoRA's 4-bit NF4 with double quantization (the paper's and peft's guides'
# setting), computing in float32 on the CPU; `lora_8bit`: LLM.int8
QUANTIZATION = {"4bit": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
                         "bnb_4bit_compute_dtype": "float32"},
                "8bit": {"load_in_8bit": True}}
EIGHT_BIT = {"lora_8bit": PEFT_METHODS["lora"]}   # method variants on an 8-bit base: the peft method they train
METHODS = dict(PEFT_METHODS, **{n: MethodSpec(n, m.make_config, applies=m.applies, traits=m.traits, batch=m.batch,
                                              notes="LoRA on an 8-bit base (BitsAndBytesConfig(load_in_8bit=True))")
                                for n, m in EIGHT_BIT.items()})


def quantization(method: str) -> dict:
    """The BitsAndBytesConfig arguments a method's base is loaded with."""
    return QUANTIZATION["8bit" if method in EIGHT_BIT else "4bit"]


def load_quantized(model, quantization: dict):
    """`model` saved to a temporary directory and loaded back with BitsAndBytesConfig(**quantization), as a user loads
    it from the hub (with its config object, which holds the attention implementation it was built with: eager for
    the aux_outputs recipe, as a user passes attn_implementation).
    Launched over several ranks, rank 0 writes the directory and every rank loads it, as a torchrun job reads one
    checkpoint (transformers 5's save_pretrained writes on rank 0 only)."""
    import tempfile

    import torch.distributed as dist
    from transformers import BitsAndBytesConfig

    launched = dist.is_available() and dist.is_initialized()
    writer = not launched or dist.get_rank() == 0
    tmp = tempfile.TemporaryDirectory() if writer else None
    where = [tmp.name if tmp else None]
    if launched:
        dist.broadcast_object_list(where, src=0)
    try:
        if writer:
            model.save_pretrained(where[0])
        if launched:
            dist.barrier()
        loaded = type(model).from_pretrained(where[0], config=model.config,
                                             quantization_config=BitsAndBytesConfig(**quantization))
        if launched:
            dist.barrier()   # every rank has read it before rank 0 removes it
        return loaded
    finally:
        if tmp is not None:
            tmp.cleanup()


class QloraBackend(PeftBackend):
    def setup(self, model, method=None):
        return load_quantized(model, quantization(method.name if method is not None else "lora"))

    def attach(self, model, arch: ArchSpec, task: str, method: MethodSpec):
        from peft import prepare_model_for_kbit_training

        if not model.is_gradient_checkpointing:   # prepare_kbit's cells prepared it already, checkpointing on
            prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        return super().attach(model, arch, task, method)

    def repro(self, method, arch, task, model) -> dict:
        rep = super().repro(method, arch, task, model)
        import inspect
        import textwrap

        rep["setup"] = (textwrap.dedent(inspect.getsource(load_quantized))
                        + f"\n\nmodel = load_quantized(model, {quantization(method.name)!r})")
        rep["attach"] = ("if not model.is_gradient_checkpointing:   # not prepared yet (checkpointing off, or later)\n"
                         "    peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)\n"
                         + rep["attach"])
        return rep


def _bnb_missing() -> str | None:
    """Why the installed transformers cannot load a bitsandbytes-quantized model here, or None: bitsandbytes
    missing, or the check from_pretrained makes first failing (transformers 4.48.3's multi-backend check with
    bitsandbytes 0.50: "'frozenset' object has no attribute 'discard'")."""
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        return "bitsandbytes is not installed (pip install '.[qlora]')"
    try:
        from transformers.integrations.bitsandbytes import validate_bnb_backend_availability

        validate_bnb_backend_availability(raise_exception=True)
    except ImportError:   # no such check in this transformers: from_pretrained tells
        return None
    except Exception as exc:  # noqa: BLE001 - what every from_pretrained(quantization_config=...) would raise
        import bitsandbytes
        import transformers

        return (f"transformers {transformers.__version__} cannot load a bitsandbytes {bitsandbytes.__version__} "
                f"model on this machine: its validate_bnb_backend_availability raises {type(exc).__name__}: {exc}")
    return None


def make() -> QloraBackend:
    peft_backend = make_peft()
    return QloraBackend(
        name="qlora",
        methods={n: m for n, m in METHODS.items() if n in peft_backend.methods or n in EIGHT_BIT},
        missing=peft_backend.missing or _bnb_missing(),
        quantized=True,
        no_float64=("bitsandbytes' quantized layers compute in float32 (bnb_4bit_compute_dtype; LLM.int8's int8 "
                    "matmul) whatever the model's dtype, so float64 removes no rounding"),
        activation_freezes=True,   # peft's set_adapter
        gc_modes=KBIT_GC_MODES,
        orders=(KBIT_ORDER, "adapter_first"),
        reference_arch="llama",
        every_arch_in_default=False,   # the decoders QLoRA is used on, and an encoder
        default_archs=("mistral", "qwen2", "gpt2", "bert"),
        compositions=peft_backend.compositions,
        compositions_missing=peft_backend.compositions_missing,
        # PSOFT's refusal of a quantized base layer ("PSOFT init requires float32/float16/bfloat16. Re-quantize ...")
        unsupported_patterns=peft_backend.unsupported_patterns + (r"PSOFT init requires float",),
    )
