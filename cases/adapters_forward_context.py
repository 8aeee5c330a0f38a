"""adapters: gradient checkpointing loses the ForwardContext during recomputation.

adapters keeps per-forward state (prefix-tuning prefix states, ReFT position indices,
gating scores, ...) in a thread-local ``ForwardContext`` that only exists while the
model's ``forward()`` runs. With gradient checkpointing the checkpointed layers are
re-run during ``backward()``, after that context was popped, so methods relying on it
(prefix tuning, ReFT, UniPELT, prompt tuning, fusion/parallel composition) break:
https://github.com/adapter-hub/adapters/issues/732.

The fix (https://github.com/adapter-hub/adapters/pull/759, first released in adapters
1.1.0: 1.0.1's model_mixin.py has no ``gradient_checkpointing_enable`` override, 1.1.0's
has it) overrides ``gradient_checkpointing_enable`` so that ``torch.utils.checkpoint``
gets the captured ForwardContext as ``context_fn`` for the recompute (non-reentrant only).
Enabling checkpointing "the plain transformers way"
(``transformers.PreTrainedModel.gradient_checkpointing_enable(model, ...)``) bypasses the
override and is still broken on fixed versions; that is the documented reason the
override exists, so this script only *reports* what the plain way does.

Verdict: exit 0 when adapters' own ``model.gradient_checkpointing_enable()`` gives the
same loss and gradients as a non-checkpointed run for prefix_tuning, loreft and unipelt
(same seeds, dropout on); exit 1 when it does not (or raises); exit 2 = cannot run.
On adapters < 1.1.0 there is no override, so "adapters' own" path is the plain one and
the case exits 1.
Standalone: imports only torch / transformers / adapters.
"""

AFFECTED = {"adapters": "<1.1.0"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers", "adapters"]
LINKS = [
    "https://github.com/adapter-hub/adapters/issues/732",
    "https://github.com/adapter-hub/adapters/pull/759",
]

import sys

LOSS_RTOL, LOSS_ATOL = 1e-5, 1e-6
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6

try:
    import torch
    import transformers
    import adapters
    from transformers import BertConfig, BertForSequenceClassification
    import logging
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)

VOCAB, BATCH, SEQ = 99, 2, 12
METHODS = ["prefix_tuning", "loreft", "unipelt"]

# How gradient checkpointing is switched on.
MODES = {
    "none": "no checkpointing (baseline)",
    "adapters": "model.gradient_checkpointing_enable()  [adapters' override]",
    "plain": "transformers.PreTrainedModel.gradient_checkpointing_enable(model, {'use_reentrant': False})",
    "plain-reentrant": "transformers.PreTrainedModel.gradient_checkpointing_enable(model)  [transformers default, use_reentrant=True]",
}


def make_inputs():
    g = torch.Generator().manual_seed(1234)
    input_ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
    attention_mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    attention_mask[1, SEQ - 3 :] = 0
    input_ids[1, SEQ - 3 :] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": torch.tensor([0, 1])}


def build(method):
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=37,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=64,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    adapters.init(model)
    # train_adapter() -> reset_adapter() logs a spurious "none are activated" warning.
    logging.getLogger("adapters").setLevel(logging.ERROR)
    model.add_adapter("a", config=method)
    model.train_adapter("a")
    # Zero-initialised adapter parts (LoRA B, prefix MLP, ...) would make some gradients
    # vanish and the comparison partly vacuous: perturb all trainable params deterministically.
    g = torch.Generator().manual_seed(4321)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.02)
    return model


def run(method, mode):
    model = build(method)
    if mode == "adapters":
        model.gradient_checkpointing_enable()
    elif mode == "plain":
        transformers.PreTrainedModel.gradient_checkpointing_enable(
            model, gradient_checkpointing_kwargs={"use_reentrant": False}
        )
        model.enable_input_require_grads()  # as adapters' override (and users) do
    elif mode == "plain-reentrant":
        transformers.PreTrainedModel.gradient_checkpointing_enable(model)
        model.enable_input_require_grads()  # otherwise reentrant checkpointing drops all layer grads
    model.train()  # dropout on
    calls = []
    model.bert.encoder.layer[0].attention.register_forward_hook(lambda *a: calls.append(1))
    torch.manual_seed(42)
    out = model(**make_inputs())
    out.loss.backward()
    grads = {
        n: (p.grad.detach().clone() if p.grad is not None else None)
        for n, p in model.named_parameters()
        if p.requires_grad
    }
    return out.loss.detach().item(), grads, len(calls)


def compare(ref, got):
    problems = []
    (l0, g0, _), (l1, g1, n1) = ref, got
    if n1 != 2:
        problems.append(
            f"first encoder layer ran {n1}x (expected 2: forward + recompute in backward)"
        )
    if not torch.isclose(torch.tensor(l1), torch.tensor(l0), rtol=LOSS_RTOL, atol=LOSS_ATOL):
        problems.append(f"loss differs: baseline {l0!r} vs {l1!r}")
    if set(g0) != set(g1):
        problems.append(f"trainable parameter sets differ: {sorted(set(g0) ^ set(g1))}")
    bad, none_only = [], []
    for n in sorted(set(g0) & set(g1)):
        a, b = g0[n], g1[n]
        if a is None or b is None:
            if (a is None) != (b is None):
                none_only.append(n)
            continue
        if not torch.allclose(b, a, rtol=GRAD_RTOL, atol=GRAD_ATOL):
            bad.append(f"{n} (max abs diff {(b - a).abs().max().item():.2e})")
    if none_only:
        problems.append(f"{len(none_only)} params have a grad in only one run, e.g. {none_only[0]}")
    if bad:
        problems.append(f"{len(bad)} params have different grads, e.g. {bad[0]}")
    if not any(g is not None and g.abs().max() > 0 for g in g0.values()):
        problems.append("baseline has no non-zero gradient (comparison vacuous)")
    return problems


def attempt(method, mode):
    """Returns (status, result or error text): status in {"ok", "error"}."""
    try:
        return "ok", run(method, mode)
    except Exception as exc:  # noqa: BLE001 - reported
        return "error", f"{type(exc).__name__}: {exc}".splitlines()[0]


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, adapters {adapters.__version__}")
    has_override = "gradient_checkpointing_enable" in vars(adapters.ModelAdaptersMixin)
    print(f"adapters overrides gradient_checkpointing_enable: {has_override}")
    for mode, desc in MODES.items():
        print(f"  mode {mode!r}: {desc}")
    own_failures, cannot = [], []
    for method in METHODS:
        status, base = attempt(method, "none")
        if status != "ok":
            print(f"[{method}] baseline could not run: {base}")
            cannot.append(method)
            continue
        print(f"[{method}] baseline loss={base[0]:.6f}")
        for mode in ("adapters", "plain", "plain-reentrant"):
            status, res = attempt(method, mode)
            if status == "ok":
                problems = compare(base, res)
                line = "equivalent to baseline" if not problems else "MISMATCH: " + "; ".join(problems)
                failed = bool(problems)
            else:
                line, failed = f"RAISES {res}", True
            role = "verdict" if mode == "adapters" else "info, expected broken"
            print(f"  {mode:16s} ({role}): {line}")
            if mode == "adapters" and failed:
                own_failures.append(method)

    if cannot:
        print(f"VERDICT: CANNOT RUN (baseline failed for: {', '.join(cannot)})")
        return 2
    if own_failures:
        print(
            "VERDICT: BUG PRESENT - model.gradient_checkpointing_enable() changes training for: "
            + ", ".join(own_failures)
        )
        return 1
    print("VERDICT: OK - adapters' gradient_checkpointing_enable keeps the ForwardContext (fix works)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
