"""peft's prepare_model_for_kbit_training(model, use_gradient_checkpointing=True) on a model that is not quantized
enables no checkpointing, without a word.

Report, ready to file (peft#513 proposed decoupling the two and was closed unmerged; peft#760 and #2299 are about the
freezing it does; the silent no-op of use_gradient_checkpointing is not reported):

    Title: prepare_model_for_kbit_training(use_gradient_checkpointing=True) silently does not enable gradient
    checkpointing on a model that is not quantized

    QLoRA recipes call prepare_model_for_kbit_training(model, use_gradient_checkpointing=True,
    gradient_checkpointing_kwargs=...) as their checkpointing switch, and people keep the call when they drop the
    quantization (bf16 LoRA, or "to be safe"). On a model that is not loaded in 8 or 4 bits (nor GPTQ, AQLM, EETQ,
    HQQ, torchao) the function freezes every parameter and returns: the checkpointing branch is guarded by
    `if loaded_in_kbit ... and use_gradient_checkpointing` (utils/other.py), so gradient_checkpointing_enable is
    never called and model.is_gradient_checkpointing stays False. Training then runs without checkpointing, with
    the memory of a run without it, and nothing says so. Expected: enable checkpointing whenever
    use_gradient_checkpointing=True, or warn that it was not enabled.

Found by the harness (`python -m harness run --backend peft --order prepare_kbit`: every cell not_checkpointed,
0 segments recomputed and the same bytes saved for backward as without checkpointing).

Verdict: exit 0 when the call enables checkpointing on an unquantized model, exit 1 when it does not, exit 2 =
cannot run. Standalone: imports only torch / transformers / peft.
"""

AFFECTED = {"peft": ">=0.14"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers", "peft"]
LINKS = [
    "https://github.com/huggingface/peft/blob/v0.21.2/src/peft/utils/other.py#L221",
    "https://github.com/huggingface/peft/pull/513",
]

import sys

try:
    import torch
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def main() -> int:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2))
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True,
                                            gradient_checkpointing_kwargs={"use_reentrant": False})
    on = model.is_gradient_checkpointing
    model = get_peft_model(model, LoraConfig(r=4, task_type="CAUSAL_LM"))
    print(f"after prepare_model_for_kbit_training(use_gradient_checkpointing=True) on an unquantized model: "
          f"is_gradient_checkpointing={on}")
    if not on:
        print("BUG: checkpointing was asked for and not enabled, silently")
        return 1
    print("OK: checkpointing enabled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
