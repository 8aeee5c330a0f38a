"""The test suite's shared helpers (tests/ import them: `from conftest import zoo`). The harness's pytest plugin
(the matrix as tests, `pytest --gc-*` options) is the installable `pytest11` entry harness/pytest_plugin.py."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
ENV = dict(os.environ, HF_HUB_OFFLINE="1")   # for the harness's processes a test starts


def tool(name: str, folder: str = "tools"):
    """tools/NAME.py (or benchmarks/NAME.py) imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def zoo(model_type: str, backend: str = "full"):
    """The zoo's spec of a model type, or a skip where the installed transformers does not cover it: it has no such
    type, or the zoo was not surveyed on this release (the survey tables are of the releases in harness/tables/)."""
    from harness.archs import archs_for

    spec = archs_for(backend).get(model_type)
    if spec is None:
        import transformers

        from harness.archs import zoo_survey

        pytest.skip(f"{model_type} is not covered on transformers {transformers.__version__}: "
                    f"{zoo_survey()[1].get(model_type, 'no such model type')}")
    return spec


# ---- faults in the checkpoint machinery ------------------------------------------------------------------------
def in_recompute() -> bool:
    """True inside a backward (where a checkpoint recomputes its segment)."""
    import torch

    return torch._C._current_graph_task_id() != -1


def checkpoint_holders() -> list:
    """The modules that took torch's checkpoint function (the libraries imported first, as a user's script has
    them before it trains)."""
    import transformers.modeling_utils  # noqa: F401
    from torch.utils.checkpoint import checkpoint as real

    from harness import backends

    if not backends.get("adapters").missing:
        import adapters.model_mixin  # noqa: F401
    return [m for m in list(sys.modules.values()) if getattr(m, "__dict__", {}).get("checkpoint") is real]


def install_fault(monkeypatch, fake) -> list[str]:
    """Put `fake` (called as torch's checkpoint) wherever torch's checkpoint was taken from, for one test; the
    modules patched."""
    holders = checkpoint_holders()
    for module in holders:
        monkeypatch.setattr(module, "checkpoint", fake)
    return [m.__name__ for m in holders]


@contextlib.contextmanager
def fault_installed(fake):
    """The same in a process without pytest (a rank): torch's checkpoint replaced by `fake(real, fn, *a, **kw)`
    while the block runs."""
    from torch.utils.checkpoint import checkpoint as real

    holders = checkpoint_holders()
    for module in holders:
        module.checkpoint = lambda fn, *a, **kw: fake(real, fn, *a, **kw)
    try:
        yield
    finally:
        for module in holders:
            module.checkpoint = real
