"""Run every bug-reproduction case in cases/ and check its verdict against the installed versions.

A case is a standalone script declaring, as plain data at module top:
    AFFECTED = {"package": "<PEP 440 specifier>", ...}  # bug present when ALL match
    REQUIRES = ["torch", "transformers>=4.49", ...]   # requirement strings; unmet -> skipped
    LINKS = ["https://..."]
    MACHINE = "name"   # optional: the bug shows only where this machine condition holds (expectations MACHINES)
It exits 0 when the libraries behave correctly, 1 when the bug is present, 2 when it
cannot run. Expected exit code: 1 if every AFFECTED specifier matches the installed
version of its package (and the MACHINE condition holds), else 0. Anything else fails, with the script's output.
"""

import ast
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

CASES_DIR = Path(__file__).resolve().parent.parent / "cases"
TIMEOUT_S = 300
CASES = sorted(p for p in CASES_DIR.glob("*.py") if not p.name.startswith("_"))


def read_declarations(path):
    """Read AFFECTED / REQUIRES / LINKS from the module top without importing it."""
    decl = {}
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in ("AFFECTED", "REQUIRES", "LINKS", "MACHINE"):
                decl[target.id] = ast.literal_eval(node.value)
    return decl


def installed_version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def run_forked(path, timeout: float) -> subprocess.CompletedProcess:
    """Run a case as `python CASE` would, in a process forked from this worker: its own process (a case may patch
    whatever it likes), without paying torch's and transformers' imports again (about 3 s a case)."""
    import multiprocessing
    import tempfile

    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        child = multiprocessing.get_context("fork").Process(target=_case_main, args=(str(path), out.fileno(),
                                                                                       err.fileno()))
        child.start()
        child.join(timeout)
        if child.is_alive():
            child.kill()
            child.join()
            out.seek(0), err.seek(0)
            raise subprocess.TimeoutExpired(str(path), timeout, output=out.read(), stderr=err.read())
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess([str(path)], child.exitcode, out.read(), err.read())


def _case_main(path: str, out_fd: int, err_fd: int):
    import runpy
    import traceback

    os.dup2(out_fd, 1), os.dup2(err_fd, 2)
    sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    os.chdir(CASES_DIR.parent)
    sys.argv = [path]
    code = 0
    try:
        import torch

        torch.set_num_threads(1)   # no OpenMP pool of the parent's in the child
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a case that crashes: its traceback, exit 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)


def test_cases_found():
    assert CASES, f"no cases found in {CASES_DIR}"


@pytest.mark.parametrize("case", CASES, ids=[p.stem for p in CASES])
def test_case(case):
    decl = read_declarations(case)
    for key in ("AFFECTED", "REQUIRES", "LINKS"):
        assert key in decl, f"{case.name} does not declare {key} at module top"
    affected, requires = decl["AFFECTED"], decl["REQUIRES"]
    assert isinstance(affected, dict) and affected, f"{case.name}: AFFECTED must be a non-empty dict"
    assert decl["LINKS"], f"{case.name}: LINKS must name the upstream issue/PR"

    # a requirement may carry a version: a model the installed release does not have yet is no verdict
    needs = [Requirement(r) for r in dict.fromkeys([*requires, *affected])]
    missing = [str(r) for r in needs if installed_version(r.name) is None
               or not r.specifier.contains(Version(installed_version(r.name)), prereleases=True)]
    if missing:
        pytest.skip(f"{case.name} needs {', '.join(missing)}, not installed")

    versions = {dist: installed_version(dist) for dist in affected}
    # prereleases=True so that e.g. "<4.49.0" also matches 4.49.0.dev0 builds.
    is_affected = all(
        SpecifierSet(spec, prereleases=True).contains(Version(versions[dist]))
        for dist, spec in affected.items()
    )
    if "MACHINE" in decl:   # e.g. a CPU feature the library's code path depends on
        from harness.expectations import MACHINES

        is_affected = is_affected and MACHINES[decl["MACHINE"]]()
    expected = 1 if is_affected else 0

    try:
        proc = run_forked(case, TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{case.name} timed out after {TIMEOUT_S}s\n--- stdout ---\n{exc.stdout}\n--- stderr ---\n"
                    f"{(exc.stderr or '')[-5000:]}")

    state = ", ".join(f"{dist}=={versions[dist]} vs {spec!r}" for dist, spec in affected.items())
    assert proc.returncode == expected, (
        f"{case.name} exited {proc.returncode}, expected {expected} "
        f"({'bug expected' if is_affected else 'fixed version, bug not expected'}: {state})\n"
        f"links: {', '.join(decl['LINKS'])}\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr[-5000:]}"
    )
