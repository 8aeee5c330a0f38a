"""peft: ShadowPEFT leaks its carrier object into the model when LayerDrop skips the last adapted block.

ShadowPEFT wraps the hidden states in a ``ShadowCarrier`` (hidden + shadow state) in a pre-hook of the first
adapted block and unwraps it in a hook on the last adapted block's output (``ShadowModel._unwrap_exit_hook``).
LayerDrop (``encoder_layerdrop`` of BART-family encoders, Whisper, ...) skips a block's call in training. A step
that drops the last adapted block (and runs an earlier one) never runs the exit hook, so the carrier reaches the
model's own code after the blocks: Pegasus's final LayerNorm raises "layer_norm(): argument 'input' must be
Tensor, not ShadowCarrier" (BlenderBot-Small: an attribute read on it). Plain training, no checkpointing needed.
Found by the harness: the float64 reruns of ShadowPEFT cells on Pegasus, MVP, BlenderBot-Small and M2M-100
failed so (float64 draws other LayerDrop numbers than float32; the cells' `harness repro` script passes with
layerdrop 0), and the calibration table's failing NLLB-MoE baseline is the same error.

Verdict: exit 0 when every step trains, exit 1 when a step that skipped the last adapted block raises (the
steps that raise are exactly those), exit 2 = cannot run. Standalone: imports only torch / transformers / peft.
"""

AFFECTED = {"peft": ">=0.21"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch", "transformers", "peft>=0.21"]   # ShadowConfig
LINKS = [
    "https://github.com/huggingface/peft/blob/v0.21.2/src/peft/tuners/shadow/model.py",
    "https://arxiv.org/abs/1909.11556",   # LayerDrop
]

import sys

try:
    import torch
    from peft import ShadowConfig, get_peft_model
    from transformers import PegasusConfig, PegasusModel
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)

STEPS = 16


def steps(layerdrop: float) -> list[tuple[tuple[bool, bool], str | None]]:
    """Per training step: (which of the 2 encoder blocks ran, the error or None)."""
    torch.manual_seed(0)
    config = PegasusConfig(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37,
                           max_position_embeddings=64, encoder_layerdrop=layerdrop, decoder_layerdrop=0.0)
    model = get_peft_model(PegasusModel(config), ShadowConfig(
        r=4, shadow_num_hidden_layers=1, target_modules=["encoder.layers.0", "encoder.layers.1"],
        task_type="FEATURE_EXTRACTION"))
    model.train()
    blocks = [model.get_base_model().encoder.layers[i] for i in range(2)]
    ran = [False, False]
    for i, block in enumerate(blocks):
        block.register_forward_pre_hook(lambda m, a, i=i: ran.__setitem__(i, True))
    out = []
    for step in range(STEPS):
        ran[:] = [False, False]
        torch.manual_seed(100 + step)
        ids = torch.randint(2, 99, (2, 8))
        try:
            loss = model(input_ids=ids, decoder_input_ids=ids[:, :5]).last_hidden_state.sum()
            err = None
            if loss.requires_grad:
                loss.backward()
            else:   # the first adapted block skipped: its entry hook never ran, no adapter took part in the step
                err = "bypassed"
        except Exception as exc:  # noqa: BLE001 - the bug is an exception
            err = f"{type(exc).__name__}: {exc}"
        out.append((tuple(ran), err))
    return out


def main() -> int:
    try:
        control, dropped = steps(0.0), steps(0.5)
    except Exception as exc:  # noqa: BLE001 - the setup itself failing is no verdict
        print(f"CANNOT RUN: {type(exc).__name__}: {exc}")
        return 2
    bad_control = [e for _, e in control if e]
    if bad_control:
        print(f"CANNOT RUN: without LayerDrop a step fails too: {bad_control[0]}")
        return 2
    for step, ((first, last), err) in enumerate(dropped):
        print(f"step {step:2d}: encoder blocks run {int(first)}{int(last)}: {err or 'ok'}")
    leaked = [s for s, (_, e) in enumerate(dropped) if e and e != "bypassed"]
    skipped_last = [s for s, ((first, last), _) in enumerate(dropped) if first and not last]
    bypassed = [s for s, (_, e) in enumerate(dropped) if e == "bypassed"]
    print(f"layerdrop 0: {STEPS} of {STEPS} steps train; layerdrop 0.5: steps that raise {leaked}, steps that "
          f"skip the last adapted block (and run the first) {skipped_last}; steps that skip the first adapted block, "
          f"where no adapter takes part (nothing requires grad) {bypassed}")
    if not leaked:
        print("OK: every step trains")
        return 0
    if leaked == skipped_last and all("ShadowCarrier" in dropped[s][1] for s in leaked):
        print("BUG: a step whose LayerDrop skips the last adapted block leaks the ShadowCarrier into the model")
        return 1
    print("CANNOT RUN: steps fail otherwise than the mechanism says")
    return 2


if __name__ == "__main__":
    sys.exit(main())
