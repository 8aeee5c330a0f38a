"""transformers 5: Qwen3-ASR's audio encoder keeps more for backward with checkpointing than without (peft, gc_first).

Qwen3ASREncoder's input embeddings (``get_input_embeddings``) are ``conv2d1``, the first of the three frozen
subsampling convs in front of its transformer layers. Checkpointing the model and then wrapping it with peft (the
gc_first order; reentrant checkpointing) hooks that conv's output to require grad (``enable_input_require_grads``),
so the frozen conv stack, which otherwise keeps nothing for backward, now keeps its activations (480 channels at
half, quarter and eighth resolution of the mel input). At the released size (24 layers of width 1024, LoRA on
q_proj / v_proj) those outweigh what checkpointing the 24 layers saves: more bytes are kept for backward with
checkpointing than without. Found by the harness (`python -m harness run --backend peft --arch qwen3_asr_encoder
--gc-mode reentrant --order gc_first`: not_checkpointed for 28 methods; the layer-heavy BOFT, DoRA, HRA, ... save
memory), then measured at the released size (this script).

Versions: Qwen3-ASR is a model type of transformers 5 (seen on 5.24.0 with peft 0.21.2).

Verdict: exit 0 when checkpointing keeps fewer bytes for backward than the plain run, exit 1 when it keeps as many
or more, exit 2 = cannot run. Standalone: imports only torch / transformers / peft. Builds the released-size
encoder (~300M parameters, ~1.3 GB; well under a minute on a CPU).
"""

AFFECTED = {"transformers": ">=5"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers>=5", "peft"]
LINKS = [
    "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/models/qwen3_asr/"
    "modeling_qwen3_asr.py",
    "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/modeling_utils.py#L2147",
]

import sys

try:
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model
    from transformers.models.qwen3_asr.configuration_qwen3_asr import Qwen3ASREncoderConfig
    from transformers.models.qwen3_asr.modeling_qwen3_asr import Qwen3ASREncoder
except ImportError as exc:  # pragma: no cover - environment problem (or transformers 4.x: no such model)
    print(f"CANNOT RUN: missing package or model: {exc}")
    sys.exit(2)

FRAMES = 100   # one window of the encoder (2 x n_window mel frames)


def kept_for_backward(checkpointed: bool) -> int:
    """Bytes of the non-parameter tensors autograd keeps between forward and backward (each storage once)."""
    torch.manual_seed(0)
    try:
        model = Qwen3ASREncoder(Qwen3ASREncoderConfig())   # the released size
    except Exception as exc:  # noqa: BLE001 - a config this release does not take is no verdict
        print(f"CANNOT RUN: building the encoder fails: {type(exc).__name__}: {exc}")
        sys.exit(2)
    if checkpointed:   # gc_first: checkpointing on the transformers model, then peft
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model = get_peft_model(model, LoraConfig(target_modules=["q_proj", "v_proj"]))
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            kept[ptr] = t.untyped_storage().nbytes()
        return t

    g = torch.Generator().manual_seed(1)
    features = torch.randn(1, model.config.num_mel_bins, FRAMES, generator=g)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_features=features, input_features_mask=torch.ones(1, FRAMES, dtype=torch.long))
    out.last_hidden_state.pow(2).mean().backward()
    return sum(kept.values())


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    plain, checkpointed = kept_for_backward(False), kept_for_backward(True)
    print(f"kept for backward, one window of {FRAMES} mel frames: plain {plain / 1e6:.1f} MB, "
          f"reentrant-checkpointed (gc_first) {checkpointed / 1e6:.1f} MB")
    if plain == 0:
        print("CANNOT RUN: the plain run keeps nothing for backward")
        return 2
    if checkpointed >= plain:
        print("BUG: gradient checkpointing keeps as much or more for backward than the plain run: the frozen "
              "subsampling convs behind the hooked conv2d1 keep their activations")
        return 1
    print("OK: checkpointing keeps less for backward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
