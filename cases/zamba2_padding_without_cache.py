"""transformers: with a padded batch, gradient checkpointing changes Zamba2's training (torch path).

Checkpointing makes ``Zamba2Model.forward`` turn ``use_cache`` off in training. ``Zamba2MambaMixer.torch_forward``
zeroes the pad positions after the causal conv1d only on its cache branch; the no-cache branch
(``hidden_states = self.act(self.conv1d(...))``) leaves them, so at every pad position ``silu(conv1d.bias)``
enters the SSM scan of the real tokens. Mamba2's torch path and Zamba2's own CUDA path mask after the conv
whatever the cache. A plain run with ``use_cache=False`` is bit-identical to the checkpointed one, so this is
not recompute but the cache switch: a left-padded batch trains differently with checkpointing on (and
``use_cache`` changes the output of a padded row at inference too). The conv bias of a fresh model is zero
(pads give ``silu(0) = 0``), so the case gives it the non-zero values a trained model has.
Found by the harness (`python -m harness run --backend full --arch zamba2 --inputs padded`: mismatch in every
gc mode and order, confirmed in float64; the cause probed by toggling use_cache and masking after the conv).

Versions: present on 4.49.0 (Zamba2's first release; the same branch) to 4.57.6; absent on 5.24.0 (the
mixer masks after the conv on every path).

Verdict: exit 0 when the checkpointed run gives the same loss and gradients as the plain one, exit 1 when they
differ, exit 2 = cannot run. Standalone: imports only torch / transformers.
"""

AFFECTED = {"transformers": ">=4.49,<5"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers>=4.49"]   # Zamba2 is in transformers from 4.49
LINKS = [
    "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/models/zamba2/modeling_zamba2.py#L770",
    "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/models/zamba2/modeling_zamba2.py#L761",
]

import sys

try:
    import torch
    import transformers
    from transformers import Zamba2Config, Zamba2ForSequenceClassification
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def run(gc: bool):
    torch.manual_seed(0)
    config = Zamba2Config(vocab_size=99, hidden_size=32, num_hidden_layers=2, layers_block_type=["mamba", "hybrid"],
                          num_attention_heads=4, num_key_value_heads=2, attention_head_dim=16, mamba_d_state=16,
                          mamba_expand=1, n_mamba_heads=8, mamba_headdim=4, mamba_ngroups=1, chunk_size=16,
                          intermediate_size=37, max_position_embeddings=64, pad_token_id=0, num_labels=2,
                          use_mem_eff_path=False)
    model = Zamba2ForSequenceClassification(config)
    with torch.no_grad():   # a trained model's conv bias is not zero
        for name, p in model.named_parameters():
            if name.endswith("conv1d.bias"):
                p.normal_(0, 0.5)
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, 99, (2, 10), generator=g)
    attention_mask = torch.ones(2, 10, dtype=torch.long)
    input_ids[1, :3], attention_mask[1, :3] = 0, 0    # the second row left-padded
    torch.manual_seed(42)   # the same dropout masks in both runs
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=torch.tensor([0, 1]))
    out.loss.backward()
    return out.loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    (l0, g0), (l1, g1) = run(False), run(True)
    print(f"loss plain {l0:.6f}, checkpointed {l1:.6f}")
    if not g0:
        print("CANNOT RUN: the plain run gives no gradient")
        return 2
    worst = max(((g1[n] - g).abs().max().item() if n in g1 else float("inf"), n) for n, g in g0.items())
    if abs(l0 - l1) > 1e-6 or worst[0] > 1e-5:
        print(f"BUG: checkpointing changes the padded batch's training: loss {l0:.6f} vs {l1:.6f}, "
              f"worst gradient difference {worst[0]:.3e} at {worst[1]}")
        return 1
    print(f"OK: same loss and gradients with checkpointing (worst difference {worst[0]:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
