"""Known non-equivalent cells, as data (matched like OpInfo's DecorateInfo).

Each entry (:class:`Expect`): a cell pattern (fnmatch per axis; "trait:NAME" for a trait of the method), the library
versions it holds for (PEP 440 specifiers, all must match the installed versions), the expected outcome, the reason
and a link. Cells no entry matches are expected `equivalent`; an entry may also say `equivalent` alone, as an
exception carved out of a broader entry after it. Matching is strict: an expected failure that now comes out
`equivalent` fails the run, so an upstream fix shows up.

Precedence, stated once: the entry files are read in the order of ORDER below, each top to bottom, and the first
entry that matches a cell wins. So a narrower entry stands above a broader one, and the files go from what a user
hits first (a method failing before checkpointing is enabled, the libraries' refusals, a plain run that fails) to
checkpointing findings, the broadest rules, then what only a training recipe (Cell.recipe) shows: an entry
without a recipe holds for every recipe, so the recipes' own findings come after them. The generated baseline-calibration table (harness/calibration.py)
is consulted first but only decides where no entry explains the plain run's failure (see expected()).
"""
from __future__ import annotations

from ..outcomes import Outcome
from . import findings_general, findings_models, findings_recipes, first, plain_failures, refusals
from .entry import MACHINES, Expect  # noqa: F401  (MACHINES: the machine conditions an entry may name)

ORDER = (first, refusals, plain_failures, findings_models, findings_general, findings_recipes)
EXPECTATIONS: list[Expect] = [e for module in ORDER for e in module.ENTRIES]


def with_traits(cell_fields: dict) -> dict:
    """The cell's fields with its method's traits (MethodSpec.traits) and its arch's (archs.base.ARCH_TRAITS), which
    "trait:NAME" patterns match."""
    if "traits" in cell_fields:
        return cell_fields
    from ..archs.base import arch_traits
    from ..backends import method_traits

    return {**cell_fields, "traits": method_traits(cell_fields.get("backend", ""), cell_fields.get("method", ""))
            | arch_traits(cell_fields.get("arch", ""))}


def expected(cell_fields: dict, table: list[Expect] | None = None,
             calibrated: bool = True) -> tuple[tuple[Outcome, ...], Expect | None]:
    """(acceptable outcomes, the entry that says so) for a cell; (equivalent,) when no entry matches.

    With `calibrated`, the generated baseline-calibration table of the installed release is consulted
    too (harness/calibration.py): when it lists the cell's plain run as failing, the cell comes out as
    that run did, so only an entry naming that outcome (one that explains the failure) still wins over
    the table's bare measurement; entries about checkpointing findings are passed over."""
    failing, stage = None, None
    if calibrated:
        from ..calibration import baseline_failure

        measured, stage = baseline_failure(cell_fields)
        if measured is not None:
            outcome, reason, link = measured
            failing = Expect({}, Outcome(outcome), reason, link)
    # a refusal of checkpointing itself shows unless the checkpointed run fails before it, as the plain one did:
    # in gc_first order checkpointing is enabled right after building, in adapter_first after attaching
    refusal_first = stage != "build" and (cell_fields.get("order") == "gc_first" or stage == "train")
    fields = with_traits(cell_fields)
    for e in EXPECTATIONS if table is None else table:
        if e.applies(fields):
            if failing is not None and failing.outcome not in e.outcomes and not (
                    e.refuses_checkpointing and refusal_first):
                continue
            return e.outcomes, e
    if failing is not None:
        return failing.outcomes, failing
    if cell_fields.get("backend") == "transformers_peft" and table is None and \
            cell_fields.get("recipe", "loop") == "loop":
        return _as_peft(cell_fields)
    return (Outcome.EQUIVALENT,), None


SWAPPED = {"gc_first": "adapter_first", "adapter_first": "gc_first"}
AS_PEFT = ("as peft's {order} (transformers' gradient_checkpointing_enable calls enable_input_require_grads once an "
           "adapter is loaded, as get_peft_model does on a model that already checkpoints; added after checkpointing, "
           "the adapter gets no such call, as after peft's own gradient_checkpointing_enable): ")


def _as_peft(cell_fields: dict) -> tuple[tuple[Outcome, ...], Expect | None]:
    """A transformers_peft cell no entry of its own explains: what peft's entries say of the same cell in the other
    order (the orders in which each library calls enable_input_require_grads are swapped)."""
    twin = {**cell_fields, "backend": "peft", "order": SWAPPED.get(cell_fields.get("order"), cell_fields.get("order"))}
    twin.pop("traits", None)
    want, why = expected(twin, calibrated=False)   # peft's plain failures are often its task wrapper's
    if why is None:
        return want, None
    return want, Expect({}, want, AS_PEFT.format(order=twin["order"]) + why.reason, why.link)


def judge(cell_fields: dict, outcome: str) -> dict:
    """The expectation part of a result record: `expected` ("a|b"), `matches`, `reason`, `link`."""
    want, why = expected(cell_fields)
    return {"expected": "|".join(w.value for w in want), "matches": outcome in {w.value for w in want},
            "reason": why.reason if why else "", "link": why.link if why else ""}
