"""Known non-equivalent cells, as data (matched like OpInfo's DecorateInfo).

Each entry (:class:`Expect`): a cell pattern (fnmatch per axis; "trait:NAME" for a trait of the method), the library
versions it holds for (PEP 440 specifiers, all must match the installed versions), the expected outcome, the reason
and a link. Cells no entry matches are expected `equivalent`; an entry may also say `equivalent` alone, as an
exception carved out of a broader entry after it. Matching is strict: an expected failure that now comes out
`equivalent` fails the run, so an upstream fix shows up.

Precedence, stated once: the entry files are read in the order of ORDER below, each top to bottom, and the first
entry that matches a cell wins. So a narrower entry stands above a broader one, and the files go from what a user
hits first (a method failing before checkpointing is enabled, the libraries' refusals, a plain run that fails, a
quantized base's own: quantized) to checkpointing findings: torch's own checkpoint API and the launches
(findings_launch: narrow, by gc mode and launch), the models', the broadest rules, then what only a training recipe
(Cell.recipe) shows: an entry without a recipe holds for every recipe, so the recipes' own findings come after them;
an entry without a launch holds for every launch. The generated baseline-calibration table (harness/calibration.py)
is consulted first but only decides where no entry explains the plain run's failure (see expected()).
"""
from __future__ import annotations

from ..backends.base import BEFORE_ADAPTER, KBIT_ORDER, UNSET
from ..backends.qlora import EIGHT_BIT
from ..outcomes import Outcome
from . import (findings_general, findings_launch, findings_models, findings_recipes, first, plain_failures,
               quantized, refusals)
from .entry import MACHINES, Expect, patterns  # noqa: F401  (MACHINES: the machine conditions an entry may name)

ORDER = (first, refusals, plain_failures, quantized, findings_launch, findings_models, findings_general,
         findings_recipes)
EXPECTATIONS: list[Expect] = [e for module in ORDER for e in module.ENTRIES]
# outcomes a cell may also come out as, whatever entry explains it otherwise (which cell of a process shows them
# depends on what the process ran before): acceptable besides the expected ones, never instead of them
ALSO: list[Expect] = findings_models.ALSO
# what a transformers_peft cell borrows from peft (_as_peft): every entry but peft's own plain failures and refusals
PEFT_FINDINGS: list[Expect] = [e for module in ORDER for e in module.ENTRIES
                               if module not in (first, refusals, plain_failures) or e.match.get("backend") != "peft"]



def with_traits(cell_fields: dict) -> dict:
    """The cell's fields with its method's traits (MethodSpec.traits) and its arch's (archs.base.ARCH_TRAITS), which
    "trait:NAME" patterns match."""
    if "traits" in cell_fields:
        return cell_fields
    from ..archs import composite_parts
    from ..archs.base import arch_traits
    from ..backends import method_traits

    backend, arch = cell_fields.get("backend", ""), cell_fields.get("arch", "")
    traits = method_traits(backend, cell_fields.get("method", "")) | arch_traits(arch)
    for part in composite_parts(backend, arch):   # a wrapper returns its encoder's and decoder's attentions
        traits |= arch_traits(part) & {"records_attentions"}
    return {**cell_fields, "traits": traits}


def expected(cell_fields: dict, table: list[Expect] | None = None,
             calibrated: bool = True) -> tuple[tuple[Outcome, ...], Expect | None]:
    """(acceptable outcomes, the entry that says so) for a cell; (equivalent,) when no entry matches.

    With `calibrated`, the generated baseline-calibration table of the installed release is consulted
    too (harness/calibration.py): when it lists the cell's plain run as failing, the cell comes out as
    that run did, so only an entry naming that outcome (one that explains the failure) still wins over
    the table's bare measurement; entries about checkpointing findings are passed over.

    A cell of a backend built on peft (TWINS: transformers_peft, qlora) takes the entries naming its backend, then
    what peft's entries say of the same cell as peft runs it (:func:`_as_peft`)."""
    failing, stage = None, None
    if calibrated:
        from ..calibration import baseline_failure

        measured, stage = baseline_failure(cell_fields)
        if measured is None and cell_fields.get("backend") == QLORA:
            # no table of its own: peft's, of the model unquantized, where its plain run fails in training with an
            # error (a task wrapper's forward; not a refusal, nor the adapter's layer types, which the quantized
            # model has others of)
            twin, twin_stage = baseline_failure({**cell_fields, "backend": "peft", **_as_qlora(cell_fields)})
            if twin is not None and twin_stage == "train" and twin[0] == Outcome.ERROR.value:
                measured, stage = twin, twin_stage
        if measured is not None:
            outcome, reason, link = measured
            failing = Expect({}, Outcome(outcome), reason, link)
    # a refusal of checkpointing itself shows unless the checkpointed run fails before it, as the plain one did:
    # in gc_first order checkpointing is enabled right after building, in adapter_first after attaching
    refusal_first = stage != "build" and (cell_fields.get("order") in BEFORE_ADAPTER or stage == "train")

    def explains(e: Expect) -> bool:
        return failing is None or failing.outcome in e.outcomes or (e.refuses_checkpointing and refusal_first)

    fields = with_traits(cell_fields)
    backend = cell_fields.get("backend")
    as_peft = table is None and backend in TWINS
    for e in EXPECTATIONS if table is None else table:
        if (not as_peft or backend in patterns(e.match.get("backend"))) and e.applies(fields) and explains(e):
            return e.outcomes, e
    if as_peft:
        want, why = _as_peft(cell_fields)
        if why is not None and explains(why):
            return want, why
    if failing is not None:
        return failing.outcomes, failing
    return (Outcome.EQUIVALENT,), None


TP = "transformers_peft"
QLORA = "qlora"

AS_PEFT = ("as peft's {order} (transformers' gradient_checkpointing_enable calls enable_input_require_grads only once "
           "an adapter is loaded (_hf_peft_config_loaded), as get_peft_model does on a model that already checkpoints; "
           "an adapter added after checkpointing gets no such call, as after peft's own gradient_checkpointing_enable: "
           "cases/transformers_add_adapter_after_checkpointing_reentrant.py): ")
AS_PEFT_UNQUANTIZED = ("as peft's {order} {gc_mode} on the model unquantized (prepare_model_for_kbit_training hooks "
                       "the input embeddings (enable_input_require_grads) where use_reentrant is True or left out, which "
                       "is reentrant, as get_peft_model does on a checkpointing model in gc_first, and PeftModel skips "
                       "its own call on a quantized model: with non-reentrant checkpointing nothing hooks them unless "
                       "transformers 5's gradient_checkpointing_enable does, as in peft's adapter_first; the plain "
                       "run prepares it without): ")


def _as_transformers_peft(cell: dict) -> dict:
    """transformers' integration calls enable_input_require_grads in the other order than peft."""
    order = cell.get("order")
    return {"order": {"gc_first": "adapter_first", "adapter_first": "gc_first"}.get(order, order)}


def _as_qlora(cell: dict) -> dict:
    """prepare_kbit hooks the input embeddings as peft's gc_first does, for reentrant modes; otherwise as its
    adapter_first (nothing but transformers 5 hooks them); unset is reentrant; an 8-bit variant is its method."""
    gc_mode, order, method = cell.get("gc_mode"), cell.get("order"), cell.get("method")
    gc_mode = {UNSET: "reentrant"}.get(gc_mode, gc_mode)
    if order == KBIT_ORDER:
        order = "gc_first" if gc_mode == "reentrant" else "adapter_first"
    return {"order": order, "gc_mode": gc_mode, "method": getattr(EIGHT_BIT.get(method), "name", method)}


# the backends built on peft: the axes of the same cell as peft runs it, and what a borrowed reason is prefixed with
TWINS = {TP: (_as_transformers_peft, AS_PEFT), QLORA: (_as_qlora, AS_PEFT_UNQUANTIZED)}


def _as_peft(cell_fields: dict) -> tuple[tuple[Outcome, ...], Expect | None]:
    """A cell of a TWINS backend that no entry naming its backend explains: what peft's entries (and the arch-wide
    ones, in their order among them) say of the same cell as peft runs it (transformers_peft: in the other order, the
    orders in which each library calls enable_input_require_grads being swapped; qlora: _as_qlora). Without peft's
    own plain failures and refusals (entries of `first`, `refusals`, `plain_failures` naming peft; its calibration
    table): often its task wrapper's or its unquantized layers'; the refusals of a PeftModel that hold for qlora name
    it, and these backends' plain runs are recorded on their own."""
    as_peft, prefix = TWINS[cell_fields.get("backend")]
    twin = {**cell_fields, "backend": "peft", **as_peft(cell_fields)}
    twin.pop("traits", None)
    want, why = expected(twin, PEFT_FINDINGS, calibrated=False)
    if why is None or "peft" not in patterns(why.match.get("backend")):
        return want, why   # an arch-wide entry holds for every backend as it stands
    return want, Expect({}, want, prefix.format(order=twin["order"], gc_mode=twin["gc_mode"]) + why.reason, why.link,
                        refuses_checkpointing=why.refuses_checkpointing)


def judge(cell_fields: dict, outcome: str) -> dict:
    """The expectation part of a result record: `expected` ("a|b"), `matches`, `reason`, `link`. An outcome an ALSO
    entry of the cell names matches too, with that entry's reason."""
    want, why = expected(cell_fields)
    matches = outcome in {w.value for w in want}
    if not matches:
        fields = with_traits(cell_fields)
        also = next((e for e in ALSO if outcome in {o.value for o in e.outcomes} and e.applies(fields)), None)
        if also is not None:
            return {"expected": "|".join(w.value for w in (*want, *also.outcomes)), "matches": True,
                    "reason": also.reason, "link": also.link}
    return {"expected": "|".join(w.value for w in want), "matches": matches,
            "reason": why.reason if why else "", "link": why.link if why else ""}
