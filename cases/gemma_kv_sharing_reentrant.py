"""transformers: reentrant gradient checkpointing drops the gradient of Gemma 3n's / Gemma 4's shared K/V.

The last ``num_kv_shared_layers`` layers of Gemma 3n and of Gemma 4's E-series do not project their own keys and
values: they reuse those of the last earlier layer of their attention type. transformers 5 hands them over in
``shared_kv_states``, a dict that the producing layer writes and the sharing layers read, passed as a keyword
argument. Reentrant checkpointing runs each layer's forward under ``no_grad`` and recomputes the layers one by
one, last first, in backward: the sharing layers read the K/V of the no-grad forward, so the gradient they send
into the producer's K/V (its k_proj / v_proj and everything upstream) is lost. The loss is unchanged; the
gradients of every layer up to the producer are wrong. Non-reentrant checkpointing keeps them.
Found by the harness (`python -m harness run --backend full --arch gemma3n_text --gc-mode reentrant`:
mismatch at step 0 in both orders, confirmed in float64); the mechanism is the one unsloth-zoo#813 describes
(their workaround forces non-reentrant checkpointing).

Versions: present on 5.24.0 (and 5.12.1 per unsloth-zoo#813); absent on 4.57.6, where the sharing layers read
the shared K/V from the cache and a model in training builds none (``not self.training``, L1610), so they project
their own in both runs: the sharing is in effect only at inference there.

Verdict: exit 0 when the checkpointed run gives the same loss and gradients as the plain one, exit 1 when they
differ, exit 2 = cannot run. Standalone: imports only torch / transformers.
"""

AFFECTED = {"transformers": ">=5"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers>=4.53"]   # Gemma 3n is in transformers from 4.53
LINKS = [
    "https://github.com/unslothai/unsloth-zoo/pull/813",
    "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/models/gemma3n/modeling_gemma3n.py#L1210",
]

import sys

try:
    import torch
    import transformers
    from transformers import Gemma3nTextConfig, Gemma3nForCausalLM
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def run(gc: bool):
    torch.manual_seed(0)
    config = Gemma3nTextConfig(
        vocab_size=128, vocab_size_per_layer_input=128, hidden_size=32, hidden_size_per_layer_input=8,
        intermediate_size=[37] * 4, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2, sliding_window=8,
        laurel_rank=4, altup_num_inputs=2, activation_sparsity_pattern=[0.0] * 4, max_position_embeddings=64)
    model = Gemma3nForCausalLM(config)
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.train()
    input_ids = torch.randint(1, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    out = model(input_ids=input_ids, labels=input_ids)
    out.loss.backward()
    return out.loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    (l0, g0), (l1, g1) = run(False), run(True)
    print(f"loss plain {l0:.6f}, checkpointed {l1:.6f}")
    if not g0:
        print("CANNOT RUN: the plain run gives no gradient")
        return 2
    worst = max(((g1[n] - g).abs().max().item() / max(g.abs().max().item(), 1e-12) if n in g1 else float("inf"), n)
                for n, g in g0.items())
    if abs(l0 - l1) > 1e-6 or worst[0] > 1e-4:
        print(f"BUG: reentrant checkpointing changes the gradients: loss {l0:.6f} vs {l1:.6f}, worst relative "
              f"gradient difference {worst[0]:.3e} at {worst[1]}")
        return 1
    print(f"OK: same loss and gradients with checkpointing (worst relative difference {worst[0]:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
