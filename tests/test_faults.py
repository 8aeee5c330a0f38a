"""Fault injection: the harness must see each kind of checkpointing bug it claims to classify.

A broken checkpoint function is patched into transformers (where `gradient_checkpointing_enable`
takes it from) and a tiny BERT is trained through the real runner, plain vs checkpointed.
"""
import dataclasses
import time

import pytest
import torch
import transformers.modeling_utils as mu
from torch.utils.checkpoint import checkpoint as real_checkpoint

from conftest import zoo
from harness import backends
from harness.archs.base import ArchSpec, build_model
from harness.cells import Cell
from harness.run import Options, Runner
from harness.train import Launched

BERT = ArchSpec("bert", tasks=("seq_cls",))


def run(arch=BERT, gc_mode="non_reentrant", backend="full", method="full", timeout=120.0, inputs="masked"):
    cell = Cell(backend, arch.name, method, gc_mode, inputs, "gc_first", arch.primary_task)
    return Runner(Options(timeout=timeout), archs={arch.name: arch}).run_cell(cell)


def _detach(out):
    if isinstance(out, torch.Tensor):
        return out.detach()
    if isinstance(out, tuple):
        return tuple(_detach(o) for o in out)
    return out


@pytest.mark.parametrize("gc_mode", ["non_reentrant", "reentrant"])
def test_healthy_checkpoint_is_equivalent(gc_mode):
    r = run(gc_mode=gc_mode)
    assert r["outcome"] == "equivalent", r["detail"]
    assert r["recomputed_segments"] > 0 and r["saved_bytes"]["candidate"] < r["saved_bytes"]["baseline"]


@pytest.mark.skipif(not backends.base.extra_gc_modes(), reason="transformers before activation_checkpointing_enable's "
                                                                "every_n_layers (the mode does not exist)")
def test_every_second_layer_is_checkpointed_in_that_mode():
    every, each = run(gc_mode="non_reentrant_every2"), run(gc_mode="non_reentrant")
    assert every["outcome"] == "equivalent", every["detail"]
    assert 0 < 2 * every["recomputed_segments"] == each["recomputed_segments"]


@pytest.mark.parametrize("gc_mode", ["non_reentrant", "reentrant"])
def test_rng_not_restored_is_mismatch(monkeypatch, gc_mode):
    def no_rng(fn, *args, **kw):
        return real_checkpoint(fn, *args, **{**kw, "preserve_rng_state": False})
    monkeypatch.setattr(mu, "checkpoint", no_rng)
    r = run(gc_mode=gc_mode)
    assert r["outcome"] == "mismatch", r["detail"]
    assert "grad" in r["detail"] or "loss" in r["detail"]
    assert r["cache_switch"] is False and "not the cache switch" in r["detail"]   # the recompute's fault


def test_cache_triage_names_the_cache_switch(monkeypatch):
    """Checkpointing also turns use_cache off in training. A model that computes otherwise with its cache (here a
    cache returning skewed keys; really: Zamba2's pad mask, Qwen3-VL's mask) trains differently though the
    recompute is exact; the triage's plain run with use_cache off trains as the checkpointed one and says so."""
    from transformers.cache_utils import DynamicCache

    update = DynamicCache.update   # its own (4.48) or Cache's (4.57, 5.x)

    def skewed(self, key_states, value_states, *args, **kw):
        keys, values = update(self, key_states, value_states, *args, **kw)
        return keys * 1.5, values
    monkeypatch.setattr(DynamicCache, "update", skewed)
    r = run(arch=ArchSpec("llama", tasks=("causal_lm",)))
    assert r["outcome"] == "mismatch" and r["cache_switch"] is True, r["detail"]
    assert "cause: the cache switch" in r["detail"]


def test_dropout_off_hides_the_rng_fault(monkeypatch):
    """Why the harness keeps dropout on: with p=0 the same broken checkpoint looks equivalent."""
    def no_rng(fn, *args, **kw):
        return real_checkpoint(fn, *args, **{**kw, "preserve_rng_state": False})
    monkeypatch.setattr(mu, "checkpoint", no_rng)
    off = {k: 0.0 for k in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout")}
    r = run(arch=ArchSpec("bert", tasks=("seq_cls",), overrides=off))
    assert r["outcome"] == "equivalent", r["detail"]


@pytest.mark.parametrize("gc_mode", ["non_reentrant", "reentrant"])
def test_output_cut_from_graph_is_missing_grad_or_gc_error(monkeypatch, gc_mode):
    monkeypatch.setattr(mu, "checkpoint", lambda fn, *a, **kw: _detach(real_checkpoint(fn, *a, **kw)))
    r = run(gc_mode=gc_mode)
    assert r["outcome"] in ("missing_grad", "gc_error"), r["detail"]


def test_checkpoint_that_only_calls_is_not_checkpointed(monkeypatch):
    monkeypatch.setattr(mu, "checkpoint", lambda fn, *a, **kw: fn(*a))
    r = run()
    assert r["outcome"] == "not_checkpointed", r["detail"]
    assert r["recomputed_segments"] == 0


def _bert_with(hook_factory):
    def build(task):
        model = build_model(BERT, task)
        hook_factory(model)
        return model
    return build


def test_nondeterministic_model():
    def noisy(model):
        gen = torch.Generator().manual_seed(time.time_ns() % 2**31)  # not the global, seeded RNG
        model.bert.embeddings.register_forward_hook(
            lambda m, i, out: out + 1e-2 * torch.randn(out.shape, generator=gen))
    r = run(arch=ArchSpec("bert", tasks=("seq_cls",), build=_bert_with(noisy)))
    assert r["outcome"] == "nondeterministic", r["detail"]


def _raise_when(predicate):
    def install(model):
        def hook(module, args):
            if predicate(model):
                raise RuntimeError("injected failure")
        model.bert.encoder.layer[0].register_forward_pre_hook(hook)
    return install


def test_raise_only_when_checkpointed_is_gc_error_and_always_is_error_and_run_goes_on():
    gc_only = ArchSpec("bert", tasks=("seq_cls",), build=_bert_with(_raise_when(lambda m: m.is_gradient_checkpointing)))
    always = ArchSpec("bert", tasks=("seq_cls",), build=_bert_with(_raise_when(lambda m: True)))
    results = [run(arch=gc_only), run(arch=always), run()]   # the third cell still runs
    assert [r["outcome"] for r in results] == ["gc_error", "error", "equivalent"], [r["detail"] for r in results]
    assert "injected failure" in results[0]["detail"] and results[0]["detail"].startswith("checkpointed train")


def test_hanging_cell_is_stopped_and_reported():
    def slow(model):
        def hook(module, args):
            if model.is_gradient_checkpointing:
                time.sleep(30)
        model.bert.encoder.layer[0].register_forward_pre_hook(hook)
    t0 = time.monotonic()
    r = run(arch=ArchSpec("bert", tasks=("seq_cls",), build=_bert_with(slow)), timeout=3.0)
    assert time.monotonic() - t0 < 25
    assert r["outcome"] == "gc_error" and "CellTimeout" in r["detail"], r["detail"]


def test_library_refusal_is_unsupported():
    if backends.get("adapters").missing:
        pytest.skip(backends.get("adapters").missing)
    r = run(backend="adapters", method="lora", gc_mode="reentrant")
    assert r["outcome"] == "unsupported" and "use_reentrant=True is not supported" in r["detail"]


def test_small_real_difference_survives_the_float64_rerun(monkeypatch):
    """A mismatch too small to be obvious in float32 is rerun in float64; a real one stays a mismatch."""
    def scaled(fn, *a, **kw):
        out = real_checkpoint(fn, *a, **kw)
        return (out[0] * (1 + 1e-4), *out[1:]) if isinstance(out, tuple) else out * (1 + 1e-4)
    monkeypatch.setattr(mu, "checkpoint", scaled)
    r = run()
    assert r["outcome"] == "mismatch", r["detail"]
    assert "float64 rerun: mismatch" in r["detail"]


def _float32_only(fn, *a, **kw):
    """A checkpoint that skews its output in float32 only: a difference float64 does not show."""
    out = real_checkpoint(fn, *a, **kw)
    first = out[0] if isinstance(out, tuple) else out
    if first.dtype != torch.float32:
        return out
    return (out[0] * 1.1, *out[1:]) if isinstance(out, tuple) else out * 1.1


def test_large_float32_only_difference_is_settled_by_float64(monkeypatch):
    """Training amplifies rounding without bound (a ReLU flip, a chaotic large step), so a float32 mismatch
    of any size is rerun in float64: one that float64 does not show is rounding, however large in float32."""
    monkeypatch.setattr(mu, "checkpoint", _float32_only)
    r = run()
    assert r["outcome"] == "equivalent", r["detail"]
    assert "the float64 rerun agrees" in r["detail"] and r["max_rel_diff"] > 1e-2, r


def test_the_float64_rerun_feeds_float_inputs_in_float64(monkeypatch):
    """A time-series model takes float values it does not cast (so do many audio and vision models): the rerun
    casts them as a user of a float64 model does, or it fails ('expected scalar type Double but found Float')
    and leaves the float32 difference unsettled."""
    ts = zoo("time_series_transformer")
    monkeypatch.setattr(mu, "checkpoint", _float32_only)
    r = run(arch=ts, inputs=ts.inputs[0])
    assert r["outcome"] == "equivalent" and "the float64 rerun agrees" in r["detail"], r["detail"]


def test_recompute_in_a_loop_is_stopped_as_gc_error(monkeypatch):
    """A checkpoint whose backward re-runs its layer over and over (WavLM's real bug recurses without end) is
    stopped by the runaway guard, fast, as gc_error."""
    def looping(fn, *a, **kw):
        def again(*x, **k):   # reentrant: the forward runs under no_grad, the recompute under grad
            return fn(*x, **k) if not torch.is_grad_enabled() else [fn(*x, **k) for _ in range(50)][-1]
        return real_checkpoint(again, *a, **kw)

    monkeypatch.setattr(mu, "checkpoint", looping)
    t0 = time.monotonic()
    r = run(gc_mode="reentrant")
    assert r["outcome"] == "gc_error" and "runaway recomputation" in r["detail"], r["detail"]
    assert time.monotonic() - t0 < 20


class _DroppableRecipe(Launched):
    """A frozen encoder whose one trainable layer LayerDrop skips at step 1; checkpointed reentrantly (the
    input does not require grad, so a reentrant checkpoint that ran the layer loses the graph)."""
    dtype = "float32"
    training = "loop"

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.frozen = torch.nn.Linear(4, 4).requires_grad_(False)
            self.layer = torch.nn.Linear(4, 4)
            self.gc = False
            self.drop_at = 1

        def forward(self, x, step):
            h = self.frozen(x)
            if step != self.drop_at:
                h = real_checkpoint(self.layer, h, use_reentrant=True) if self.gc else self.layer(h)
            return h.pow(2).mean()

    def build(self):
        return self.Model()

    def enable_gc(self, model):
        model.gc = True

    def attach(self, model):
        return model

    def batch(self, model, step):
        return {"x": torch.randn(2, 4, generator=torch.Generator().manual_seed(step)), "step": step}

    def loss(self, output):
        return output

    def is_unsupported(self, exc):
        return False


def test_a_step_where_nothing_trainable_runs_is_skipped_not_an_error_but_a_lost_graph_still_raises():
    """LayerDrop can drop every adapted layer of a tiny model at one step (BigBird-Pegasus): that step has
    nothing to train in either run. A checkpointed forward that did run the layer and lost the graph is the
    classic reentrant bug and must still fail."""
    from harness.train import train_recipe

    kw = dict(order="gc_first", steps=3, seed=0, lr=0.1, timeout=60)
    plain = train_recipe(_DroppableRecipe(), gc=False, **kw)
    assert plain.ok, plain.error
    assert [g["layer.weight"] is None for g in plain.grads] == [False, True, False]
    broken = train_recipe(_DroppableRecipe(), gc=True, **kw)
    assert not broken.ok and "does not require grad" in broken.error and broken.error_stage == "train"


def test_a_forward_that_never_reaches_backward_leaves_no_graph_behind():
    """The probe's saved-tensor hook must not keep an op's own output: its grad_fn owns the saved slot, a cycle
    through C++ that gc cannot see, so a run failing mid-forward leaked its whole graph (NeMo SpeechLM + BOFT:
    6.3 GB held, every later run of the process out of memory)."""
    import gc
    import weakref

    from harness.probe import Probe

    w = torch.randn(4, 4, requires_grad=True)
    with Probe() as probe, probe.saving():
        y = (torch.randn(2, 4) @ w).exp()   # exp saves its own output
    ref = weakref.ref(y)
    del y
    gc.collect()
    assert ref() is None


def test_final_state_keeps_a_shared_tensor_once_and_gradients_are_copied():
    """A state dict lists a shared tensor under every key that uses it (RandLoRA's random bases: 9 GB of float64
    copies for the tiny MiniCPM-o); the final state keeps the trained model's tensors themselves, so one per distinct
    tensor. A step's gradients are copies: what the optimizer or a zero_grad does to .grad afterwards leaves them."""
    from harness.train import _final, _grads

    shared = torch.randn(4, 4)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    for m in model:
        m.register_buffer("basis", shared)
    state = {k: _final(v) for k, v in model.state_dict().items()}
    assert state["0.basis"].data_ptr() == state["1.basis"].data_ptr() == shared.data_ptr()
    assert state["0.weight"].data_ptr() == model[0].weight.data_ptr() and not state["0.weight"].requires_grad
    model(torch.randn(2, 4)).sum().backward()
    grads = _grads(list(model.named_parameters()))
    before = grads["0.weight"].clone()
    model.zero_grad(set_to_none=False)
    assert torch.equal(grads["0.weight"], before) and before.abs().max() > 0


def test_saved_bytes_count_the_memory_held_not_each_saved_tensor():
    """FRoD on RoCBert came out not_checkpointed: the probe counted its frozen basis (a buffer, free to save) and its
    sparse matrix (dense size, once per use) on every save. Now: the model's own tensors are free, a storage counts
    once per forward, a sparse tensor at its indices and values."""
    from harness.probe import Probe

    lin = torch.nn.Linear(8, 8, bias=False)
    x = torch.randn(4, 8, requires_grad=True)
    with Probe() as probe:
        probe.step(lin)
        with probe.saving():
            y = lin(x)            # saves x (for the weight's gradient) and the weight (the model's own)
            z = x * x             # x again
    assert probe.saved == x.numel() * 4
    assert probe.saved == 128 and y.requires_grad and z.requires_grad

    s = torch.eye(100).to_sparse()            # 100 non-zeros of 10,000
    w = torch.randn(100, 2, requires_grad=True)
    with Probe() as probe:
        probe.step(torch.nn.Module())
        with probe.saving():
            out = torch.sparse.mm(s, w)
    held = s._indices().untyped_storage().nbytes() + s._values().untyped_storage().nbytes()
    assert probe.saved == held < s.to_dense().numel() * 4 and out.requires_grad


def test_saved_bytes_count_a_saved_tensor_freed_before_backward_and_its_successor():
    """A saved tensor of a graph branch the loss never reaches is freed in the forward; its address goes to the next
    allocation. Counted by address, a later saved tensor there went uncounted: NeMo's streaming ASR "saved" 11.9 to
    16.8 MB run to run, and its checkpointed runs looked not checkpointed by chance. Every saved tensor counts."""
    from harness.probe import Probe

    x = torch.randn(64, 1024, requires_grad=True)     # 256 KiB per exp output
    for _ in range(3):
        with Probe() as probe:
            probe.step(torch.nn.Module())
            with probe.saving():
                for _ in range(4):
                    (x * 2).exp()                      # exp saves its output; the branch is dropped at once
                y = (x * 3).exp().sum()
        assert probe.saved == 5 * x.numel() * 4 and y.requires_grad


def test_cache_triage_names_the_cache_switch_of_a_failure(monkeypatch):
    """The same for a failure: a layer that raises without its cache (NemotronH's no-cache kernel branch reads
    an attribute LN tuning's wrapper lacks) fails only when checkpointed, and also in a plain run without cache."""
    import inspect

    from transformers.models.llama import modeling_llama

    forward = modeling_llama.LlamaDecoderLayer.forward
    signature = inspect.signature(forward)

    def needs_cache(self, *args, **kw):
        given = signature.bind(self, *args, **kw).arguments   # positional under 4.48's checkpointing, else keywords
        given.update(given.pop("kwargs", {}))
        cache = [given.get(k) for k in ("past_key_value", "past_key_values", "cache")]   # 4.48, 4.57, 5.x
        if self.training and not any(c is not None for c in cache):
            raise AttributeError("no cache: the other branch")
        return forward(self, *args, **kw)
    monkeypatch.setattr(modeling_llama.LlamaDecoderLayer, "forward", needs_cache)
    r = run(arch=ArchSpec("llama", tasks=("causal_lm",)))
    assert r["outcome"] == "gc_error" and r["cache_switch"] is True, r["detail"]


def test_a_float64_rerun_whose_baseline_is_not_finite_settles_nothing():
    """Granite-MoE-SWA's padded rows go NaN in float64 only: NaN agreeing with NaN called five models' real PVeRA
    generator mismatches 'float32 rounding only'. A float64 rerun settles a mismatch only from a finite baseline."""
    from harness.compare import compare
    from harness.trace import Trace

    def trace(*losses, checkpointed=False):
        grads = [{"w": torch.tensor([loss, 1.0], dtype=torch.float64)} for loss in losses]
        return Trace(losses=list(losses), grads=grads, state=dict(grads[-1]), trainable=["w"],
                     recomputed_segments=2 if checkpointed else 0, saved_bytes=50 if checkpointed else 100)

    cell = Cell("full", "bert", "full", "non_reentrant", "masked", "gc_first", "seq_cls")
    nan = float("nan")
    for float64_losses, says in [((nan, nan), "float64 rerun: unsettled, the plain run does not train in float64: "
                                              "non-finite baseline: loss nan at step 0"),
                                 ((1.0, nan), "float64 rerun: unsettled, its baseline is not finite from step 1 "
                                              "(loss nan at step 1)")]:
        runner = Runner(Options())
        runner._train = lambda cell, gc_mode=None, dtype=None, cache=True: trace(
            *float64_losses, checkpointed=gc_mode is not None)   # both float64 runs agree, NaN and all
        float32 = compare(trace(1.0, 1.0), trace(1.0, 1.0), trace(1.0, 1.1, checkpointed=True))
        assert float32.outcome.value == "mismatch"
        verdict, _ = runner._confirm_in_float64(cell, float32)
        assert verdict.outcome.value == "mismatch" and says in verdict.detail, verdict.detail


def test_a_gradient_zeroed_by_rounding_is_settled_in_float64_and_a_cut_one_is_not():
    """Canary + GLoRA behind a BatchNorm (5.24.0): the baseline's gradient is rounding around a true zero, 1.9e-5,
    and exactly 0 with checkpointing; float64 loses no gradient. A float32 zero where the baseline's is beyond the
    tolerance is rerun in float64 like a mismatch; a gradient cut from the graph (None) is no rounding."""
    from harness.compare import compare
    from harness.trace import Trace

    def trace(w, v=(1.0, 2.0), checkpointed=False):
        return Trace(losses=[1.0], grads=[{"w": w, "v": torch.tensor(v)}], state={"v": torch.ones(2)},
                     trainable=["w", "v"], recomputed_segments=2 if checkpointed else 0,
                     saved_bytes=50 if checkpointed else 100)

    cell = Cell("full", "bert", "full", "non_reentrant", "masked", "gc_first", "seq_cls")
    base = trace(torch.tensor([1.9e-5, 0.0]))
    float32 = compare(base, base, trace(torch.zeros(2), checkpointed=True))
    assert float32.outcome.value == "missing_grad" and float32.zeroed
    zero = torch.zeros(2)
    for (base64, cand64), outcome, says in [
            ((trace(zero), trace(zero, checkpointed=True)), "equivalent",
             "float32 rounding only: step 0: w gets a zero gradient with checkpointing"),
            ((trace(zero), trace(zero, (1.0, 2.5), checkpointed=True)), "mismatch",
             "float64 rerun: first at step 0 grad v"),
            ((trace(torch.tensor([1.0, 0.0])), trace(zero, checkpointed=True)), "missing_grad",
             "; float64 rerun: missing_grad: step 0: w gets a zero gradient")]:
        runner = Runner(Options())
        runner._train = lambda cell, gc_mode=None, dtype=None, cache=True: cand64 if gc_mode else base64
        verdict, c64 = runner._confirm_in_float64(cell, dataclasses.replace(float32))
        assert verdict.outcome.value == outcome and says in verdict.detail, verdict.detail
        assert (c64 is cand64) == (outcome == "mismatch")
    cut = compare(base, base, trace(None, checkpointed=True))
    assert cut.outcome.value == "missing_grad" and not cut.zeroed
    runner._train = None   # not called
    assert runner._confirm_in_float64(cell, cut) == (cut, None)
