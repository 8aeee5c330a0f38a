"""peft + torch's checkpoint_wrapper (reentrant): the LoRA weights inside the wrapped layers get no gradient; on a
causal LM the loss has no gradient at all.

Report, ready to file (no upstream issue found):

    Title: get_peft_model does not make the inputs require grad when checkpointing is torch's checkpoint_wrapper
    (accelerate's FSDP activation_checkpointing), so reentrant checkpointing trains nothing inside the layers

    PeftModel.__init__ calls enable_input_require_grads only when the base model says it checkpoints
    (`getattr(model, "is_gradient_checkpointing", True)`, peft_model.py). torch's
    apply_activation_checkpointing (CheckpointImpl.REENTRANT; how accelerate's FSDP plugin, torchtune and
    torchtitan checkpoint) does not set transformers' flag, so with the frozen embeddings no input of a wrapped layer
    requires grad and the reentrant checkpoint returns outputs outside the graph: the LoRA weights get no gradient
    (a classifier head beside them still trains, so the run looks fine), and a causal LM's loss has no grad_fn
    ("element 0 of tensors does not require grad"). Under DistributedDataParallel's defaults the next step raises
    "Expected to have finished reduction in the prior iteration". FSDP1 (use_orig_params=True) hides it where the
    root unit's flat parameter requires grad for a trained head: the frozen embeddings are views of it. Calling
    model.enable_input_require_grads() or using CheckpointImpl.NO_REENTRANT avoids it.

Found by the harness (`python -m harness run --backend peft --arch llama,bert --gc-mode torch_reentrant`: gc_error on
Llama, missing_grad on BERT; every launch).

Verdict: exit 0 when the checkpointed run trains LoRA as the plain one does, exit 1 when it does not, exit 2 =
cannot run. Standalone: imports only torch / transformers / peft.
"""

AFFECTED = {"peft": ">=0.14"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch>=2.1", "transformers", "peft"]
LINKS = ["https://github.com/huggingface/peft/blob/v0.21.2/src/peft/peft_model.py#L184"]

import functools
import sys

try:
    import peft
    import torch
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl, apply_activation_checkpointing, checkpoint_wrapper)
    from transformers import BertConfig, BertForSequenceClassification
    from transformers.models.bert.modeling_bert import BertLayer
except ImportError as exc:  # pragma: no cover - environment problem
    print(f"CANNOT RUN: missing package: {exc}")
    sys.exit(2)


def run(gc: bool):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=128, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=64, num_labels=3)
    model = BertForSequenceClassification(config)
    if gc:   # as accelerate's FSDP plugin applies it, before the adapter is attached or after: the same here
        apply_activation_checkpointing(model, checkpoint_wrapper_fn=functools.partial(
            checkpoint_wrapper, checkpoint_impl=CheckpointImpl.REENTRANT), check_fn=lambda m: isinstance(m, BertLayer))
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["query", "value"],
                                                       task_type="SEQ_CLS"))
    model.train()
    g = torch.Generator().manual_seed(1)
    out = model(input_ids=torch.randint(1, 128, (2, 10), generator=g), labels=torch.randint(0, 3, (2,), generator=g))
    out.loss.backward()
    return {n.replace("_checkpoint_wrapped_module.", ""): p.grad for n, p in model.named_parameters()
            if p.requires_grad and "lora_B" in n}


def main():
    print(f"torch {torch.__version__}, peft {peft.__version__}")
    plain, gc = run(False), run(True)
    if any(g is None for g in plain.values()):
        print("CANNOT RUN: the plain run's lora_B weights get no gradient")
        return 2
    lost = [n for n, g in gc.items() if g is None]
    if lost:
        print(f"BUG: {len(lost)} of {len(gc)} lora_B weights get no gradient with reentrant checkpoint_wrapper "
              f"({lost[0]}, ...); the classifier head still trains")
        return 1
    worst = max(((gc[n] - g).abs().max() / g.abs().max().clamp_min(1e-12)).item() for n, g in plain.items())
    print(f"OK: LoRA trains with checkpointing (worst relative difference {worst:.3e})")
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
