"""The training mechanism: one run of a cell, plain or checkpointed, captured as a Trace.

What repro scripts copy verbatim (harness/repro.py) lives here and nowhere else; the runner (harness/run.py) drives it.

The run calls the libraries as their users do: build the model, (order) enable checkpointing
and attach the method, ``model.train()``, then a few SGD steps on synthetic batches. It only
*observes*: global module hooks count what is re-run during backward and a saved-tensors hook
counts the bytes kept for backward; neither changes what is computed.
"""
from __future__ import annotations

import contextlib
import random
import signal
import time
import warnings

import numpy as np
import torch

from .archs.base import ArchSpec, build_model, cache_off
from .backends.base import Backend, MethodSpec
from .outcomes import Outcome
from .trace import Trace

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}
# the ways of training a cell (its `recipe` axis): what a step does around its forward and backward
RECIPES = {
    "loop": "one forward and one backward per optimizer step, a plain loop",
    "accumulate": "gradient accumulation: 2 micro-batches per optimizer step, each loss / 2 and its own backward",
    "eval_between": "between optimizer steps a forward under torch.no_grad() in eval mode and one in train mode "
                    "(evaluation, generate-in-the-loop), outputs discarded",
}
MICRO_BATCHES = {"accumulate": 2}


class CellTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Raise CellTimeout in the main thread after `seconds` (no-op when None or not in the main
    thread). An outer interval timer (e.g. pytest-timeout's) is re-armed with what it had left."""
    if not seconds:
        yield
        return
    try:
        old = signal.signal(signal.SIGALRM, _raise_timeout)
    except ValueError:  # not the main thread
        yield
        return
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-3))


def _raise_timeout(signum, frame):
    raise CellTimeout("cell exceeded its time limit")


class RunawayRecompute(RuntimeError):
    """A backward re-ran far more module calls than the forward made: checkpointing recomputes in a loop."""


RUNAWAY_FACTOR = 4   # a checkpointed backward re-runs each module of the forward about once (nested: a few times)


class Probe:
    """Counts module calls re-run during backward, and bytes saved for backward during forward: the memory the saved
    tensors hold, so each storage once per forward, none of the model's parameters and buffers (saving a weight
    costs nothing), a sparse tensor at its values and indices (FRoD's frozen basis and sparse matrix were counted
    dense, once per use: RoCBert looked not checkpointed).

    Also a guard: a backward that re-runs more than RUNAWAY_FACTOR times the module calls of its forward is
    stopped with RunawayRecompute (WavLM under reentrant checkpointing recomputes a layer without end until
    threads or memory run out, ~2 min; the guard says so in well under a second)."""

    def __init__(self):
        self.in_backward = False
        self.depth = 0
        self.segments = 0
        self.modules = 0
        self.saved = 0
        self._handles = []
        self._forward_calls = 0
        self._backward_calls = 0
        self.called: set[int] = set()   # ids of the modules the current step's forward ran
        # address -> storage: those counted this forward, kept alive until the backward starts (see _pack), and
        # the model's own (None)
        self._held: dict[int, object] = {}

    def step(self, model):
        """A training step begins: its forward is counted afresh."""
        self._forward_calls = 0
        self.called = set()
        self._held = dict.fromkeys(t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers()))

    def _pre(self, module, args):
        if not self.in_backward:
            self._forward_calls += 1
            self.called.add(id(module))
            return
        if self.depth == 0:
            self.segments += 1
        self.modules += 1
        self.depth += 1
        self._backward_calls += 1
        if self._backward_calls > RUNAWAY_FACTOR * self._forward_calls + 100:
            raise RunawayRecompute(
                f"runaway recomputation: {self._backward_calls} module calls re-run in one backward for "
                f"{self._forward_calls} in its forward (last {type(module).__name__})")

    def _post(self, module, args, output):
        if self.in_backward and self.depth > 0:
            self.depth -= 1

    def _pack(self, t):
        if t.layout == torch.sparse_coo:
            parts = (t._indices(), t._values())
        else:
            parts = (t,)
        for part in parts:
            try:
                storage = part.untyped_storage()
                key, size = storage.data_ptr(), storage.nbytes()
            except (RuntimeError, NotImplementedError):  # no storage of its own (e.g. another sparse layout)
                key, size = None, part.numel() * part.element_size()
            if key not in self._held:
                self.saved += size
                if key is not None:
                    # a storage counted by its address must outlive the forward: one freed early (a saved tensor
                    # of a graph branch the loss never reaches) hands its address to a later saved tensor, which
                    # then went uncounted -- NeMo's streaming ASR "saved" 11.9 to 16.8 MB run to run, and its
                    # checkpointed runs looked not checkpointed as often as not
                    self._held[key] = storage
        # detached: `t` may be the op's own output, whose grad_fn owns this saved tensor -- keeping `t` would close
        # a cycle through C++ that no gc can see, leaking the whole graph of a forward that never reaches its
        # backward (a run failing mid-forward: every later run of the process then ran out of memory)
        return t.detach()

    def __enter__(self):
        reg = torch.nn.modules.module
        self._handles = [reg.register_module_forward_pre_hook(self._pre),
                         reg.register_module_forward_hook(self._post, always_call=True)]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._held = dict.fromkeys(self._held)   # the addresses stay counted, the storages are let go

    def saving(self):
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    @contextlib.contextmanager
    def backward(self):
        self.in_backward, self.depth, self._backward_calls = True, 0, 0
        self._held = dict.fromkeys(self._held)
        try:
            yield
        finally:
            self.in_backward = False


def _snapshot(t: torch.Tensor, memo: dict | None = None) -> torch.Tensor:
    """A float64 copy of `t`; with `memo`, one copy per distinct tensor (a state dict lists a shared tensor, e.g.
    RandLoRA's random bases, under every layer's key: 9 GB of copies for the tiny minicpm_ocr)."""
    if memo is None:
        return t.detach().to("cpu", torch.float64, copy=True)
    key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype, t.device)
    if key not in memo:
        memo[key] = _snapshot(t)
    return memo[key]


class CellRecipe:
    """The concrete calls of one cell; `train_recipe` drives them. A generated repro script
    defines a class with the same methods and reuses `train_recipe`'s source verbatim."""

    def __init__(self, arch: ArchSpec, task: str, backend: Backend, method: MethodSpec, inputs: str,
                 gc_mode: str | None, dtype: str = "float32", device: str = "cpu", seed: int = 0,
                 cache: bool = True, training: str = "loop"):
        self.arch, self.task, self.backend, self.method, self.inputs = arch, task, backend, method, inputs
        self.gc_mode, self.dtype, self.device, self.seed, self.cache = gc_mode, dtype, device, seed, cache
        self.training = training   # a key of RECIPES
        self.cache_off = 0

    def build(self):
        model = build_model(self.arch, self.task, DTYPES[self.dtype], self.device)
        if not self.cache:
            self.cache_off = cache_off(model)
        return self.backend.setup(model)

    def enable_gc(self, model):
        self.backend.enable_gc(model, self.gc_mode)

    def attach(self, model):
        model = self.backend.attach(model, self.arch, self.task, self.method)
        if self.dtype != "float32":
            # what a user casting the adapted model to this dtype gets: tensors a library makes under the default
            # dtype (adapters' LoRA / ReFT / bottleneck modules) follow the model; float32 runs never come here
            model = self.backend.cast(model, DTYPES[self.dtype])
        return model

    def batch(self, model, step):
        # made for the transformers model, not for a library's wrapper around it (whose forward signature
        # would hide e.g. decoder_input_ids): the same batch the repro script holds
        batch = self.arch.make_batch(self.task, transformers_model(model), self.inputs, step, self.seed)
        return {k: (v.to(self.device) if isinstance(v, torch.Tensor) else v)
                for k, v in cast_inputs(batch, DTYPES[self.dtype]).items()}

    def loss(self, output):
        return self.arch.loss(self.task, output)

    def is_unsupported(self, exc):
        return self.backend.is_unsupported(exc)


def cast_inputs(batch: dict, dtype: torch.dtype) -> dict:
    """The float inputs in the model's dtype, as a user prepares them for a float64 / bfloat16 model: many vision,
    audio and time-series models do not cast pixels, waves or values themselves ("Input type (float) and bias
    type (double)"), which left the float64 rerun of their mismatches unsettled. A no-op in float32."""
    return {k: (v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in batch.items()}


def transformers_model(model):
    """The transformers model under a library's wrapper (peft's PeftModel), or `model` itself."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def train(arch: ArchSpec, task: str, backend: Backend, method: MethodSpec, *, inputs: str = "masked",
          gc_mode: str | None = None, order: str = "gc_first", steps: int = 3, seed: int = 0,
          lr: float = 0.1, dtype: str = "float32", device: str = "cpu", timeout: float | None = None,
          cache: bool = True, training: str = "loop") -> Trace:
    """Train one run. gc_mode None is the plain baseline; otherwise checkpointing is enabled in `order`.
    `cache` False: with use_cache switched off in the model's configs, as checkpointing does (the cache triage).
    `training`: the recipe, a key of RECIPES."""
    recipe = CellRecipe(arch, task, backend, method, inputs, gc_mode, dtype, device, seed, cache, training)
    return train_recipe(recipe, gc=gc_mode is not None, order=order, steps=steps, seed=seed, lr=lr, timeout=timeout)


@contextlib.contextmanager
def default_float(dtype: str):
    """Training in float64 makes float64 torch's default dtype too, as a user of a float64 model sets it: code
    that makes a tensor without a dtype then agrees with the model (transformers' legacy causal-mask maker fills
    a default-dtype tensor with the model dtype's minimum: 'value cannot be converted to type float without
    overflow'). Only around training: the model and its adapters are made in float32 and cast, so that a float64
    rerun starts from the float32 run's values."""
    if dtype != "float64":
        yield
        return
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def train_recipe(recipe, gc: bool, order: str, steps: int, seed: int, lr: float, timeout: float | None) -> Trace:
    """Train one run of `recipe` (build, enable_gc, attach, batch, loss, is_unsupported, `dtype`: the name of the
    dtype it trains in, and `training`: how a step trains, a key of RECIPES), capturing its Trace. Shared verbatim
    with repro scripts."""
    trace = Trace()
    t0 = time.perf_counter()
    stage = "build"
    with warnings.catch_warnings(record=True) as caught, time_limit(timeout), Probe() as probe, \
            contextlib.ExitStack() as during:
        warnings.simplefilter("always")
        try:
            torch.manual_seed(seed)
            model = recipe.build()
            if gc and order == "gc_first":
                stage = "enable_gc"
                recipe.enable_gc(model)
            stage = "attach"
            torch.manual_seed(seed + 1)
            model = recipe.attach(model)
            if gc and order == "adapter_first":
                stage = "enable_gc"
                recipe.enable_gc(model)
            stage = "train"
            during.enter_context(default_float(recipe.dtype))
            model.train()
            named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
            trace.trainable = [n for n, _ in named]
            opt = torch.optim.SGD([p for _, p in named], lr=lr) if named else None
            holders = {id(m) for m in model.modules() if any(p.requires_grad for p in m.parameters(recurse=False))}
            micro = MICRO_BATCHES.get(recipe.training, 1)
            for step in range(steps):
                losses, trained = [], False
                for k in range(step * micro, (step + 1) * micro):   # the step's micro-batches (one: a plain loop)
                    batch = recipe.batch(model, k)
                    # dropout masks (and numpy/python draws, e.g. SpecAugment): the same stream in both runs
                    torch.manual_seed(seed + 100 + k)
                    np.random.seed(seed + 100 + k)
                    random.seed(seed + 100 + k)
                    probe.step(model)
                    with probe.saving():
                        loss = recipe.loss(model(**batch))
                        if micro > 1:
                            loss = loss / micro
                    losses.append(float(loss.detach().float()))
                    if not loss.requires_grad and not holders & probe.called:
                        # no module holding a trainable tensor ran (LayerDrop dropped every adapted layer): a
                        # forward with nothing to train, in either run; a checkpointed forward that ran them and
                        # lost the graph still raises in backward below
                        continue
                    trained = True
                    with probe.backward():
                        loss.backward()
                trace.losses.append(losses[0] if micro == 1 else sum(losses))
                if not trained:
                    trace.grads.append({n: None for n, _ in named})
                    continue
                trace.grads.append({n: (None if p.grad is None else _snapshot(p.grad)) for n, p in named})
                if opt is not None:
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                if recipe.training == "eval_between" and step < steps - 1:
                    # what an evaluation loop or generate-in-the-loop does between steps; outputs discarded
                    batch = recipe.batch(model, step)
                    torch.manual_seed(seed + 200 + step)
                    with torch.no_grad():
                        model.eval()
                        model(**batch)
                        model.train()
                        model(**batch)
            memo = {}
            trace.state = {k: _snapshot(v, memo) for k, v in model.state_dict().items()}
        except Exception as exc:  # noqa: BLE001 - a crashing cell is that cell's outcome
            trace.error = f"{stage}: {type(exc).__name__}: {_one_line(str(exc))}"
            trace.error_stage = stage
            trace.unsupported = not isinstance(exc, CellTimeout) and recipe.is_unsupported(exc)
    trace.cache_off = getattr(recipe, "cache_off", 0)   # set by a recipe built with use_cache switched off
    trace.recomputed_segments = probe.segments
    trace.recomputed_modules = probe.modules
    trace.saved_bytes = probe.saved
    trace.warnings = sorted({_one_line(str(w.message)) for w in caught
                             if "checkpoint" in str(w.message).lower() or "requires_grad" in str(w.message)})
    trace.seconds = time.perf_counter() - t0
    return trace


def _one_line(s: str, limit: int = 300) -> str:
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def cache_asked(outcome: Outcome, reentrant: bool, cand: Trace) -> bool:
    """Whether a verdict gets the cache triage: a value difference, a non-reentrant loss of gradients (a reentrant
    one is the layer inputs', as a rule), or a failure in training that is not a time limit or runaway recompute."""
    if outcome is Outcome.GC_ERROR:
        return cand.error_stage == "train" and not any(
            k in (cand.error or "") for k in ("CellTimeout", "RunawayRecompute"))
    return outcome is Outcome.MISMATCH or outcome is Outcome.MISSING_GRAD and not reentrant


def cache_cause(plain: Trace, cand: Trace, dtype: str) -> tuple[bool | None, str | None]:
    """The cache triage's answer from `plain`, a plain run with use_cache off, and the line saying so: True when it
    trains as the checkpointed run `cand` did, or fails as it did (the difference is the cache switch, not the
    recompute), False when not, None when it cannot tell; the line is None when no config had use_cache on."""
    from .compare import compare

    if not plain.cache_off:
        return None, None
    if not cand.ok:   # the same exception type: "stage: Type: message"
        same = not plain.ok and plain.error.split(": ")[1:2] == cand.error.split(": ")[1:2]
        return same, ("cause: the cache switch -- a plain run with use_cache off fails too" if same else
                      "not the cache switch: a plain run with use_cache off "
                      + (f"fails otherwise: {plain.error}" if not plain.ok else "trains"))
    if not plain.ok:
        return None, f"cache triage: the plain run with use_cache off fails: {plain.error}"
    same = compare(plain, None, cand, dtype).outcome in (Outcome.EQUIVALENT, Outcome.NOT_CHECKPOINTED)
    return same, ("cause: the cache switch -- a plain run with use_cache off trains as the checkpointed one" if same
                  else "not the cache switch: a plain run with use_cache off differs too")
