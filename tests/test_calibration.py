"""Baseline calibration: measured plain-run failures become strict expectations; shards merge; bad input is
one line; the generated tables name only archs and methods that exist."""
import importlib.util
import json

import pytest

from harness import backends, calibrate, calibration, cli
from harness.archs import archs_for
from harness.cells import full_product
from harness.expectations import Expect, expected
from harness.outcomes import Outcome


def rec(arch, inputs, task, outcome=None, detail=""):
    return {"backend": "full", "arch": arch, "method": "full", "inputs": inputs, "task": task, "outcome": outcome,
            "detail": detail, "seconds": 0.1}


def fields(arch, inputs, task):
    return dict(backend="full", arch=arch, method="full", gc_mode="reentrant", inputs=inputs, order="gc_first",
                task=task, modality="text")


RECORDS = [rec("bert", "masked", "seq_cls", "error", "baseline train: E1"),
           rec("bert", "padded", "seq_cls", "error", "baseline train: E1"),
           rec("gpt2", "masked", "causal_lm", "unsupported", "baseline attach: E2"),
           rec("gpt2", "padded", "causal_lm"),
           rec("roberta", "masked", "seq_cls")]


@pytest.fixture
def make_table(tmp_path, monkeypatch):
    def make(records, shard=None, filters=None):
        path = tmp_path / f"cal{len(list(tmp_path.iterdir()))}.json"
        sel = {"backends": ["full"], "shard": shard, "filters": filters or {}}
        calibrate.write_json(str(path), {str(i): r for i, r in enumerate(records)}, sel, complete=True)
        out = tmp_path / "tables"
        [written] = calibrate.write_tables([str(path)], out_dir=str(out))
        spec = importlib.util.spec_from_file_location("fake_table", written)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        monkeypatch.setattr(calibration, "table", lambda b: mod if b == "full" else None)
        calibration.index.cache_clear()
        return mod

    yield make
    calibration.index.cache_clear()


def test_table_compresses_and_the_expectations_follow_it(make_table):
    mod = make_table(RECORDS)
    keys = {k: (o, d) for o, d, ks in mod.FAILS for k in ks}
    assert keys == {("bert", "full", "*", "*"): ("error", "baseline train: E1"),        # every bert baseline fails
                    ("gpt2", "full", "masked", "causal_lm"): ("unsupported", "baseline attach: E2")}
    assert mod.CALIBRATED_ON["baselines"] == 5 and mod.CALIBRATED_ON["failing"] == 3
    outcomes, why = expected(fields("bert", "padded", "seq_cls"))
    assert outcomes == (Outcome.ERROR,) and "plain run already fails" in why.reason and "E1" in why.reason
    assert expected(fields("gpt2", "masked", "causal_lm"))[0] == (Outcome.UNSUPPORTED,)
    assert expected(fields("gpt2", "padded", "causal_lm"))[0] == (Outcome.EQUIVALENT,)
    assert expected(fields("roberta", "masked", "seq_cls"))[0] == (Outcome.EQUIVALENT,)
    assert expected(fields("bert", "padded", "seq_cls"), calibrated=False)[0] == (Outcome.EQUIVALENT,)


def test_a_failing_plain_run_passes_over_findings_but_not_an_explanation(make_table):
    make_table(RECORDS)
    finding = Expect({"arch": "bert"}, Outcome.GC_ERROR, "a checkpointing finding", "https://x")
    explained = Expect({"arch": "bert"}, Outcome.ERROR, "analysed: why the plain run fails", "https://x")
    assert expected(fields("bert", "masked", "seq_cls"), [finding])[0] == (Outcome.ERROR,)
    assert expected(fields("bert", "masked", "seq_cls"), [explained, finding])[1] is explained
    on_roberta = Expect({"arch": "roberta"}, Outcome.GC_ERROR, "a checkpointing finding", "https://x")
    assert expected(fields("roberta", "masked", "seq_cls"), [on_roberta])[1] is on_roberta   # plain run fine


def test_only_the_calibrated_shards_are_judged_by_the_table(make_table):
    inside = [(i, t) for i in ("masked", "padded", "unmasked") for t in ("seq_cls", "token_cls", "feature")
              if calibration.key_in_shards("full", ("bert", "full", i, t), [(1, 2)])]
    outside = [(i, t) for i in ("masked", "padded", "unmasked") for t in ("seq_cls", "token_cls", "feature")
               if (i, t) not in inside]
    assert inside and outside
    mod = make_table([rec("bert", i, t, "error", "E") for i, t in inside], shard=[1, 2])
    assert mod.FAILS[0][2] == (("bert", "full", "*", "*"),) and mod.CALIBRATED_ON["shards"] == [[1, 2]]
    assert expected(fields("bert", *inside[0]))[0] == (Outcome.ERROR,)
    assert expected(fields("bert", *outside[0]))[0] == (Outcome.EQUIVALENT,)   # not measured: no claim


def test_a_filtered_run_updates_the_installed_table(make_table):
    """After a harness fix, re-calibrating only what it touches (e.g. --task feature) rewrites those keys and
    keeps every other key of the table, passing or failing, as it was."""
    make_table(RECORDS)
    mod = make_table([rec("bert", "masked", "seq_cls"),                                  # fixed
                      rec("gpt2", "padded", "causal_lm", "error", "baseline train: E3")],   # newly failing
                     filters={"arch": "bert,gpt2"})
    keys = {k: (o, d) for o, d, ks in mod.FAILS for k in ks}
    assert keys[("bert", "full", "padded", "seq_cls")] == ("error", "baseline train: E1")   # kept, no longer '*'
    assert ("bert", "full", "*", "*") not in keys and ("bert", "full", "masked", "seq_cls") not in keys
    assert keys[("gpt2", "full", "masked", "causal_lm")] == ("unsupported", "baseline attach: E2")
    assert keys[("gpt2", "full", "padded", "causal_lm")] == ("error", "baseline train: E3")
    assert mod.CALIBRATED_ON["baselines"] == len({(c.arch, c.method, c.inputs, c.task)
                                                  for c in full_product("full")})


def test_a_table_grows_shard_by_shard(make_table):
    """A new unfiltered shard of the same release adds to the installed table instead of replacing it."""
    keys = [(i, t) for i in ("masked", "padded", "unmasked") for t in ("seq_cls", "token_cls")]
    first = [k for k in keys if calibration.key_in_shards("full", ("bert", "full", *k), [(1, 2)])]
    second = [k for k in keys if k not in first]
    assert first and second
    make_table([rec("bert", *first[0], "error", "E1")] + [rec("bert", *k) for k in first[1:]], shard=[1, 2])
    mod = make_table([rec("bert", *second[0], "error", "E2")] + [rec("bert", *k) for k in second[1:]], shard=[2, 2])
    assert mod.CALIBRATED_ON["shards"] == [[1, 2], [2, 2]]
    keys = {k: d for _, d, ks in mod.FAILS for k in ks}
    assert keys == {("bert", "full", *first[0]): "E1", ("bert", "full", *second[0]): "E2"}


def test_tables_come_only_from_complete_runs_or_update_an_installed_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(calibration, "table", lambda b: None)
    for name, complete, filters, needle in (("part.json", False, {}, "incomplete"),
                                            ("filtered.json", True, {"arch": "bert"}, "give unfiltered runs")):
        path = tmp_path / name
        calibrate.write_json(str(path), {}, {"backends": ["full"], "shard": None, "filters": filters}, complete)
        assert cli.main(["calibrate", "--table-from", str(path)]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
    assert cli.main(["calibrate", "--table-from", str(tmp_path / "nope.json")]) == 2
    assert "cannot read a calibration JSON" in capsys.readouterr().err
    assert cli.main(["calibrate", "--backend", "full", "--json", str(tmp_path / "no" / "x.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_calibrate_runs_each_baseline_once_and_records_the_selection(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert cli.main(["calibrate", "--backend", "full", "--arch", "bert", "--inputs", "masked", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["complete"] and data["selection"]["filters"] == {"arch": "bert", "inputs": "masked"}
    recs = list(data["baselines"].values())
    assert sorted(r["task"] for r in recs) == sorted(archs_for("full")["bert"].tasks)   # one per baseline key
    assert all(r["outcome"] is None and r["seconds"] > 0 for r in recs)
    assert f"# {len(recs)} baselines, 0 fail" in capsys.readouterr().out


def test_generated_tables_name_existing_archs_and_methods():
    for b in [b for b in backends.BACKEND_NAMES if not backends.get(b).missing]:
        mod = calibration.table(b)
        if mod is None:
            continue
        archs, methods = archs_for(b), backends.get(b).methods
        stale = {k[:2] for _, _, keys in mod.FAILS for k in keys if k[0] not in archs or k[1] not in methods}
        assert not stale, f"{mod.__name__} names archs/methods the registry no longer has: {sorted(stale)[:5]}"


def test_a_refusal_of_checkpointing_itself_still_shows_where_it_comes_first(make_table):
    """gradient_checkpointing_enable refusing (e.g. VAN) is the outcome even when the plain run fails, unless the
    checkpointed run fails before reaching it: adapter_first attaches (and fails like the plain run) first."""
    make_table([rec("bert", "masked", "seq_cls", "error", "baseline attach: ValueError: no target"),
                rec("gpt2", "masked", "causal_lm", "error", "baseline train: RuntimeError: boom")])
    refusal = Expect({"arch": ("bert", "gpt2")}, Outcome.UNSUPPORTED, "refuses", "https://x", refuses_checkpointing=True)
    attach_fails = fields("bert", "masked", "seq_cls")
    train_fails = fields("gpt2", "masked", "causal_lm")
    assert expected(attach_fails, [refusal])[0] == (Outcome.UNSUPPORTED,)                    # gc_first
    assert expected({**attach_fails, "order": "adapter_first"}, [refusal])[0] == (Outcome.ERROR,)
    assert expected({**train_fails, "order": "adapter_first"}, [refusal])[0] == (Outcome.UNSUPPORTED,)
    plain = Expect({"arch": "bert"}, Outcome.UNSUPPORTED, "refuses the method", "https://x")
    assert expected(attach_fails, [plain])[0] == (Outcome.ERROR,)    # not a refusal of checkpointing: passed over


def test_running_out_of_memory_is_never_a_table_entry(make_table):
    """A long calibration process that ran out of memory failed every later baseline: that is the process's
    state, not the release's behaviour, so the table must not expect `error` there."""
    oom = "baseline build: RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 6553600 bytes"
    mod = make_table([rec("bert", "masked", "seq_cls", "error", oom), rec("bert", "padded", "seq_cls"),
                      rec("gpt2", "masked", "causal_lm", "error", "baseline train: RuntimeError: could not create a "
                                                                  "primitive")])
    assert mod.FAILS == [] and mod.CALIBRATED_ON["failing"] == 0
    assert expected(fields("bert", "masked", "seq_cls"))[0] == (Outcome.EQUIVALENT,)


def test_calibrate_records_a_memory_failure_as_resource():
    from harness.trace import Trace

    class Runner:
        def plain(self, cell):
            return Trace(error="build: MemoryError: ", error_stage="build", trainable=["w"])

    [cell] = [c for c in full_product("full", parallel="single") if c.arch == "bert" and c.inputs == "masked"
              and c.task == "seq_cls" and c.gc_mode == "reentrant" and c.order == "gc_first" and c.recipe == "loop"]
    [record] = calibrate.calibrate([cell], Runner(), {}, report_line=lambda s: None).values()
    assert record["resource"] and record["outcome"] is None and "MemoryError" in record["detail"]


def test_a_table_of_the_keys_another_backend_fails(tmp_path, monkeypatch):
    """`calibrate --failing-in peft` measures transformers_peft's plain runs where peft's table lists a failure (the
    tuners are peft's): the table covers those keys only, so a '*' of its compression claims nothing of a key peft's
    table does not list, and the selection is exactly peft's failing keys."""
    import types

    from harness.versions import installed

    versions = {"transformers": installed("transformers"), "torch": installed("torch"), "peft": installed("peft")}
    peft = types.SimpleNamespace(__name__="fake_peft", CALIBRATED_ON={**versions, "shards": [[1, 1]]},
                                 FAILS=[("error", "baseline train: P", (("bert", "lora", "masked", "seq_cls"),))])
    tables = {"peft": peft}
    monkeypatch.setattr(calibration, "table", lambda b: tables.get(b))
    calibration.index.cache_clear()
    path = tmp_path / "tp.json"
    tp = {"backend": "transformers_peft", "arch": "bert", "method": "lora", "inputs": "masked", "task": "seq_cls",
          "outcome": "error", "detail": "baseline train: T", "seconds": 0.1}
    calibrate.write_json(str(path), {"0": tp}, {"backends": ["transformers_peft"], "shard": None,
                                                "filters": {"failing_in": "peft"}}, complete=True)
    [written] = calibrate.write_tables([str(path)], out_dir=str(tmp_path))
    spec = importlib.util.spec_from_file_location("fake_tp", written)
    tables["transformers_peft"] = mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    calibration.index.cache_clear()
    try:
        assert mod.CALIBRATED_ON["failing_in"] == "peft" and mod.CALIBRATED_ON["baselines"] == 1
        assert mod.FAILS == [("error", "baseline train: T", (("bert", "lora", "*", "*"),))]
        cell = dict(backend="transformers_peft", arch="bert", method="lora", inputs="masked", task="seq_cls")
        assert calibration.baseline_failure(cell)[0][0] == "error"
        assert calibration.baseline_failure({**cell, "inputs": "padded"}) == (None, None)   # not measured
        cells = [c for c in full_product("transformers_peft", recipes=("loop",), parallel="single") if c.arch == "bert" and c.method == "lora"]
        assert {c.baseline_key for c in calibrate.failing_in(cells, "peft")} == {
            "transformers_peft-bert-lora-masked-seq_cls"}
        with pytest.raises(ValueError, match="no baseline table of adapters"):
            calibrate.failing_in(cells, "adapters")
    finally:
        calibration.index.cache_clear()
