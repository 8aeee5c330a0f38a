"""transformers: a loss on `outputs.attentions` gets no gradient under reentrant gradient checkpointing (Llama and
every model that records its attentions with hooks).

Report, ready to file (no upstream issue found):

    Title: attentions returned via _can_record_outputs carry no gradient with gradient_checkpointing(use_reentrant=True)

    Models that collect `output_attentions` through `_can_record_outputs` (the forward hooks that the output-capturing
    decorator installs on their attention modules: Llama, Mistral, Mixtral, Qwen3-MoE, ViT, ... on 4.57) record the
    attention weights inside the checkpointed decoder layer. The reentrant checkpoint runs the layer's forward under
    torch.no_grad(), so the recorded tensors have requires_grad=False: any loss on `outputs.attentions`
    (attention distillation, attention supervision) silently contributes no gradient. The loss value is unchanged,
    nothing warns. Non-reentrant checkpointing keeps the graph; models that return attentions through the layer's
    outputs (BERT) keep it under both. Reproduction: this script (tiny random Llama, eager attention, full
    fine-tuning, loss = LM loss + mean of the attentions times a fixed random tensor; compares gradients of a
    plain and a reentrant-checkpointed run).

    Same root cause as pytorch#124725 (reentrant checkpoint only tracks tensors it returns); a fix could return the
    recorded outputs from the checkpointed call or document that output recording needs use_reentrant=False.

Found by the harness (`python -m harness run --backend full --arch llama --recipe aux_outputs --gc-mode reentrant`:
mismatch; equivalent under non_reentrant; BERT equivalent under both).

Verdict: exit 0 when the checkpointed run gives the same loss and gradients as the plain one, exit 1 when it
differs, exit 2 = cannot run. Standalone: imports only torch / transformers.
"""

AFFECTED = {"transformers": ">=4.56"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers"]
LINKS = [
    "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/utils/generic.py#L918",
    "https://github.com/pytorch/pytorch/issues/124725",
]

import sys

try:
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def run(gc: bool):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         attn_implementation="eager")
    model = LlamaForCausalLM(config)
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.train()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 128, (2, 10), generator=g)
    out = model(input_ids=ids, labels=ids, output_attentions=True)
    directions = [torch.randn(a.shape, generator=g) for a in out.attentions]
    loss = out.loss + sum((a * d).mean() for a, d in zip(out.attentions, directions))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.item(), [a.requires_grad for a in out.attentions], grads


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    (l0, r0, g0), (l1, r1, g1) = run(False), run(True)
    print(f"loss plain {l0:.6f}, checkpointed {l1:.6f}; attentions require grad: plain {r0}, checkpointed {r1}")
    if not all(r0):
        print("CANNOT RUN: the plain run's attentions do not require grad")
        return 2
    worst = max((((g1[n] - g).abs().max() / g.abs().max().clamp_min(1e-12)).item(), n) for n, g in g0.items())
    if not all(r1) or worst[0] > 1e-4:
        print(f"BUG: the attentions carry no gradient with reentrant checkpointing; worst relative gradient "
              f"difference {worst[0]:.3e} at {worst[1]}")
        return 1
    print(f"OK: same loss and gradients with checkpointing (worst relative difference {worst[0]:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
