"""Every option of `python -m harness run|calibrate` and of the pytest plugin, defined once: flag, default, help.

The command line (harness/cli.py) and pytest (harness/pytest_plugin.py) both add them from here, so a filter, a
limit or a default means the same in either. Two differences are deliberate and stated on the option: the tier
(`harness run` selects the whole product unless told otherwise, `pytest` the CI covering set) and `--timeout`, which
pytest-timeout owns under pytest, so the per-run limit is `--cell-timeout` in both (the CLI keeps `--timeout` as
another name for it). Importing this module imports no torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import AXES, OPTIONS


@dataclass(frozen=True)
class Option:
    flag: str                 # the long flag, e.g. "--cell-timeout"
    help: str
    default: Any = None
    type: Any = None
    metavar: str | None = None
    pytest_default: Any = ...   # where pytest's default differs from the command line's (...: the same)
    aliases: tuple[str, ...] = ()   # other flags of the command line for the same option

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def add(self, add_option, pytest: bool = False) -> None:
        """Add the option through argparse's add_argument or pytest's addoption (the same keywords)."""
        default = self.default if not pytest or self.pytest_default is ... else self.pytest_default
        kwargs = {k: v for k, v in dict(type=self.type, metavar=self.metavar).items() if v is not None}
        flags = (self.flag,) if pytest else (self.flag, *self.aliases)
        add_option(*flags, dest=self.dest, default=default, help=self.help.format(default=default), **kwargs)


FILTERS = tuple(Option(f"--{o}", f"comma-separated {o} values (default: all)") for o in OPTIONS)
assert tuple(f.dest for f in FILTERS) == AXES
TIER = Option("--tier", "default (the CI covering set) or full (the whole product); default: {default}",
              default="full", pytest_default="default")
SHARD = Option("--shard", "only the K-th of N disjoint parts (split by baseline)", metavar="K/N")
STEPS = Option("--steps", "optimizer steps per run (default {default})", default=3, type=int)
DTYPE = Option("--dtype", "dtype the model trains in (default {default})", default="float32")
DEVICE = Option("--device", "device the model trains on (default {default})", default="cpu")
CELL_TIMEOUT = Option("--cell-timeout", "seconds per training run of a cell; a run past it is that cell's outcome "
                      "(default {default})", default=300.0, type=float, aliases=("--timeout",))
MEMORY_GB = Option("--memory-gb", "address-space cap of the process (of each xdist worker); 0 for none "
                   "(default {default})", default=8.0, type=float)

# check my setup (harness/own.py): the user's configs as this process's registry entries
MODEL_CONFIG = Option("--model-config", "your model's config.json (or its folder): its model type's cells, on the "
                      "config shrunk by the zoo's rule, keeping its switches (windows, rope, MoE routing, layer "
                      "types, ties)", metavar="PATH")
METHOD_CONFIG = Option("--method-config", "your peft adapter_config.json / LoraConfig JSON, or adapters config JSON "
                       "(or its folder): the cells of the method it is a variant of, training your config",
                       metavar="PATH")
SEQ_LEN = Option("--seq-len", "tokens per row of the synthetic batches (default 10; more reaches sliding windows and "
                 "chunked attention)", type=int, metavar="N")
WEIGHTS = Option("--weights", "a local checkpoint folder (config.json + weights), trained unshrunk: needs the "
                 "memory of the real model", metavar="DIR")
OWN = (MODEL_CONFIG, METHOD_CONFIG, SEQ_LEN, WEIGHTS)

RUN = (*FILTERS, TIER, SHARD, STEPS, DTYPE, DEVICE, CELL_TIMEOUT, MEMORY_GB, *OWN)   # `harness run` and pytest
# the calibration measures plain runs of the plain loop (its tables hold for every recipe): no recipe filter
# (and in one process: a launch over several trains the same plain runs)
CALIBRATE = (*(f for f in FILTERS if f.dest not in ("recipe", "parallel")), SHARD, CELL_TIMEOUT, MEMORY_GB)


def check_memory_gb(value: float) -> str | None:
    """The one-line complaint about a --memory-gb value, or None."""
    return "--memory-gb must be >= 0 (0: no cap)" if value < 0 else None
