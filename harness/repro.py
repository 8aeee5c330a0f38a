"""`python -m harness repro CELL_ID`: a self-contained script reproducing one cell.

The script imports torch, transformers and the cell's library only. It carries the tiny config,
the method config, the synthetic batches and, verbatim, the harness's own training loop
(`train_recipe`, `Probe`), trace and comparator sources, so it reaches the same outcome by the
same code. It prints the diff and exits 0 when the cell is equivalent, 1 otherwise.
"""
from __future__ import annotations

import base64
import enum
import inspect
import math
import re
import textwrap

import torch

from . import backends, compare, launch, outcomes, probe, run, trace, train
from .archs.base import checkpointed_layers
from .archs.base import (ArchSpec, KeepFloat64, build_model, cache_off, config_and_subs, declared_float32,
                         model_configs, to_dtype)
from .archs.losses import PROJECTION_SEED, projected, upcast
from .archs.losses import all_outputs_loss, nested_outputs
from .cells import SelectionError, find, resolve
from .launch import rank as launch_rank
from .repro_scripts import EXACT, LABELLED, MINIMAL, TEMPLATE
from .versions import versions

# where checkpointing is enabled, as the minimal script's docstring says it
ORDER_WORDS = {"gc_first": "before the adapter is attached", "adapter_first": "after attaching it",
               "prepare_kbit": "by prepare_model_for_kbit_training before the adapter is attached"}


def _strip_imports(src: str) -> str:
    keep = [ln for ln in src.splitlines()
            if not re.match(r"\s*(from \.|from __future__|import torch$|from dataclasses|import enum$)", ln)]
    return "\n".join(keep)


class _Source(str):
    """Source text that `repr` writes as it is (inside a config literal)."""

    def __repr__(self):
        return str(self)


def _jsonable(obj):
    """A config dict as a Python literal: enums by value, sets as sorted lists, inf/nan as float('inf')
    (NemotronH's time_step_limit)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return _Source(f"float('{obj}')")
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(_jsonable(v) for v in obj)
    return obj


def _tensor_source(t: torch.Tensor) -> str:
    """Integer tensors (ids, masks, labels) and small float tensors verbatim; larger float tensors (pixels,
    audio, boxes) exactly as well, as their bytes in base64: a redrawn stand-in changes the outcome (UDOP's
    boxes: a ReLU flip seen with the real ones, none with normal-distributed ones)."""
    dtype = str(t.dtype).split(".")[-1]
    if not t.is_floating_point() or t.numel() <= 64:
        return f"torch.tensor({t.tolist()!r}, dtype=torch.{dtype})"
    data = base64.b64encode(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).decode()
    lines = "\n".join(f"        {data[i:i + 96]!r}" for i in range(0, len(data), 96))
    return f"exact({tuple(t.shape)!r}, {dtype!r}, (\n{lines}))"


def _batches_source(arch, task, model, inputs, steps, seed, method=None, name: str = "BATCHES") -> str:
    out = [f"{name} = ["]
    for step in range(steps):
        out.append("    {")
        batch = arch.make_batch(task, model, inputs, step, seed)
        if method is not None and method.batch is not None:
            batch = method.batch(batch)
        for k, v in batch.items():
            val = _tensor_source(v) if isinstance(v, torch.Tensor) else repr(v)
            out.append(f"    {k!r}: {val},")
        out.append("    },")
    out.append("]")
    return "\n".join(out)


def _parts(cell, o: run.Options):
    """What both scripts are written from: the cell's arch, backend and method, the tiny model built as the cell
    builds it, its config's values that differ from the class's defaults, and the backend's repro calls."""
    arch, be, method = resolve(cell)
    torch.manual_seed(o.seed)
    model = build_model(arch, cell.task)
    cfg = model.config
    diff = cfg.to_diff_dict()
    for k in ("transformers_version", "model_type"):
        if type(cfg).__name__ != "EncoderDecoderConfig":
            diff.pop(k, None)
    try:
        rep = be.repro(method, arch, cell.task, model)
    except NotImplementedError as exc:
        raise SelectionError(f"cannot write a repro for {cell.id}: {exc}") from None
    return arch, be, method, model, diff, rep


def _set_attn(recipe: str, model) -> str:
    """The build's line that sets the recipe's attn_implementation on every sub-model, as build_model does."""
    attn = train.CONFIG_KWARGS.get(recipe, {}).get("attn_implementation")
    if not attn or not hasattr(model, "set_attn_implementation"):
        return ""
    return f"\n        model.set_attn_implementation({attn!r})   # every sub-model's, as from_pretrained's argument"


def script(cell_id: str, options: run.Options | None = None, with_outcome: bool = True) -> str:
    o = options or run.Options()
    cell = find(cell_id)
    arch, be, method, model, diff, rep = _parts(cell, o)
    cfg = model.config
    header = "harness outcome at generation: not run"
    if with_outcome:
        r = run.Runner(o).run_cell(cell)
        header = f"harness outcome at generation: {r['outcome']} (expected {r['expected']}): {r['detail']}"
    from_harness = "\n\n".join(_strip_imports(inspect.getsource(m)) for m in (outcomes, trace, compare))
    loop = (f"RUNAWAY_FACTOR = {probe.RUNAWAY_FACTOR}\nPROJECTION_SEED = {PROJECTION_SEED}\n"
            f"MICRO_BATCHES = {train.MICRO_BATCHES!r}\nADAPTERS = {train.ADAPTERS!r}\n"
            f"AUX_FORWARD = {train.AUX_FORWARD!r}\nAUX_KEYS = re.compile({train.AUX_KEYS.pattern!r})\n"
            f"VIEWS = {train.VIEWS!r}\nWRAPPED = {train.WRAPPED!r}\n"
            f"TORCH_GC_MODES = {backends.base.TORCH_GC_MODES!r}\nBEFORE_ADAPTER = {backends.base.BEFORE_ADAPTER!r}\n"
            f"WORLD, DDP_KWARGS = {launch.WORLD!r}, {launch.DDP_KWARGS!r}\n\n\n") + "\n\n".join(
        _strip_imports(inspect.getsource(obj)) for obj in (
        train.CellTimeout, train.time_limit, train._raise_timeout, probe.RunawayRecompute, probe._address, probe.Probe,
        train._grads,
        train._snapshot, train._final, train.seed_torch,
        train._one_line, train.default_float, train.train_recipe, train.trainable, train.train_loop,
        train.train_by_trainer, train.autocast, train.judged_dtype, train.aux_outputs_on, train.NoAuxOutputs,
        train.aux_refused, train.aux_loss, train.cache_asked, train.cache_cause, train.cast_inputs,
        train.clean_name, train.final_state, train._innermost, checkpointed_layers,
        backends.base.torch_checkpointing, launch_rank.Rank, launch_rank._full,
        all_outputs_loss, projected, upcast, to_dtype, KeepFloat64, declared_float32, cache_off, model_configs,
        config_and_subs))
    return TEMPLATE.format(
        cell_id=cell.id, versions=versions(), header=textwrap.fill(header, 96, subsequent_indent="    "),
        arch=cell.arch, task=cell.task, method=cell.method, backend=cell.backend,
        gc_mode=cell.gc_mode, order=cell.order, inputs=cell.inputs, recipe=cell.recipe,
        recipe_doc=train.RECIPES[cell.recipe],
        imports=rep["imports"], model_cls=type(model).__name__, config_cls=type(cfg).__name__,
        config=repr(_jsonable(diff)), method_config=repr(_jsonable(rep["config"])),
        setup=textwrap.indent(rep["setup"], " " * 8), attach=textwrap.indent(rep["attach"], " " * 8),
        second=textwrap.indent(rep.get("second", "raise NotImplementedError('one adapter only')"), " " * 12),
        activate=textwrap.indent("\n".join(
            [rep.get("activate", "raise NotImplementedError('one adapter only')")]
            + ([rep["train_both"]] if cell.recipe == "switch" and "train_both" in rep else [])), " " * 8),
        trainer=rep.get("trainer", "transformers.Trainer"),
        compose=textwrap.indent(rep.get("compose", {}).get(cell.recipe, "pass"), " " * 8),
        config_kwargs=train.CONFIG_KWARGS.get(cell.recipe, {}), set_attn=_set_attn(cell.recipe, model),
        unsupported=repr(be.unsupported_patterns + backends.base.COMMON_UNSUPPORTED),
        batches=_batches_source(arch, cell.task, model, cell.inputs,
                                o.steps * train.MICRO_BATCHES.get(cell.recipe, 1), o.seed, method),
        steps=o.steps, seed=o.seed, lr=o.lr, dtype=o.dtype, timeout=o.timeout,
        view_batches="\n".join(_batches_source(arch, cell.task, model, cell.inputs, o.steps, o.seed + train.VIEW_SEED * v,
                                                method, f"VIEW{v}") for v in range(1, train.VIEWS.get(cell.recipe, 1))),
        views=", ".join(f"VIEW{v}" for v in range(1, train.VIEWS.get(cell.recipe, 1))), parallel=cell.parallel,
        reentrant=cell.gc_mode in backends.base.REENTRANT, gc_kwargs=backends.base.gc_kwargs(cell.gc_mode),
        gc_extra=backends.base.EXTRA_GC_MODES.get(cell.gc_mode, {}),
        launched=_strip_imports(inspect.getsource(train.Launched)),
        torch_gc=cell.gc_mode if cell.gc_mode in backends.base.TORCH_GC_MODES else None,
        all_outputs=cell.task == "feature" and type(arch).loss is not ArchSpec.loss, batch_extra=rep.get("batch_extra", "{}"),
        nested_outputs=nested_outputs(arch),
        harness_sources=from_harness, loop_sources=loop, labelled=LABELLED, exact=EXACT,
    )


def minimal_script(cell_id: str, options: run.Options | None = None) -> str:
    """A short script a maintainer reads in a minute: the user's calls, one config, the batches, a plain and a
    checkpointed run of the plain loop, the gradients compared at the harness's tolerance (a float32 difference
    settled in float64), one verdict line; the known cause and link in its docstring. Plain-loop cells of a head
    with a loss only (the faithful script covers the rest)."""
    from .expectations import expected

    o = options or run.Options()
    cell = find(cell_id)
    if cell.recipe != "loop":
        raise SelectionError(f"--minimal writes the plain loop; {cell.id} trains by the {cell.recipe} recipe: "
                             f"`harness repro {cell.id}` writes its faithful script")
    arch, be, method, model, diff, rep = _parts(cell, o)
    cfg = model.config
    if "labels" not in arch.make_batch(cell.task, model, cell.inputs, 0, o.seed):
        raise SelectionError(f"--minimal needs a head with a loss; {cell.id} trains a {cell.task} model on a "
                             f"projection of its outputs: `harness repro {cell.id}` writes its faithful script")
    want, why = expected(cell.fields())
    cause = textwrap.fill(f"Known cause: {why.reason}", 100) + f"\n{why.link}" if why else "No known cause recorded."
    return MINIMAL.format(
        cell_id=cell.id, backend=cell.backend, arch=cell.arch, method=cell.method, gc_mode=cell.gc_mode,
        order=cell.order, inputs=cell.inputs, expected="|".join(w.value for w in want), cause=cause,
        versions=", ".join(f"{k} {v}" for k, v in versions().items() if v and k != "python"),
        imports=rep["imports"], model_cls=type(model).__name__, config_cls=type(cfg).__name__,
        config=repr(_jsonable(diff)), method_config=repr(_jsonable(_set_fields(method.make_config(arch, cell.task),
                                                                               rep["config"]))),
        setup=textwrap.indent(rep["setup"], " " * 4),
        attach=textwrap.indent(rep["attach"], " " * 4), batch_extra=rep.get("batch_extra", "{}"),
        batches=_batches_source(arch, cell.task, model, cell.inputs, o.steps, o.seed, method),
        reentrant=cell.gc_mode in backends.base.REENTRANT, gc_kwargs=backends.base.gc_kwargs(cell.gc_mode),
        gc_extra=backends.base.EXTRA_GC_MODES.get(cell.gc_mode, {}),
        order_words=ORDER_WORDS[cell.order],
        seed=o.seed, lr=o.lr, tol={k: v for k, v in compare.DEFAULT_TOL.items() if k in ("float32", "float64")},
        labelled=LABELLED, exact=EXACT)


def _set_fields(config, fields: dict) -> dict:
    """The fields of a peft config that differ from its class's defaults (and those naming the method), for a
    reader; all of them for another library's or when the class has no defaults."""
    if not isinstance(fields, dict) or "peft_type" not in fields:   # adapters: AdapterConfig.load reads the whole dict
        return fields
    try:
        defaults = type(config)().to_dict()
    except Exception:  # noqa: BLE001
        return fields
    keep = ("peft_type", "task_type")
    return {k: v for k, v in fields.items() if k in keep or k not in defaults or defaults[k] != v}


def write_repro(cell_id: str, path: str | None = None, minimal: bool = False) -> str:
    src = minimal_script(cell_id) if minimal else script(cell_id)
    if path:
        with open(path, "w") as fh:
            fh.write(src)
        return path
    print(src)
    return ""
