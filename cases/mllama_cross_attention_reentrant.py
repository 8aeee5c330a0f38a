"""transformers: Mllama (Llama 3.2 Vision) cannot train its vision tower under reentrant gradient checkpointing.

Mllama's language model reads the image through cross-attention layers; MllamaTextModel passes the projected
image states to every decoder layer as a keyword argument, ``cross_attention_states=...``.
GradientCheckpointingLayer checkpoints a layer as ``checkpoint(partial(forward, **kwargs), *args)``, so under
reentrant checkpointing (``use_reentrant=True``) the image states are not inputs of the checkpoint but a tensor
the recompute closes over, still attached to the vision tower's graph. In backward each cross-attention layer is
recomputed and differentiated on its own (``torch.autograd.backward`` inside the checkpoint's backward), and that
inner backward runs on through the closed-over image states into the vision tower and projector, freeing their
graph. The next cross-attention layer's recompute then backpropagates into the freed graph: "RuntimeError: Trying
to backward through the graph a second time". Every released Llama 3.2 Vision checkpoint has 8 cross-attention
layers (one would train, with its gradient reaching the tower only through the inner backward). Whenever the
tower or the projector trains (full fine-tuning, or LoRA with its default q_proj / v_proj targets, which the
tower's attention has too), reentrant checkpointing cannot train; non-reentrant checkpointing trains as the
plain model does. Found by the harness (`python -m harness run --backend full --arch mllama --gc-mode
reentrant`: gc_error in every cell, equivalent under non_reentrant).

Versions: present on 4.57.6 and 5.24.0 (both pass the image states by keyword to a GradientCheckpointingLayer);
releases before the layers became GradientCheckpointingLayers passed them positionally to the checkpoint
function and are not tested here.

Verdict: exit 0 when the checkpointed run gives the same loss and gradients as the plain one, exit 1 when it
fails or differs, exit 2 = cannot run. Standalone: imports only torch / transformers.
"""

AFFECTED = {"transformers": ">=4.57"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers>=4.57"]
LINKS = [
    "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/models/mllama/modeling_mllama.py#L1259",
    "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/modeling_layers.py#L93",
]

import sys

try:
    import torch
    import transformers
    from transformers import MllamaConfig, MllamaForConditionalGeneration
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)

IMAGE_TOKEN = 120


def make_model():
    torch.manual_seed(0)
    config = MllamaConfig(
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_global_layers=1,
                           attention_heads=4, image_size=32, patch_size=8, max_num_tiles=2,
                           supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]], intermediate_layers_indices=[0, 1],
                           vision_output_dim=96),
        text_config=dict(vocab_size=128, hidden_size=32, intermediate_size=37, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, cross_attention_layers=[0, 2],
                         max_position_embeddings=64, rope_scaling={"rope_type": "default"},
                         pad_token_id=0, bos_token_id=1, eos_token_id=2),
        image_token_index=IMAGE_TOKEN)
    return MllamaForConditionalGeneration(config)


def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 100, (2, 10), generator=g)
    ids[:, 4] = IMAGE_TOKEN
    tiles = torch.tensor([[[1, 0]], [[1, 1]]])   # first image one tile (and a padding tile), second two
    pixels = torch.randn(2, 1, 2, 3, 32, 32, generator=g) * tiles[..., None, None, None]
    cross = (torch.arange(10) >= 4)[None, :, None, None] & tiles[:, None].bool()   # text from the image on
    return dict(input_ids=ids, labels=ids, pixel_values=pixels, aspect_ratio_ids=torch.tensor([[1], [2]]),
                aspect_ratio_mask=tiles, cross_attention_mask=cross.long())


def run(gc: bool):
    try:
        model = make_model()
    except Exception as exc:  # noqa: BLE001 - a config this release does not take is no verdict
        print(f"CANNOT RUN: building the tiny model fails: {type(exc).__name__}: {exc}")
        sys.exit(2)
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.train()
    out = model(**batch())
    try:
        out.loss.backward()
    except RuntimeError as exc:
        return out.loss.item(), f"{type(exc).__name__}: {str(exc).splitlines()[0][:150]}"
    return out.loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    (l0, g0), (l1, g1) = run(False), run(True)
    print(f"loss plain {l0:.6f}, checkpointed {l1:.6f}")
    if not isinstance(g0, dict) or not g0:
        print(f"CANNOT RUN: the plain run does not train: {g0 if isinstance(g0, str) else 'no gradient'}")
        return 2
    if isinstance(g1, str):
        print(f"BUG: the reentrant-checkpointed backward fails: {g1}")
        return 1
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
