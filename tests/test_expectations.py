"""The known failures name only what exists: every arch, method and trait an entry names is one the harness knows
(in some release's zoo table or the hand-tuned registry; in some backend's methods; in MethodSpec's traits), every
field it matches is a cell field, and a trait pattern matches the methods that carry the trait and no other."""
import fnmatch
import importlib

import pytest

from harness import AXES, backends, tables
from harness.archs.registry import ARCHS
from harness.archs.base import ARCH_TRAITS
from harness.backends.base import TRAITS
from harness.expectations import EXPECTATIONS, ORDER, Expect, expected, with_traits
from harness.expectations.entry import TRAIT
from harness.outcomes import Outcome

FIELDS = set(AXES) | {"modality"}


def known_archs() -> set[str]:
    names = set(ARCHS)
    for t in tables.names("zoo"):
        names |= set(tables.load(t).TABLE)
    return names


def all_methods() -> dict[str, set[str]]:
    """Every method of every backend, whether or not its library is installed: name -> traits."""
    out: dict[str, set[str]] = {}
    for b in backends.BACKEND_NAMES:
        for name, spec in importlib.import_module(f"harness.backends.{b}").METHODS.items():
            out.setdefault(name, set()).update(spec.traits)
    return out


def patterns(entry: Expect, axis: str) -> list[str]:
    out = []
    for where in (entry.match, entry.unless):
        value = where.get(axis, ())
        out.extend((value,) if isinstance(value, str) else value)
    return out


def unknown(names: list[str], known: set[str]) -> list[str]:
    return [p for p in names if not p.startswith(TRAIT) and not fnmatch.filter(known, p)]


def test_every_entry_matches_cell_fields_only():
    bad = [(e.reason[:60], k) for e in EXPECTATIONS for k in (*e.match, *e.unless) if k not in FIELDS]
    assert not bad, bad


def test_every_arch_an_entry_names_exists_in_some_release():
    archs = known_archs()
    bad = {p for e in EXPECTATIONS for p in unknown(patterns(e, "arch"), archs)}
    assert not bad, f"entries name archs no release table or registry has: {sorted(bad)}"


def test_every_method_and_trait_an_entry_names_exists():
    methods = all_methods()
    bad = {p for e in EXPECTATIONS for p in unknown(patterns(e, "method"), set(methods))}
    assert not bad, f"entries name methods no backend has: {sorted(bad)}"
    named = {p[len(TRAIT):] for e in EXPECTATIONS for p in patterns(e, "method") if p.startswith(TRAIT)}
    assert named <= set(TRAITS), named - set(TRAITS)
    carried = set().union(*methods.values())
    assert named <= carried, f"traits no method carries: {named - carried}"
    on_archs = {p[len(TRAIT):] for e in EXPECTATIONS for p in patterns(e, "arch") if p.startswith(TRAIT)}
    assert on_archs <= set(ARCH_TRAITS), on_archs - set(ARCH_TRAITS)
    misplaced = [e.reason[:60] for e in EXPECTATIONS for axis in FIELDS - {"method", "arch"}
                 if any(p.startswith(TRAIT) for p in patterns(e, axis))]
    assert not misplaced, f"a trait is a method's or an arch's: {misplaced}"


def test_an_arch_trait_is_read_from_the_installed_source():
    from packaging.version import Version

    from harness.archs.base import arch_traits
    from harness.versions import installed

    assert arch_traits("no_such_type") == frozenset()
    assert "routes_experts" in arch_traits("mixtral") and "routes_experts" not in arch_traits("llama")
    # Llama records its attentions with hooks from 4.56 on (4.48.3 returns them through its layers)
    tf = Version(installed("transformers"))
    assert ("records_attentions" in arch_traits("llama")) == (tf >= Version("4.56"))
    # what the reentrant aux_outputs cells showed over the zoo: LLaVA returns its language model's (Llama's) recorded
    # attentions; Gemma 2 on 4.57.6 declares them recorded but collects them from its layers' outputs itself
    assert ("records_attentions" in arch_traits("llava")) == (tf >= Version("4.56"))
    if Version("4.56") <= tf < Version("5"):
        assert "records_attentions" not in arch_traits("gemma2")
    if tf >= Version("5.24"):   # EXAONE is a LlamaModel there; Data2Vec's text model has a file named otherwise
        assert {"exaone", "data2vec-text"} == {m for m in ("exaone", "data2vec-text", "no_such_type")
                                               if "records_attentions" in arch_traits(m)}


def test_the_check_of_names_catches_a_misspelt_arch():
    assert unknown(["lama", "llama", "qwen3*", "trait:weight"], known_archs()) == ["lama"]


@pytest.mark.parametrize("method, want", [("lora", Outcome.GC_ERROR), ("ln_tuning", Outcome.EQUIVALENT),
                                          ("boft", Outcome.EQUIVALENT)])
def test_a_trait_pattern_matches_the_methods_that_carry_it(method, want):
    entry = Expect({"backend": "peft", "method": "trait:input_grad"}, Outcome.GC_ERROR, "x", "https://x",
                   unless={"method": "boft"})
    fields = dict(backend="peft", arch="bert", method=method, gc_mode="reentrant", inputs="masked",
                  order="gc_first", task="seq_cls", modality="text")
    assert expected(fields, [entry], calibrated=False)[0] == (want,)


def test_unless_carves_out_the_cells_that_match_all_its_axes():
    """`unless` matches as `match` does: the offload refusal leaves out DeBERTa under autocast (its plain run fails
    first), not every autocast cell (Wav2Vec2-Conformer under autocast and offload was expected a BatchNorm
    mismatch although the offload refuses it)."""
    entry = Expect({"gc_mode": "non_reentrant_offload"}, Outcome.GC_ERROR, "x", "https://x",
                   unless={"arch": "deberta", "recipe": "autocast"})
    fields = dict(backend="full", arch="wav2vec2-conformer", method="full", gc_mode="non_reentrant_offload",
                  inputs="unmasked", order="gc_first", task="seq_cls", modality="audio", recipe="autocast")
    assert expected(fields, [entry], calibrated=False)[0] == (Outcome.GC_ERROR,)
    assert expected({**fields, "arch": "deberta"}, [entry], calibrated=False)[0] == (Outcome.EQUIVALENT,)
    assert expected({**fields, "arch": "deberta", "recipe": "loop"}, [entry], calibrated=False)[0] == (Outcome.GC_ERROR,)


def test_adapters_methods_of_the_same_name_do_not_carry_peft_traits():
    fields = dict(backend="adapters", arch="bert", method="lora", gc_mode="non_reentrant", inputs="masked",
                  order="gc_first", task="seq_cls", modality="text")
    entry = Expect({"method": "trait:weight"}, Outcome.GC_ERROR, "x", "https://x")
    assert expected(fields, [entry], calibrated=False)[0] == (Outcome.EQUIVALENT,)


def test_precedence_is_the_stated_order_of_the_entry_files():
    assert EXPECTATIONS == [e for module in ORDER for e in module.ENTRIES]
    assert [m.__name__.rsplit(".", 1)[-1] for m in ORDER] == [
        "first", "refusals", "plain_failures", "quantized", "findings_launch", "findings_models", "findings_general",
        "findings_recipes"]


def test_qlora_takes_peft_s_entries_of_the_same_cell_unquantized():
    """A qlora cell no entry naming qlora explains is what peft's entries say of the same cell on the unquantized
    model: prepare_kbit as gc_first where it hooks the input embeddings as get_peft_model does there (reentrant),
    else as adapter_first (nothing hooks them on transformers 4); unset as reentrant (the libraries' default); an
    8-bit variant as its method; an entry naming qlora wins."""
    from harness import backends
    from harness.expectations import PEFT_FINDINGS
    from harness.versions import installed

    if backends.get("qlora").missing:
        pytest.skip(backends.get("qlora").missing)
    cell = {"backend": "qlora", "arch": "llama", "method": "lora", "inputs": "masked", "task": "causal_lm",
            "recipe": "loop", "modality": "text"}
    for (gc_mode, order), (peft_gc, peft_order) in {
            ("unset", "adapter_first"): ("reentrant", "adapter_first"),
            ("reentrant", "prepare_kbit"): ("reentrant", "gc_first"),
            ("non_reentrant", "prepare_kbit"): ("non_reentrant", "adapter_first")}.items():
        for method in ("lora", "lora_8bit"):
            want, why = expected({**cell, "method": method, "gc_mode": gc_mode, "order": order}, calibrated=False)
            peft_want, peft_why = expected({**cell, "backend": "peft", "gc_mode": peft_gc, "order": peft_order},
                                           PEFT_FINDINGS, calibrated=False)
            assert want == peft_want, (gc_mode, order, method)
            assert (why is None) == (peft_why is None)
            if why is not None:
                assert peft_why.reason in why.reason
    if installed("transformers").startswith("4."):
        # peft's adapter_first reentrant loses the layers' gradients on transformers 4: borrowed
        assert Outcome.MISSING_GRAD in expected({**cell, "gc_mode": "unset", "order": "adapter_first"},
                                                calibrated=False)[0]
    # CLIP, which has no input embeddings to hook: peft's gc_first raises in enable_input_require_grads; the
    # non-reentrant prepare_kbit never calls it and trains
    clip = {**cell, "arch": "clip", "task": "contrastive", "gc_mode": "non_reentrant", "order": "prepare_kbit"}
    assert expected(clip, calibrated=False)[0] == (Outcome.EQUIVALENT,)
    # qlora's own entry (prefix tuning's device map on the CPU; on 5, peft's refusal) wins over what peft says
    want, why = expected({**cell, "method": "prefix_tuning", "gc_mode": "non_reentrant", "order": "prepare_kbit"},
                         calibrated=False)
    if installed("transformers").startswith("4."):
        assert want == (Outcome.ERROR,) and "hf_device_map" in why.reason
    else:
        assert want == (Outcome.UNSUPPORTED,) and why.match.get("backend") == "qlora"


def test_transformers_peft_takes_peft_s_entries_of_the_other_order():
    """transformers' gradient_checkpointing_enable calls enable_input_require_grads once an adapter is loaded, as
    get_peft_model does on a model that already checkpoints: a transformers_peft plain-loop cell no entry naming its
    backend explains is what peft's entries (and the arch-wide ones, in their order) say of the same cell in the other
    order -- peft's carve-outs included (a trained projection in front of the layers), peft's own plain failures and
    refusals not (often its task wrapper's)."""
    from harness.expectations import PEFT_FINDINGS

    cell = {"backend": "transformers_peft", "arch": "bart", "method": "lora", "gc_mode": "reentrant",
            "inputs": "masked", "task": "seq_cls", "recipe": "loop", "modality": "text"}
    took = []
    for arch in ("bart", "bert", "rembert", "fnet", "flava", "llava", "albert"):
        for order, other in (("gc_first", "adapter_first"), ("adapter_first", "gc_first")):
            fields = {**cell, "arch": arch, "order": order}
            want, why = expected(fields, calibrated=False)
            peft_want, peft_why = expected({**fields, "backend": "peft", "order": other}, PEFT_FINDINGS,
                                           calibrated=False)
            own = [e for e in EXPECTATIONS if "transformers_peft" in str(e.match.get("backend"))
                   and e.applies(with_traits(fields))]
            if own:   # an entry naming the backend wins
                assert why is own[0]
            elif peft_why is not None and "peft" in str(peft_why.match.get("backend")):
                assert want == peft_want and why.reason.startswith(f"as peft's {other}") and peft_why.reason in why.reason
                took.append((arch, order))
            elif peft_why is not None:   # an arch-wide entry, as it stands
                assert why is peft_why
            else:
                assert want == (Outcome.EQUIVALENT,) and why is None
    from harness.versions import installed

    if installed("transformers").startswith("4.57"):   # BART's encoder is not hooked on 4.x (fixed in 5.0.0)
        assert ("bart", "adapter_first") in took and ("bart", "gc_first") in took
        # reentrant gc_first: the adapters inside the layers lose their gradients, unless a trained projection in
        # front of them (RemBERT's, FNet's) makes the layers' input require grad
        assert expected({**cell, "arch": "bert", "order": "gc_first"}, calibrated=False)[0] == (
            Outcome.MISSING_GRAD, Outcome.GC_ERROR, Outcome.MISMATCH)
        for arch in ("rembert", "fnet"):
            assert expected({**cell, "arch": arch, "order": "gc_first"}, calibrated=False)[0] == (Outcome.EQUIVALENT,)
        # FNet's plain run fails under peft's task wrapper (an entry of peft's plain failures): not borrowed
        assert expected({**cell, "backend": "peft", "arch": "fnet", "order": "gc_first"}, calibrated=False)[0] == (
            Outcome.ERROR,)
        # an arch-wide entry holds as it stands: ALBERT's refusal is no input-grad hook
        assert not expected({**cell, "arch": "albert", "order": "gc_first"}, calibrated=False)[1].reason.startswith(
            "as peft's")
        # FLAVA has no get_input_embeddings: enabled after add_adapter, checkpointing raises
        assert expected({**cell, "arch": "flava", "order": "adapter_first"}, calibrated=False)[0] == (
            Outcome.GC_ERROR,)
    # every recipe: the mechanism is how each library calls enable_input_require_grads, whatever the step does;
    # the recipe's entries naming the backend (switch: transformers' set_adapter) come first
    want, why = expected({**cell, "order": "adapter_first", "recipe": "autocast"}, calibrated=False)
    peft_want, peft_why = expected({**cell, "backend": "peft", "order": "gc_first", "recipe": "autocast"},
                                   PEFT_FINDINGS, calibrated=False)
    assert want == peft_want and (why is None) == (peft_why is None)
    switch = {**cell, "arch": "mistral", "order": "adapter_first", "recipe": "switch"}
    own = [e for e in EXPECTATIONS if "transformers_peft" in str(e.match.get("backend"))
           and e.applies(with_traits(switch))]
    assert own and expected(switch, calibrated=False)[1] is own[0]


def test_an_also_entry_adds_an_outcome_and_takes_nothing_away():
    """VITS's first training in a process is not reproduced by the next (TorchScript's profiling executor): whichever
    VITS cell a process trains first may come out nondeterministic. That outcome is accepted besides the cell's
    expected ones, with its own reason; the expected ones stay as they are."""
    from harness.expectations import judge

    cell = {"backend": "full", "arch": "vits", "method": "full", "gc_mode": "non_reentrant", "inputs": "unmasked",
            "order": "gc_first", "task": "feature", "recipe": "loop", "modality": "audio"}
    want, why = expected(cell)
    usual = judge(cell, want[0].value)
    assert usual["matches"] and usual["expected"] == "|".join(w.value for w in want)
    flaky = judge(cell, "nondeterministic")
    assert flaky["matches"] and "TorchScript" in flaky["reason"] and flaky["expected"].endswith("nondeterministic")
    assert not judge({**cell, "arch": "bert", "modality": "text"}, "nondeterministic")["matches"]
