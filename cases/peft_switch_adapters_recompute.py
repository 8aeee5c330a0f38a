"""peft: two LoRA adapters trained at once, a forward with each active, one backward: checkpointing recomputes the
first forward through the adapter active at backward time.

A training step that runs ``model.set_adapter("a")``, a forward, ``model.set_adapter("b")``, a forward, and one
backward of the summed losses (multi-task or paired training), both adapters kept trainable
(``set_requires_grad(["a", "b"])`` after each ``set_adapter``, which freezes the inactive one). Each LoRA layer reads
its active adapter when it runs, and checkpointing recomputes each layer's forward during the backward, with
``b`` active: under reentrant checkpointing the recompute builds a fresh graph through ``b``, so ``a`` gets no
gradient and ``b`` gets the first forward's part too; under non-reentrant checkpointing the recomputed tensors (of
``b``) have the shapes of the saved ones (of ``a``), torch's metadata check passes, and both adapters get other
gradients, silently. (With ``set_adapter`` alone ``a`` trains in neither run, and only the reentrant difference
shows.) Reported as peft#2832 (its reporter's workaround: checkpoint the whole step).
Found by the harness (`python -m harness run --backend peft --recipe switch --gc-mode reentrant,non_reentrant`:
every method that adapts inside the layers, on every arch; 4.48.3 to 5.24.0).

Verdict: exit 0 when the checkpointed runs give the same gradients as the plain one, exit 1 when one differs,
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


def train_both(model):
    """Both adapters trainable again after set_adapter froze the inactive one (peft's own API where it has it)."""
    if hasattr(model, "set_requires_grad"):
        model.set_requires_grad(["a", "b"])
    else:
        for name, p in model.named_parameters():
            if {"a", "b"} & set(name.split(".")):
                p.requires_grad_(True)


def run(reentrant: bool | None):
    """One step's gradients: without checkpointing (None), or with reentrant / non-reentrant checkpointing."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    if reentrant is not None:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = peft.get_peft_model(model, config, adapter_name="a")
    model.add_adapter("b", copy.deepcopy(config))
    model.train()
    ids = torch.randint(1, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    model.set_adapter("a")
    train_both(model)
    loss = model(input_ids=ids, labels=ids).loss
    model.set_adapter("b")
    train_both(model)
    loss = loss + model(input_ids=ids, labels=ids).loss
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def differs(g0, g1) -> str | None:
    """How the checkpointed gradients differ from the plain ones, or None."""
    if set(g0) != set(g1):
        return f"other parameters get gradients: {sorted(set(g0) ^ set(g1))[:3]}"
    worst = max((((g1[n] - g).abs().max() / g.abs().max().clamp_min(1e-12)).item(), n) for n, g in g0.items())
    if worst[0] > 1e-4:
        return f"worst relative gradient difference {worst[0]:.3e} at {worst[1]}"
    return None


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    g0 = run(None)
    if not any(".a." in n for n in g0) or not any(".b." in n for n in g0):
        print("CANNOT RUN: the plain run does not train both adapters")
        return 2
    found = {kind: differs(g0, run(kind == "reentrant")) for kind in ("reentrant", "non-reentrant")}
    for kind, what in found.items():
        print(f"{'BUG' if what else 'OK'}: {kind}: " + (f"the recompute ran through the other adapter: {what}" if what
                                                       else "same gradients with checkpointing"))
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
