"""The runner: cells trained as twins (harness/train.py) and judged.

A cell's plain baseline is shared by every checkpointed variant of the cell and run a second time (the replay, the
noise floor) once a checkpointed run differs from it (docs/outcomes.md, "Noise floor and replay"); a float32
difference that may be rounding is settled in float64; a difference that the cache switch may explain gets the cache
triage; the verdict is judged against the known expectations.
"""
from __future__ import annotations

import gc
import logging
from collections import OrderedDict
from dataclasses import dataclass, replace
import time

import torch

from . import backends
from .outcomes import Outcome
from .launch import SINGLE
from .launch.pool import train_ranks
from .train import Trace, cache_asked, cache_cause, judged_dtype, train

@dataclass
class Options:
    steps: int = 3
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    lr: float = 0.1
    timeout: float | None = 300.0   # per training run; a hanging run becomes that cell's outcome
    threads: int = 1                # torch intra-op threads: tiny models only lose from more (and
                                    # xdist workers oversubscribe the cores): 10x slower measured at 2


def cap_memory(gb: float | None) -> None:
    """Cap this process's address space: a cell whose model still comes out huge then fails with its own
    out-of-memory error (that cell's outcome) instead of taking the machine and every other worker down."""
    if not gb:
        return
    import resource

    cap = int(gb * 2**30)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


class Runner:
    """Runs cells; keeps the last few baselines (and their replays, once run) so that cells sharing one pay for it
    once."""

    def __init__(self, options: Options | None = None, cache_size: int = 8, archs: dict | None = None):
        self.options = options or Options()
        logging.getLogger("adapters").setLevel(logging.ERROR)  # per-call chatter, not findings
        torch.set_num_threads(self.options.threads)
        self.archs = archs  # None: the registry of each cell's backend
        # (baseline key, dtype or None) -> [baseline, replay or None]
        self._cache: OrderedDict[tuple, list] = OrderedDict()
        self.cache_size = cache_size
        self._arch_seen: str | None = None
        gc.set_threshold(100_000, 50, 100)

    def _settle_heap(self, arch: str) -> None:
        """Keep Python's cyclic GC off the ~0.5M objects of the imported libraries: freeze what is
        alive whenever a new arch (and its freshly imported modeling module) comes in. Full
        collections over them otherwise cost ~20 ms each, charged to whatever allocates (`python
        benchmarks/cell_times.py --backend peft --arch bert,llama --method lora,loha,ia3 --tier full`:
        median 101 -> 83 ms per cell)."""
        if arch != self._arch_seen:
            self._arch_seen = arch
            gc.collect()
            gc.freeze()

    def _train(self, cell, gc_mode=None, dtype: str | None = None, cache: bool = True) -> Trace:
        from .cells import resolve

        o = self.options
        if dtype is not None:
            o = replace(o, dtype=dtype)
        if cell.parallel != SINGLE:   # trained by the launch's rank processes (harness/launch/)
            return train_ranks(cell, gc_mode, o, cache)
        arch, be, method = resolve(cell, self.archs)
        return train(arch, cell.task, be, method,
                     inputs=cell.inputs, gc_mode=gc_mode, order=cell.order, steps=o.steps, seed=o.seed,
                     lr=o.lr, dtype=o.dtype, device=o.device, timeout=o.timeout, cache=cache,
                     training=cell.recipe)

    def _judged(self, cell) -> str:
        """The tolerance the cell's runs are judged at (an autocast cell: bfloat16's)."""
        return judged_dtype(cell.recipe, self.options.dtype)

    def plain(self, cell) -> Trace:
        """One plain (not checkpointed) training run of the cell, trained as its baseline is."""
        self._settle_heap(cell.arch)
        return self._train(cell, None)

    def forget(self) -> None:
        """Drop the cached baselines and replays: the next cell trains its own."""
        self._cache.clear()

    def _cached(self, cell, dtype: str | None = None) -> list:
        key = (cell.baseline_key, dtype)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        self._cache[key] = entry = [self._train(cell, None, dtype), None]
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return entry

    def baseline(self, cell, dtype: str | None = None) -> Trace:
        """The cell's plain baseline (in `dtype`: the float64 rerun's), run once for the cells that share it."""
        return self._cached(cell, dtype)[0]

    def replay(self, cell, dtype: str | None = None) -> Trace | None:
        """The baseline's replay (the noise floor), run once for the cells that share it; None when the baseline
        failed."""
        entry = self._cached(cell, dtype)
        if entry[1] is None and entry[0].ok:
            entry[1] = self._train(cell, None, dtype)
        return entry[1]

    def _verdict(self, cell, cand: Trace, dtype: str | None, judged: str):
        """The candidate against the baseline, with the replay only where the two differ (compare.reproduces)."""
        from .compare import compare, reproduces

        base = self.baseline(cell, dtype)
        verdict = compare(base, None, cand, judged)
        return verdict if reproduces(verdict) else compare(base, self.replay(cell, dtype), cand, judged)

    def _confirm_in_float64(self, cell, verdict):
        """Rerun the cell in float64 when its float32 verdict may be rounding (compare.asks_float64); the verdict
        and, when float64 confirms a value difference, the float64 checkpointed trace (the cache triage compares
        in float64 then). The float64 baseline is shared by the cells that share the float32 one."""
        from .compare import asks_float64, settle_in_float64

        if not asks_float64(verdict, self._judged(cell)):
            return verdict, None
        be = backends.get(cell.backend)
        cannot = be.no_float64 or getattr(be.methods.get(cell.method), "no_float64", "")
        if cannot:   # the float32 verdict stands; a difference beyond float32 rounding is not vouched for
            beyond = verdict.outcome is Outcome.EQUIVALENT
            verdict.detail += (f"; float64 rerun: not run, {cannot}: the float32 verdict stands"
                               + (f", and its difference beyond float32 rounding (max rel {verdict.max_rel_diff:.3g})"
                                  " is not vouched for" if beyond else ""))
            return verdict, None
        b64 = self.baseline(cell, "float64")
        c64 = self._train(cell, cell.gc_mode, "float64")
        verdict, confirmed = settle_in_float64(verdict, self._verdict(cell, c64, "float64", "float64"), b64,
                                               self._judged(cell))
        return verdict, (c64 if confirmed else None)

    def _cache_triage(self, cell, verdict, cand, c64) -> bool | None:
        """Checkpointing changes one thing besides recomputing: in training it turns use_cache off, and a model
        may compute otherwise without its cache (Zamba2's pad mask, Qwen3-VL's packed-sequence mask, the memory
        layout of cached K/V, NemotronH's no-cache kernel branch). A plain run with use_cache off tells the two
        apart (:func:`cache_cause`), in float64 where the float32 mismatch was confirmed there; None when not asked
        (:func:`cache_asked`)."""
        if not cache_asked(verdict.outcome, cell.gc_mode == "reentrant", cand):
            return None
        dtype, judged, cand = (("float64", "float64", c64) if c64 is not None else
                               (self.options.dtype, self._judged(cell), cand))
        same, line = cache_cause(self._train(cell, None, dtype, cache=False), cand, judged)
        if line:
            verdict.detail += "; " + line
        return same

    def run_cell(self, cell) -> dict:
        from .compare import compare
        from .expectations import judge

        self._settle_heap(cell.arch)
        t0 = time.perf_counter()
        cand = self._train(cell, cell.gc_mode)
        if cand.unsupported and cand.error_stage == "enable_gc":
            # the library refuses checkpointing itself: no baseline is needed to say so
            verdict, cache_switch = compare(None, None, cand, self._judged(cell)), None
        else:
            verdict = self._verdict(cell, cand, None, self._judged(cell))
            verdict, c64 = self._confirm_in_float64(cell, verdict)
            cache_switch = self._cache_triage(cell, verdict, cand, c64)
        return {
            "id": cell.id, **cell.fields(),
            "outcome": verdict.outcome.value, **judge(cell.fields(), verdict.outcome.value),
            "detail": verdict.detail,
            "max_abs_diff": verdict.max_abs_diff, "max_rel_diff": verdict.max_rel_diff,
            "tolerance": verdict.tolerance, "noise_floor": verdict.noise_floor,
            "unexercised": verdict.unexercised, "cache_switch": cache_switch,
            "recomputed_segments": verdict.recomputed_segments, "saved_bytes": verdict.saved_bytes,
            "seconds": round(time.perf_counter() - t0, 4),
            # how a launch over several ranks dealt the data (the ranks' averaged gradient and the whole batch's)
            **({"launch": cand.launch} if cell.parallel != SINGLE else {}),
        }
