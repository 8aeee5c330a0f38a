"""transformers: activation checkpointing with ``offload=True`` raises on a machine without an accelerator.

``PreTrainedModel.activation_checkpointing_enable(offload=True)`` (and ``gradient_checkpointing_enable`` /
Trainer's ``activation_checkpointing_kwargs={"offload": True}``) wraps each checkpoint in
``torch.autograd.graph.save_on_cpu(pin_memory=True, device_type=device_type)`` with
``device_type = (get_current_accelerator() or torch.device("cpu")).type``. The comment there says that without an
accelerator "the activations already live on the host and there is nothing to copy off a device", but
``save_on_cpu`` decides whether to pin with ``getattr(torch, device_type).is_available()``, and
``torch.cpu.is_available()`` is True: it allocates pinned memory, which raises "pin_memory=True requires a CUDA or
other accelerator backend; no pinned memory allocator is available on this system" in the first checkpointed
layer's forward. The plain run and ``offload=False`` train normally; ``pin_memory=False`` (or no save_on_cpu) when
there is no accelerator would avoid it.
Found by the harness on 5.24.0 (`python -m harness run --backend full --gc-mode non_reentrant_offload`: every
arch's checkpointed run raises on this CPU-only machine). This script hides CUDA devices
(CUDA_VISIBLE_DEVICES="") before importing torch, so it takes the no-accelerator path on a GPU machine too.

Versions: ``offload`` exists from 5.17.0 (on ``gradient_checkpointing_enable``; ``activation_checkpointing_enable``
from 5.23.0); every release from 5.17.0 to 5.25.0 (newest checked) raises (run by a helper on each).

Verdict: exit 0 when the offloaded checkpointed run gives the same loss and gradients as the plain one, exit 1
when it differs or only it raises, exit 2 = cannot run. Standalone: imports only torch / transformers.
"""

AFFECTED = {"transformers": ">=5.17.0"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers>=5.17.0"]   # the offload option exists from 5.17.0
LINKS = [
    "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/modeling_utils.py#L3160-L3167",
    "https://github.com/huggingface/transformers/pull/48590",
    "https://github.com/huggingface/transformers/pull/48444",
    "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/autograd/graph.py",
]

import os
import sys

os.environ["CUDA_VISIBLE_DEVICES"] = ""   # the path of a machine without an accelerator

try:
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def run(offload: bool | None):
    """offload None: no checkpointing; else checkpointing (non-reentrant) with that offload flag."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    model = LlamaForCausalLM(config)
    if offload is not None:
        enable = getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)
        enable(offload=offload)
    model.train()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"accelerator {torch.accelerator.current_accelerator()}")
    try:
        l0, g0 = run(None)
        run(False)
    except Exception as exc:
        print(f"CANNOT RUN: a run without offload raises {type(exc).__name__}: {exc}")
        return 2
    try:
        l1, g1 = run(True)
    except Exception as exc:
        print(f"BUG: only the offloaded checkpointed run raises {type(exc).__name__}: {str(exc)[:200]}")
        return 1
    worst = max(((g1[n] - g).abs().max().item() if n in g1 else float("inf"), n) for n, g in g0.items())
    if abs(l0 - l1) > 1e-6 or worst[0] > 1e-5:
        print(f"BUG: offloading changes training: loss {l0:.6f} vs {l1:.6f}, worst gradient difference "
              f"{worst[0]:.3e} at {worst[1]}")
        return 1
    print(f"OK: same loss ({l0:.6f}) and gradients (worst difference {worst[0]:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
