"""transformers: without an attention mask, gradient checkpointing trains Qwen3-VL with a broken causal mask.

Checkpointing turns ``use_cache`` off in training. ``Qwen3VLTextModel.forward`` hands ``create_causal_mask`` the
temporal row of the 3-row M-RoPE position ids as ``position_ids`` (``text_position_ids = position_ids[0]``).
With no attention mask and no cache, ``masking_utils`` looks for packed sequences in those ids and starts a
new sequence wherever they do not step by +1: the image tokens share one temporal index and the text after
them jumps, so the mask becomes block-diagonal, and text after the first image token no longer sees the prompt.
Plain training keeps ``config.use_cache=True``, builds a ``DynamicCache`` and skips that detection, so it gets the
full causal mask. A plain run with ``use_cache=False`` is bit-identical to the checkpointed one (this is the cache
switch, not recompute); with an attention mask both agree. Qwen3-VL-MoE has the same code.
Found by the harness (`python -m harness run --backend full --arch qwen3_vl --inputs unmasked`: mismatch from
the step-0 loss, every gc mode and order, float64 too).

Versions: present on 4.57.6; absent on 5.24.0 (no text positions are taken from 3-row M-RoPE ids; likely
transformers PR 44158). Earlier releases not checked (Qwen3-VL is in transformers from 4.57).

Verdict: exit 0 when the checkpointed forward gives the plain run's loss, exit 1 when it differs, exit 2 = cannot
run. Standalone: imports only torch / transformers.
"""

AFFECTED = {"transformers": ">=4.57,<5"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers>=4.57"]   # Qwen3-VL is in transformers from 4.57
LINKS = [
    "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/models/qwen3_vl/modeling_qwen3_vl.py#L831",
    "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/masking_utils.py#L734",
    "https://github.com/huggingface/transformers/pull/44158",
]

import sys

try:
    import torch
    import transformers
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)

IMAGE, START, END = 255, 253, 252
V5 = int(transformers.__version__.split(".")[0]) >= 5


def config():
    vision = dict(depth=2, hidden_size=32, intermediate_size=37, num_heads=4, in_channels=3, patch_size=8,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32, deepstack_visual_indexes=[0, 1])
    text = dict(vocab_size=256, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, max_position_embeddings=64, attention_dropout=0.0,
                rope_scaling={"rope_type": "default", "mrope_section": [2, 1, 1]})
    if V5:   # rope settings moved to rope_parameters
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [2, 1, 1]}
        del text["rope_scaling"]
    return Qwen3VLConfig(vision_config=vision, text_config=text, image_token_id=IMAGE, video_token_id=254,
                         vision_start_token_id=START, vision_end_token_id=END)


def loss(gc: bool, mask: bool = False):
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(config())
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    # a prompt, one 4x4-patch image (4 tokens after the 2x2 merge), more text; no attention mask
    ids = torch.tensor([[10, 11, 12, START, IMAGE, IMAGE, IMAGE, IMAGE, END, 20, 21, 22, 23]])
    g = torch.Generator().manual_seed(1)
    batch = dict(input_ids=ids, labels=ids, pixel_values=torch.randn(16, 3 * 2 * 8 * 8, generator=g),
                 image_grid_thw=torch.tensor([[1, 4, 4]]))
    if mask:
        batch["attention_mask"] = torch.ones_like(ids)
    if V5:
        batch["mm_token_type_ids"] = (ids == IMAGE).long()
    return model(**batch).loss.item()


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    plain, ckpt, masked = loss(False), loss(True), loss(True, mask=True)
    print(f"loss plain {plain:.6f}, checkpointed {ckpt:.6f}, checkpointed with an all-ones mask {masked:.6f}")
    if abs(masked - plain) > 1e-5:
        print("CANNOT RUN: with a mask the checkpointed loss should equal the plain one; it does not here")
        return 2
    if abs(ckpt - plain) > 1e-5:
        print("BUG: without an attention mask the checkpointed forward computes another loss (broken causal mask)")
        return 1
    print("OK: the same loss with checkpointing, with or without an attention mask")
    return 0


if __name__ == "__main__":
    sys.exit(main())
