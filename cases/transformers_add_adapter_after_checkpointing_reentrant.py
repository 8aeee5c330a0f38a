"""transformers: an adapter added with model.add_adapter after gradient checkpointing was enabled gets no gradient
under reentrant checkpointing.

transformers' ``gradient_checkpointing_enable`` calls ``enable_input_require_grads`` only when a PEFT adapter is
already loaded (``_hf_peft_config_loaded``). Enabled first (as a training script that turns checkpointing on right
after loading the model does), then ``model.add_adapter(LoraConfig(...))``: nothing makes the layers' inputs require
grad and ``add_adapter`` does not either, so reentrant checkpointing returns layer outputs without a graph and the
LoRA weights inside the layers get no gradient ("element 0 of tensors does not require grad" when nothing else
trains). peft's ``get_peft_model`` does it (``_prepare_model_for_gradient_checkpointing``); enabling checkpointing
after ``add_adapter``, or non-reentrant checkpointing, trains. Found by the harness (`python -m harness run --backend
transformers_peft --gc-mode reentrant --order gc_first`).

Report, ready to file (no upstream issue found):

    Title: add_adapter after gradient_checkpointing_enable(use_reentrant=True): adapters get no gradient

    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True}) followed by
    model.add_adapter(LoraConfig(...)) trains nothing: enable_input_require_grads runs in gradient_checkpointing_enable
    only if an adapter is loaded at that time, and add_adapter does not call it when checkpointing is already on.
    Calling it from add_adapter when self.is_gradient_checkpointing (as get_peft_model does) fixes the order.
    Reproduction: this script (tiny Llama, LoRA on q_proj / v_proj).

Versions: seen on 4.48.3 and 4.57.6; 5.24.0's integration needs peft >= 0.22, not measured here.

Verdict: exit 0 when the checkpointed run gives the adapters the gradients the plain one does, exit 1 when it does
not, exit 2 = cannot run. Standalone: imports only torch / transformers / peft.
"""

AFFECTED = {"transformers": ">=4.35"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers<5", "peft"]
LINKS = ["https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/modeling_utils.py"]

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
    model.add_adapter(peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                      init_lora_weights=False))
    model.train()
    ids = torch.randint(1, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    loss = model(input_ids=ids, labels=ids).loss
    try:
        loss.backward()
    except RuntimeError as exc:
        return f"{type(exc).__name__}: {exc}"
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    try:
        g0 = run(False)
    except ValueError as exc:   # an integration that refuses this peft
        print(f"CANNOT RUN: {exc}")
        return 2
    g1 = run(True)
    if not isinstance(g0, dict) or not g0:
        print(f"CANNOT RUN: the plain run does not train: {g0}")
        return 2
    if isinstance(g1, str) or set(g1) != set(g0):
        lost = g1 if isinstance(g1, str) else f"{len(set(g0) - set(g1))} of {len(g0)} tensors get no gradient"
        print(f"BUG: with reentrant checkpointing enabled before add_adapter the adapters do not train: {lost}")
        return 1
    worst = max((((g1[n] - g).abs().max() / g.abs().max().clamp_min(1e-12)).item(), n) for n, g in g0.items())
    if worst[0] > 1e-4:
        print(f"BUG: other gradients with checkpointing: worst relative difference {worst[0]:.3e} at {worst[1]}")
        return 1
    print(f"OK: same gradients with checkpointing (worst relative difference {worst[0]:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
