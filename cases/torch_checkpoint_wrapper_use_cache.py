"""transformers + torch's checkpoint_wrapper: a decoder whose config keeps use_cache=True writes its keys and values
into a DynamicCache during training, and the recompute writes them again. Non-reentrant: CheckpointError.
Reentrant: the key and value projections silently get a zero gradient.

Report, ready to file (transformers#34928 is the non-reentrant error, closed with a fix only for accelerate's env
flag, transformers#36610, which was not merged; the silent reentrant loss is not reported):

    Title: apply_activation_checkpointing on a Llama with use_cache=True (its default) silently zeroes the k/v
    projections' gradients (reentrant) or raises CheckpointError (non-reentrant)

    torch's activation checkpointing (torch.distributed.algorithms._checkpoint.checkpoint_wrapper.
    apply_activation_checkpointing, as accelerate's FSDP plugin with activation_checkpointing=True, torchtune and
    torchtitan apply it) wraps each LlamaDecoderLayer. transformers turns the cache off in training only under its
    own switch (GradientCheckpointingLayer.__call__ checks self.gradient_checkpointing), so LlamaModel.forward, with
    use_cache from the config (True), makes a DynamicCache and every layer appends its keys and values to it. The
    checkpoint's recompute runs the layer again and appends again: the layer attends to 20 keys for 10 tokens.
    use_reentrant=False: torch's metadata check raises ("Recomputed values ... have different metadata").
    use_reentrant=True: without a padding mask SDPA's is_causal mask aligns the 10 queries with the first 10 keys,
    the forward's, which were computed under no_grad, so the recomputed keys and values are never attended: the
    loss and the other gradients are unchanged and k_proj / v_proj get exactly zero gradient at every step, silently.
    With a padding mask: a size mismatch (20 vs 10). Passing use_cache=False (or the config's) avoids both; a
    warning, or turning the cache off when the model is in training and any layer is wrapped, would too.

Found by the harness (`python -m harness run --backend full --arch llama --gc-mode torch_reentrant,torch_non_reentrant`:
missing_grad / gc_error under every launch; BERT, which caches only as a decoder, equivalent).

Verdict: exit 0 when both checkpointed runs train as the plain one, exit 1 when either does not, exit 2 = cannot
run. Standalone: imports only torch / transformers.
"""

AFFECTED = {"transformers": ">=4.36"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch>=2.1", "transformers"]
LINKS = [
    "https://github.com/huggingface/transformers/issues/34928",
    "https://github.com/huggingface/transformers/pull/36610",
    "https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/modeling_layers.py#L61",
]

import functools
import sys

try:
    import torch
    import transformers
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl, apply_activation_checkpointing, checkpoint_wrapper)
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def run(impl):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)   # config.use_cache: True, as every checkpoint ships it
    if impl is not None:
        apply_activation_checkpointing(model, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper,
                                                                                      checkpoint_impl=impl),
                                       check_fn=lambda m: isinstance(m, LlamaDecoderLayer))
    model.train()
    ids = torch.randint(1, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    try:
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
    except Exception as exc:  # noqa: BLE001 - the finding
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    return {n.replace("_checkpoint_wrapped_module.", ""): p.grad.clone() for n, p in model.named_parameters()}, ""


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    plain, why = run(None)
    if plain is None:
        print(f"CANNOT RUN: the plain run fails: {why}")
        return 2
    bug = False
    for impl in (CheckpointImpl.REENTRANT, CheckpointImpl.NO_REENTRANT):
        grads, why = run(impl)
        if grads is None:
            print(f"BUG: {impl.name}: {why}")
            bug = True
            continue
        zero = [n for n, g in plain.items() if g.abs().max() > 0 and grads[n].abs().max() == 0]
        worst = max(((grads[n] - g).abs().max() / g.abs().max().clamp_min(1e-12)).item() for n, g in plain.items())
        if zero or worst > 1e-4:
            print(f"BUG: {impl.name}: {len(zero)} tensors get a zero gradient ({', '.join(zero[:2])}, ...); worst "
                  f"relative gradient difference {worst:.3e}")
            bug = True
        else:
            print(f"OK: {impl.name}: same gradients (worst relative difference {worst:.3e})")
    return 1 if bug else 0


if __name__ == "__main__":
    sys.exit(main())
