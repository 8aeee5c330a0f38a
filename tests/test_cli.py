"""The CLI contract (docs/design.md section 5): exit codes, one-line errors, JSON fields."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ENV, ROOT, tool
from harness import backends, cli
from harness.cells import SelectionError, find, select
from harness.expectations import EXPECTATIONS, MACHINES, Expect, expected
from harness.outcomes import Outcome
from harness.versions import versions

CASES_DIR = ROOT / "cases"


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, env=ENV,
                          timeout=600)


@pytest.mark.parametrize("args, needle", [
    (["--arch", "bert,nope"], "unknown arch 'nope'; "),
    (["--arch", "lama"], "unknown arch 'lama'; did you mean 'llama'?"),
    (["--cell-timeout", "-5"], "--cell-timeout must be > 0 seconds, not -5"),
    (["--timeout", "0"], "--cell-timeout must be > 0 seconds, not 0"),
    (["--json", "/"], "--json '/' is a folder; name a file in it"),
    (["--json", "/proc/x.json"], "--json '/proc/x.json' cannot be written here"),
    (["--backend", "keras"], "unknown backend 'keras'; valid: adapters, peft, transformers_peft, qlora, full"),
    (["--gc-mode", "sometimes"], "unknown gc_mode 'sometimes'; valid: non_reentrant, reentrant"),
    (["--inputs", "masked,x"], "unknown inputs 'x'"),
    (["--order", "later"], "unknown order 'later'"),
    (["--task", "translation"], "unknown task 'translation'; valid: "),
    (["--recipe", "adam"], "unknown recipe 'adam'; valid: loop, accumulate, eval_between, autocast, aux_outputs, "
                           "switch, switch_frozen, two_forwards, trainer"),
    (["--tier", "huge"], "unknown tier 'huge'"),
    (["--dtype", "float8"], "unknown dtype 'float8'"),
    (["--shard", "3/2"], "bad shard '3/2'; valid: K/N"),
    (["--shard", "half"], "bad shard 'half'"),
    (["--memory-gb", "-1"], "--memory-gb must be >= 0"),
    (["--device", "nodevice"], "device 'nodevice' is not usable here"),
])
def test_bad_input_exits_2_with_one_line(capsys, args, needle):
    assert cli.main(["run", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


def test_fail_on_broken_exits_1_on_a_known_broken_cell_that_the_default_passes(tmp_path, capsys):
    """A cell known to break (expected mismatch) is as expected: exit 0 by default, 1 with --fail-on broken."""
    run = tmp_path / "run.json"
    args = ["--backend", "peft", "--arch", "bert", "--method", "lora", "--gc-mode", "reentrant", "--inputs", "masked",
            "--order", "gc_first", "--task", "seq_cls", "--recipe", "switch_frozen", "--parallel", "single",
            "--json", str(run), "-q"]
    assert cli.main(["run", *args]) == 0
    assert json.loads(run.read_text())["cells"][0]["outcome"] == "mismatch"
    assert cli.main(["check", str(run), "--fail-on", "broken"]) == 1
    assert cli.main(["check", str(run)]) == 0
    capsys.readouterr()


def test_repro_to_a_folder_that_does_not_exist_exits_2_before_writing(capsys):
    assert cli.main(["repro", "full-bert-full-reentrant-padded-gc_first", "-o", "/nonexistent/x.py"]) == 2
    err = capsys.readouterr().err
    assert "-o '/nonexistent/x.py': folder '/nonexistent' does not exist" in err and err.count("\n") == 1, err


def test_check_of_a_json_that_is_not_a_run_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "not_a_run.json"
    path.write_text('{"results": []}')
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "cannot read a run's JSON" in err and err.count("\n") == 1, err


def test_shards_partition_the_selection_and_keep_baselines_together():
    archs = "bert,gpt2,llama,t5"    # the full backend: there with every library set (tox envs included)
    everything = select("full", archs)
    parts = [select("full", archs, shard=f"{k}/3") for k in (1, 2, 3)]
    ids = [c.id for part in parts for c in part]
    assert sorted(ids) == sorted(c.id for c in everything) and len(ids) == len(set(ids))
    assert all(parts), f"three shards of {len(everything)} cells: none should be empty"
    owner = {c.baseline_key: k for k, part in enumerate(parts) for c in part}
    assert all(owner[c.baseline_key] == k for k, part in enumerate(parts) for c in part)


def test_a_recipe_other_than_the_plain_loop_ends_the_cell_id_and_has_its_own_baseline():
    """Today's ids do not change: the plain loop is the default recipe and is not in the id."""
    cells = {c.recipe: c for c in select("full", "bert", gc_mode="reentrant", inputs="masked", order="gc_first",
                                         task="seq_cls", parallel="single")}
    # full fine-tuning has no second adapter (switch); Trainer checkpoints after the adapter (trainer: adapter_first)
    assert set(cells) == {"loop", "accumulate", "eval_between", "autocast", "aux_outputs", "two_forwards"}
    assert cells["loop"].id == "full-bert-full-reentrant-masked-gc_first"
    assert cells["accumulate"].id == "full-bert-full-reentrant-masked-gc_first-accumulate"
    assert len({c.baseline_key for c in cells.values()}) == 6
    assert find(cells["eval_between"].id) == cells["eval_between"]
    assert {c.recipe for c in select("full", "bert", recipe="accumulate")} == {"accumulate"}


def test_a_record_made_before_the_recipe_axis_is_judged_as_the_plain_loop():
    from harness.records import rejudge

    record = {"backend": "adapters", "arch": "bert", "method": "lora", "gc_mode": "reentrant", "inputs": "masked",
              "order": "gc_first", "task": "seq_cls", "outcome": "unsupported"}
    rejudge(record)
    assert record["matches"] == (not backends.get("adapters").missing)


def test_the_task_filter_selects_by_task():
    picked = select("full", "bert,t5", task="token_cls,seq2seq_lm")
    assert picked and {c.task for c in picked} == {"token_cls", "seq2seq_lm"}
    assert {c.id for c in picked} == {c.id for c in select("full", "bert,t5")
                                      if c.task in ("token_cls", "seq2seq_lm")}


def test_empty_selection_says_so(capsys):
    assert cli.main(["run", "--backend", "adapters", "--arch", "vit", "--inputs", "padded"]) == 2
    assert "select no cell" in capsys.readouterr().err


def test_run_json_contract_and_exit_codes(tmp_path):
    out = tmp_path / "r.json"
    p = run_cli("run", "--backend", "full", "--arch", "bert", "--inputs", "masked", "--order", "gc_first",
                "--gc-mode", "non_reentrant,reentrant", "--recipe", "loop", "--parallel", "single", "--json", str(out))
    # (transformers 5 has two more gc_modes; other recipes have findings on 5: BERT records its attentions)
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(out.read_text())
    assert set(data["versions"]) >= {"python", "torch", "transformers", "adapters", "peft"}
    cells = data["cells"]
    assert {c["gc_mode"] for c in cells} == {"non_reentrant", "reentrant"}
    for c in cells:
        for key in ("id", "backend", "arch", "method", "gc_mode", "inputs", "order", "task", "outcome",
                    "expected", "detail", "max_abs_diff", "tolerance", "recomputed_segments", "saved_bytes",
                    "seconds"):
            assert key in c, key
        assert c["outcome"] == "equivalent" and c["saved_bytes"]["candidate"] < c["saved_bytes"]["baseline"]
    assert {c["task"] for c in cells} == {"seq_cls", "token_cls"}
    assert f"{len(cells)} cells: equivalent: {len(cells)}; {len(cells)} as expected" in p.stdout


def test_exit_1_when_a_cell_does_not_match(monkeypatch, capsys):
    monkeypatch.setattr("harness.expectations.EXPECTATIONS",
                        [Expect({"backend": "full"}, Outcome.MISMATCH, "pretend it is known broken")])
    rc = cli.main(["run", "--backend", "full", "--arch", "bert", "--gc-mode", "non_reentrant",
                   "--inputs", "masked", "--order", "gc_first", "--recipe", "loop", "--parallel", "single"])
    assert rc == 1
    assert re.search(r"^FAIL safe +full-bert-full-non_reentrant-masked-gc_first: equivalent \(expected mismatch\)",
                     capsys.readouterr().out, re.M)


needs_adapters = pytest.mark.skipif(bool(backends.get("adapters").missing), reason="adapters not installed")


@needs_adapters
def test_list_names_archs_methods_and_reasons():
    p = run_cli("list", "--backend", "adapters")
    assert p.returncode == 0, p.stderr
    for needle in ("backend adapters", "bert2bert", "gemma3_text", "compacter++", "not applicable",
                   "known non-equivalent patterns"):
        assert needle in p.stdout, needle


def test_list_of_every_available_backend_prints_its_known_patterns():
    from harness.listing import listing

    for b in [b for b in backends.BACKEND_NAMES if not backends.get(b).missing]:
        text = listing(b)
        assert f"backend {b}" in text and "known non-equivalent patterns" in text
        if b == "peft":
            assert "missing_grad|gc_error" in text    # an entry naming several outcomes of one cause


def test_cell_ids_round_trip_and_tiers_cover_every_axis():
    """The default tier is cells of the product, and holds every value of an axis the product holds; the product
    (millions of cells) is walked, never held: a value the tier lacks must have no cell at all."""
    from harness.cells import product_cells, valid_choices

    narrow = {"arch": "archs", "method": "methods", "task": "tasks", "recipe": "recipes"}   # product_cells' names
    for backend in [b for b in backends.BACKEND_NAMES if not backends.get(b).missing]:
        default = select(backend=backend, tier="default")
        assert default
        for c in default:   # each in the product: the product narrowed to its values holds it
            assert c in product_cells(backend, archs=[c.arch], methods=[c.method], tasks=[c.task],
                                      recipes=[c.recipe], inputs=c.inputs, gc_mode=c.gc_mode, order=c.order,
                                      parallel=c.parallel)
        # (a backend whose archs another backend's default tier tries covers its own calls on its reference arch)
        every = ("arch",) if backends.get(backend).every_arch_in_default else ()
        valid = valid_choices([backend])
        for axis in (*every, "method", "gc_mode", "inputs", "order", "task", "recipe", "parallel"):
            missing = set(valid[axis]) - {getattr(c, axis) for c in default}
            for value in missing:
                kw = {narrow[axis]: [value]} if axis in narrow else {axis: value}
                assert next(product_cells(backend, **kw), None) is None, (backend, axis, value)
        c = default[0]
        assert find(c.id) == c
    with pytest.raises(SelectionError):
        find("adapters-nope-lora-non_reentrant-masked-gc_first")


def test_missing_library_is_listed_not_run():
    missing = [b for b in ("adapters", "peft") if backends.get(b).missing]
    for b in missing:
        assert "NOT AVAILABLE" in run_cli("list", "--backend", b).stdout
        assert select(backend=b) == []


@needs_adapters
def test_expectations_are_versioned_data_with_reasons():
    for e in EXPECTATIONS:
        assert e.reason and e.link.startswith("https://")
        # `equivalent` only alone: an exception carved out of a broader entry further down, never a way
        # to make an entry lenient (an expected failure that comes out equivalent must fail the run); the
        # exceptions are flagged below_tolerance: a loss the comparator cannot always see (UniLoRA's tensor shared
        # by every layer), or one whose size varies by arch, when a bug-reproduction case is its strict guard
        guard = re.search(r"cases/(\w+\.py)", e.reason)
        assert Outcome.EQUIVALENT not in e.outcomes or e.outcomes == (Outcome.EQUIVALENT,) or (
            e.below_tolerance and (e.match.get("method") == "unilora"
                                   or guard and (CASES_DIR / guard.group(1)).is_file())), e.reason
    fields = dict(backend="adapters", arch="bert", method="lora", gc_mode="reentrant", inputs="masked",
                  order="gc_first", task="seq_cls")
    assert expected(fields)[0] == (Outcome.UNSUPPORTED,)
    assert expected({**fields, "gc_mode": "non_reentrant"})[0] == (Outcome.EQUIVALENT,)
    old = [Expect({"backend": "adapters"}, Outcome.ERROR, "x", "https://x", {"adapters": "<0.1"})]
    assert expected(fields, old)[0] == (Outcome.EQUIVALENT,)    # version range excludes the installed one


def test_an_expectation_may_hold_on_a_kind_of_machine_only(monkeypatch):
    fields = dict(backend="full", arch="bert", method="full", gc_mode="non_reentrant", inputs="masked",
                  order="gc_first", task="seq_cls")
    entry = Expect({"backend": "full"}, Outcome.GC_ERROR, "x", "https://x", machine="no_accelerator")
    for accelerator in (True, False):
        monkeypatch.setitem(MACHINES, "no_accelerator", lambda: not accelerator)
        assert expected(fields, [entry])[0] == ((Outcome.EQUIVALENT,) if accelerator else (Outcome.GC_ERROR,))
    assert all(not e.machine or e.machine in MACHINES for e in EXPECTATIONS)


def test_interrupted_run_keeps_what_finished(tmp_path, monkeypatch, capsys):
    """Ctrl-C (or SIGTERM) mid-run: the JSON holds the finished cells and says it is incomplete."""
    from harness import run as run_mod

    calls = []

    def fake(self, cell):
        if calls:
            raise KeyboardInterrupt
        calls.append(cell)
        return {"id": cell.id, **cell.fields(), "outcome": "equivalent", "expected": "equivalent", "matches": True,
                "detail": "", "reason": "", "link": "", "seconds": 0.0}

    monkeypatch.setattr(run_mod.Runner, "run_cell", fake)
    out = tmp_path / "r.json"
    assert cli.main(["run", "--backend", "full", "--arch", "bert", "--json", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["complete"] is False and [c["id"] for c in data["cells"]] == [calls[0].id]
    assert "interrupted after 1 of" in capsys.readouterr().out
    # --resume keeps (and re-judges) the finished cell and runs only the others
    monkeypatch.setattr("harness.expectations.EXPECTATIONS",
                        [Expect({"backend": "full"}, Outcome.MISMATCH, "pretend it is known broken")])
    again = []
    monkeypatch.setattr(run_mod.Runner, "run_cell", lambda self, cell: again.append(cell) or {
        "id": cell.id, **cell.fields(), "outcome": "mismatch", "expected": "mismatch", "matches": True,
        "detail": "", "reason": "", "link": "", "seconds": 0.0})
    assert cli.main(["run", "--backend", "full", "--arch", "bert", "--json", str(out), "--resume"]) == 1
    data = json.loads(out.read_text())
    assert data["complete"] is True and calls[0].id not in {c.id for c in again}
    assert len(data["cells"]) == len(again) + 1 and data["options"] == {"steps": 3, "dtype": "float32",
                                                                         "device": "cpu"}
    first = next(c for c in data["cells"] if c["id"] == calls[0].id)
    assert first["outcome"] == "equivalent" and first["expected"] == "mismatch" and not first["matches"]
    assert "resuming: 1 cells kept" in capsys.readouterr().out
    # made with other options, or no file: a usage error, nothing run
    assert cli.main(["run", "--backend", "full", "--arch", "bert", "--json", str(out), "--resume",
                     "--steps", "2"]) == 2
    assert "other options" in capsys.readouterr().err
    assert cli.main(["run", "--backend", "full", "--arch", "bert", "--json", str(tmp_path / "no.json"),
                     "--resume"]) == 2
    assert "needs --json naming an existing" in capsys.readouterr().err


def test_check_rejudges_a_run_against_the_expectations(tmp_path, capsys):
    def record(arch, outcome):
        return {"id": f"full-{arch}-full-reentrant-masked-gc_first", "backend": "full", "arch": arch, "method": "full",
                "gc_mode": "reentrant", "inputs": "masked", "order": "gc_first", "task": "seq_cls",
                "modality": "text", "outcome": outcome, "expected": "equivalent", "matches": True, "detail": "d",
                "seconds": 0.0}

    path = tmp_path / "r.json"
    path.write_text(json.dumps({"versions": versions(), "cells": [
        record("bert", "equivalent"), record("albert", "unsupported"), record("roberta", "mismatch")]}))
    assert cli.main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^FAIL broken, NEW +full-roberta-full-reentrant-masked-gc_first: mismatch", out, re.M)
    assert "albert" not in out
    assert "3 cells: " in out and "2 as expected, 1 not as expected" in out
    # the shards of one matrix merge into one summary; a cell in two of them is a usage error
    other = tmp_path / "r2.json"
    other.write_text(json.dumps({"versions": versions(), "complete": False, "cells": [
        record("distilbert", "gc_error")]}))
    assert cli.main(["check", "-q", str(path), str(other)]) == 1
    out = capsys.readouterr().out
    assert "4 cells: " in out and "2 as expected, 2 not as expected" in out and f"incomplete run(s): {other}" in out
    assert cli.main(["check", str(path), str(path)]) == 2
    assert "is in both" in capsys.readouterr().err
    path.write_text(json.dumps({"versions": {**versions(), "torch": "0.1"}, "cells": []}))
    assert cli.main(["check", str(path)]) == 2
    assert "other versions than installed here: torch 0.1" in capsys.readouterr().err


def cell_record(cell, outcome: str, detail: str) -> dict:
    """A text cell's record as `harness run` writes it, expected equivalent, with seconds -1 (not run here): a run
    record rerun by matrix.py gets its real time."""
    from harness import AXES

    return {"id": cell.id, **{a: getattr(cell, a) for a in AXES}, "modality": "text", "outcome": outcome,
            "expected": "equivalent", "matches": outcome == "equivalent", "detail": detail, "seconds": -1.0}


@pytest.mark.versionless   # tools/matrix.py's scheduling, on full fine-tuning of BERT
def test_matrix_rerun_and_refresh_run_just_the_cells_that_changed_or_are_new(tmp_path):
    """tools/matrix.py --rerun: after a change that alters some cells' results, those cells (and only they)
    are dropped from the finished parts and run again; the rest of the part is kept as it was."""
    cells = select(backend="full", arch="bert", task="seq_cls", tier="full", recipe="loop", parallel="single")
    stale = [cell_record(c, "mismatch", "old") for c in cells]
    out = tmp_path / "runs"
    out.mkdir()
    part = out / "r_1_of_1.json"
    part.write_text(json.dumps({"versions": versions(), "complete": True,
                                "options": {"steps": 3, "dtype": "float32", "device": "cpu"}, "cells": stale}))
    matrix = [sys.executable, "tools/matrix.py", "--backend", "full", "--parts", "1", "--out", str(out)]
    bad = subprocess.run([*matrix, "--rerun", "colour=red"], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines() == [
        "error: --rerun 'colour=red': expected KEY=V1,V2 or KEY~TEXT with KEY one of id, backend, arch, method, "
        "gc_mode, inputs, order, task, recipe, modality, outcome, expected, matches, detail"]
    # KEY=V: the field is V; KEY~T: it contains T (the stale details are "old")
    done = subprocess.run([*matrix, "--rerun", "gc_mode=reentrant", "--rerun", "outcome=mismatch", "--rerun",
                           "detail~xyz,OL", "--",
                           "--arch", "bert", "--task", "seq_cls", "--recipe", "loop", "--parallel", "single"],
                          capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600)
    n_reentrant = sum(c.gc_mode == "reentrant" for c in cells)
    assert 0 < n_reentrant < len(cells)
    assert f"# --rerun: {n_reentrant} cells dropped from 1 parts" in done.stdout, done.stdout + done.stderr
    data = json.loads(part.read_text())
    assert data["complete"] and len(data["cells"]) == len(cells)
    rerun = {r["id"]: r for r in data["cells"] if r["seconds"] >= 0}
    assert sorted(rerun) == sorted(c.id for c in cells if c.gc_mode == "reentrant")
    assert {r["outcome"] for r in rerun.values()} == {"equivalent"}
    # the kept cells are the old records (re-judged), so the merged check still reports them
    assert f"{len(cells)} cells: " in done.stdout and f"{len(cells) - n_reentrant} not as expected" in done.stdout
    # --refresh: a complete part that lacks cells of its shard (types newly covered) gets them, keeping the rest
    part.write_text(json.dumps({**data, "cells": list(rerun.values())}))
    ledger = tmp_path / "ledger.json"
    fresh = subprocess.run([*matrix, "--refresh", "--ledger", str(ledger), "--", "--arch", "bert", "--task", "seq_cls",
                            "--recipe", "loop", "--parallel", "single"],
                           capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600)
    data = json.loads(part.read_text())
    assert data["complete"] and sorted(r["id"] for r in data["cells"]) == sorted(c.id for c in cells), fresh.stdout
    assert [r for r in data["cells"] if r["id"] in rerun] == list(rerun.values())
    assert f"{len(cells)} cells: " in fresh.stdout and "0 not as expected" in fresh.stdout
    # --ledger: the part's figures, written as it ended, and the table printed
    book = json.loads(ledger.read_text())
    assert book["entries"]["1"]["cells"] == len(cells) and book["entries"]["1"]["not_as_expected"] == []
    assert f"# ledger {ledger}: 1 of 1 parts" in fresh.stdout and "| 1 of 1 |" in fresh.stdout


@pytest.mark.versionless   # tools/matrix.py's scheduling, on full fine-tuning of BERT
def test_matrix_runs_a_parts_out_of_memory_cells_again_in_a_fresh_process(tmp_path):
    """tools/matrix.py: a cell whose run, baseline or replay ran out of memory when its part ended (the cap
    exhausted with what the part's process held before: 5.24.0's Phi-4-MM + FRoD replays) runs again once, in a
    process of its own; the part's other cells are kept as they were."""
    cells = select(backend="full", arch="bert", task="seq_cls", tier="full", gc_mode="reentrant", order="gc_first",
                   recipe="loop", parallel="single")
    starved = {cells[0].id: "baseline replay ran out of memory (DefaultCPUAllocator: can't allocate memory: you "
                            "tried to allocate 1677557760 bytes); run the cell alone to tell",
               cells[1].id: "candidate train: MemoryError"}
    records = [cell_record(c, "error" if c.id in starved else "equivalent", starved.get(c.id, "kept")) for c in cells]
    assert len(records) > len(starved)
    out = tmp_path / "runs"
    out.mkdir()
    part = out / "r_1_of_1.json"
    part.write_text(json.dumps({"versions": versions(), "complete": True,
                                "options": {"steps": 3, "dtype": "float32", "device": "cpu"}, "cells": records}))
    done = subprocess.run([sys.executable, "tools/matrix.py", "--backend", "full", "--parts", "1", "--out",
                           str(out), "--refresh", "--", "--arch", "bert", "--task", "seq_cls", "--gc-mode",
                           "reentrant", "--order", "gc_first", "--recipe", "loop", "--parallel", "single"],
                          capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600)
    assert "part 1/1: 2 cells ran out of memory, run again in a fresh process: 2 ran, 0 ran out of memory again" \
        in done.stdout, done.stdout + done.stderr
    written = json.loads(part.read_text())
    data = {r["id"]: r for r in written["cells"]}
    assert written["complete"] and sorted(data) == sorted(c.id for c in cells)
    assert {i: (data[i]["outcome"], data[i]["seconds"] >= 0) for i in starved} == {i: ("equivalent", True)
                                                                                 for i in starved}
    kept = [r["id"] for r in records if r["id"] not in starved]
    assert [(data[i]["outcome"], data[i]["detail"], data[i]["seconds"]) for i in kept] == [("equivalent", "kept", -1.0)]
    assert f"{len(cells)} cells: " in done.stdout and "0 not as expected" in done.stdout


@pytest.mark.versionless   # tools/matrix.py's scheduling, on full fine-tuning of BERT
def test_matrix_ledger_keeps_each_complete_parts_figures(tmp_path, monkeypatch):
    """tools/matrix.py --ledger: the product's figures outlive its run folder. Each complete part's histogram
    (re-judged), its cells not as expected and its cell time go into a small JSON keyed by part; an incomplete
    part is left out, a part rerun replaces its entry, a part of other options is refused. The re-judging is
    done by a fresh process, with the expectations on disk: not by whatever this process holds in memory (a
    matrix runs for hours and imported its expectations at its start)."""
    from harness import expectations

    monkeypatch.setattr(expectations, "judge", lambda cell, outcome: {"expected": "gc_error", "matches": False})

    matrix = tool("matrix")

    def part(name, complete, outcomes, options=None):
        cells = [{"id": f"full-{arch}-full-reentrant-masked-gc_first", "backend": "full", "arch": arch,
                  "method": "full", "gc_mode": "reentrant", "inputs": "masked", "order": "gc_first",
                  "task": "seq_cls", "modality": "text", "outcome": outcome, "expected": "equivalent",
                  "matches": True, "detail": "d", "seconds": 1.5} for arch, outcome in outcomes]
        path = tmp_path / name
        path.write_text(json.dumps({"versions": versions(), "complete": complete,
                                    "options": options or {"steps": 3, "dtype": "float32", "device": "cpu"},
                                    "cells": cells}))
        return str(path)

    ledger = str(tmp_path / "ledger.json")
    one = part("r1.json", True, [("bert", "equivalent"), ("albert", "unsupported"), ("roberta", "mismatch")])
    two = part("r2.json", False, [("gpt2", "equivalent")])
    book = matrix.ledger_add(ledger, "full", 4, {1: one, 2: two})
    assert list(book["entries"]) == ["1"]
    assert book["entries"]["1"]["outcomes"] == {"equivalent": 1, "unsupported": 1, "mismatch": 1}
    assert book["entries"]["1"]["not_as_expected"] == ["full-roberta-full-reentrant-masked-gc_first"]
    part("r2.json", True, [("gpt2", "equivalent")])
    part("r1.json", True, [("bert", "equivalent"), ("albert", "unsupported"), ("roberta", "equivalent")])
    book = matrix.ledger_add(ledger, "full", 4, {1: one, 2: two})
    assert json.loads(Path(ledger).read_text()) == book
    table = matrix.ledger_table(book).splitlines()
    assert table[0].startswith("| transformers | parts | cells | equivalent | missing_grad |")
    assert table[2] == (f"| {versions()['transformers']} | 1-2 of 4 | 4 | 3 | 0 | 0 | 0 | 1 | 0 | 0 | 0 "
                        "| 6 s |")
    other = part("r3.json", True, [("gpt2", "equivalent")], {"steps": 5, "dtype": "float32", "device": "cpu"})
    with pytest.raises(SystemExit, match="it holds options .* part 3 has"):
        matrix.ledger_add(ledger, "full", 4, {3: other})
    assert matrix.spans([5, 1, 2, 3, 7, 8]) == "1-3,5,7-8"

    # another matrix process on the same ledger (a --rerun of finished parts beside the product) holds the lock:
    # this one waits for it, then merges into what the other wrote instead of overwriting it
    import fcntl
    import threading

    with open(ledger + ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        adder = threading.Thread(target=matrix.ledger_add, args=(ledger, "full", 4, {2: two}))
        adder.start()
        waiting_on(os.fstat(held.fileno()).st_ino, adder)   # its merging process blocked on the lock
        book = json.loads(Path(ledger).read_text())
        del book["entries"]["2"]
        book["entries"]["4"] = book["entries"]["1"]
        Path(ledger).write_text(json.dumps(book))
    adder.join()
    assert list(json.loads(Path(ledger).read_text())["entries"]) == ["1", "2", "4"]


def waiting_on(inode: int, thread) -> None:
    """Return once some process waits for a lock on the file `inode` (Linux's /proc/locks marks a blocked request
    "->"); the thread that should be the one waiting must not have ended first."""
    while not any(line.split()[1] == "->" and line.split()[6].endswith(f":{inode}")
                  for line in Path("/proc/locks").read_text().splitlines()):
        assert thread.is_alive(), "it ended without waiting for the lock"
        thread.join(0.05)


@pytest.mark.parametrize("cell_id, near", [
    ("full-lama-full-reentrant-masked-gc_first", "full-llama-full-reentrant-masked-gc_first"),   # a misspelt arch
    ("full-bert-full-reentrant-maskd-gc_first", "full-bert-full-reentrant-masked-gc_first"),     # a misspelt value
    ("nothing-like-an-id", None),
])
def test_repro_of_an_unknown_cell_names_the_close_one(capsys, cell_id, near):
    assert cli.main(["repro", cell_id]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: no cell has id {cell_id!r}") and "\n" not in err
    assert (f"did you mean {near!r}?" in err) if near else "did you mean" not in err
