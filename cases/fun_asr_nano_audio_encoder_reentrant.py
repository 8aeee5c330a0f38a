"""transformers 5: Fun-ASR-Nano's audio encoder gets no gradient under reentrant checkpointing, full fine-tuning too.

FunAsrNanoEncoder has no parameter in front of its first checkpointed layer: its input is the stacked mel frames,
scaled, plus fixed sinusoidal positions (FunAsrNanoPositionEmbedding has no weights), and it has no input
embeddings (no ``get_input_embeddings``, no ``_input_embed_layer``) for ``enable_input_require_grads`` to hook.
Under reentrant checkpointing (``use_reentrant=True``) a checkpointed layer whose inputs do not require grad
returns an output that does not either, so no layer of the encoder, and nothing before the adaptor, gets a
gradient: full fine-tuning silently trains the adaptor and the language model only (the loss is unchanged; the
warning "None of the inputs have requires_grad=True" is all the user sees). Non-reentrant checkpointing trains as
the plain model does. GLM-ASR's encoder, whose Whisper-style conv stem has parameters, keeps full fine-tuning's
gradients but lacks the ``_input_embed_layer = "conv1"`` its siblings (Qwen2-Audio, Voxtral, AudioFlamingo3, MOSS)
declare, so peft's adapters in it get none. Found by the harness (`python -m harness run --backend full --arch
fun_asr_nano --gc-mode reentrant`: missing_grad in every cell, equivalent under non_reentrant).

Versions: Fun-ASR-Nano is a model type of transformers 5 (seen on 5.24.0).

Verdict: exit 0 when the checkpointed run gives the same loss and gradients as the plain one, exit 1 when it
fails or differs, exit 2 = cannot run. Standalone: imports only torch / transformers.
"""

AFFECTED = {"transformers": ">=5"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers>=5"]
LINKS = [
    "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/models/fun_asr_nano/"
    "modeling_fun_asr_nano.py#L318",
    "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/modeling_utils.py#L2147",
]

import sys

try:
    import torch
    import transformers
    from transformers import FunAsrNanoConfig, FunAsrNanoForConditionalGeneration
except ImportError as exc:  # pragma: no cover - environment problem (or transformers 4.x: no such model)
    print(f"CANNOT RUN: missing package or model: {exc}")
    sys.exit(2)

AUDIO_TOKEN, FRAMES, MEL, STACKED = 120, 8, 16, 7


def make_model():
    torch.manual_seed(0)
    config = FunAsrNanoConfig(
        audio_config=dict(model_type="fun_asr_nano_encoder", num_mel_bins=MEL, num_stacked_frames=STACKED,
                          hidden_size=32, num_attention_heads=4, intermediate_size=37, num_hidden_layers=2,
                          num_timestamp_prediction_layers=1, max_position_embeddings=64),
        adaptor_config=dict(hidden_size=32, intermediate_size=8, num_attention_heads=4, num_hidden_layers=1,
                            projector_hidden_size=37),
        text_config=dict(model_type="qwen3", vocab_size=128, hidden_size=32, intermediate_size=37,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         max_position_embeddings=64),
        audio_token_id=AUDIO_TOKEN)
    return FunAsrNanoForConditionalGeneration(config)


def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 100, (2, 6 + FRAMES), generator=g)
    ids[:, 2:2 + FRAMES] = AUDIO_TOKEN   # one placeholder per (stacked) frame
    return dict(input_ids=ids, labels=ids, input_features=torch.randn(2, FRAMES, MEL * STACKED, generator=g),
                input_features_mask=torch.ones(2, FRAMES, dtype=torch.long))


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
    lost = [n for n in g0 if n not in g1]
    if lost:
        print(f"BUG: {len(lost)} of {len(g0)} parameters get no gradient with reentrant checkpointing "
              f"(first {lost[0]}; {sum('audio_tower' in n for n in lost)} of them in the audio tower)")
        return 1
    worst = max((((g1[n] - g).abs().max() / g.abs().max().clamp_min(1e-12)).item(), n) for n, g in g0.items())
    if abs(l0 - l1) > 1e-6 or worst[0] > 1e-4:
        print(f"BUG: reentrant checkpointing changes the gradients: loss {l0:.6f} vs {l1:.6f}, worst relative "
              f"gradient difference {worst[0]:.3e} at {worst[1]}")
        return 1
    print(f"OK: same loss and gradients with checkpointing (worst relative difference {worst[0]:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
