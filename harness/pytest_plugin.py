"""The pytest plugin (registered through the `pytest11` entry point): the harness's options, the matrix
parametrisation of any test that takes a `cell`, and the session's `runner`.

Options are harness/options.py's, as on the command line. Cells that share a baseline carry the same xdist_group,
so under `--dist loadgroup` (pyproject's addopts) they run on one worker and pay for the baseline once. Importing
this module imports no torch: pytest loads it in every session of an environment where the harness is installed.
"""
from __future__ import annotations

import os

import pytest

from . import options

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def pytest_addoption(parser):
    g = parser.getgroup("harness", "gradient-checkpointing equivalence matrix")
    for option in options.RUN:
        option.add(g.addoption, pytest=True)


def _selection(config):
    from .cells import AXES, SelectionError, select

    if not hasattr(config, "_harness_cells"):
        from . import own

        try:
            implied = own.install(**{o.dest: config.getoption(o.dest) for o in options.OWN})
            filters = {a: config.getoption(a) or implied.get(a) for a in AXES}
            config._harness_cells = select(**filters, tier=config.getoption("tier"), shard=config.getoption("shard"))
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
    from .run import Options, Runner, cap_memory
    from .train import DTYPES

    dtype = pytestconfig.getoption("dtype")
    if dtype not in DTYPES:
        raise pytest.UsageError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    complaint = options.check_memory_gb(pytestconfig.getoption("memory_gb"))
    if complaint:
        raise pytest.UsageError(complaint)
    cap_memory(pytestconfig.getoption("memory_gb"))
    return Runner(Options(steps=pytestconfig.getoption("steps"), dtype=dtype,
                          device=pytestconfig.getoption("device"),
                          timeout=pytestconfig.getoption("cell_timeout")))
