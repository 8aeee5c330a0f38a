"""peft: PVeRA with ``generator_seed`` trains on other noise under gradient checkpointing.

PVeRA samples ``eps`` in training (``_reparametrize``). With ``generator_seed`` set it draws from a private CPU
``torch.Generator``; ``torch.utils.checkpoint`` saves and restores the global RNG state for the recompute
(``preserve_rng_state``), not that generator. So the recompute in backward draws the *next* noise, not the
forward's: the gradient is computed for another sample than the loss (and the generator advances twice per step,
so every later step differs too). Without ``generator_seed`` PVeRA uses the global RNG and checkpointing is exact.
Found by the harness (`python -m harness run --backend peft --method pvera_seeded`: mismatch from step 0 on every
architecture, both gc modes; `--method pvera` is equivalent).

Versions: generator_seed exists from peft 0.20.0 (0.19 samples with randn_like); present on 0.21.2.

Verdict: exit 0 when the checkpointed run gives the same loss and gradients as the plain one, exit 1 when they
differ, exit 2 = cannot run. Standalone: imports only torch / transformers / peft.
"""

AFFECTED = {"peft": ">=0.20"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers", "peft>=0.20"]   # generator_seed is in PveraConfig from peft 0.20
LINKS = [
    "https://github.com/huggingface/peft/blob/v0.21.2/src/peft/tuners/pvera/layer.py#L169",
    "https://pytorch.org/docs/stable/checkpoint.html",
]

import sys

try:
    import peft
    import torch
    import transformers
    from peft import PveraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def run(gc: bool, generator_seed):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = get_peft_model(model, PveraConfig(r=8, target_modules=["q_proj", "v_proj"],
                                              generator_seed=generator_seed))
    with torch.no_grad():   # lambda_b starts at zero; a trained adapter's is not, and the noise then shows in the loss
        for name, p in model.named_parameters():
            if "pvera_lambda_b" in name:
                p.normal_(0, 0.5)
    model.train()
    input_ids = torch.randint(1, 99, (2, 10), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(42)   # the same global RNG stream in both runs
    out = model(input_ids=input_ids, labels=input_ids)
    out.loss.backward()
    return out.loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def differ(seed):
    (l0, g0), (l1, g1) = run(False, seed), run(True, seed)
    worst = max(((g1[n] - g).abs().max().item() if n in g1 else float("inf"), n) for n, g in g0.items())
    return l0, l1, worst, bool(g0)


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    l0, l1, worst, ok = differ(None)
    if not ok:
        print("CANNOT RUN: the plain run gives no gradient")
        return 2
    print(f"global RNG (no generator_seed): loss {l0:.6f} vs {l1:.6f}, worst gradient difference {worst[0]:.3e}")
    if abs(l0 - l1) > 1e-6 or worst[0] > 1e-5:
        print("CANNOT RUN: checkpointing differs even without generator_seed; this case isolates the generator")
        return 2
    l0, l1, worst, _ = differ(0)
    print(f"generator_seed=0: loss plain {l0:.6f}, checkpointed {l1:.6f}")
    if abs(l0 - l1) > 1e-6 or worst[0] > 1e-5:
        print(f"BUG: with generator_seed the checkpointed run's gradients differ (the recompute draws other "
              f"noise): worst difference {worst[0]:.3e} at {worst[1]}")
        return 1
    print(f"OK: same loss and gradients with checkpointing (worst difference {worst[0]:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
