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
from .versions import versions


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
            f"TORCH_GC_MODES = {backends.base.TORCH_GC_MODES!r}\n"
            f"WORLD, DDP_KWARGS = {launch.WORLD!r}, {launch.DDP_KWARGS!r}\n\n\n") + "\n\n".join(
        _strip_imports(inspect.getsource(obj)) for obj in (
        train.CellTimeout, train.time_limit, train._raise_timeout, probe.RunawayRecompute, probe._address, probe.Probe, train._grads,
        train._snapshot, train._final, train.seed_torch,
        train._one_line, train.default_float, train.train_recipe, train.trainable, train.train_loop,
        train.train_by_trainer, train.autocast, train.judged_dtype, train.aux_outputs_on, train.NoAuxOutputs,
        train.aux_refused, train.aux_loss, train.cache_asked, train.cache_cause, train.cast_inputs,
        train.clean_name, train.final_state, train._innermost, checkpointed_layers,
        backends.base.torch_checkpointing, launch.Rank, launch._full,
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
        activate=textwrap.indent(rep.get("activate", "raise NotImplementedError('one adapter only')"), " " * 8),
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
        reentrant=cell.gc_mode == "reentrant", gc_extra=backends.base.EXTRA_GC_MODES.get(cell.gc_mode, {}),
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
        reentrant=cell.gc_mode == "reentrant", gc_extra=backends.base.EXTRA_GC_MODES.get(cell.gc_mode, {}),
        order_words="before the adapter is attached" if cell.order == "gc_first" else "after attaching it",
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


# what both scripts carry verbatim: library warnings labelled, and exact float tensors
LABELLED = ('warnings.formatwarning = lambda message, category, *a, **k: f"[library warning] {category.__name__}: '
            '{message}\\n"\n'
            "transformers.logging.enable_explicit_format()   # transformers' own messages say where they come from")
EXACT = '''def exact(shape, dtype, data):
    """A float tensor (pixels, audio) stored exactly: its bytes in base64."""
    return torch.frombuffer(bytearray(base64.b64decode(data)), dtype=getattr(torch, dtype)).reshape(shape).clone()'''


TEMPLATE = '''#!/usr/bin/env python
"""Gradient-checkpointing equivalence: reproduction of cell {cell_id}

{backend} / {arch} ({model_cls}, tiny random config, task {task}) / method {method}:
trained twice from the same seed on the same synthetic batches, plainly and with gradient
checkpointing (gc_mode {gc_mode}, order {order}, inputs {inputs}, recipe {recipe}, launch {parallel}), dropout on,
{steps} SGD steps;
losses, gradients of every trainable parameter and the final state dict are compared.

Generated by `python -m harness repro` with {versions}
{header}

Run: python THIS_FILE   -> prints the verdict; exit 0 when equivalent, 1 otherwise.
Imports torch, transformers and the library under test only; no hub access is needed.
"""
import base64
import contextlib
import math
import os
import random
import re
import signal
import sys
import tempfile
import time
import warnings
import enum
from dataclasses import dataclass, field

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np
import torch
import transformers
{imports}

{labelled}

ORDER = "{order}"
STEPS, SEED, LR, DTYPE, TIMEOUT = {steps}, {seed}, {lr}, "{dtype}", {timeout}
TRAINING = "{recipe}"   # how a step trains: {recipe_doc}
GC_KWARGS = {{"use_reentrant": {reentrant}}}
TORCH_GC = {torch_gc!r}   # torch's checkpoint_wrapper on the checkpointed layers instead of transformers' switch
PARALLEL = "{parallel}"   # the launch: one process, or WORLD ranks as torchrun starts them (this script starts them)
GC_EXTRA = {gc_extra}   # more arguments of transformers 5's activation_checkpointing_enable (every_n_layers, offload)
CACHE = True   # False: use_cache switched off in the plain run, as checkpointing does (the cache triage)
ALL_OUTPUTS = {all_outputs}  # the loss of a base model without a head: a fixed random projection of its outputs
NESTED_OUTPUTS = {nested_outputs}  # ... the tensors inside list outputs too (a vision tower's inner-layer features)
CONFIG = {config}
METHOD_CONFIG = {method_config}
# the library's own documented refusals: an exception matching one is `unsupported`
UNSUPPORTED = {unsupported}


{exact}


{batches}
{view_batches}
VIEW_BATCHES = [{views}]   # the other views of each step's data (two_forwards)


def make_config():
    """The class's default config with the tiny values set on it (as the harness builds it)."""
    try:
        cfg = transformers.{config_cls}(**{config_kwargs!r})
    except Exception:  # composite configs without defaults (EncoderDecoderConfig)
        return transformers.{config_cls}.from_dict(CONFIG)
    set_values(cfg, CONFIG)
    return cfg


def set_values(obj, values):
    for key, value in values.items():
        try:
            current = getattr(obj, key, None)
        except Exception:  # a per-layer attribute read globally (Gemma 4's head_dim) raises; it is set below
            current = None
        if isinstance(value, dict) and isinstance(current, transformers.PretrainedConfig):
            set_values(current, value)
        else:
            setattr(obj, key, value)


{launched}


class Recipe(Launched):
    """The calls a user makes: build the tiny model, attach the method, enable checkpointing (and, launched over
    several ranks, wrap it as the launch does: Launched, Rank)."""
    training = TRAINING
    device = "cpu"
    reentrant = GC_KWARGS["use_reentrant"]

    @property
    def dtype(self):   # DTYPE as it is now: the float64 rerun and the cache triage set it
        return DTYPE

    def build(self):
        model = transformers.{model_cls}(make_config()){set_attn}
        model = to_dtype(model, "cpu", getattr(torch, DTYPE))
        if not CACHE:
            self.cache_off = cache_off(model)
        if TRAINING == "aux_outputs":
            aux_outputs_on(model)
{setup}
        return model

    def enable_gc(self, model):
        if TORCH_GC:
            torch_checkpointing(model, TORCH_GC)
        elif GC_EXTRA:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=dict(GC_KWARGS), **GC_EXTRA)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=dict(GC_KWARGS))

    def attach(self, model):
{attach}
        if ADAPTERS.get(TRAINING, 1) > 1:   # a second adapter of the method
{second}
        # several adapters composed (a compose_* recipe), or nothing more
{compose}
        return model

    def activate(self, model, index):
{activate}

    def trainer_class(self):
        return {trainer}

    def batch(self, model, step, view=0, rank=None):
        batch = dict((BATCHES if view == 0 else VIEW_BATCHES[view - 1])[step], **{batch_extra})
        if self.launch is not None:
            batch = self.launch.part(batch, rank)
        extra = AUX_FORWARD if TRAINING == "aux_outputs" else {{}}
        return cast_inputs(dict(batch, **extra), getattr(torch, DTYPE))

    def loss(self, output):
        loss = self.task_loss(output)
        return aux_loss(loss, output) if TRAINING == "aux_outputs" else loss

    def task_loss(self, output):
        loss = getattr(output, "loss", None)
        if loss is not None:
            return loss
        # every float output (e.g. a pooler too)
        loss = all_outputs_loss(output, NESTED_OUTPUTS) if ALL_OUTPUTS else None
        if loss is not None:
            return loss
        hidden = output[0] if isinstance(output, (tuple, list)) else output.last_hidden_state
        return projected(hidden)

    def is_unsupported(self, exc):
        return (TRAINING == "aux_outputs" and aux_refused(exc)
                or any(re.search(p, f"{{type(exc).__name__}}: {{exc}}") for p in UNSUPPORTED))


# ---- from the harness, verbatim: outcomes, trace, comparator --------------------------------
{harness_sources}


# ---- from the harness, verbatim: the training loop and its probe -----------------------------
{loop_sources}


def verdict(dtype):
    global DTYPE
    DTYPE = dtype

    def one(gc):
        return train_recipe(Recipe(), gc=gc, order=ORDER, steps=STEPS, seed=SEED, lr=LR, timeout=TIMEOUT)

    base = one(False)
    cand = one(True) if base.ok else Trace(error="not run: baseline failed")
    if PARALLEL != "single" and not (base.ok and cand.ok):
        # a rank whose run raised ends, as the harness's ranks do: its connections close, so a peer waiting in a
        # collective raises ("Connection closed by peer") instead of waiting on
        failed = cand if base.ok else base
        print(f"OUTCOME: {{'gc_error' if base.ok else 'error'}}: {{failed.error}} (at {{failed.where}})")
        sys.stdout.flush()
        os._exit(1)
    v = compare(base, None, cand, judged_dtype(TRAINING, DTYPE))
    if base.ok and anyone(not reproduces(v)):   # the replay (the noise floor) only where the two runs differ
        v = compare(base, one(False), cand, judged_dtype(TRAINING, DTYPE))
    return base, cand, v


def triage(dtype, cand):
    """As the harness does: a plain run with use_cache off (checkpointing turns it off in training) against the
    checkpointed run."""
    global CACHE, DTYPE
    CACHE, DTYPE, recipe = False, dtype, Recipe()
    try:
        plain = train_recipe(recipe, gc=False, order=ORDER, steps=STEPS, seed=SEED, lr=LR, timeout=TIMEOUT)
    finally:
        CACHE = True
    return cache_cause(plain, cand, judged_dtype(TRAINING, dtype))[1] or "cache triage: no config has use_cache on"


def anyone(flag):
    """Whether any rank's flag is set (one process: the flag): every rank then takes the same path, as the
    collectives of their runs need."""
    if PARALLEL == "single":
        return bool(flag)
    t = torch.tensor([int(bool(flag))])
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return bool(t.item())


def launch_ranks():
    """Start the launch's WORLD ranks as `torchrun --nproc_per_node WORLD THIS_FILE` would (its environment), on
    127.0.0.1 only; print each rank's lines; exit 0 when every rank's run was equivalent."""
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(WORLD),
               LOCAL_WORLD_SIZE=str(WORLD), GLOO_SOCKET_IFNAME="lo")
    ranks = [subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(WORLD)]
    outcomes = []
    try:
        for r, proc in enumerate(ranks):
            out, _ = proc.communicate(timeout=8 * (TIMEOUT or 300) + 120)
            print("\\n".join(f"rank {{r}}: {{line}}" for line in out.splitlines() if not line.startswith("[library")))
            outcomes += [(r, line[len("OUTCOME: "):]) for line in out.splitlines() if line.startswith("OUTCOME: ")]
    except subprocess.TimeoutExpired:
        print("OUTCOME: gc_error: a rank did not finish (it waits in a collective its peer did not enter)")
        return 1
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # the cell's outcome: the first rank's that is not equivalent, a rank's own failure before its peer's "closed by peer"
    worst = sorted(outcomes, key=lambda o: (o[1].startswith("equivalent"), "by peer" in o[1], o[0]))
    if not worst:
        print("OUTCOME: error: no rank reached a verdict")
        return 1
    print(f"OUTCOME: {{worst[0][1].partition(': ')[0]}}: rank {{worst[0][0]}}: {{worst[0][1].partition(': ')[2]}}")
    return 0 if worst[0][1].startswith("equivalent") else 1


def main():
    if PARALLEL != "single":
        if "RANK" not in os.environ:
            return launch_ranks()
        torch.distributed.init_process_group("gloo")
        Recipe.launch = Rank(PARALLEL, int(os.environ["RANK"]), WORLD)
    base, cand, v = verdict(DTYPE)
    print(f"losses  baseline   {{base.losses}}")
    print(f"losses  checkpoint {{cand.losses}}")
    print(f"recomputed segments {{cand.recomputed_segments}}; saved bytes {{v.saved_bytes}}")
    print(f"tolerance {{v.tolerance}}; max abs diff {{v.max_abs_diff:.3g}}; noise floor {{v.noise_floor:.3g}}")
    judged = (DTYPE, cand)
    if anyone(asks_float64(v, judged_dtype(TRAINING, DTYPE))):
        # as the harness does: training amplifies rounding without bound, so float64 settles a float32 difference
        print(f"float32: {{v.outcome.value}}: {{v.detail}}")
        b64, c64, v64 = verdict("float64")
        v, confirmed = settle_in_float64(v, v64, b64, judged_dtype(TRAINING, DTYPE))
        if confirmed:
            judged = ("float64", c64)
    if anyone(cache_asked(v.outcome, GC_KWARGS["use_reentrant"], cand)):
        print(triage(*judged))
    print(f"OUTCOME: {{v.outcome.value}}: {{v.detail}}")
    return 0 if v.outcome is Outcome.EQUIVALENT else 1


if __name__ == "__main__":
    sys.exit(main())
'''


MINIMAL = '''#!/usr/bin/env python
"""Does gradient checkpointing change training? {cell_id}

{backend} / {arch} / {method}; {gc_mode}, checkpointing enabled {order_words}, inputs {inputs}.
The same tiny model trained twice from one seed on the same batches, plainly and with gradient
checkpointing (dropout on); the gradients of every step compared. Expected here: {expected}.
{cause}

Made by `python -m harness repro {cell_id} --minimal` with {versions}.
The faithful script (the harness's own loop, probes and comparator): the same command without --minimal.
"""
import base64
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np
import torch
import transformers
{imports}

{labelled}

ORDER, GC_KWARGS, GC_EXTRA = "{order}", {{"use_reentrant": {reentrant}}}, {gc_extra}
SEED, LR, TOLERANCE = {seed}, {lr}, {tol!r}   # (atol, rtol x the tensor's scale) per dtype
CONFIG = {config}
METHOD_CONFIG = {method_config}


{exact}


{batches}


def enable_checkpointing(model):
    if GC_EXTRA:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=GC_KWARGS, **GC_EXTRA)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=GC_KWARGS)


def train(checkpointing, dtype):
    global DTYPE
    DTYPE = str(dtype).split(".")[-1]
    torch.manual_seed(SEED)
    config = transformers.{config_cls}()
    for key, value in CONFIG.items():
        sub = getattr(config, key, None)
        if isinstance(value, dict) and isinstance(sub, transformers.PretrainedConfig):
            for k, v in value.items():
                setattr(sub, k, v)
        else:
            setattr(config, key, value)
    model = transformers.{model_cls}(config).to(dtype)
{setup}
    if checkpointing and ORDER == "gc_first":
        enable_checkpointing(model)
    torch.manual_seed(SEED + 1)
{attach}
    if checkpointing and ORDER == "adapter_first":
        enable_checkpointing(model)
    model.train()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    optimizer = torch.optim.SGD([p for _, p in named], lr=LR)
    grads = []
    for step, batch in enumerate(BATCHES):
        batch = {{k: v.to(dtype) if v.is_floating_point() else v for k, v in dict(batch, **{batch_extra}).items()}}
        torch.manual_seed(SEED + 100 + step)   # the same dropout masks in both runs
        np.random.seed(SEED + 100 + step)
        model(**batch).loss.backward()
        grads.append({{n: None if p.grad is None else p.grad.detach().clone() for n, p in named}})
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return grads


def differences(plain, checkpointed, dtype):
    atol, rtol = TOLERANCE[str(dtype).split(".")[-1]]
    for step, (a, b) in enumerate(zip(plain, checkpointed)):
        for name, ga in a.items():
            gb = b[name]
            if ga is not None and ga.abs().max() > 0 and (gb is None or gb.abs().max() == 0):
                return "missing_grad", f"step {{step}}: {{name}} gets no gradient with checkpointing"
            if ga is not None and gb is not None and (ga - gb).abs().max() > atol + rtol * ga.abs().max():
                return "mismatch", (f"step {{step}}: gradient of {{name}} differs by "
                                    f"{{(ga - gb).abs().max().item():.3g}} (tolerance {{atol}} + {{rtol}} x scale)")
    return "equivalent", "every gradient of every step within tolerance"


def main():
    plain = train(False, torch.float32)
    try:
        checkpointed = train(True, torch.float32)
    except Exception as exc:
        print(f"VERDICT: gc_error: checkpointed training raises {{type(exc).__name__}}: {{exc}}")
        return 1
    outcome, detail = differences(plain, checkpointed, torch.float32)
    if outcome == "mismatch":   # rounding that training amplifies, or a real difference: float64 tells
        outcome, detail = differences(train(False, torch.float64), train(True, torch.float64), torch.float64)
        detail += " (float64)"
    print(f"VERDICT: {{outcome}}: {{detail}}")
    return 0 if outcome == "equivalent" else 1


if __name__ == "__main__":
    sys.exit(main())
'''
