"""Losses: the scalar each cell back-propagates. ArchSpec's :func:`loss_of` (the model's own loss, else
:func:`projected` of its output) and the zoo's :func:`zoo_loss` (the feature task takes every float output,
:func:`all_outputs_loss`). Repro scripts carry these functions verbatim (harness/repro.py)."""
from __future__ import annotations

import torch


def loss_of(task: str, output) -> torch.Tensor:
    """The scalar that is back-propagated."""
    loss = getattr(output, "loss", None)
    if loss is not None:
        return loss
    hidden = output[0] if isinstance(output, (tuple, list)) else output.last_hidden_state
    return projected(hidden)


def projected(t: torch.Tensor, k: int = 0) -> torch.Tensor:
    """A fixed random linear functional of an output without a loss: mean(t * R), R ~ N(0, 1) drawn from seed
    PROJECTION_SEED + k in float32 (the same R in every run and dtype of a cell). Not the mean square: a model's
    output is normalised as a rule (a final LayerNorm / RMSNorm), and the mean square of a normalised tensor is
    a constant (1 up to eps: Gemma 4's was 1.0 at every step, its largest gradient 5e-7, below float32's atol, so
    checkpointing's lost K/V gradients went unseen); a random direction sees every element's gradient."""
    gen = torch.Generator().manual_seed(PROJECTION_SEED + k)
    r = torch.randn(t.shape, generator=gen, dtype=torch.float32)
    t = upcast(t)
    return (t * r.to(t.device, t.dtype)).mean()


PROJECTION_SEED = 20261204


def upcast(t: torch.Tensor) -> torch.Tensor:
    """float32 at least, for a loss: half precision would round away what the comparison looks for; float64 stays
    (the float64 rerun: `.float()` there rounds its outputs to float32 in the loss and, through its gradient, every
    gradient of the run)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def zoo_loss(task: str, output, nested: bool = False) -> torch.Tensor:
    """loss_of, except that the feature task takes every float output tensor (all_outputs_loss)."""
    loss = getattr(output, "loss", None)
    if loss is not None or task != "feature":
        return loss_of(task, output)
    loss = all_outputs_loss(output, nested)
    return loss_of(task, output) if loss is None else loss


def nested_outputs(spec) -> bool:
    """Whether the feature loss of `spec` counts the tensors inside list outputs too: a VLM's vision tower
    (feed patch_grid) returns the features its VLM takes from inner layers as a list (Qwen3-VL's deepstack),
    whose mergers train only so. (Not in general: a 4.x model's legacy cache is a tuple of tensors that the
    checkpointed run, with use_cache off, does not return.)"""
    return getattr(spec, "feed", None) == "patch_grid"


def all_outputs_loss(output, nested: bool = False):
    """The sum of a fixed random linear functional of every float output tensor (projected, the k-th output
    with seed k: so that e.g. a pooler trains too), or None.
    Whether an output requires grad does not matter: the loss is the same function of the outputs in both runs
    (checkpointing may make an output require grad that plain training does not: peft's
    enable_input_require_grads on an encoder whose layers LayerDrop skipped). A constant term that is not finite
    (a float mask of -inf or finfo.min) is left out; an output that requires grad always counts, overflowing or
    not (full fine-tuning of VITS overflows its waveform by step 2: both runs must see that)."""
    values = list(output.values() if hasattr(output, "values") else output)
    if nested:   # the tensors of list outputs too (see nested_outputs)
        values = [x for v in values for x in (v if isinstance(v, (list, tuple)) else [v])]
    values = [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]
    parts = [(projected(v, k), v.requires_grad) for k, v in enumerate(values)]
    parts = [p for p, grad in parts if grad or torch.isfinite(p)]
    return torch.stack(parts).sum() if parts else None
