"""peft aLoRA on transformers 4.57: checkpointing enabled after get_peft_model fails torch's recompute check.

Activated LoRA (``LoraConfig(alora_invocation_tokens=...)``) applies its adapter only from the invocation tokens on;
peft computes the offsets in PeftModel's forward and hands them to the LoRA layers through forward hooks it registers
for that forward (and, for layers with ``gradient_checkpointing`` set, hooks that re-register them for the recompute,
peft#2860). With non-reentrant checkpointing enabled after ``get_peft_model`` (``model.gradient_checkpointing_enable``
on the PeftModel, as ``Trainer(gradient_checkpointing=True)`` does), the recompute saves other tensors than the
forward and torch's checkpoint stops the backward ("Recomputed values for the following tensors have different
metadata" / "A different number of tensors was saved"). Enabled before ``get_peft_model`` it trains, and on
transformers 5.24.0 both orders train. Found by the harness (`python -m harness run --backend peft --method alora
--gc-mode non_reentrant --order adapter_first`); why the order matters on 4.57 is not probed further.

Verdict: exit 0 when the checkpointed run trains as the plain one, exit 1 when it fails or differs, exit 2 = cannot
run. Standalone: imports only torch / transformers / peft.
"""

AFFECTED = {"transformers": "<5", "peft": ">=0.18"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers>=4.52.1", "peft>=0.18"]
LINKS = ["https://github.com/huggingface/peft/pull/2860"]

import sys

try:
    import peft
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)

INVOCATION = [7, 8]


def run(gc: bool):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                             alora_invocation_tokens=INVOCATION, task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, config)
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    ids = torch.randint(10, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    ids[:, 6:8] = torch.tensor(INVOCATION)   # the prompt invokes the adapter
    loss = model(input_ids=ids, labels=ids).loss
    try:
        loss.backward()
    except Exception as exc:  # noqa: BLE001 - the failure is the finding
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    g0, g1 = run(False), run(True)
    if not isinstance(g0, dict) or not g0:
        print(f"CANNOT RUN: the plain run does not train: {g0}")
        return 2
    if isinstance(g1, str):
        print(f"BUG: the checkpointed backward fails: {g1}")
        return 1
    worst = max((((g1[n] - g).abs().max() / g.abs().max().clamp_min(1e-12)).item(), n) for n, g in g0.items())
    if set(g1) != set(g0) or worst[0] > 1e-4:
        print(f"BUG: other gradients with checkpointing (worst relative difference {worst[0]:.3e} at {worst[1]})")
        return 1
    print(f"OK: same gradients with checkpointing (worst relative difference {worst[0]:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
