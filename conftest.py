"""pytest options mirroring `python -m harness run`, and the matrix parametrisation.

Cells that share a baseline carry the same xdist_group, so under `--dist loadgroup` (set in
pyproject's addopts) they run on one worker and pay for the baseline once.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

def pytest_addoption(parser):
    from harness import OPTIONS

    g = parser.getgroup("harness", "gradient-checkpointing equivalence matrix")
    for axis in OPTIONS:
        g.addoption(f"--{axis}", default=None, help=f"comma-separated {axis} values (default: all)")
    g.addoption("--tier", default="default", help="default (CI covering set) or full (the whole product)")
    g.addoption("--shard", default=None, metavar="K/N", help="only the K-th of N disjoint parts (split by baseline)")
    g.addoption("--steps", type=int, default=3, help="optimizer steps per run (default 3)")
    g.addoption("--dtype", default="float32")
    g.addoption("--device", default="cpu")
    g.addoption("--cell-timeout", type=float, default=300.0, help="seconds per training run of a cell")
    g.addoption("--memory-gb", type=float, default=8.0, help="address-space cap per worker; 0 for none (default 8)")


def _selection(config):
    from harness.cells import AXES, SelectionError, select

    if not hasattr(config, "_harness_cells"):
        try:
            config._harness_cells = select(**{a: config.getoption(a) for a in AXES},
                                           tier=config.getoption("tier"), shard=config.getoption("shard"))
        except SelectionError as exc:
            raise pytest.UsageError(str(exc)) from None
    return config._harness_cells


def pytest_generate_tests(metafunc):
    if "cell" not in metafunc.fixturenames:
        return
    cells = _selection(metafunc.config)
    metafunc.parametrize("cell", [
        pytest.param(c, id=c.id, marks=pytest.mark.xdist_group(c.baseline_key)) for c in cells])


@pytest.fixture(scope="session")
def runner(pytestconfig):
    from harness.run import DTYPES, Options, Runner, cap_memory

    dtype = pytestconfig.getoption("dtype")
    if dtype not in DTYPES:
        raise pytest.UsageError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    if pytestconfig.getoption("memory_gb") < 0:
        raise pytest.UsageError("--memory-gb must be >= 0 (0: no cap)")
    cap_memory(pytestconfig.getoption("memory_gb"))
    return Runner(Options(steps=pytestconfig.getoption("steps"), dtype=dtype,
                          device=pytestconfig.getoption("device"),
                          timeout=pytestconfig.getoption("cell_timeout")))
