"""A suite of faults of the checkpoint machinery, each injected into the real libraries and caught on reference
cells of every backend (an encoder, a decoder-only, an encoder-decoder and a vision model), with its outcome.

Each fault replaces torch's `checkpoint` wherever a library took it from (transformers' gradient_checkpointing_enable,
adapters' own override, torch itself), so every backend trains through it as its users' code would. The small faults
(a relative 1e-4 or 1e-3 of what the recompute computes or passes back) are the ones an absolute tolerance lets
through on a tiny model's small gradients: they must be caught whatever the size of the cell's gradients.
"""

import pytest
import torch
from torch.utils.checkpoint import checkpoint as real_checkpoint

from conftest import in_recompute, install_fault
from harness import backends
from harness.archs import archs_for
from harness.cells import Cell
from harness.outcomes import Outcome
from harness.run import Options, Runner
from harness.train import RECIPES

REFERENCE_ARCHS = ("bert", "llama", "t5", "vit")   # encoder, decoder-only, encoder-decoder, vision
METHOD = {"adapters": "lora", "peft": "lora", "transformers_peft": "lora", "qlora": "lora", "full": "full"}


def _scaled(x, factor):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x * factor
    if isinstance(x, tuple):
        return tuple(_scaled(v, factor) for v in x)
    return x


def rng_not_restored(fn, *a, **kw):
    return real_checkpoint(fn, *a, **{**kw, "preserve_rng_state": False})


def recompute_inputs(eps):
    """The recompute starts from inputs that differ from the forward's by a relative `eps`."""
    def checkpoint(fn, *a, **kw):
        def again(*x, **k):
            if in_recompute():
                x = tuple(_scaled(v, 1 + eps) for v in x)
            return fn(*x, **k)
        return real_checkpoint(again, *a, **kw)
    return checkpoint


def recompute_module_outputs(eps):
    """A hook active only while the segment is recomputed changes what each of its modules returns."""
    def checkpoint(fn, *a, **kw):
        def again(*x, **k):
            if not in_recompute():
                return fn(*x, **k)
            handle = torch.nn.modules.module.register_module_forward_hook(lambda m, i, out: _scaled(out, 1 + eps))
            try:
                return fn(*x, **k)
            finally:
                handle.remove()
        return real_checkpoint(again, *a, **kw)
    return checkpoint


def gradient_scaled(factor):
    """The gradient a segment passes back is `factor` times what it should be (0: none of it arrives)."""
    def checkpoint(fn, *a, **kw):
        out = real_checkpoint(fn, *a, **kw)
        first = out[0] if isinstance(out, tuple) else out
        if isinstance(first, torch.Tensor) and first.requires_grad:
            first.register_hook(lambda g: g * factor)
        return out
    return checkpoint


def output_cut(fn, *a, **kw):
    return _detached(real_checkpoint(fn, *a, **kw))


def _detached(out):
    if isinstance(out, torch.Tensor):
        return out.detach()
    return tuple(_detached(o) for o in out) if isinstance(out, tuple) else out


def no_recompute(fn, *a, **kw):   # kw are checkpoint's own options (use_reentrant, ...), not the segment's
    return fn(*a)


# fault -> (checkpoint function, the outcomes that name it); the healthy checkpoint on the same cells is the
# known-good set below
FAULTS = {
    "rng_not_restored": (rng_not_restored, ("mismatch",)),
    "recompute_inputs_1e-3": (recompute_inputs(1e-3), ("mismatch",)),
    "recompute_inputs_1e-4": (recompute_inputs(1e-4), ("mismatch",)),
    "recompute_module_outputs_1e-4": (recompute_module_outputs(1e-4), ("mismatch",)),
    "gradient_scaled_1e-3": (gradient_scaled(1 + 1e-3), ("mismatch",)),
    "gradient_scaled_1e-4": (gradient_scaled(1 + 1e-4), ("mismatch",)),
    "gradient_dropped": (gradient_scaled(0.0), ("missing_grad",)),
    "output_cut_from_graph": (output_cut, ("missing_grad", "gc_error")),
    "nothing_recomputed": (no_recompute, ("not_checkpointed",)),
}


@pytest.fixture(scope="module")
def runner():
    """One runner for the suite's cells (per worker): a fault touches only the checkpointed run (it replaces the
    checkpoint function, which a plain run never calls), so every fault of a cell is judged against the same plain
    baseline, trained once, as the cells sharing a baseline in a run are."""
    return Runner(Options(), cache_size=64)


def reference_cells():
    for backend in backends.BACKEND_NAMES:
        for arch in REFERENCE_ARCHS:
            yield backend, arch


def plain_failure(cell: Cell) -> str | None:
    """Why a reference cell cannot be one (an entry records its plain run as failing: transformers 5 quantizes a
    head with a bias, the qlora backend's BERT and ViT), or None. The entry is strict in the matrix."""
    from harness.expectations import expected

    want, entry = expected(cell.fields())
    return f"{cell.id}: a recorded plain failure: {entry.reason[:90]}" if want == (Outcome.ERROR,) else None


def cell_of(backend: str, arch: str) -> Cell:
    spec = archs_for(backend)[arch]
    return Cell(backend, arch, METHOD[backend], "non_reentrant", spec.inputs[0], backends.get(backend).orders[0],
                spec.primary_task)


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("backend, arch", list(reference_cells()))
def test_each_fault_of_the_checkpoint_machinery_is_caught_with_its_outcome(monkeypatch, runner, backend, arch, fault):
    if backends.get(backend).missing:
        pytest.skip(backends.get(backend).missing)
    if plain_failure(cell_of(backend, arch)):
        pytest.skip(plain_failure(cell_of(backend, arch)))
    fake, outcomes = FAULTS[fault]
    patched = install_fault(monkeypatch, fake)
    assert "torch.utils.checkpoint" in patched and "transformers.modeling_utils" in patched, patched
    r = runner.run_cell(cell_of(backend, arch))
    assert r["outcome"] in outcomes or unsettled(backend, r, outcomes), r["detail"]


def unsettled(backend: str, record: dict, outcomes) -> bool:
    """Where no float64 rerun can settle rounding (Backend.no_float64: qlora's float32 compute), a fault within
    float32's tolerance but beyond its rounding is caught when the cell does not vouch for it: `safe, partly`."""
    from harness.report import verdict

    return bool(backends.get(backend).no_float64) and "mismatch" in outcomes and verdict(record) == "safe, partly"


def test_the_fault_is_installed_where_adapters_takes_checkpoint_from(monkeypatch):
    if backends.get("adapters").missing:
        pytest.skip(backends.get("adapters").missing)
    import adapters.model_mixin

    assert "adapters.model_mixin" in install_fault(monkeypatch, no_recompute)
    assert adapters.model_mixin.checkpoint is no_recompute


def test_a_known_good_set_gives_identical_records_three_times():
    """No flakes, no false alarms: the healthy reference cells, each run by a fresh runner three times, give the same
    records but for their timing."""
    cells = [cell_of(b, a) for b, a in reference_cells()
             if not backends.get(b).missing and not plain_failure(cell_of(b, a))]
    runs = []
    for _ in range(3):
        runner = Runner(Options())
        runs.append([{k: v for k, v in runner.run_cell(c).items() if k != "seconds"} for c in cells])
    assert runs[0] == runs[1] == runs[2]
    assert all(r["outcome"] == "equivalent" for r in runs[0]), [(r["id"], r["detail"]) for r in runs[0]]


# ---------------------------------------------------------------------------------------------
# Recipes: every way of training catches a fault, and the faults only a recipe exposes are caught by it alone.
def recipe_cell(backend: str, recipe: str) -> Cell:
    """BERT's sequence-classification cell of the backend's reference method (peft's compositions: Llama's causal
    LM, whose head is not in modules_to_save), in the first order the recipe applies in (Trainer checkpoints after
    the adapter)."""
    from harness.train import recipe_applies

    be = backends.get(backend)
    order = next((o for o in be.orders if recipe_applies(recipe, be, "non_reentrant", o) is None), be.orders[0])
    arch, task = (("llama", "causal_lm") if backend in ("peft", "qlora") and recipe.startswith("compose_")
                  else ("bert", "seq_cls"))
    # adapters' compositions: a bottleneck adapter, which takes every block (and trains from its first step)
    method = "seq_bn" if backend == "adapters" and recipe.startswith("compose_") else METHOD[backend]
    return Cell(backend, arch, method, "non_reentrant", "masked", order, task, recipe=recipe)


def recipe_runs(backend: str, recipe: str) -> str | None:
    """Why a recipe's fault test does not apply to a backend, or None: the library is missing, the recipe does not
    apply, or the cell is known not to be equivalent without any fault."""
    from harness.expectations import expected
    from harness.train import recipe_applies

    be = backends.get(backend)
    if be.missing:
        return be.missing
    cell = recipe_cell(backend, recipe)
    why = recipe_applies(recipe, be, cell.gc_mode, cell.order, be.methods[cell.method])
    if why:
        return why
    want, entry = expected(cell.fields())
    return None if want == (Outcome.EQUIVALENT,) else f"known {want[0].value} without any fault: {entry.reason[:80]}"


def segment_module(fn):
    """The layer a transformers checkpoint call recomputes: its bound __call__ (4.48), a partial of it (4.57), or a
    partial of its class's forward with the layer as first argument (5.x)."""
    for f in (fn, getattr(fn, "func", None)):
        module = getattr(f, "__self__", None)
        if isinstance(module, torch.nn.Module):
            return module
    first = (getattr(fn, "args", None) or (None,))[0]
    if isinstance(first, torch.nn.Module):
        return first
    raise AssertionError(f"no module behind {fn!r}")


def zeroes_accumulated_gradients(fn, *a, **kw):
    """A recompute that starts by zeroing its layer's gradients: harmless when each backward starts from none (a
    plain loop), it drops the micro-batches accumulated before it."""
    def again(*x, **k):
        if in_recompute():
            for p in segment_module(fn).parameters():
                if p.grad is not None:
                    p.grad.zero_()
        return fn(*x, **k)
    return real_checkpoint(again, *a, **kw)


SWITCHED_TO_EVAL: list[str] = []


def leaves_its_layer_in_eval_mode(fn, *a, **kw):
    """A checkpoint that, called under torch.no_grad() (an evaluation forward), switches its layer to eval mode for
    good: training then goes on without that layer's dropout. A plain loop never calls it so."""
    if not torch.is_grad_enabled() and not in_recompute():
        SWITCHED_TO_EVAL.append(type(segment_module(fn)).__name__)
        segment_module(fn).eval()
    return real_checkpoint(fn, *a, **kw)


@pytest.mark.parametrize("fault", ["rng_not_restored", "recompute_inputs_1e-4"])
@pytest.mark.parametrize("recipe", [r for r in RECIPES if r not in ("loop", "autocast")])
@pytest.mark.parametrize("backend", backends.BACKEND_NAMES)
def test_every_recipe_catches_faults_of_the_checkpoint_machinery(monkeypatch, runner, backend, recipe, fault):
    """(The plain loop: the suite above; autocast: below.)"""
    if recipe_runs(backend, recipe):
        pytest.skip(recipe_runs(backend, recipe))
    assert runner.run_cell(recipe_cell(backend, recipe))["outcome"] == "equivalent"
    install_fault(monkeypatch, FAULTS[fault][0])
    r = runner.run_cell(recipe_cell(backend, recipe))
    assert r["outcome"] == "mismatch" or unsettled(backend, r, ("mismatch",)), r["detail"]


@pytest.mark.parametrize("fault", ["rng_not_restored", "recompute_inputs_1e-4"])
@pytest.mark.parametrize("backend", backends.BACKEND_NAMES)
def test_autocast_is_judged_at_float32s_tolerance(monkeypatch, runner, backend, fault):
    """bfloat16's tolerance (atol 1e-2) passed other dropout masks in the recompute: an autocast cell is judged at
    float32's, its rounding settled in float64 (the rerun without autocast still has the fault)."""
    if backends.get(backend).missing or plain_failure(recipe_cell(backend, "autocast")):
        pytest.skip(backends.get(backend).missing or plain_failure(recipe_cell(backend, "autocast")))
    assert runner.run_cell(recipe_cell(backend, "autocast"))["outcome"] == "equivalent"
    install_fault(monkeypatch, FAULTS[fault][0])
    r = runner.run_cell(recipe_cell(backend, "autocast"))
    assert (r["outcome"] == "mismatch" or unsettled(backend, r, ("mismatch",))) and r["tolerance"]["atol"] == 1e-6, \
        r["detail"]


@pytest.mark.parametrize("recipe, fault, outcome", [
    ("loop", zeroes_accumulated_gradients, "equivalent"),
    ("accumulate", zeroes_accumulated_gradients, "mismatch"),
    ("loop", leaves_its_layer_in_eval_mode, "equivalent"),
    ("eval_between", leaves_its_layer_in_eval_mode, "mismatch"),
])
@pytest.mark.parametrize("backend", ["peft", "full"])
def test_a_fault_only_a_recipe_exposes_is_caught_by_that_recipe(monkeypatch, runner, backend, recipe, fault, outcome):
    if backends.get(backend).missing:
        pytest.skip(backends.get(backend).missing)
    install_fault(monkeypatch, fault)
    SWITCHED_TO_EVAL.clear()
    r = runner.run_cell(recipe_cell(backend, recipe))
    if recipe == "eval_between" and fault is leaves_its_layer_in_eval_mode and not SWITCHED_TO_EVAL:
        import transformers

        pytest.skip(f"transformers {transformers.__version__} does not checkpoint under torch.no_grad(): this fault "
                    "cannot arise there")
    assert r["outcome"] == outcome, r["detail"]
