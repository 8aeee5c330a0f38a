"""transformers: reentrant gradient checkpointing loses every gradient in front of LayoutLM's layers.

LayoutLM's encoder (like AltCLIP's, Chinese-CLIP's, MLCD's and Splinter's on transformers 4.57.6) calls its
layers with the hidden states as a keyword argument: ``layer_module(hidden_states=hidden_states, ...)``.
``GradientCheckpointingLayer.__call__`` binds keyword arguments into a ``functools.partial`` and hands
only the positional ones to ``torch.utils.checkpoint`` as inputs. With ``use_reentrant=True`` the
checkpoint therefore has no tensor input at all: it runs the layer under ``no_grad`` and its output does
not depend on anything before it in the graph. Full fine-tuning then gets no gradient for the
embeddings (and with ``enable_input_require_grads`` an adapter inside the layers gets none either).
Found by the harness (`python -m harness run --backend full --arch layoutlm --gc-mode reentrant`):
missing_grad in every order and input variant; non_reentrant is equivalent.

Versions: present on 4.57.6; absent on 4.48.3 (layers called through
``_gradient_checkpointing_func(layer_module.__call__, hidden_states, ...)``, positional) and on 5.24.0
(where the harness finds LayoutLM equivalent). The release that introduced it is not bisected.

Verdict: exit 0 when the reentrant-checkpointed run gives the word embeddings the same gradient as the
plain run, exit 1 when it gives none (or another), exit 2 = cannot run.
Standalone: imports only torch / transformers.
"""

AFFECTED = {"transformers": ">4.48.3,<5"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers"]
LINKS = [
    "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/modeling_layers.py",
    "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/models/layoutlm/modeling_layoutlm.py",
]

import sys

try:
    import torch
    import transformers
    from transformers import LayoutLMConfig, LayoutLMForSequenceClassification
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def run(gc: bool):
    torch.manual_seed(0)
    config = LayoutLMConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=37, max_position_embeddings=64, num_labels=2)
    model = LayoutLMForSequenceClassification(config)
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.train()
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, 99, (2, 10), generator=g)
    bbox = torch.zeros(2, 10, 4, dtype=torch.long)
    torch.manual_seed(42)   # the same dropout masks in both runs
    out = model(input_ids=input_ids, bbox=bbox, labels=torch.tensor([0, 1]))
    out.loss.backward()
    grad = model.layoutlm.embeddings.word_embeddings.weight.grad
    return out.loss.item(), (None if grad is None else grad.clone())


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    (l0, g0), (l1, g1) = run(False), run(True)
    print(f"loss plain {l0:.6f}, reentrant-checkpointed {l1:.6f}")
    if g0 is None:
        print("CANNOT RUN: the plain run gives the word embeddings no gradient")
        return 2
    if g1 is None:
        print("BUG: with reentrant checkpointing the word embeddings get no gradient (None)")
        return 1
    if not torch.allclose(g1, g0, rtol=1e-4, atol=1e-6):
        print(f"BUG: word-embedding gradients differ, max abs {(g1 - g0).abs().max().item():.3e}")
        return 1
    print("OK: same word-embedding gradient with reentrant checkpointing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
