"""The comparator on hand-made traces: every outcome, and the tolerance policy."""
import torch

from harness.compare import DEFAULT_TOL, compare
from harness.outcomes import Outcome
from harness.trace import Trace


def make(scale=1.0, grads=None, saved=1000, segments=4, error=None, unsupported=False, nudge=0.0):
    """Two steps, two trainable tensors; `grads` overrides step-1 gradients by name."""
    w, b = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64), torch.tensor([0.5], dtype=torch.float64)
    steps = []
    for s in range(2):
        g = {"w": w * (s + 1) * scale + nudge, "b": b * (s + 1) * scale}
        if s == 1 and grads:
            g.update(grads)
        steps.append(g)
    return Trace(losses=[1.0 * scale + nudge, 0.9 * scale], grads=steps,
                 state={"w": w * scale, "b": b, "frozen": torch.ones(2, dtype=torch.float64)},
                 trainable=["w", "b"], recomputed_segments=segments, saved_bytes=saved,
                 error=error, error_stage="train" if error else None, unsupported=unsupported)


def base():
    return make(saved=4000, segments=0)


def test_equivalent_identical():
    v = compare(base(), base(), make())
    assert v.outcome is Outcome.EQUIVALENT, v.detail
    assert v.max_abs_diff == 0.0 and v.tolerance == {"atol": 1e-6, "rtol": 1e-5}


def test_equivalent_within_tolerance_but_mismatch_beyond():
    assert compare(base(), base(), make(nudge=1e-8)).outcome is Outcome.EQUIVALENT
    v = compare(base(), base(), make(nudge=1e-3))
    assert v.outcome is Outcome.MISMATCH
    assert "step 0 loss" in v.detail and "atol" in v.detail and v.max_abs_diff >= 1e-3


def test_mismatch_names_first_step_and_parameter():
    v = compare(base(), base(), make(grads={"b": torch.tensor([7.0], dtype=torch.float64)}))
    assert v.outcome is Outcome.MISMATCH
    assert v.detail.startswith("first at step 1 grad b"), v.detail


def test_mismatch_only_in_frozen_state():
    cand = make()
    cand.state["frozen"] = cand.state["frozen"] + 1e-2
    v = compare(base(), base(), cand)
    assert v.outcome is Outcome.MISMATCH and "final state frozen" in v.detail


def test_missing_grad_none_and_zero():
    v = compare(base(), base(), make(grads={"w": None}))
    assert v.outcome is Outcome.MISSING_GRAD and "step 1: w gets no gradient (None)" in v.detail
    v = compare(base(), base(), make(grads={"w": torch.zeros(3, dtype=torch.float64)}))
    assert v.outcome is Outcome.MISSING_GRAD and "a zero gradient" in v.detail
    # a parameter whose baseline gradient is zero (its upstream is zero at init) but which checkpointing cuts
    # from the graph (None): still missing_grad
    zero_w = {"w": torch.zeros(3, dtype=torch.float64)}
    v = compare(make(grads=zero_w), make(grads=zero_w), make(grads={"w": None}))
    assert v.outcome is Outcome.MISSING_GRAD and "w gets no gradient (None) with checkpointing, baseline a zero" in v.detail
    # the other way round nothing is missing: a gradient where the baseline's is zero is a value difference
    v = compare(make(grads=zero_w), make(grads=zero_w), make())
    assert v.outcome is Outcome.MISMATCH and v.detail.startswith("first at step 1 grad w"), v.detail
    # a zero gradient where the baseline's is rounding around zero, within the tolerance, is no loss either
    tiny_w = {"w": torch.tensor([1e-8, -2e-8, 0.0], dtype=torch.float64)}
    tiny = make(grads=tiny_w, saved=4000, segments=0)
    assert compare(tiny, tiny, make(grads=zero_w)).outcome is Outcome.EQUIVALENT
    small = make(grads={"w": torch.tensor([1e-8, -2e-6, 0.0], dtype=torch.float64)}, saved=4000, segments=0)
    v = compare(small, small, make(grads=zero_w))
    assert v.outcome is Outcome.MISSING_GRAD and "baseline a gradient (max abs 2e-06)" in v.detail, v.detail


def test_gc_error_and_error_and_unsupported():
    assert compare(base(), base(), make(error="train: RuntimeError: boom")).outcome is Outcome.GC_ERROR
    b = make(error="build: ValueError: bad config")
    assert compare(b, None, make()).outcome is Outcome.ERROR
    u = make(error="enable_gc: ValueError: X does not support gradient checkpointing", unsupported=True)
    assert compare(base(), base(), u).outcome is Outcome.UNSUPPORTED
    b.unsupported = True
    assert compare(b, None, make()).outcome is Outcome.UNSUPPORTED


def test_not_checkpointed():
    assert compare(base(), base(), make(segments=0)).outcome is Outcome.NOT_CHECKPOINTED
    assert compare(base(), base(), make(saved=4000)).outcome is Outcome.NOT_CHECKPOINTED


def test_nondeterministic_baseline_and_noise_floor():
    v = compare(base(), make(saved=4000, nudge=1e-3), make())
    assert v.outcome is Outcome.NONDETERMINISTIC and "does not reproduce itself" in v.detail
    # a floor within the default tolerance widens atol to NOISE_FACTOR x floor, and it is reported
    v = compare(base(), make(saved=4000, nudge=5e-7), make(nudge=3e-6))
    assert v.outcome is Outcome.EQUIVALENT, v.detail
    assert v.tolerance["atol"] > DEFAULT_TOL["float32"][0] and v.noise_floor > 0


def test_a_replay_that_fails_is_nondeterministic_unless_it_ran_out_of_memory():
    """Phi-4-MM + FRoD on 5.24.0: the replay's attach ran out of the address space the process
    had left; run alone, the cells are equivalent. That is not the baseline disagreeing with itself."""
    v = compare(base(), make(error="train: RuntimeError: index 7 is out of bounds"), make())
    assert v.outcome is Outcome.NONDETERMINISTIC and "baseline replay train" in v.detail
    oom = ("attach: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
           "memory: you tried to allocate 1677557760 bytes. Error code 12 (Cannot allocate memory)")
    v = compare(base(), make(error=oom), make())
    assert v.outcome is Outcome.ERROR and v.detail.startswith("baseline replay ran out of memory") and oom in v.detail


def test_vacuous_baseline_is_error_and_unexercised_is_reported():
    zero = {"w": torch.zeros(3, dtype=torch.float64), "b": torch.zeros(1, dtype=torch.float64)}
    b = base()
    b.grads = [dict(zero), dict(zero)]
    c = make()
    c.grads = [dict(zero), dict(zero)]
    assert compare(b, b, c).outcome is Outcome.ERROR
    # nothing trainable at all (every step skipped: no module holding a trainable tensor ran) is vacuous too
    b, c = base(), make()
    for t in (b, c):
        t.trainable, t.grads = [], [{}, {}]
    v = compare(b, b, c)
    assert v.outcome is Outcome.ERROR and "nothing is trainable" in v.detail, v.detail
    b, c = base(), make()
    for t in (b, c):
        for step in t.grads:
            step["b"] = torch.zeros(1, dtype=torch.float64)
    v = compare(b, b, c)
    assert v.outcome is Outcome.EQUIVALENT and v.unexercised == 1 and "not vouched for" in v.detail


def test_nan_in_candidate_only_is_mismatch():
    v = compare(base(), base(), make(grads={"b": torch.tensor([float("nan")], dtype=torch.float64)}))
    assert v.outcome is Outcome.MISMATCH


def test_a_baseline_not_finite_from_step_0_vouches_for_nothing_and_from_a_later_step_is_flagged():
    """NaN at the same places in both runs is no difference: a baseline NaN from the start (Granite-MoE-SWA's padded
    rows in float64) would call anything equivalent, so it is a baseline defect, like a vacuous one; one that
    diverges later (VITS fully fine-tuned, step 2) is compared up to there and says from where it vouches for
    nothing."""
    nan = float("nan")
    b, c = base(), make()
    b.losses[0] = c.losses[0] = nan
    v = compare(b, b, c)
    assert v.outcome is Outcome.ERROR and v.detail == "non-finite baseline: loss nan at step 0", v.detail
    inf = torch.tensor([1.0, float("inf"), 3.0], dtype=torch.float64)
    b, c = base(), make(grads={"w": inf})
    b.grads[1]["w"] = inf
    v = compare(b, b, c)
    assert v.outcome is Outcome.EQUIVALENT, v.detail
    assert v.detail.endswith("; the baseline is not finite from step 1 (step 1 grad w is not finite): not vouched "
                             "for from there"), v.detail
    v = compare(b, b, make(grads={"w": torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)}))
    assert v.outcome is Outcome.MISMATCH and "step 1 grad w" in v.detail, v.detail   # finite where it is not


def test_tolerance_is_relative_to_the_tensor_scale():
    b, c = base(), make()
    b.grads[0]["w"] = torch.tensor([10.0, 1e-3, 0.0], dtype=torch.float64)
    c.grads[0]["w"] = torch.tensor([10.0, 1e-3 + 5e-5, 0.0], dtype=torch.float64)   # ulps of the scale 10
    assert compare(b, b, c).outcome is Outcome.EQUIVALENT
    c = make()   # a trace is not changed after its run: the comparator keeps what it computed of it
    c.grads[0]["w"] = torch.tensor([10.0, 1e-3 + 5e-3, 0.0], dtype=torch.float64)   # 5e-4 of the scale
    v = compare(b, b, c)
    assert v.outcome is Outcome.MISMATCH and "step 0 grad w" in v.detail


def test_the_replay_runs_only_where_the_checkpointed_run_differs():
    """The runner replays a baseline only when a checkpointed run is not it bit for bit (compare.reproduces): a
    bit-exact cell costs two trainings, any difference three, and a plain run that does not reproduce itself is
    still `nondeterministic` (it cannot give the checkpointed run its values to the last bit and the replay others)."""
    from harness.cells import Cell
    from harness.compare import reproduces
    from harness.run import Runner

    assert reproduces(compare(base(), None, make()))
    assert reproduces(compare(base(), None, make(segments=0)))          # not_checkpointed, values equal
    for differs in (make(nudge=1e-9), make(nudge=1e-3), make(grads={"w": None}), make(error="train: boom")):
        assert not reproduces(compare(base(), None, differs))

    def runner_of(cand, replay):
        plain = iter([base(), replay])
        runs = []

        def train(cell, gc_mode=None, dtype=None, cache=True):
            runs.append(gc_mode)
            return cand if gc_mode else next(plain)
        r = Runner()
        r._train = train
        return r, runs

    cells = [Cell("full", "bert", "full", mode, "masked", "gc_first", "seq_cls") for mode in ("non_reentrant", "reentrant")]
    r, runs = runner_of(make(), None)
    assert [r.run_cell(c)["outcome"] for c in cells] == ["equivalent"] * 2
    assert runs == ["non_reentrant", None, "reentrant"]                  # one baseline, no replay
    r, runs = runner_of(make(nudge=1e-9), base())
    rec = [r.run_cell(c) for c in cells]
    assert [x["outcome"] for x in rec] == ["equivalent"] * 2 and rec[0]["max_abs_diff"] > 0
    assert runs == ["non_reentrant", None, None, "reentrant"]            # the replay once, shared
    r, runs = runner_of(make(nudge=1e-9), make(saved=4000, nudge=1e-3))
    assert r.run_cell(cells[0])["outcome"] == "nondeterministic"
