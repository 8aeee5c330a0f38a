"""`python -m harness repro`: the generated script runs alone and reaches the cell's outcome."""
import re
import subprocess
import sys

import pytest

from conftest import ENV
from harness import backends
from harness.run import Runner

# one cell per outcome that the installed matrix produces (see harness/expectations.py)
SAMPLE = [
    "full-bert-full-reentrant-padded-gc_first",                        # equivalent
    "adapters-llama-lora-non_reentrant-padded-adapter_first",          # equivalent, decoder-only, left padding
    "adapters-bert-lora-reentrant-masked-gc_first",                    # unsupported
    # mismatch under DDP: the script starts its 2 ranks itself (two forwards, reentrant: ranks diverge)
    "peft-llama-lora-reentrant-masked-gc_first-two_forwards-ddp",
    "adapters-gpt2-prefix_tuning-non_reentrant-unmasked-gc_first",     # missing_grad
    "adapters-t5-loreft-non_reentrant-unmasked-gc_first",              # mismatch
    "adapters-beit-lora-non_reentrant-unmasked-gc_first",              # gc_error
    "adapters-t5-loreft-non_reentrant-masked-gc_first",                # error
    "full-parakeet_ctc-full-non_reentrant-unmasked-gc_first",          # mismatch (BatchNorm stats), zoo arch
    "full-gpt_bigcode-full-non_reentrant-masked-gc_first",             # not_checkpointed, zoo arch
    "peft-llama-poly-non_reentrant-masked-gc_first",                   # gc_error, peft
    "full-udop-full-reentrant-masked-gc_first",    # equivalent: on 4.57.6 a float32 ReLU flip that float64 settles
    "full-bert-full-non_reentrant_offload-masked-gc_first",   # transformers 5's offload (gc_error without accelerator)
    # mismatch on 5.x (KV sharing under reentrant); a per-layer config (reading its head_dim raised in the script)
    "peft-gemma4_text-lora-reentrant-unmasked-gc_first-feature",
    "peft-llama-lora-reentrant-masked-gc_first-switch",                # mismatch: a recipe with two adapters
    "adapters-bert-lora-non_reentrant-masked-adapter_first-trainer",   # equivalent: AdapterTrainer
    "qlora-llama-lora-unset-masked-adapter_first",   # gc_error: a 4-bit base saved and loaded quantized in the script
    "peft-llama-lora-reentrant-masked-prepare_kbit",   # not_checkpointed: prepare_model_for_kbit_training, unquantized
    "peft-llama-ia3-torch_reentrant-masked-gc_first",  # missing_grad: IA3 under torch's reentrant wrapper, a causal LM
]


STANDALONE = 4   # the first cells' scripts run in a fresh interpreter with no harness on the path; the others in this one


@pytest.mark.parametrize("cell_id", SAMPLE)
def test_generated_script_reproduces_the_cell(tmp_path, capsys, cell_id):
    backend = cell_id.split("-")[0]
    if backends.get(backend).missing:
        pytest.skip(backends.get(backend).missing)
    from harness.cells import SelectionError, find
    from harness.repro import script

    try:
        cell = find(cell_id)
    except SelectionError:   # a zoo arch surveyed on another transformers
        pytest.skip(f"{cell_id} is not in the matrix of this transformers")
    want = Runner().run_cell(cell)["outcome"]
    path = tmp_path / "repro.py"
    src = script(cell_id, with_outcome=False)   # (`harness repro -o`, the command: below)
    path.write_text(src)
    assert not re.search(r"^\s*(import|from) harness", src, re.M)
    if SAMPLE.index(cell_id) < STANDALONE:
        # from an empty directory with a bare environment: no harness on the path
        q = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env={**ENV, "PYTHONPATH": ""},
                           capture_output=True, text=True, timeout=600)
        out, rc = q.stdout + q.stderr, q.returncode
    else:   # the same script in this interpreter (its imports are paid once per worker)
        import runpy

        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(path), run_name="__main__")
        out, rc = capsys.readouterr().out, done.value.code
    m = re.search(r"^OUTCOME: (\w+):", out, re.M)
    assert m, out
    assert m.group(1) == want, out
    assert rc == (0 if want == "equivalent" else 1)


def test_the_repro_command_writes_the_script_with_the_outcome_it_had(tmp_path):
    path = tmp_path / "repro.py"
    p = subprocess.run([sys.executable, "-m", "harness", "repro", SAMPLE[0], "-o", str(path)], env=ENV,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    src = path.read_text()
    assert "harness outcome at generation: equivalent (expected equivalent)" in src
    compile(src, str(path), "exec")


def test_script_holds_the_cells_batches_exactly(tmp_path):
    """Float inputs too (pixels, boxes): a redrawn stand-in changed UDOP's outcome."""
    import runpy

    import torch

    from harness.archs import archs_for
    from harness.archs.base import build_model
    from harness.cells import SelectionError, find
    from harness.repro import script

    cell_id = "full-udop-full-reentrant-masked-gc_first"
    try:
        cell = find(cell_id)
    except SelectionError:
        pytest.skip(f"{cell_id} is not in the matrix of this transformers")
    path = tmp_path / "repro.py"
    path.write_text(script(cell_id, with_outcome=False))
    batches = runpy.run_path(str(path), run_name="not_main")["BATCHES"]
    arch = archs_for("full")[cell.arch]
    torch.manual_seed(0)
    model = build_model(arch, cell.task)
    floats = 0
    for step, got in enumerate(batches):
        want = arch.make_batch(cell.task, model, cell.inputs, step, 0)
        assert got.keys() == want.keys()
        for k, v in want.items():
            assert torch.equal(got[k], v) and got[k].dtype == v.dtype, (step, k)
            floats += v.is_floating_point() and v.numel() > 64
    assert floats, "the cell has no large float input: it tests nothing"


def test_config_literal_keeps_non_finite_floats():
    """NemotronH's config holds time_step_limit (0.0, inf): the script's literal must say float('inf'), not inf."""
    from harness.repro import _jsonable

    cfg = {"limit": (0.0, float("inf")), "low": float("-inf"), "nested": {"x": [float("nan")]}}
    back = eval(repr(_jsonable(cfg)))
    nan = back["nested"]["x"][0]
    assert back["limit"] == [0.0, float("inf")] and back["low"] == float("-inf") and nan != nan


MINIMAL = [
    "full-bert-full-reentrant-padded-gc_first",                        # equivalent
    "peft-bert-lora-reentrant-masked-adapter_first",                   # missing_grad on 4.x
    "peft-bert-pvera_seeded-non_reentrant-masked-adapter_first",       # mismatch, confirmed in float64
    "peft-llama-poly-non_reentrant-masked-gc_first",                   # gc_error
    "adapters-t5-loreft-non_reentrant-unmasked-gc_first",              # mismatch
    "adapters-llama-lora-non_reentrant-padded-adapter_first",          # equivalent, left padding
    "full-vit-full-non_reentrant-unmasked-gc_first",                   # equivalent, pixels stored exactly
]


@pytest.mark.parametrize("cell_id", MINIMAL)
def test_the_minimal_script_reaches_the_cells_outcome(tmp_path, capsys, cell_id):
    """`repro --minimal`: a short script of the user's calls and a plain compare; its verdict is the harness's."""
    backend = cell_id.split("-")[0]
    if backends.get(backend).missing:
        pytest.skip(backends.get(backend).missing)
    from harness.cells import SelectionError, find
    from harness.repro import minimal_script

    try:
        cell = find(cell_id)
    except SelectionError:   # a method of a later peft
        pytest.skip(f"{cell_id} is not in the matrix of these versions")
    want = Runner().run_cell(cell)["outcome"]
    src = minimal_script(cell_id)
    batches = src[src.index("BATCHES = ["):src.index("\n]\n", src.index("BATCHES = ["))]
    assert len(src.splitlines()) - len(batches.splitlines()) < 150   # what a reader reads: all but the data
    imported = set(re.findall(r"^(?:import|from) (\w+)", src, re.M))
    assert imported <= {"base64", "os", "sys", "warnings", "numpy", "torch", "transformers", "peft", "adapters", "copy"}
    path = tmp_path / "minimal.py"
    path.write_text(src)
    if cell_id == MINIMAL[0]:   # alone, with no harness on the path
        q = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env={**ENV, "PYTHONPATH": ""},
                           capture_output=True, text=True, timeout=600)
        out, rc = q.stdout + q.stderr, q.returncode
    else:
        import runpy

        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(path), run_name="__main__")
        out, rc = capsys.readouterr().out, done.value.code
    m = re.search(r"^VERDICT: (\w+):", out, re.M)
    assert m and m.group(1) == want, out
    assert rc == (0 if want == "equivalent" else 1)


def test_minimal_refuses_what_it_does_not_cover_in_one_line(capsys):
    from harness import cli

    assert cli.main(["repro", "peft-llama-lora-reentrant-masked-gc_first-switch", "--minimal"]) == 2
    err = capsys.readouterr().err
    assert "--minimal writes the plain loop" in err and len(err.strip().splitlines()) == 1
