"""`python -m harness list`: what the matrix covers, and why anything is not covered."""
from __future__ import annotations

from . import backends, calibration
from .archs import archs_for, registry_not_in_transformers, zoo_survey
from .archs.base import INPUTS
from .cells import SelectionError, check_values, split_values
from .expectations import ALSO, EXPECTATIONS
from .expectations.entry import _matches
from .launch import PARALLEL, SINGLE, TRAINER, WORLD, parallel_applies
from .report import CASE, short
from .train import RECIPES, recipe_applies


def listing(backend: str | None = None) -> str:
    names = split_values(backend) or list(backends.BACKEND_NAMES)
    check_values("backend", names, list(backends.BACKEND_NAMES))
    out: list[str] = []
    for b in names:
        be = backends.get(b)
        out.append(f"== backend {b}" + (f": NOT AVAILABLE ({be.missing})" if be.missing else ""))
        out.append(f"  gc_modes: {', '.join(be.gc_modes)}; orders: {', '.join(be.orders)}; inputs: {', '.join(INPUTS)}")
        out.append("  recipes (every cell trains each way it can):")
        for name, what in RECIPES.items():
            out.append(f"    {name:<22} {what}")
            why = sorted({r for g in be.gc_modes for o in be.orders if (r := recipe_applies(name, be, g, o))})
            out.extend(f"        not applicable: {r}" for r in why)
        out.append(f"  launches (parallel; every value but single: {WORLD} ranks, gloo, 127.0.0.1 only):")
        for name, what in PARALLEL.items():
            out.append(f"    {name:<22} {what}")
            if TRAINER.get(name):
                out.append(f"        with the trainer recipe: {TRAINER[name]}")
            elif name != SINGLE and (why := parallel_applies(name, "trainer")):
                out.append(f"        not applicable with the trainer recipe: {why}")
        archs = archs_for(b)
        out.append(f"  archs ({len(archs)}):")
        for a in archs.values():
            skip = [i for i in INPUTS if i not in a.inputs]
            extra = f"; inputs only {', '.join(a.inputs)}" if skip else ""
            out.append(f"    {a.name:<22} tasks {', '.join(a.tasks)}{extra}" + (f"  -- {a.notes}" if a.notes else ""))
        for name, why in registry_not_in_transformers().items():
            out.append(f"    {name:<22} not covered: {why}")
        out.append(f"  methods ({len(be.methods)}):")
        for m in be.methods.values():
            na = sorted({f"{a.name}/{t}: {r}" for a in archs.values() for t in a.tasks
                         if (r := m.applies(a, t)) is not None})
            note = f"  -- {m.notes}" if m.notes else ""
            out.append(f"    {m.name:<22} applies to {sum(1 for a in archs.values() for t in a.tasks if m.applies(a, t) is None)}"
                       f" arch/task pairs{note}")
            for line in na[:3]:
                out.append(f"        not applicable: {line}")
            if len(na) > 3:
                out.append(f"        ... and {len(na) - 3} more not applicable")
        if b == "peft" and not be.missing:
            from .backends.peft import peft_type_status

            out.append("  PeftTypes of the installed peft:")
            for t, s in sorted(peft_type_status().items()):
                out.append(f"    {t:<26} {s}")
        if b != "adapters":
            _, not_covered = zoo_survey()
            if not_covered:
                out.append(f"  transformers model types not covered ({len(not_covered)}):")
                for mt, why in sorted(not_covered.items()):
                    out.append(f"    {mt:<30} {why}")
        if not be.missing:
            out.extend(calibration.summary(b))
        exp = [e for e in EXPECTATIONS if _matches({"backend": b}, "backend", e.match.get("backend", "*"))]
        here = [e for e in exp if e.holds_here()]
        out.append(f"  known non-equivalent patterns for the installed versions ({len(here)}; {len(exp) - len(here)} "
                   f"more hold for other versions), first match wins; the full reasons: docs/findings.md:")
        for e in here:
            case = CASE.search(e.reason)
            out.append(f"    {'|'.join(o.value for o in e.outcomes):<24} {e.pattern()}")
            out.append(f"    {'':<24} {short(e.reason)}  {e.link}" + (f"  {case.group(0)}" if case else ""))
        if b == "transformers_peft":
            out.append("    then peft's entries (and the arch-wide ones) with the orders swapped: transformers' "
                       "gradient_checkpointing_enable calls enable_input_require_grads once an adapter is loaded, "
                       "as get_peft_model does on a model that already checkpoints (docs/design.md section 6)")
        also = [e for e in ALSO if e.holds_here() and _matches({"backend": b}, "backend", e.match.get("backend", "*"))]
        if also:
            out.append("  accepted besides a cell's expected outcomes (which cell shows them depends on the process):")
            for e in also:
                out.append(f"    {'|'.join(o.value for o in e.outcomes):<24} {e.pattern()}")
                out.append(f"    {'':<24} {short(e.reason)}  {e.link}")
    return "\n".join(out)


__all__ = ["listing", "SelectionError"]
