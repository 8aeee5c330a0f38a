"""Every recipe trains what it says (what a `safe` verdict vouches for): the plain run of each backend's reference
method on its reference arch, trained by the recipe, gives every tensor the recipe makes trainable a non-zero
gradient at some step. Where a recipe says part of it does not train (switch_frozen: set_adapter freezes the first
adapter), the test asserts exactly that part, so a recipe that trains less than it says fails, named."""
import re

import pytest

from harness import backends
from harness.archs import archs_for
from harness.cells import _cells_of
from harness.compare import _nonzero_set
from harness.launch import SINGLE
from harness.run import Runner
from harness.train import RECIPES

def _layer(name: str) -> int:
    """The index of the layer a tensor is in (-1: outside the layers)."""
    found = re.search(r"\.layers?\.(\d+)\.", name)
    return int(found.group(1)) if found else -1


# recipe -> (what its description says does not train, (trainable tensors, task) -> those that are that)
UNTRAINED = {
    "switch_frozen": ("the first adapter (set_adapter freezes it before the backward)",
                      lambda names, task: {n for n in names if ".default." in n}),
    "compose_split": ("on a pooled head the last layer's second adapter (the tokens after the split reach no loss)",
                      lambda names, task: {n for n in names if task == "seq_cls" and ".cell2." in n
                                           and _layer(n) == max(map(_layer, names))}),
}


def reference_cells(backend: str, recipe: str):
    """The cells of the backend's reference method trained by `recipe`: on the reference arch's tasks (its primary
    task first), then on the other archs' primary tasks, as the default tier finds a cell a method applies to."""
    be = backends.get(backend)
    archs = archs_for(backend)
    ref = archs[be.reference_arch]
    method = next(iter(be.methods))
    where = [(ref, t) for t in dict.fromkeys([ref.primary_task, *ref.tasks])]
    others = [archs[a] for a in be.default_archs if a in archs] if be.default_archs else archs.values()
    where += [(a, a.primary_task) for a in others if a is not ref]   # (a backend's own archs, where it names them)
    for arch, task in where:
        cell = next((c for order in reversed(be.orders) for c in _cells_of(
            backend, arch, [task], [recipe], [method], gc_mode=be.gc_modes[0], inputs=arch.inputs[0], order=order,
            parallel=SINGLE)), None)
        if cell is not None:
            yield cell


def known_plain_failure(cell) -> bool:
    """An entry records the cell's plain run as failing (`error`, e.g. bitsandbytes' CPU repack in eval_between)."""
    from harness.expectations import expected
    from harness.outcomes import Outcome

    return expected(cell.fields())[0] == (Outcome.ERROR,)


@pytest.fixture(scope="module")
def runner():
    return Runner()


def recipes_of(backend: str) -> list:
    """The recipes that apply to the backend's reference method somewhere (a missing library: one skip)."""
    be = backends.get(backend)
    if be.missing:
        return [pytest.param(backend, None, marks=pytest.mark.skip(reason=be.missing))]
    return [(backend, r) for r in RECIPES if next(reference_cells(backend, r), None) is not None]


@pytest.mark.parametrize("backend, recipe", [p for b in backends.BACKEND_NAMES for p in recipes_of(b)])
def test_recipe_trains_what_it_says(backend, recipe, runner):
    refused = []
    for cell in reference_cells(backend, recipe):   # the first that the library neither refuses nor fails in
        trace = runner.plain(cell)
        if not trace.unsupported and (trace.ok or not known_plain_failure(cell)):
            break
        refused.append(f"{cell.id}: {trace.error}")
    else:
        pytest.skip(f"{backend} refuses {recipe} for its reference method everywhere, or its plain run fails there "
                    f"as an entry records (the matrix runs it strict): {'; '.join(refused[:2])}")
    assert trace.ok, f"{cell.id}: the plain run fails: {trace.error}"
    assert trace.trainable, f"recipe {recipe}: nothing trainable in {cell.id}"
    dead = {n for n in trace.trainable if n not in _nonzero_set(trace)}
    what, said = UNTRAINED.get(recipe, ("nothing", lambda names, task: set()))
    untrained = said(trace.trainable, cell.task)
    assert sorted(dead - untrained) == [], (
        f"recipe {recipe} ({cell.id}): {len(dead)} of {len(trace.trainable)} trainable tensors never get a non-zero "
        f"gradient in the plain run; its description says {what} stays untrained")
    assert dead == untrained, (
        f"recipe {recipe} ({cell.id}): {what} is said not to train, but {len(untrained - dead)} of its tensors train")
