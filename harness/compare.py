"""The one comparator: a pure function (baseline, baseline replay, candidate) -> Verdict.

No model is touched here; traces are plain tensors. Order of checks (the first that fires wins):
error (the baseline raised, is NaN / inf from step 0, or is vacuous: no trainable tensor ever gets a non-zero
gradient, so it can say nothing about checkpointing) -> unsupported -> nondeterministic -> gc_error ->
missing_grad -> mismatch -> not_checkpointed -> equivalent (which lists trainable tensors the baseline never
exercised, and the steps from which it is not finite: those are not vouched for). The baseline alone decides
the first two, so a baseline calibration (harness/calibration.py) predicts them without running the
checkpointed side.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .outcomes import OUT_OF_MEMORY, Outcome
from .trace import Trace

# per-dtype default tolerance (docs/design.md section 3)
DEFAULT_TOL = {
    "float64": (1e-10, 1e-8),
    "float32": (1e-6, 1e-5),
    "bfloat16": (1e-2, 5e-2),
    "float16": (1e-3, 1e-2),
    # the autocast recipe (float32 weights, the forward in bfloat16) at float32's: CPU autocast replays itself exactly
    # and a correct recompute runs the same bfloat16 kernels on the same inputs; bfloat16's tolerance (atol 1e-2)
    # passed a recompute with other dropout masks on a tiny model (tests/test_fault_suite.py). Rounding that
    # recompute legally changes is settled by the float64 rerun, as in float32.
    "autocast": (1e-6, 1e-5),
}
NOISE_FACTOR = 10.0  # tolerance widened to NOISE_FACTOR x the measured noise floor when larger
# A float32 difference of more than ROUNDING_ULPS float32 epsilons of a tensor's own largest magnitude, in a cell whose
# baseline replays itself exactly, is more than rounding of that tensor explains: float64 decides it, whatever atol
# says (a 1e-4 relative fault in the recompute of a tiny model's small gradients stays under atol 1e-6). Honest
# recompute rounding measured on the adapters and peft default tiers: at most 5.3e-6 = 45 eps (switch_transformers
# + LoRA), 22 of 24 cells within 1.3e-6 = 11 eps; a relative fault of 1e-4 shows as 2e-4 or more (docs/outcomes.md).
ROUNDING_ULPS = 16
EPS32 = torch.finfo(torch.float32).eps


@dataclass
class Verdict:
    outcome: Outcome
    detail: str
    max_abs_diff: float = 0.0
    max_rel_diff: float = 0.0
    tolerance: dict = field(default_factory=dict)
    noise_floor: float = 0.0
    recomputed_segments: int = 0
    saved_bytes: dict = field(default_factory=dict)
    unexercised: int = 0   # trainable tensors that never got a non-zero gradient in the baseline
    zeroed: bool = False   # missing_grad only by gradients that are exactly zero with checkpointing (not None)


@dataclass
class _Diff:
    where: str = ""
    abs: float = 0.0
    rel: float = 0.0
    fails: bool = False
    fail_rel: float = 0.0   # the largest relative difference among the comparisons beyond tolerance


def _diff(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, bool]:
    """(max abs diff, scale, fails whatever the tolerance): the scale is the largest magnitude in the baseline tensor
    `b`, which rtol is relative to: recompute may legally reorder a float sum, which moves small entries of a
    large-gradient tensor by a few ulps of its large entries, never by a share of its scale. Fails whatever the
    tolerance: other shapes, or a NaN where the other has none."""
    if a.shape != b.shape:
        return float("inf"), 0.0, True
    if torch.equal(a, b):   # the common case (frozen weights, exact recompute); NaNs never compare equal
        return 0.0, 0.0, False
    a, b = a.double(), b.double()   # traces keep the run's dtype; differences are taken in float64
    d = (a - b).abs()
    mabs, scale = float(d.max()), float(b.abs().max())
    if math.isfinite(mabs) and math.isfinite(scale):
        return mabs, scale, False
    nan_mismatch = bool((torch.isnan(a) != torch.isnan(b)).any())
    return (float(torch.nan_to_num(d, nan=0.0).max()), float(torch.nan_to_num(b.abs(), nan=0.0).max()),
            nan_mismatch)


def _differences(base: Trace, cand: Trace) -> list[tuple[str, float, float, bool]]:
    """What of `cand` is not equal to `base`, in step order (losses, gradients per step, the final state):
    (where, max abs diff, scale, fails whatever the tolerance). Computed once per pair: a candidate is compared
    again with the replay, a replay at two tolerances."""
    if cand.differences is not None and cand.differences[0] is base:
        return cand.differences[1]
    out = []

    def see(where, a, b):
        mabs, scale, fails = _diff(a, b)
        if mabs or fails:
            out.append((where, mabs, scale, fails))

    for step, (lb, lc) in enumerate(zip(base.losses, cand.losses)):
        if lb != lc:   # equal floats differ by nothing (NaN is never equal)
            see(f"step {step} loss", torch.tensor([lc], dtype=torch.float64), torch.tensor([lb], dtype=torch.float64))
        gb, gc = base.grads[step], cand.grads[step]
        for name, g in gb.items():
            h = gc.get(name)
            if g is not None and h is not None:
                see(f"step {step} grad {name}", h, g)
    for name, v in base.state.items():
        w = cand.state.get(name)
        if w is not None:
            see(f"final state {name}", w, v)
    cand.differences = (base, out)
    return out


def _walk(base: Trace, cand: Trace, atol: float, rtol: float) -> tuple[_Diff, _Diff]:
    """(first failing difference in step order, overall max difference)."""
    first, worst = _Diff(), _Diff()
    for where, mabs, scale, always in _differences(base, cand):
        rel = mabs / scale if scale > 0 else (0.0 if mabs == 0 else float("inf"))
        fails = _beyond((mabs, scale, always), atol, rtol)
        if mabs > worst.abs or (fails and not worst.fails):
            worst.where, worst.abs, worst.rel, worst.fails = where, mabs, rel, worst.fails or fails
        worst.rel = max(worst.rel, rel)
        if fails:
            worst.fail_rel = max(worst.fail_rel, rel)
        if fails and not first.fails:
            first.where, first.abs, first.rel, first.fails = where, mabs, rel, True
    return first, worst


def _nonzero_set(t: Trace) -> set[str]:
    return {n for step in magnitudes(t) for n, m in step.items() if _has(m)}


def not_finite(t: Trace) -> tuple[int, str] | None:
    """(step, what) where `t` first has a NaN or infinite loss or gradient, or None. From there on NaN equals NaN
    in the walk below, so those steps vouch for nothing (Granite-MoE-SWA's padded rows in float64 at step 0;
    full fine-tuning of VITS diverging at step 2)."""
    grads = magnitudes(t)
    for step, loss in enumerate(t.losses):
        if not math.isfinite(loss):
            return step, f"loss {loss} at step {step}"
        for name, m in (grads[step].items() if step < len(grads) else ()):
            if m is not None and not math.isfinite(m):
                return step, f"step {step} grad {name} is not finite"
    return None


def asks_float64(verdict: Verdict, dtype: str) -> bool:
    """Whether a float32 verdict is rerun in float64 (`settle_in_float64`). A value difference may be rounding that
    recompute legally changes (a float sum accumulated in another order; the other matmul path of use_cache=False),
    and training amplifies it to any size: a ReLU input within 4e-7 of zero flips (UDOP: 0.018 in one gradient
    row), a large step makes the tiny model chaotic (mT5 + WaveFT: 0.16 by step 2), so its size does not tell. So
    is a gradient that is exactly zero with checkpointing where the baseline's is not: rounding around a true zero
    can leave it beyond the tolerance (Canary + GLoRA behind a BatchNorm: 1.9e-5 in the baseline, no gradient lost
    in float64). A gradient cut from the graph (None) is no rounding. An `equivalent` whose difference is more than
    rounding explains (beyond_rounding) is rerun too: atol passed it, not the evidence."""
    value_difference = verdict.outcome is Outcome.MISMATCH or verdict.outcome is Outcome.MISSING_GRAD and verdict.zeroed
    return dtype in ("float32", "autocast") and (value_difference or beyond_rounding(verdict))


def beyond_rounding(verdict: Verdict) -> bool:
    """An `equivalent` float32 verdict whose difference is more than float32 rounding explains: the baseline replays
    itself exactly (noise floor 0) and some tensor differs by more than ROUNDING_ULPS x float32 eps of its own largest
    magnitude (max_rel_diff). Within atol, but not evidence of equivalence: float64 decides."""
    return (verdict.outcome is Outcome.EQUIVALENT and verdict.noise_floor == 0.0
            and verdict.max_rel_diff > ROUNDING_ULPS * EPS32)


ROUNDING_OF = {"autocast": "bfloat16 (autocast)"}   # what a judged dtype's rounding is called


def settle_in_float64(verdict: Verdict, v64: Verdict, b64: Trace, dtype: str = "float32") -> tuple[Verdict, bool]:
    """The float32 `verdict` once the cell has been rerun in float64, where rounding is ~1e-9 smaller (`v64`, from
    the float64 baseline `b64`), and whether float64 confirms a value difference (the cache triage then compares
    in float64). float64 agreeing: it was rounding; a float32 zero gradient that float64 does not lose: rounding
    around a zero, and float64 judges the values; else the float32 verdict stands, with what float64 says."""
    bad = not_finite(b64)
    if v64.outcome is Outcome.EQUIVALENT and bad:   # agreeing NaN settles nothing
        verdict.detail += f"; float64 rerun: unsettled, its baseline is not finite from step {bad[0]} ({bad[1]})"
        return verdict, False
    if v64.outcome is Outcome.EQUIVALENT:
        return Verdict(Outcome.EQUIVALENT,
                       f"{ROUNDING_OF.get(dtype, dtype)} rounding only: {verdict.detail}; the float64 rerun agrees "
                       f"(max abs {v64.max_abs_diff:.3g} within atol {v64.tolerance['atol']:.3g} + rtol "
                       f"{v64.tolerance['rtol']:g} x scale)",
                       verdict.max_abs_diff, verdict.max_rel_diff, verdict.tolerance, verdict.noise_floor,
                       verdict.recomputed_segments, verdict.saved_bytes, verdict.unexercised), False
    if (verdict.outcome is Outcome.EQUIVALENT and v64.outcome is Outcome.MISMATCH and not bad
            and v64.max_rel_diff <= ROUNDING_ULPS * EPS32):
        # what float64 cannot remove when the model computes in float32 inside (GPT-Neo's attention upcasts query
        # and key to float32): a difference of float32 rounding's size, which is all the float32 run had
        verdict.detail += (f"; float64 rerun: a difference of float32 rounding's size remains (max rel "
                           f"{v64.max_rel_diff:.3g} <= {ROUNDING_ULPS} eps32: float32 arithmetic inside the model)")
        return verdict, False
    if verdict.outcome is Outcome.EQUIVALENT and v64.outcome in (Outcome.MISMATCH, Outcome.MISSING_GRAD) and not bad:
        v64.detail = (f"float64 rerun: {v64.detail} (in float32 within the tolerance but beyond rounding: max rel "
                      f"{verdict.max_rel_diff:.3g} > {ROUNDING_ULPS} eps32, noise floor 0)")
        return v64, v64.outcome is Outcome.MISMATCH
    if v64.outcome is Outcome.ERROR:   # the plain run itself does not train in float64: nothing is settled
        verdict.detail += f"; float64 rerun: unsettled, the plain run does not train in float64: {v64.detail}"
        return verdict, False
    if verdict.outcome is Outcome.MISSING_GRAD and v64.outcome is Outcome.MISMATCH and not bad:
        v64.detail = (f"float64 rerun: {v64.detail} (in float32 rounding around a zero gradient hid it: "
                      f"{verdict.detail})")
        return v64, True
    verdict.detail += f"; float64 rerun: {v64.outcome.value}: {v64.detail}"
    return verdict, v64.outcome is Outcome.MISMATCH and verdict.outcome is Outcome.MISMATCH


def baseline_defect(base: Trace) -> tuple[Outcome, str] | None:
    """What makes a plain run unusable as a baseline, as (outcome, detail): it raised (`unsupported` when
    that is the library's documented refusal, else `error`), it is not finite from its first step on, or it is
    vacuous (no trainable tensor ever gets a non-zero gradient, so there is nothing to compare). None for a usable
    baseline."""
    if not base.ok:
        return (Outcome.UNSUPPORTED if base.unsupported else Outcome.ERROR), f"baseline {base.error}"
    if not base.trainable:   # e.g. OSF skipping GPT-2's Conv1D layers: every step had nothing to train
        return Outcome.ERROR, "vacuous baseline: nothing is trainable"
    bad = not_finite(base)
    if bad and bad[0] == 0:   # NaN equals NaN in the walk below: such a run would vouch for anything
        return Outcome.ERROR, f"non-finite baseline: {bad[1]}"
    exercised = _nonzero_set(base)
    dead = [n for n in base.trainable if n not in exercised]
    if len(dead) == len(base.trainable):
        return Outcome.ERROR, (f"vacuous baseline: none of the {len(dead)} trainable tensors gets a non-zero "
                               f"gradient in {len(base.losses)} steps")
    return None


def compare(base: Trace | None, replay: Trace | None, cand: Trace, dtype: str = "float32") -> Verdict:
    """`base` None: not run, because the library refused checkpointing itself (`cand` says so). Runs over several
    processes (Trace.ranks) are compared rank by rank (:func:`_across_ranks`)."""
    verdict = _compare(base, replay, cand, dtype)
    if base is not None and base.ranks and cand.ranks and verdict.outcome in WORSE:
        return _across_ranks(verdict, base, replay, cand, dtype)
    return verdict


# what a rank's verdict may make of rank 0's, worst last (the order compare reaches them in, reversed)
WORSE = (Outcome.EQUIVALENT, Outcome.NOT_CHECKPOINTED, Outcome.MISMATCH, Outcome.MISSING_GRAD,
         Outcome.NONDETERMINISTIC)


def _across_ranks(verdict: Verdict, base: Trace, replay: Trace | None, cand: Trace, dtype: str) -> Verdict:
    """A run over several ranks (rank 0's verdict is `verdict`): every other rank's losses, gradients and final
    state against its own baseline, the worst verdict standing (its detail names the rank). A launch keeps its ranks'
    gradients and state equal (DDP averages the gradients; FSDP's are gathered whole): checkpointed ranks that hold
    other gradients or another state than each other where the baseline's do not are said first, "ranks diverge"
    (each rank trains its own rows, so their losses differ by design)."""
    worst, verdicts = verdict, [verdict]
    for r in range(1, len(base.ranks)):
        other = _compare(base.ranks[r], replay.ranks[r] if replay is not None and replay.ranks else None,
                         cand.ranks[r], dtype)
        verdicts.append(other)
        if WORSE.index(other.outcome) > WORSE.index(worst.outcome):
            worst = other
            worst.detail = f"rank {r}: {other.detail}"
    worst.max_abs_diff = max(v.max_abs_diff for v in verdicts)
    worst.max_rel_diff = max(v.max_rel_diff for v in verdicts)
    worst.noise_floor = max(v.noise_floor for v in verdicts)
    atol, rtol = worst.tolerance.get("atol", DEFAULT_TOL["float32"][0]), worst.tolerance.get("rtol", 0.0)
    apart = _ranks_apart(cand, atol, rtol) if worst.outcome is not Outcome.NONDETERMINISTIC else ""
    if apart and not _ranks_apart(base, atol, rtol):
        worst.detail = f"ranks diverge with checkpointing, the baseline's agree ({apart}); {worst.detail}"
        if worst.outcome in (Outcome.EQUIVALENT, Outcome.NOT_CHECKPOINTED):
            worst.outcome = Outcome.MISMATCH
    return worst


def _ranks_apart(t: Trace, atol: float, rtol: float) -> str:
    """Where the ranks of `t` first hold other gradients or another final state than rank 0, or ""."""
    first = t.ranks[0]
    for r, other in enumerate(t.ranks[1:], 1):
        for step, (g0, g1) in enumerate(zip(first.grads, other.grads)):
            for name, g in g0.items():
                h = g1.get(name)
                if (g is None) != (h is None):
                    return f"step {step} grad {name}: {'none' if g is None else 'a gradient'} on rank 0, " \
                           f"{'none' if h is None else 'a gradient'} on rank {r}"
                if g is not None and _beyond(d := _diff(h, g), atol, rtol):
                    return f"step {step} grad {name} differs between rank 0 and rank {r} by {d[0]:.3g}"
        for name, v in first.state.items():
            w = other.state.get(name)
            if w is not None and _beyond(d := _diff(w, v), atol, rtol):
                return f"final state {name} differs between rank 0 and rank {r} by {d[0]:.3g}"
    return ""


def _compare(base: Trace | None, replay: Trace | None, cand: Trace, dtype: str = "float32") -> Verdict:
    def v(outcome, detail, **kw):
        return Verdict(outcome, detail, recomputed_segments=cand.recomputed_segments,
                       saved_bytes={"baseline": base.saved_bytes if base else 0, "candidate": cand.saved_bytes}, **kw)

    defect = baseline_defect(base) if base is not None else None
    if defect:
        return v(*defect)
    if base is None and (cand.ok or not cand.unsupported):
        raise ValueError("a baseline is needed unless the checkpointed run is the library's refusal")
    if not cand.ok:
        if cand.unsupported:
            return v(Outcome.UNSUPPORTED, f"checkpointed {cand.error}")
        return v(Outcome.GC_ERROR, f"checkpointed {cand.error}")

    atol, rtol = DEFAULT_TOL.get(dtype, DEFAULT_TOL["float32"])
    noise = 0.0
    if replay is not None:
        if not replay.ok:
            if OUT_OF_MEMORY.search(replay.error):   # the process's memory, not the model's dice
                return v(Outcome.ERROR, f"baseline replay ran out of memory (the --memory-gb cap, with what the "
                                        f"process held before; run the cell alone to tell): {replay.error}")
            return v(Outcome.NONDETERMINISTIC, f"baseline replay {replay.error}")
        if _nonzero_set(replay) != _nonzero_set(base):
            return v(Outcome.NONDETERMINISTIC, "baseline replay gives gradients to a different set of parameters")
        _, floor = _walk(base, replay, 0.0, 0.0)
        noise = floor.abs
        nd_first, _ = _walk(base, replay, atol, rtol)
        if nd_first.fails:
            return v(Outcome.NONDETERMINISTIC,
                     f"baseline does not reproduce itself: first at {nd_first.where}: max abs {nd_first.abs:.3g} "
                     f"rel {nd_first.rel:.3g} > atol {atol:g} rtol {rtol:g}", max_abs_diff=nd_first.abs,
                     noise_floor=noise, tolerance={"atol": atol, "rtol": rtol})
    atol = max(atol, NOISE_FACTOR * noise)
    tol = {"atol": atol, "rtol": rtol}

    if len(cand.losses) != len(base.losses):
        return v(Outcome.GC_ERROR, f"checkpointed run made {len(cand.losses)} steps, baseline {len(base.losses)}")
    if set(cand.trainable) != set(base.trainable):
        extra = sorted(set(cand.trainable) ^ set(base.trainable))
        return v(Outcome.MISSING_GRAD, f"trainable parameter sets differ ({len(extra)}): first {extra[0]}",
                 tolerance=tol)

    # missing_grad: the checkpointed run lacks what the baseline has, per step and parameter: a non-zero gradient
    # (it gets zero or None), or any gradient (None: cut from the graph). A zero gradient in the baseline is still
    # a gradient: a parameter whose upstream is all zero at random init (e.g. Gemma3's zero-initialised projector
    # in front of its vision tower) shows that it was cut off only this way (and an optimiser with weight decay
    # treats None and zero differently). The other way round (a gradient where the baseline's is zero: Qwen3-VL's
    # other mask) nothing is missing: the values differ, which the walk below measures. Nor is a zero gradient where
    # the baseline's is within the tolerance of zero (rounding around a true zero: InstructBLIP's GLoRA bias on its
    # language projection, 1e-8 beside a largest gradient of 5.4): the walk compares it as a value.
    mb, mc = magnitudes(base), magnitudes(cand)

    def differs(step, name) -> bool:
        g, h = base.grads[step].get(name), cand.grads[step].get(name)
        lost = _has(mb[step].get(name)) and not _has(mc[step].get(name)) and \
            _beyond(_diff(torch.zeros_like(g), g), atol, rtol)
        return lost or (g is not None and h is None)

    for step, (gb, gc) in enumerate(zip(base.grads, cand.grads)):
        for name in base.trainable:
            g, h = gb.get(name), gc.get(name)
            if differs(step, name):
                n_missing = sum(1 for n in base.trainable if differs(step, n))
                got = ("no gradient (None)" if h is None else
                       "a gradient" if _has(mc[step].get(name)) else "a zero gradient")
                want = (f"a gradient (max abs {mb[step][name]:.3g})" if _has(mb[step].get(name)) else
                        "a zero gradient" if g is not None else "none")
                hint = f"; warning: {cand.warnings[0]}" if cand.warnings else ""
                zeroed = all(gc.get(n) is not None for n in base.trainable if differs(step, n))
                return v(Outcome.MISSING_GRAD,
                         f"step {step}: {name} gets {got} with checkpointing, baseline {want} "
                         f"({n_missing} parameters differ at this step){hint}", tolerance=tol, zeroed=zeroed)

    first, worst = _walk(base, cand, atol, rtol)
    if first.fails:
        return v(Outcome.MISMATCH,
                 f"first at {first.where}: max abs {first.abs:.3g} rel {first.rel:.3g} > atol {atol:.3g} "
                 f"rtol {rtol:g} (worst {worst.abs:.3g} at {worst.where})",
                 max_abs_diff=worst.abs, max_rel_diff=worst.fail_rel, tolerance=tol, noise_floor=noise)

    if cand.recomputed_segments == 0 or cand.saved_bytes >= base.saved_bytes:
        return v(Outcome.NOT_CHECKPOINTED,
                 f"checkpointing accepted but {cand.recomputed_segments} segments recomputed and "
                 f"{cand.saved_bytes} bytes saved for backward vs {base.saved_bytes} without",
                 max_abs_diff=worst.abs, tolerance=tol, noise_floor=noise)

    exercised = _nonzero_set(base)
    dead = [n for n in base.trainable if n not in exercised]
    unexercised = (f"; {len(dead)} of {len(base.trainable)} trainable tensors never get a non-zero gradient, "
                   f"not vouched for (first {dead[0]})") if dead else ""
    bad = not_finite(base)
    if bad:
        unexercised += f"; the baseline is not finite from step {bad[0]} ({bad[1]}): not vouched for from there"
    return v(Outcome.EQUIVALENT,
             f"{len(base.losses)} steps, {len(base.trainable)} trainable tensors, {len(base.state)} state entries; "
             f"max abs {worst.abs:.3g} ({worst.where or 'none'}) within atol {atol:.3g} + rtol {rtol:g} x scale; "
             f"{cand.recomputed_segments} segments recomputed; "
             f"saved {cand.saved_bytes}/{base.saved_bytes} bytes{unexercised}",
             max_abs_diff=worst.abs, max_rel_diff=worst.rel, tolerance=tol, noise_floor=noise,
             unexercised=len(dead))


def reproduces(verdict: Verdict) -> bool:
    """Whether a verdict reached without the baseline's replay stands without it: the checkpointed run reproduced
    the baseline bit for bit (every loss, gradient and state entry, the same set of gradients; equivalent, or not
    checkpointed). The replay then adds nothing. The noise floor only widens atol, which a difference of 0 does not
    need; a nondeterministic plain run would have to give two runs, one of them through the recompute, the same
    values to the last bit and a third other ones. Any other verdict is reached again with the replay
    (docs/outcomes.md, "Noise floor and replay")."""
    return verdict.outcome in (Outcome.EQUIVALENT, Outcome.NOT_CHECKPOINTED) and verdict.max_abs_diff == 0.0


def _beyond(diff: tuple[float, float, bool], atol: float, rtol: float) -> bool:
    mabs, scale, always = diff
    return always or mabs > atol + rtol * scale


def magnitudes(t: Trace) -> list[dict[str, float | None]]:
    """Per step, the largest magnitude of each gradient (NaN when it holds a NaN, None when there is none), computed
    once per trace: a baseline is compared with every checkpointed variant of its cell."""
    if t.magnitudes is None:
        t.magnitudes = [{n: None if g is None else float(g.abs().max()) if g.numel() else 0.0
                         for n, g in step.items()} for step in t.grads]
    return t.magnitudes


def _has(magnitude: float | None) -> bool:
    """A gradient with a non-zero entry (or a NaN), by its magnitude."""
    return magnitude is not None and magnitude != 0
