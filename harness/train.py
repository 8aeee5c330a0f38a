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
import re
import signal
import tempfile
import time
import warnings

import numpy as np
import torch

from .archs.base import ArchSpec, build_model, cache_off, config_and_subs, model_configs
from .archs.losses import projected
from .backends.base import BEFORE_ADAPTER, GC_MODES, KBIT_GC_MODES, KBIT_ORDER, REENTRANT, Backend, MethodSpec
from .outcomes import Outcome
from .probe import Probe
from .trace import Trace

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}
# the ways of training a cell (its `recipe` axis): what a step does around its forward and backward
RECIPES = {
    "loop": "one forward and one backward per optimizer step, a plain loop",
    "accumulate": "gradient accumulation: 2 micro-batches per optimizer step, each loss / 2 and its own backward",
    "eval_between": "between optimizer steps a forward under torch.no_grad() in eval mode and one in train mode "
                    "(evaluation, generate-in-the-loop), outputs discarded",
    "autocast": "the forward and the loss under torch.autocast(device, dtype=torch.bfloat16), float32 weights and "
                "optimizer; judged at float32's tolerance (CPU autocast replays itself exactly), a difference "
                "settled by a float64 rerun without autocast (bfloat16's rounding is what it settles)",
    "aux_outputs": "losses that use more than the logits: attentions (eager attention, on every sub-model) and "
                   "hidden states returned "
                   "and a term on them added to the task loss, as distillation does; router logits on "
                   "(output_router_logits) in mixture-of-experts models, whose own loss then adds the "
                   "load-balancing loss",
    "switch": "two adapters of the method on one model, both trained: each step a forward with the first active "
              "and one with the second (peft set_adapter, adapters set_active_adapters), the losses summed, one "
              "backward; after each set_adapter both adapters made trainable again (peft's set_requires_grad), as "
              "multi-task users train them",
    "switch_frozen": "switch with set_adapter alone (peft): it freezes the inactive adapter, so the first adapter's "
                     "forward trains only what stays trainable (its head, the shared parameters) and the first "
                     "adapter trains in neither run (what a user gets who switches without set_requires_grad)",
    "two_forwards": "two forwards of the model per step, on two views of the step's data (two batches of the same "
                    "shape: chosen / rejected, two augmentations), their losses summed, one backward: how "
                    "contrastive, preference and consistency training step",
    "trainer": "transformers' Trainer (adapters: AdapterTrainer) with TrainingArguments(gradient_checkpointing=..., "
               "gradient_checkpointing_kwargs={'use_reentrant': ...}), SGD at a constant rate, its default "
               "gradient clipping; Trainer enables checkpointing on the model it is given, after the adapter",
    # several adapters composed and trained at once, as the libraries compose them (Backend.compositions)
    "compose_stack": "adapters' Stack(first, second) trained with train_adapter: the second on the first's output",
    "compose_fuse": "adapters' AdapterFusion: Fuse(first, second), add_adapter_fusion and train_adapter_fusion (the "
                    "fusion layer trains, the adapters stay frozen)",
    "compose_average": "adapters' Average(first, second, weights=[0.5, 0.5]) trained with train_adapter",
    "compose_batchsplit": "adapters' BatchSplit(first, second, batch_sizes=[1, 1]) trained with train_adapter",
    "compose_split": "adapters' Split(first, second, splits=[4, 6]) trained with train_adapter: the 10 tokens of a "
                     "text batch split at 4 (under a pooled head, sequence classification, the last layer's second "
                     "adapter trains nothing: its tokens' outputs reach no loss)",
    "compose_active": "peft: two adapters active at once, model.base_model.set_adapter([first, second]), both "
                      "trained",
    "compose_weighted": "peft: add_weighted_adapter([first, second], [0.5, 0.5], 'combined', combination_type='cat') "
                        "and the combined adapter trained",
}
MICRO_BATCHES = {"accumulate": 2}
ADAPTERS = {"switch": 2, "switch_frozen": 2}
VIEWS = {"two_forwards": 2}   # forwards on views of the step's data before its backward
VIEW_SEED = 7919   # a view's batch is drawn from the seed + VIEW_SEED x its index
# what a recipe passes to AutoConfig: asking for attentions, a user chooses eager attention (fused kernels return none)
CONFIG_KWARGS = {"aux_outputs": {"attn_implementation": "eager"}}   # adapters trained at once


def recipe_applies(recipe: str, backend: Backend, gc_mode: str, order: str, method: MethodSpec | None = None,
                   arch: ArchSpec | None = None) -> str | None:
    """None when a cell of `backend` (and `method` on `arch`, when given) can train by `recipe` in this gc_mode and
    order, else why not."""
    if recipe in ADAPTERS and not backend.second_adapter:
        return "one adapter only: full fine-tuning trains the model itself"
    if recipe == "switch_frozen" and not backend.activation_freezes:
        return f"{backend.name}'s activation leaves both adapters trainable: the switch recipe"
    if order == KBIT_ORDER:
        if gc_mode not in KBIT_GC_MODES:
            return f"prepare_model_for_kbit_training passes use_reentrant to transformers' switch, not {gc_mode}"
        if not backend.quantized and (recipe != "loop" or method is not None and method.name != next(iter(
                backend.methods))):
            return ("on a model that is not quantized prepare_model_for_kbit_training enables no checkpointing, "
                    "whatever the method and recipe: its cells are the plain loop's of the backend's first method")
    if recipe.startswith("compose_"):
        if recipe not in backend.compositions:
            return backend.compositions_missing or f"no such composition in {backend.name}"
        return backend.composes(recipe, method, arch) if method is not None else None
    if recipe == "trainer":
        if gc_mode not in GC_MODES:
            return f"Trainer's gradient_checkpointing_kwargs take use_reentrant only, not {gc_mode}"
        if order != "adapter_first":
            return "Trainer enables checkpointing on the model it is given: after the adapter (order adapter_first)"
    return None


def judged_dtype(training: str, dtype: str) -> str:
    """The name a run of `training` in `dtype` is judged under ("autocast": float32's tolerance, its rounding
    called bfloat16's)."""
    return "autocast" if training == "autocast" and dtype == "float32" else dtype


def autocast(training: str, dtype: str, device: str):
    """torch.autocast to bfloat16 for the autocast recipe (not in its float64 rerun), else nothing."""
    if training != "autocast" or dtype == "float64":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def aux_outputs_on(model) -> None:
    """What MoE fine-tuning recipes set: router logits returned, so that the model's own loss adds the
    load-balancing loss (with the config's router_aux_loss_coef)."""
    for cfg in model_configs(model):
        for sub in config_and_subs(cfg):
            if hasattr(sub, "output_router_logits"):
                sub.output_router_logits = True


AUX_FORWARD = {"output_attentions": True, "output_hidden_states": True}   # what distillation passes to forward


class NoAuxOutputs(Exception):
    """The aux_outputs recipe on a model that returns none of what it trains on."""


def aux_refused(exc) -> bool:
    """The aux_outputs recipe's refusal: a model that returns none of its outputs, or whose forward takes no
    output_attentions / output_hidden_states."""
    return isinstance(exc, NoAuxOutputs) or isinstance(exc, TypeError) and any(
        f"unexpected keyword argument '{k}'" in str(exc) for k in AUX_FORWARD)


AUX_KEYS = re.compile(r"(^|_)(attentions|hidden_states|router_logits)$")


def aux_loss(loss: torch.Tensor, output) -> torch.Tensor:
    """The task loss plus a term on the attentions and hidden states the model returned (a fixed random projection
    of each, as in `projected`); the router logits count as returned, their load-balancing loss is the model's."""
    from_model = [v for k, v in (output.items() if hasattr(output, "items") else ()) if AUX_KEYS.search(k)]
    if not from_model:
        raise NoAuxOutputs("aux_outputs: the model returns no attentions, hidden states or router logits")
    terms = [t for k, v in output.items() if AUX_KEYS.search(k) and "router" not in k
             for t in (v if isinstance(v, (tuple, list)) else [v])
             if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return loss + sum(projected(t, 1000 + i) for i, t in enumerate(terms)) if terms else loss


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


def _grads(named) -> dict:
    """The step's gradient of each (name, parameter): a copy, or None."""
    return {n: (None if p.grad is None else _snapshot(p.grad)) for n, p in named}


def _snapshot(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` on the CPU in its own dtype (the comparator takes differences in float64, and only of tensors
    that are not equal)."""
    return t.detach().to("cpu", copy=True)


WRAPPED = ("_checkpoint_wrapped_module.", "_fsdp_wrapped_module.", "_orig_mod.")   # what wrappers put in names


def clean_name(name: str) -> str:
    """A parameter's name without the modules torch's wrappers insert (checkpoint_wrapper, FSDP, torch.compile): the
    name the unwrapped model gives it, so that runs with and without a wrapper compare tensor by tensor (a
    checkpoint wrapper's state_dict strips its own part the same way)."""
    for part in WRAPPED:
        name = name.replace(part, "")
    return name


def final_state(model) -> dict:
    """The final state dict of a model trained in this process."""
    return {k: _final(v) for k, v in model.state_dict().items()}


def _final(t: torch.Tensor) -> torch.Tensor:
    """A state dict entry as the trained model leaves it, on the CPU: the tensor itself (nothing trains the model
    after), so that a tensor a state dict lists under many keys (RandLoRA's random bases, under every layer's key)
    is kept once."""
    return t.detach() if t.device.type == "cpu" else t.detach().to("cpu")


class Launched:
    """What train_recipe asks of a recipe about its launch (`launch`: this process's rank of a launch over several,
    harness.launch.rank.Rank, or None for one process). A generated repro script's recipe inherits it too."""
    launch = None

    def dataset(self, model, steps: int) -> list:
        """What Trainer is given to train on: the steps' batches; over several ranks every rank's part of each, which
        Trainer's sampler deals to the ranks."""
        ranks = range(self.launch.world) if self.launch is not None else [None]
        return [self.batch(model, k, rank=r) for k in range(steps) for r in ranks]

    def wrap(self, model):
        """The module a step calls: the model, or what the launch wraps it in (DDP, FSDP); Trainer wraps it itself."""
        return model if self.launch is None or self.training == "trainer" else self.launch.wrap(model)

    def grads(self, forward, named) -> dict:
        """The step's full gradients (a sharded launch gathers them)."""
        return _grads(named) if self.launch is None else self.launch.grads(forward, named)

    def state(self, forward, model) -> dict:
        """The final state dict, full (a sharded launch gathers it)."""
        return final_state(model) if self.launch is None else self.launch.state(forward, model)


class CellRecipe(Launched):
    """The concrete calls of one cell; `train_recipe` drives them. A generated repro script
    defines a class with the same methods and reuses `train_recipe`'s source verbatim."""

    def __init__(self, arch: ArchSpec, task: str, backend: Backend, method: MethodSpec, inputs: str,
                 gc_mode: str | None, dtype: str = "float32", device: str = "cpu", seed: int = 0,
                 cache: bool = True, training: str = "loop", launch=None, order: str = "gc_first"):
        self.order = order         # where checkpointing is enabled (backends.base.ORDERS, KBIT_ORDER)
        self.arch, self.task, self.backend, self.method, self.inputs = arch, task, backend, method, inputs
        self.gc_mode, self.dtype, self.device, self.seed, self.cache = gc_mode, dtype, device, seed, cache
        self.training = training   # a key of RECIPES
        self.launch = launch       # this process's rank of a launch over several (harness.launch.rank.Rank), or None
        self.cache_off = 0

    def build(self):
        model = build_model(self.arch, self.task, DTYPES[self.dtype], self.device,
                            **CONFIG_KWARGS.get(self.training, {}))
        if not self.cache:
            self.cache_off = cache_off(model)
        if self.training == "aux_outputs":
            aux_outputs_on(model)
        return self.backend.setup(model, self.method)

    def enable_gc(self, model):
        self.backend.enable_gc(model, self.gc_mode, self.order)

    def attach(self, model):
        model = self.backend.attach(model, self.arch, self.task, self.method)
        if ADAPTERS.get(self.training, 1) > 1:
            model = self.backend.attach_second(model, self.arch, self.task, self.method)
        if self.training.startswith("compose_"):
            model = self.backend.compose(model, self.arch, self.task, self.method, self.training)
        if self.dtype != "float32":
            # what a user casting the adapted model to this dtype gets: tensors a library makes under the default
            # dtype (adapters' LoRA / ReFT / bottleneck modules) follow the model; float32 runs never come here
            model = self.backend.cast(model, DTYPES[self.dtype])
        return model

    def batch(self, model, step, view: int = 0, rank: int | None = None):
        """The batch of `step` (of a view of it, VIEWS), of this process's rank (`rank`: of that rank) when the run is
        a launch over several."""
        # made for the transformers model, not for a library's wrapper around it (whose forward signature
        # would hide e.g. decoder_input_ids): the same batch the repro script holds
        batch = self.arch.make_batch(self.task, transformers_model(model), self.inputs, step,
                                     self.seed + VIEW_SEED * view)
        if self.method.batch is not None:
            batch = self.method.batch(batch)
        if self.launch is not None:
            batch = self.launch.part(batch, rank)
        if self.training == "aux_outputs":
            batch.update(AUX_FORWARD)
        return {k: (v.to(self.device) if isinstance(v, torch.Tensor) else v)
                for k, v in cast_inputs(batch, DTYPES[self.dtype]).items()}

    def activate(self, model, index: int):
        self.backend.activate(model, index)
        if self.training == "switch":
            self.backend.train_both(model, self.method)

    def loss(self, output):
        loss = self.arch.loss(self.task, output)
        return aux_loss(loss, output) if self.training == "aux_outputs" else loss

    @property
    def reentrant(self) -> bool:
        return self.gc_mode in REENTRANT

    def trainer_class(self):
        return self.backend.trainer_class()

    def is_unsupported(self, exc):
        return self.training == "aux_outputs" and aux_refused(exc) or self.backend.is_unsupported(exc)


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
          cache: bool = True, training: str = "loop", launch=None) -> Trace:
    """Train one run. gc_mode None is the plain baseline; otherwise checkpointing is enabled in `order`.
    `cache` False: with use_cache switched off in the model's configs, as checkpointing does (the cache triage).
    `training`: the recipe, a key of RECIPES. `launch`: this process's rank of a launch over several processes
    (harness.launch.rank.Rank), None for a single process."""
    recipe = CellRecipe(arch, task, backend, method, inputs, gc_mode, dtype, device, seed, cache, training, launch,
                        order)
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


def seed_torch(value: int, recipe) -> None:
    """Seed torch for a run of `recipe`: on the CPU its generator, which is all that torch.manual_seed changes there
    besides queueing a seed for each accelerator torch knows (CUDA, XPU, MTIA) with the formatted Python stack of
    the call, 0.2 ms a call at a stack depth of 10 and 0.9 ms at 80 (a pytest worker's): more than a tiny model's
    step. On an accelerator, torch.manual_seed."""
    if torch.device(getattr(recipe, "device", "cpu")).type == "cpu":
        torch.default_generator.manual_seed(value)
    else:
        torch.manual_seed(value)


def train_recipe(recipe, gc: bool, order: str, steps: int, seed: int, lr: float, timeout: float | None) -> Trace:
    """Train one run of `recipe` (build, enable_gc, attach, batch, loss, is_unsupported, `dtype`: the name of the
    dtype it trains in, `training`: how a step trains, a key of RECIPES, and what that recipe asks: `activate`,
    `trainer_class`, `reentrant`), capturing its Trace. Shared verbatim with repro scripts."""
    trace = Trace()
    t0 = time.perf_counter()
    stage = "build"
    by_trainer = recipe.training == "trainer"   # Trainer enables checkpointing itself, from its arguments
    with warnings.catch_warnings(record=True) as caught, time_limit(timeout), Probe(recompute=gc) as probe, \
            contextlib.ExitStack() as during:
        warnings.simplefilter("always")
        try:
            seed_torch(seed, recipe)
            model = recipe.build()
            if gc and order in BEFORE_ADAPTER and not by_trainer:
                stage = "enable_gc"
                recipe.enable_gc(model)
            stage = "attach"
            seed_torch(seed + 1, recipe)
            model = recipe.attach(model)
            if gc and order == "adapter_first" and not by_trainer:
                stage = "enable_gc"
                recipe.enable_gc(model)
            stage = "train"
            during.enter_context(default_float(recipe.dtype))
            model.train()
            stage = "wrap"
            forward = recipe.wrap(model)   # the module a step calls (DDP, FSDP: the launch's)
            stage = "train"
            named = trainable(recipe, model)
            trace.trainable = [n for n, _ in named]
            probe.watch(model, named)
            if by_trainer:
                train_by_trainer(recipe, model, named, trace, probe, gc, steps, seed, lr)
            else:
                train_loop(recipe, model, forward, named, trace, probe, steps, seed, lr)
            trace.state = recipe.state(forward, model)
        except Exception as exc:  # noqa: BLE001 - a crashing cell is that cell's outcome
            trace.error = f"{stage}: {type(exc).__name__}: {_one_line(str(exc))}"
            trace.error_stage = stage
            trace.where = _innermost(exc)
            trace.unsupported = not isinstance(exc, CellTimeout) and recipe.is_unsupported(exc)
    trace.cache_off = getattr(recipe, "cache_off", 0)   # set by a recipe built with use_cache switched off
    trace.recomputed_segments = probe.segments
    trace.recomputed_modules = probe.modules
    trace.saved_bytes = probe.saved
    trace.warnings = sorted({_one_line(str(w.message)) for w in caught
                             if "checkpoint" in str(w.message).lower() or "requires_grad" in str(w.message)})
    trace.seconds = time.perf_counter() - t0
    return trace


def trainable(recipe, model) -> list:
    """(name, parameter) of what trains: what requires grad with any of the recipe's adapters active (peft's
    set_adapter makes only the active one require grad); the first is active after. Names as the unwrapped model
    gives them (clean_name)."""
    n = ADAPTERS.get(recipe.training, 1)
    wanted = set()
    for i in reversed(range(n)):
        if n > 1:
            recipe.activate(model, i)
        wanted |= {name for name, p in model.named_parameters() if p.requires_grad}
    return [(clean_name(name), p) for name, p in model.named_parameters() if name in wanted]


def train_loop(recipe, model, forward, named, trace, probe, steps, seed, lr):
    """The recipe's own loop: SGD steps, each over its micro-batches, adapters and views, observed by `probe`;
    `forward` is the module a step calls (the model, or the launch's wrapper of it)."""
    opt = torch.optim.SGD([p for _, p in named], lr=lr) if named else None
    micro = MICRO_BATCHES.get(recipe.training, 1)
    adapters = ADAPTERS.get(recipe.training, 1)
    views = VIEWS.get(recipe.training, 1)
    for step in range(steps):
        losses, trained = [], False
        for k in range(step * micro, (step + 1) * micro):   # the step's micro-batches (one: a plain loop)
            batch = recipe.batch(model, k)
            seen = [recipe.batch(model, k, view) for view in range(1, views)]   # two_forwards: the other view
            # dropout masks (and numpy/python draws, e.g. SpecAugment): the same stream in both runs
            seed_torch(seed + 100 + k, recipe)
            np.random.seed(seed + 100 + k)
            random.seed(seed + 100 + k)
            probe.step(model)
            with probe.saving(), autocast(recipe.training, recipe.dtype, getattr(recipe, "device", "cpu")):
                parts = []
                for i in range(adapters):   # switch: a forward with each adapter active, the last stays active
                    if adapters > 1:
                        recipe.activate(model, i)
                    parts.append(recipe.loss(forward(**batch)))
                parts += [recipe.loss(forward(**other)) for other in seen]
                loss = parts[0] if len(parts) == 1 else sum(parts)
                if micro > 1:
                    loss = loss / micro
            losses.append(float(loss.detach().float()))
            if not loss.requires_grad and not probe.holder_ran:
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
        trace.grads.append(recipe.grads(forward, named))
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)
        if recipe.training == "eval_between" and step < steps - 1:
            # what an evaluation loop or generate-in-the-loop does between steps; outputs discarded
            batch = recipe.batch(model, step)
            seed_torch(seed + 200 + step, recipe)
            with torch.no_grad():
                model.eval()
                forward(**batch)
                model.train()
                forward(**batch)


def train_by_trainer(recipe, model, named, trace, probe, gc, steps, seed, lr):
    """transformers' Trainer trains (recipe.trainer_class(): Trainer or adapters' AdapterTrainer), checkpointing
    from its arguments. Observed as the docs show a user: compute_loss overridden for the cell's loss (the
    documented way to a loss of one's own), callbacks at each step's start and before its optimizer step (the
    gradients, after Trainer's clipping), and the model's own forward hooks around each forward."""
    from transformers import TrainerCallback, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    losses = []
    batches = recipe.dataset(model, steps)   # over several ranks, Trainer's sampler deals them

    class CellTrainer(recipe.trainer_class()):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            outputs = model(**inputs)
            loss = recipe.loss(outputs)
            losses.append(float(loss.detach().float()))
            return (loss, outputs) if return_outputs else loss

    class Observe(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            probe.end_backward()
            probe.step(model)

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            probe.end_backward()
            trace.grads.append(_grads(named))

    saving = []

    def forward_begins(module, args):
        saving.append(probe.saving())
        saving[-1].__enter__()

    def forward_ends(module, args, output):
        saving.pop().__exit__(None, None, None)
        probe.begin_backward()   # Trainer's backward follows its forward

    handles = [model.register_forward_pre_hook(forward_begins),
               model.register_forward_hook(forward_ends, always_call=True)]
    try:
        with tempfile.TemporaryDirectory() as out:
            args = TrainingArguments(
                output_dir=out, max_steps=steps, per_device_train_batch_size=1, learning_rate=lr, optim="sgd",
                lr_scheduler_type="constant", seed=seed, gradient_checkpointing=gc,
                gradient_checkpointing_kwargs={"use_reentrant": recipe.reentrant} if gc else None,
                remove_unused_columns=False, report_to="none", save_strategy="no", logging_strategy="no",
                disable_tqdm=True, use_cpu=getattr(recipe, "device", "cpu") == "cpu", dataloader_num_workers=0,
                # on several ranks (torchrun's environment): Trainer's own DDP over gloo, as on CPUs
                ddp_backend="gloo" if getattr(recipe, "launch", None) is not None else None)
            trainer = CellTrainer(model=model, args=args, train_dataset=batches,
                                  data_collator=lambda items: items[0], callbacks=[Observe()])
            trainer.remove_callback(PrinterCallback)   # its summary line on stdout, nothing else
            trainer.train()
    finally:
        for h in handles:
            h.remove()
        probe.end_backward()
    trace.losses = losses


def _innermost(exc: BaseException) -> str:
    """Where `exc` was raised: its traceback's innermost frame, "file:line in function"."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return ""
    code = tb.tb_frame.f_code
    return f"{code.co_filename.rpartition('/')[2]}:{tb.tb_lineno} in {code.co_name}"


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
