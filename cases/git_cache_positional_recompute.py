"""transformers: gradient checkpointing makes GitModel's training fail (the recompute writes the KV cache again).

``GitModel.forward`` creates a ``DynamicCache`` whenever ``use_cache`` is on, and ``use_cache`` defaults to
``config.use_cache = True``. ``merge_with_config_defaults`` turns it off under checkpointing only for a module that
itself has a ``gradient_checkpointing`` attribute; ``GitModel`` has none (only ``GitEncoder`` does), so the cache
is created in training too. ``GitEncoder.forward`` then calls ``layer_module(hidden_states, attention_mask, cache,
**kwargs)`` with the cache POSITIONALLY. ``GradientCheckpointingLayer`` drops a cache only when it is a keyword
(``kwargs["cache"] = None``), so the checkpointed ``GitLayer`` keeps it: the forward appends the layer's keys and
values to the cache, and the backward recompute appends them a second time. The recomputed attention then has
twice as many keys as the mask has columns and raises in backward ("The size of tensor a (30) must match the size
of tensor b (15) at non-singleton dimension 3", at ``attention_scores + attention_mask``), with ``use_reentrant``
False or True. A plain run (or ``use_cache=False``) trains normally. ``GitForCausalLM`` with ``labels`` is not
hit (it sets ``use_cache=False``); ``GitModel`` and ``GitForCausalLM`` without ``labels`` are.
Up to 5.3.0 ``GitEncoder.forward`` itself set ``use_cache=False`` under checkpointing and created the cache only
after that, so no cache reached the layers. 5.4.0 moved the cache creation to ``GitModel.forward`` and dropped
that switch from ``GitEncoder``. RoFormer (``is_decoder=True``) has the same positional-cache failure since 5.0.0.
Found by the harness on 5.24.0 (`python -m harness run --backend full --arch git --task feature`: every gc mode and
order raises in backward, also with peft's methods; the cause probed by
the cache length before/after the recompute and by passing ``use_cache=False``).

Versions: absent on 4.57.6 and 5.0.0 to 5.3.0; present on 5.4.0 (source-bisected over every 5.x minor, run on
5.3.0 / 5.4.0) to 5.25.0 (newest checked).

Verdict: exit 0 when the checkpointed run gives the same loss and gradients as the plain one, exit 1 when they
differ or only the checkpointed run raises, exit 2 = cannot run. Standalone: imports only torch / transformers.
"""

AFFECTED = {"transformers": ">=5.4.0"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers>=4.25"]   # GIT is in transformers from 4.25
LINKS = [
    "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/models/git/modeling_git.py#L784",
    "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/models/git/modeling_git.py#L314-L319",
    "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/models/git/modeling_git.py#L161",
    "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/models/git/modeling_git.py#L169",
    "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/modeling_layers.py#L106-L109",
    "https://github.com/huggingface/transformers/blob/v5.3.0/src/transformers/models/git/modeling_git.py#L430-L438",
]

import sys

try:
    import torch
    import transformers
    from transformers import GitConfig, GitModel
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def run(gc: bool, use_reentrant: bool = False):
    torch.manual_seed(0)
    config = GitConfig(vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                          num_attention_heads=4, image_size=16, patch_size=8),
                       vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=37, max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
    model = GitModel(config)   # use_cache left at its default (config.use_cache = True)
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    model.train()
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, 99, (2, 10), generator=g)
    pixel_values = torch.randn(2, 3, 16, 16, generator=g)
    torch.manual_seed(42)   # the same dropout masks in both runs
    out = model(input_ids=input_ids, pixel_values=pixel_values)
    loss = out.last_hidden_state.pow(2).mean()
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    try:
        l0, g0 = run(False)
    except Exception as exc:
        print(f"CANNOT RUN: the plain run raises {type(exc).__name__}: {exc}")
        return 2
    if not g0:
        print("CANNOT RUN: the plain run gives no gradient")
        return 2
    bug = False
    for use_reentrant in (False, True):
        mode = f"use_reentrant={use_reentrant}"
        try:
            l1, g1 = run(True, use_reentrant)
        except Exception as exc:
            print(f"BUG ({mode}): only the checkpointed run raises {type(exc).__name__}: {str(exc)[:200]}")
            bug = True
            continue
        worst = max(((g1[n] - g).abs().max().item() if n in g1 else float("inf"), n) for n, g in g0.items())
        if abs(l0 - l1) > 1e-6 or worst[0] > 1e-5:
            print(f"BUG ({mode}): checkpointing changes training: loss {l0:.6f} vs {l1:.6f}, "
                  f"worst gradient difference {worst[0]:.3e} at {worst[1]}")
            bug = True
        else:
            print(f"OK ({mode}): same loss ({l0:.6f}) and gradients (worst difference {worst[0]:.3e})")
    return 1 if bug else 0


if __name__ == "__main__":
    sys.exit(main())
