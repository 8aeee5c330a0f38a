"""The matrix: cells, their ids, filters and tiers."""
from __future__ import annotations

import re
import zlib
from dataclasses import asdict, dataclass
from typing import Iterable, Iterator

from . import AXES, backends
from .archs import archs_for
from .archs.base import INPUTS, ArchSpec, routes_experts
from .backends.base import GC_MODES, TORCH_GC_MODES
from .launch import PARALLEL, SINGLE, parallel_applies
from .train import RECIPES, recipe_applies

TIERS = ("default", "full")


@dataclass(frozen=True, order=True)
class Cell:
    backend: str
    arch: str
    method: str
    gc_mode: str
    inputs: str
    order: str
    task: str
    primary_task: bool = True
    modality: str = "text"      # the arch's (text | vision | audio | multimodal): not part of the id, matchable
    recipe: str = "loop"        # how it trains (harness.train.RECIPES); in the id unless the plain loop
    parallel: str = SINGLE      # how it launches (harness.launch.PARALLEL); in the id unless one process

    @property
    def id(self) -> str:
        base = f"{self.backend}-{self.arch}-{self.method}-{self.gc_mode}-{self.inputs}-{self.order}"
        base = base if self.primary_task else f"{base}-{self.task}"
        base = base if self.recipe == "loop" else f"{base}-{self.recipe}"
        return base if self.parallel == SINGLE else f"{base}-{self.parallel}"

    @property
    def baseline_key(self) -> str:
        """Cells with equal keys share one baseline (and, under xdist, one worker)."""
        return baseline_key(self.backend, self.arch, self.method, self.inputs, self.task, self.recipe, self.parallel)

    def fields(self) -> dict:
        d = asdict(self)
        d.pop("primary_task")
        return d


def baseline_key(backend: str, arch: str, method: str, inputs: str, task: str, recipe: str = "loop",
                 parallel: str = SINGLE) -> str:
    key = f"{backend}-{arch}-{method}-{inputs}-{task}"
    key = key if recipe == "loop" else f"{key}-{recipe}"
    return key if parallel == SINGLE else f"{key}-{parallel}"


class SelectionError(ValueError):
    """A filter value that names nothing; the message is the one line shown to the user."""


def split_values(value: str | Iterable[str] | None) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    out = [v.strip() for v in value if v and v.strip()]
    return out or None


def valid_choices(backend_names: Iterable[str]) -> dict[str, list[str]]:
    archs, methods, tasks, gc_modes, orders = set(), set(), set(), {}, {}
    for b in backend_names:
        be = backends.get(b)
        archs |= set(archs_for(b))
        tasks |= {t for a in archs_for(b).values() for t in a.tasks}
        methods |= set(be.methods)
        gc_modes.update(dict.fromkeys(be.gc_modes))
        orders.update(dict.fromkeys(be.orders))
    return {"backend": list(backends.BACKEND_NAMES), "arch": sorted(archs), "method": sorted(methods),
            "gc_mode": list(gc_modes), "inputs": list(INPUTS), "order": list(orders), "task": sorted(tasks),
            "recipe": list(RECIPES), "parallel": list(PARALLEL), "tier": list(TIERS)}


LISTED = 20   # an axis with more values than this names the close ones and points to `harness list`


def check_values(axis: str, wanted: list[str] | None, valid: list[str]):
    if wanted is None:
        return
    bad = [w for w in wanted if w not in valid]
    if bad:
        import difflib

        near = [m for w in bad for m in difflib.get_close_matches(w, valid, n=1)]
        hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
        known = (f"valid: {', '.join(valid)}" if len(valid) <= LISTED else
                 f"{len(valid)} valid, `python -m harness list` names them")
        raise SelectionError(f"unknown {axis} {', '.join(map(repr, bad))}{hint}; {known}")


def _cells_of(backend: str, arch: ArchSpec, tasks: Iterable[str], recipes: Iterable[str] = RECIPES,
              methods: Iterable[str] | None = None, shard: tuple[int, int] | None = None,
              **only) -> Iterator[Cell]:
    """The cells of `arch` for these tasks and recipes, in the product's order; `methods`, `shard` and `only`
    (inputs=, gc_mode=, order=, parallel=: a value or a list) narrow it before any cell is made, so that only the
    methods asked for, with a baseline in the shard, have their applicability computed."""
    be = backends.get(backend)
    launched = [(r, p) for r in recipes for p in _narrowed(PARALLEL, only.get("parallel"))
                if parallel_applies(p, r) is None]   # (recipe, launch): how a step trains, how it is launched
    for task in tasks:
        for method in [be.methods[m] for m in methods] if methods is not None else be.methods.values():
            in_part = {i: [(r, p) for r, p in launched
                           if key_in_shard(baseline_key(backend, arch.name, method.name, i, task, r, p), shard)]
                       for i in _narrowed(arch.inputs, only.get("inputs"))}   # inputs -> its recipes in the shard
            in_part = {i: rs for i, rs in in_part.items() if rs}
            if not in_part or method.applies(arch, task) is not None:
                continue
            for i, part_recipes in in_part.items():
                for gc_mode in _narrowed(be.gc_modes, only.get("gc_mode")):
                    for order in _narrowed(be.orders, only.get("order")):
                        for recipe, parallel in part_recipes:
                            if recipe_applies(recipe, be, gc_mode, order, method, arch) is not None:
                                continue
                            yield Cell(backend, arch.name, method.name, gc_mode, i, order, task,
                                       task == arch.primary_task, arch.modality, recipe, parallel)


def _narrowed(values: Iterable[str], value: str | list[str] | None) -> Iterable[str]:
    if value is None:
        return values
    wanted = [value] if isinstance(value, str) else value
    return [v for v in values if v in wanted]


def full_product(backend: str, all_tasks: bool = True, archs: Iterable[str] | None = None,
                 recipes: Iterable[str] | None = None, methods: Iterable[str] | None = None,
                 tasks: Iterable[str] | None = None, shard: tuple[int, int] | None = None, **only) -> list[Cell]:
    """Every cell of `backend`; with `archs` / `recipes` / `methods` / `tasks` / `shard` / `only` (inputs=,
    gc_mode=, order=, parallel=), only those cells (in the same order)."""
    return list(product_cells(backend, all_tasks, archs, recipes, methods, tasks, shard, **only))


def product_cells(backend: str, all_tasks: bool = True, archs: Iterable[str] | None = None,
                  recipes: Iterable[str] | None = None, methods: Iterable[str] | None = None,
                  tasks: Iterable[str] | None = None, shard: tuple[int, int] | None = None,
                  **only) -> Iterator[Cell]:
    """full_product's cells one at a time (a product of millions need not be held to ask what is in it)."""
    be = backends.get(backend)
    if methods is not None:   # in the product's order
        methods = [m for m in be.methods if m in methods]
    for arch in archs_for(backend).values():
        if archs is None or arch.name in archs:
            arch_tasks = arch.tasks if all_tasks else arch.tasks[:1]
            yield from _cells_of(backend, arch, [t for t in arch_tasks if tasks is None or t in tasks],
                                 recipes or RECIPES, methods, shard, **only)


def default_tier(backend: str) -> list[Cell]:
    """A covering set on cheap cells: every arch once (its primary task and the backend's default
    method), every method once (on the reference arch), every task once, the aux_outputs recipe on every
    mixture-of-experts model of the zoo, every axis value once."""
    be = backends.get(backend)
    archs = archs_for(backend)
    if not archs:
        return []
    ref = archs.get(be.reference_arch) or next(iter(archs.values()))
    default_method = next(iter(be.methods))
    chosen: dict[str, Cell] = {}

    def first(arch: ArchSpec, task: str, method: str | None = None, **fix) -> Cell | None:
        """The cell of `arch` and `task` with these settings and `method`, or the first method that applies (the
        first such cell of the product's order; only the asked method's applicability is computed)."""
        want = dict(gc_mode=be.gc_modes[0], inputs=arch.inputs[0], order=be.orders[0], parallel=SINGLE)
        want.update(fix)
        recipe = want.pop("recipe", "loop")
        return next(_cells_of(backend, arch, [task], [recipe], [method] if method else None, **want), None)

    def add(c: Cell | None):
        if c is not None:
            chosen.setdefault(c.id, c)

    # every arch once, or the reference arch and the backend's default_archs
    once = list(archs.values()) if be.every_arch_in_default else [ref, *filter(None, map(archs.get, be.default_archs))]
    for arch in once:
        add(first(arch, arch.primary_task, default_method) or first(arch, arch.primary_task))
    for name in be.methods:                           # every method once, on the first arch it applies to
        for arch in [ref, *archs.values()]:
            c = first(arch, arch.primary_task, name, order=be.orders[-1])
            if c:
                add(c)
                break
    seen_tasks = {c.task for c in chosen.values()}
    for arch in archs.values():                       # every task once
        for task in arch.tasks:
            if task not in seen_tasks:
                add(first(arch, task, default_method) or first(arch, task))
                seen_tasks.add(task)
    if be.name != "adapters":                         # aux_outputs on every mixture-of-experts model of the zoo
        for arch in archs.values() if not be.default_archs else once:
            if routes_experts(arch):
                add(first(arch, arch.primary_task, default_method, recipe="aux_outputs")
                    or first(arch, arch.primary_task, recipe="aux_outputs"))
    if be.name in LAUNCHED:   # the launches and torch's checkpoint API on a decoder and an encoder
        for arch in filter(None, (archs.get(a) for a in LAUNCH_ARCHS)):
            for parallel in PARALLEL:
                for gc_mode in (*GC_MODES, *TORCH_GC_MODES):
                    if parallel in (TORCH_GC_LAUNCHES if gc_mode in TORCH_GC_MODES else PARALLEL) and (
                            parallel != SINGLE or gc_mode in TORCH_GC_MODES):
                        add(first(arch, arch.primary_task, default_method, gc_mode=gc_mode, parallel=parallel))
    for gc_mode in be.gc_modes:                        # every gc mode in every order, on the reference arch
        for order in be.orders:
            add(first(ref, ref.primary_task, default_method, gc_mode=gc_mode, order=order))
    for axis, values in (("gc_mode", be.gc_modes), ("inputs", INPUTS), ("order", be.orders), ("recipe", RECIPES),
                         ("parallel", PARALLEL)):
        for value in values:                          # every axis value once, on the reference arch
            if not any(getattr(c, axis) == value for c in chosen.values()):
                # a recipe in the first order it applies in (Trainer checkpoints after the adapter)
                add(next(filter(None, (first(ref, ref.primary_task, default_method, **{"order": o, axis: value})
                                       for o in ([be.orders[0]] if axis == "order" else be.orders))), None))
    return sorted(chosen.values(), key=lambda c: (c.baseline_key, c.id))


LAUNCHED = ("peft", "full")      # the backends whose default tier covers every launch and torch gc mode ...
LAUNCH_ARCHS = ("llama", "bert")   # ... on these archs (a decoder, an encoder): transformers' gc modes under every
TORCH_GC_LAUNCHES = (SINGLE, "fsdp", "fsdp1")   # launch, torch's under one process and FSDP (accelerate's plugin)


def parse_shard(spec: str | None) -> tuple[int, int] | None:
    """``K/N`` (1 <= K <= N) -> (K, N); None for no sharding."""
    if not spec:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise SelectionError(f"bad shard {spec!r}; valid: K/N with 1 <= K <= N, e.g. 1/4")
    return int(m.group(1)), int(m.group(2))


def in_shard(cell: Cell, shard: tuple[int, int] | None) -> bool:
    """Shards split by baseline (cells sharing one stay together), stable across runs and machines."""
    return key_in_shard(cell.baseline_key, shard)


def key_in_shard(baseline_key: str, shard: tuple[int, int] | None) -> bool:
    if shard is None:
        return True
    k, n = shard
    return zlib.crc32(baseline_key.encode()) % n == k - 1


def select(backend=None, arch=None, method=None, gc_mode=None, inputs=None, order=None, task=None, recipe=None,
           parallel=None, tier: str = "full", available_only: bool = True, shard: str | None = None) -> list[Cell]:
    """Cells matching the comma-separated filters (one per AXES), and in shard ``K/N`` when given;
    SelectionError (one line) on unknown values."""
    part = parse_shard(shard)
    f = {k: split_values(v) for k, v in dict(backend=backend, arch=arch, method=method, gc_mode=gc_mode,
                                         inputs=inputs, order=order, task=task, recipe=recipe,
                                         parallel=parallel).items()}
    if tier not in TIERS:
        raise SelectionError(f"unknown tier {tier!r}; valid: {', '.join(TIERS)}")
    check_values("backend", f["backend"], list(backends.BACKEND_NAMES))
    names = f["backend"] or list(backends.BACKEND_NAMES)
    valid = valid_choices(names)
    for axis in AXES[1:]:
        check_values(axis, f[axis], valid[axis])
    if f["parallel"] and f["recipe"]:
        refused = [parallel_applies(p, r) for p in f["parallel"] for r in f["recipe"]]
        if all(refused):
            raise SelectionError(f"--parallel {','.join(f['parallel'])} with --recipe {','.join(f['recipe'])}: "
                                 f"{refused[0]}")
    cells: list[Cell] = []
    for b in names:
        if available_only and backends.get(b).missing:
            continue
        pool = default_tier(b) if tier == "default" else full_product(
            b, archs=f["arch"], recipes=f["recipe"], methods=f["method"], tasks=f["task"], shard=part,
            inputs=f["inputs"], gc_mode=f["gc_mode"], order=f["order"], parallel=f["parallel"])
        cells.extend(c for c in pool if all(f[a] is None or getattr(c, a) in f[a] for a in AXES)
                     and in_shard(c, part))
    return cells


def resolve(cell: Cell, archs: dict | None = None):
    """(arch spec, backend, method spec) of a cell: what the runner trains and a repro script is written from.
    `archs`: a registry to use instead of the backend's (tests' own archs)."""
    be = backends.get(cell.backend)
    return (archs or archs_for(cell.backend))[cell.arch], be, be.methods[cell.method]


def find(cell_id: str) -> Cell:
    """The cell with this id: only the cells of the archs the id can start with are made (an arch's name may hold
    a hyphen, so each arch whose name fits is tried)."""
    import difflib

    near: list[str] = []
    for b in backends.BACKEND_NAMES:
        if cell_id.startswith(b + "-"):
            archs = [a for a in archs_for(b) if cell_id.startswith(f"{b}-{a}-")]
            if not archs:   # a misspelt arch: the ids of the closest names
                head = cell_id[len(b) + 1:].split("-")[0]
                archs = difflib.get_close_matches(head, list(archs_for(b)), n=2)
            cells = full_product(b, archs=archs) if archs else []
            for c in cells:
                if c.id == cell_id:
                    return c
            near += difflib.get_close_matches(cell_id, [c.id for c in cells], n=1, cutoff=0.8)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise SelectionError(f"no cell has id {cell_id!r}{hint}; `python -m harness list` shows the axes")
