"""DeBERTa / DeBERTa-v2 + PEFT LoRA + enable_input_require_grads: in-place op on a leaf.

Before transformers 4.49.0 the DeBERTa(-v2) embeddings did

    embeddings = inputs_embeds
    embeddings += position_embeddings          # in place

`model.enable_input_require_grads()` (called by users, by peft when the base model
already checkpoints, and by adapters' gradient_checkpointing_enable) registers a
forward hook that calls `output.requires_grad_(True)` on the word embeddings output.
With a frozen embedding matrix (LoRA) that output is a *leaf* requiring grad, so the
`+=` raises "a leaf Variable that requires grad is being used in an in-place
operation". The embeddings sit outside the checkpointed encoder layers, so the error
does not depend on gradient checkpointing: on transformers 4.48.3 + peft 0.14.0 all
four cells (deberta, deberta-v2) x (gc off, gc on) raise.
Fixed by https://github.com/huggingface/transformers/pull/35898 (released in 4.49.0).

The script also checks, when both runs complete, that gradient checkpointing does not
change the loss or the gradients of the trainable parameters (same seeds, dropout on).

Exit codes: 0 = libraries behave correctly, 1 = bug present, 2 = cannot run.
Standalone: imports only torch / transformers / peft.
"""

AFFECTED = {"transformers": "<4.49.0"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers", "peft"]
LINKS = ["https://github.com/huggingface/transformers/pull/35898"]

import sys
import traceback

INPLACE_MSG = "leaf Variable that requires grad is being used in an in-place operation"
LOSS_RTOL, LOSS_ATOL = 1e-5, 1e-6
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6

try:
    import torch
    import transformers
    import peft
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import (
        DebertaConfig,
        DebertaForSequenceClassification,
        DebertaV2Config,
        DebertaV2ForSequenceClassification,
    )
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)

VOCAB, MAXPOS, BATCH, SEQ = 99, 64, 2, 12

ARCHS = {
    "deberta": (DebertaConfig, DebertaForSequenceClassification),
    "deberta-v2": (DebertaV2Config, DebertaV2ForSequenceClassification),
}


def make_config(config_cls):
    # Only constructor arguments that exist with the same meaning in 4.48 .. 5.x.
    return config_cls(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=5,
        num_attention_heads=4,
        intermediate_size=37,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=MAXPOS,
        relative_attention=True,
        pos_att_type="p2c|c2p",
        num_labels=2,
        pad_token_id=0,
    )


def make_inputs():
    g = torch.Generator().manual_seed(1234)
    input_ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
    attention_mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    attention_mask[1, SEQ - 3 :] = 0  # some padding so masks matter
    input_ids[1, SEQ - 3 :] = 0
    labels = torch.tensor([0, 1])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def run(arch, gc):
    """Build the model from scratch, do one forward+backward.

    Returns (loss, grads of trainable params, forward calls of the first encoder layer)."""
    config_cls, model_cls = ARCHS[arch]
    torch.manual_seed(0)
    base = model_cls(make_config(config_cls))
    lora = LoraConfig(r=8, lora_alpha=32, lora_dropout=0.1, task_type=TaskType.SEQ_CLS)
    model = get_peft_model(base, lora)
    # LoRA B starts at zero, which would make every lora_A grad zero and the grad
    # comparison vacuous; give B deterministic non-zero values (as after some training).
    g = torch.Generator().manual_seed(4321)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    model.enable_input_require_grads()  # as users do (and as peft does for gc models)
    if gc:
        model.gradient_checkpointing_enable()
    model.train()  # dropout stays on
    # Count forward calls of a module inside the first encoder layer: with gradient
    # checkpointing active it runs twice (forward + recompute during backward).
    calls = []
    probe = [m for n, m in model.named_modules() if n.endswith("encoder.layer.0.attention")]
    if len(probe) != 1:
        raise LookupError(f"probe module not found uniquely ({len(probe)} matches)")
    probe[0].register_forward_hook(lambda *a: calls.append(1))
    torch.manual_seed(42)  # same dropout masks in both runs
    out = model(**make_inputs())
    out.loss.backward()
    grads = {
        n: (p.grad.detach().clone() if p.grad is not None else None)
        for n, p in model.named_parameters()
        if p.requires_grad
    }
    return out.loss.detach().item(), grads, len(calls)


def compare(ref, got):
    """Return a list of human-readable mismatches between two run() results."""
    problems = []
    (l0, g0, n0), (l1, g1, n1) = ref, got
    if (n0, n1) != (1, 2):
        problems.append(
            f"first encoder layer ran {n0}x without / {n1}x with gc (expected 1 / 2: "
            "gradient checkpointing recomputes it in backward)"
        )
    if not torch.isclose(torch.tensor(l1), torch.tensor(l0), rtol=LOSS_RTOL, atol=LOSS_ATOL):
        problems.append(f"loss differs: no-gc {l0!r} vs gc {l1!r}")
    if set(g0) != set(g1):
        problems.append(f"trainable parameter sets differ: {sorted(set(g0) ^ set(g1))}")
    nonzero = 0
    for n in sorted(set(g0) & set(g1)):
        a, b = g0[n], g1[n]
        if a is None or b is None:
            if (a is None) != (b is None):
                problems.append(f"{n}: grad is None in {'no-gc' if a is None else 'gc'} run only")
            continue
        if a.abs().max() > 0:
            nonzero += 1
        if not torch.allclose(b, a, rtol=GRAD_RTOL, atol=GRAD_ATOL):
            diff = (b - a).abs().max().item()
            problems.append(f"{n}: grad differs, max abs diff {diff:.3e} (ref max {a.abs().max().item():.3e})")
    if nonzero == 0:
        problems.append("no trainable parameter received a non-zero gradient (comparison vacuous)")
    return problems


def main():
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}"
    )
    inplace_cells, mismatches, unexpected = [], [], []
    for arch in ARCHS:
        results = {}
        for gc in (False, True):
            cell = f"{arch} gc={'on' if gc else 'off'}"
            try:
                results[gc] = run(arch, gc)
                print(f"  {cell:17s}: ok, loss={results[gc][0]:.6f}")
            except Exception as exc:  # noqa: BLE001 - we classify below
                msg = f"{type(exc).__name__}: {exc}".splitlines()[0]
                if INPLACE_MSG in str(exc):
                    inplace_cells.append(cell)
                    print(f"  {cell:17s}: RAISES in-place error: {msg}")
                else:
                    unexpected.append(cell)
                    print(f"  {cell:17s}: unexpected error: {msg}")
                    traceback.print_exc()
        if False in results and True in results:
            problems = compare(results[False], results[True])
            if problems:
                mismatches.append(arch)
                print(f"  {arch}: gc vs no-gc MISMATCH:")
                for p in problems:
                    print(f"    - {p}")
            else:
                print(f"  {arch}: gc vs no-gc: loss and grads match")

    if inplace_cells or mismatches:
        print("VERDICT: BUG PRESENT")
        if inplace_cells:
            print(f"  in-place leaf error in: {', '.join(inplace_cells)}")
        if mismatches:
            print(f"  gradient checkpointing changes loss/grads for: {', '.join(mismatches)}")
        if unexpected:
            print(f"  (also unexpected errors in: {', '.join(unexpected)})")
        return 1
    if unexpected:
        print(f"VERDICT: CANNOT RUN (unexpected errors in: {', '.join(unexpected)})")
        return 2
    print("VERDICT: OK - no in-place error; gradient checkpointing leaves loss and grads unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
