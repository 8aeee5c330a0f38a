"""bitsandbytes on a CPU with AVX512-BF16: one evaluation forward of a 4-bit model makes every later training step
lose the gradient through the 4-bit layers, silently (with or without gradient checkpointing).

Report, ready to file (no upstream report found; bitsandbytes#1804 added the CPU kernel):

    Title: Linear4bit on CPU: an eval forward repacks the weight for the inference kernel for good, and training
    afterwards gets no gradient through the layer (gemv_4bit has no autograd kernel)

    Linear4bit.forward repacks its weight for the fused CPU kernel (_convert_weight_packed_for_cpu) when the input
    is on a CPU with AVX512-BF16, the module is in eval mode and the input does not require grad: an evaluation
    loop or generate() between training steps, as Trainer's evaluation does. The repacked weight is kept
    (quant_state.packing_format_for_cpu), so every later forward, in train mode too, takes the packed path of
    matmul_4bit, which calls the gemv_4bit op directly instead of the MatMul4Bit autograd function. gemv_4bit has no
    autograd kernel: torch warns "an autograd kernel was not registered ... This may lead to silently incorrect
    behavior", and the gradient with respect to the layer's input is not propagated, so every adapter upstream of a
    4-bit layer (LoRA in layer 0 of a 2-layer Llama here) gets no gradient at all for the rest of training. With
    fewer input features than the blocksize (64) the repack itself fails ("shape '[32, 0]' is invalid"). Expected:
    the training path unchanged by an earlier eval forward (repack only for inference, or unpack in train mode, or an
    autograd kernel for gemv_4bit).

Found by the harness (`python -m harness run --backend qlora --recipe eval_between`: the tiny model's repack
fails; this script uses 64 features, where it succeeds and the gradients go).

Verdict: exit 0 when training after an eval forward gets the same gradients as without it, exit 1 when it does not,
exit 2 = cannot run. On a CPU without AVX512-BF16 nothing is repacked and the script exits 0. Standalone: imports
only torch / transformers / peft / bitsandbytes.
"""

AFFECTED = {"bitsandbytes": ">=0.50"}  # PEP 440 specifiers; bug present when ALL match (seen on 0.50.2)
MACHINE = "bnb_cpu_repacks"   # ... on a machine where this holds (harness.expectations.entry.MACHINES)
REQUIRES = ["torch", "transformers", "peft", "bitsandbytes"]
LINKS = [
    "https://github.com/bitsandbytes-foundation/bitsandbytes/blob/0.50.2/bitsandbytes/nn/modules.py#L612",
    "https://github.com/bitsandbytes-foundation/bitsandbytes/pull/1804",
]

import sys
import tempfile
import warnings

try:
    import torch
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def layer0_grads(saved: str, evaluate_first: bool) -> dict:
    model = LlamaForCausalLM.from_pretrained(saved, quantization_config=BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32))
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    torch.manual_seed(1)
    model = get_peft_model(model, LoraConfig(r=4, init_lora_weights=False, task_type="CAUSAL_LM"))
    ids = torch.randint(5, 120, (2, 10), generator=torch.Generator().manual_seed(2))
    if evaluate_first:   # an evaluation step between training steps
        model.eval()
        with torch.no_grad():
            model(input_ids=ids)
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    return {n: p.grad for n, p in model.named_parameters() if p.requires_grad and ".layers.0." in n}


def main() -> int:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    with tempfile.TemporaryDirectory() as saved:
        LlamaForCausalLM(config).save_pretrained(saved)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plain, after_eval = layer0_grads(saved, False), layer0_grads(saved, True)
    lost = [n for n, g in after_eval.items() if plain[n] is not None and (g is None or not torch.allclose(g, plain[n]))]
    for n in plain:
        print(f"{n}: without eval {None if plain[n] is None else float(plain[n].abs().sum()):.4g}, after eval "
              f"{'None' if after_eval[n] is None else f'{float(after_eval[n].abs().sum()):.4g}'}")
    if lost:
        print(f"BUG: after one eval forward {len(lost)} of {len(plain)} layer-0 LoRA tensors get no (or another) "
              f"gradient")
        return 1
    print("OK: an eval forward leaves training's gradients unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
