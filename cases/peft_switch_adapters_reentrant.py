"""peft: two LoRA adapters trained at once, a forward with each active, one backward: reentrant checkpointing
recomputes the first forward through the adapter active at backward time.

A training step that runs ``model.set_adapter("a")``, a forward, ``model.set_adapter("b")``, a forward, and one
backward of the summed losses (multi-task or paired training). Checkpointing recomputes each layer's forward during
the backward, with whatever adapter is active then: ``b``. Under reentrant checkpointing the recompute builds a
fresh graph, so the first forward's part of the loss sends its gradient into ``b``'s LoRA weights instead of ``a``'s:
``b`` gets a gradient it would not get without checkpointing, silently. (``set_adapter`` also turns requires_grad
off on the inactive adapter, so ``a`` gets no gradient in either run.) Non-reentrant checkpointing recomputes only
into the first forward's saved tensors. Reported as peft#2832 (its reporter's workaround: checkpoint the whole step).
Found by the harness (`python -m harness run --backend peft --method lora --recipe switch --gc-mode reentrant
--order gc_first`: mismatch on every arch; 4.48.3 to 5.24.0).

Verdict: exit 0 when the checkpointed run gives the same gradients as the plain one, exit 1 when it differs,
exit 2 = cannot run. Standalone: imports only torch / transformers / peft.
"""

AFFECTED = {"peft": ">=0.14"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers", "peft"]
LINKS = ["https://github.com/huggingface/peft/issues/2832"]

import copy
import sys

try:
    import peft
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def run(gc: bool):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = peft.get_peft_model(model, config, adapter_name="a")
    model.add_adapter("b", copy.deepcopy(config))
    model.train()
    ids = torch.randint(1, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    model.set_adapter("a")
    loss = model(input_ids=ids, labels=ids).loss
    model.set_adapter("b")
    loss = loss + model(input_ids=ids, labels=ids).loss
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    g0, g1 = run(False), run(True)
    if not g0:
        print("CANNOT RUN: the plain run trains nothing")
        return 2
    if set(g0) != set(g1):
        print(f"BUG: other parameters get gradients with checkpointing: {sorted(set(g0) ^ set(g1))[:3]}")
        return 1
    worst = max((((g1[n] - g).abs().max() / g.abs().max().clamp_min(1e-12)).item(), n) for n, g in g0.items())
    if worst[0] > 1e-4:
        print(f"BUG: the recompute ran through the other adapter: worst relative gradient difference {worst[0]:.3e} "
              f"at {worst[1]}")
        return 1
    print(f"OK: same gradients with checkpointing (worst relative difference {worst[0]:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
