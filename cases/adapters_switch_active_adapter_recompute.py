"""adapters: two adapters trained at once, a forward with each active, one backward: the checkpointed recompute runs
through the adapter active at backward time.

A step that runs ``model.set_active_adapters("a")``, a forward, ``model.set_active_adapters("b")``, a forward, and
one backward of the summed losses, with both adapters trainable (``train_adapter(["a", "b"])``). adapters'
``gradient_checkpointing_enable`` hands the forward's ForwardContext to the recompute (``context_fn``, adapters#759)
but not the active adapter setup, which every adapter layer reads from the model when it runs: the first forward's
layers are recomputed through ``b``. Bottleneck, LoRA and ReFT adapters get other gradients, silently; methods that
read parameters shared across layers from the context by adapter name (Compacter, VeRA, prefix tuning) fail with
``KeyError: 'b'``. Found by the harness (`python -m harness run --backend adapters --recipe switch`).

Report, ready to file (no upstream issue found):

    Title: gradient checkpointing recomputes with the adapters active at backward time, not those of the forward

    With gradient checkpointing on, a training step that switches the active adapter between forwards
    (set_active_adapters("a"); forward; set_active_adapters("b"); forward; one backward) recomputes the first
    forward's layers through adapter "b": the gradients differ from the same step without checkpointing (or raise
    KeyError for Compacter / VeRA / prefix tuning, whose shared parameters are looked up in the saved
    ForwardContext). The ForwardContext is handed to the recompute (#759), the active setup is not; capturing
    model.active_adapters in the context and restoring it around the recompute would make the two agree.
    Reproduction: this script (tiny BERT, two SeqBn adapters).

Verdict: exit 0 when the checkpointed run gives the same gradients as the plain one, exit 1 when it differs or
fails, exit 2 = cannot run. Standalone: imports only torch / transformers / adapters.
"""

AFFECTED = {"adapters": ">=1.2"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers", "adapters"]
LINKS = ["https://github.com/adapter-hub/adapters/pull/759"]

import sys

try:
    import adapters
    import torch
    import transformers
    from transformers import BertConfig, BertForSequenceClassification
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def run(gc: bool):
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=128, hidden_size=32, intermediate_size=37,
                                                     num_hidden_layers=2, num_attention_heads=4,
                                                     max_position_embeddings=64, num_labels=3))
    adapters.init(model)
    for name in ("a", "b"):
        model.add_adapter(name, config=adapters.SeqBnConfig(reduction_factor=4))
    model.train_adapter(["a", "b"])
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    g = torch.Generator().manual_seed(1)
    ids, labels = torch.randint(1, 128, (2, 10), generator=g), torch.tensor([0, 2])
    model.set_active_adapters("a")
    loss = model(input_ids=ids, labels=labels).loss
    model.set_active_adapters("b")
    loss = loss + model(input_ids=ids, labels=labels).loss
    try:
        loss.backward()
    except Exception as exc:  # noqa: BLE001 - the failure is the finding
        return f"{type(exc).__name__}: {exc}"
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, adapters {adapters.__version__}")
    g0, g1 = run(False), run(True)
    if not isinstance(g0, dict) or not g0:
        print(f"CANNOT RUN: the plain run does not train: {g0}")
        return 2
    if isinstance(g1, str):
        print(f"BUG: the checkpointed backward fails: {g1}")
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
