"""Report: versions, one line per cell with its plain verdict, the summary (outcomes, pivots by method and arch,
the broken cells by cause with the setting that was safe), the JSON contract (docs/design.md section 5)."""
from __future__ import annotations

import contextlib
import json
import os
import re
from collections import Counter, defaultdict

from . import AXIS_DEFAULTS
from .outcomes import BROKEN
from .versions import versions

# what an outcome means for the user, worst first (the report's heatmap colours a cell by the worst of its cells)
VERDICTS = ("broken, NEW", "broken, known", "nondeterministic", "not checkpointed", "plain fails", "unsupported",
            "safe, partly", "safe")
_WORD = {"equivalent": "safe", "error": "plain fails", "unsupported": "unsupported",
         "not_checkpointed": "not checkpointed", "nondeterministic": "nondeterministic"}
CASE = re.compile(r"cases/\w+\.py")


def verdict(result: dict) -> str:
    """safe (everything the recipe trains got a gradient and agreed); safe, partly (equivalent, but some of what it
    trains never got a non-zero gradient, or the baseline was not finite from some step: those are not vouched for);
    broken, known (checkpointing changes training, a recorded cause); broken, NEW (not recorded, or not as
    recorded); plain fails (training fails without checkpointing too); unsupported (the library refuses the
    combination); not checkpointed (accepted, nothing recomputed or saved); nondeterministic."""
    o = result["outcome"]
    if o in BROKEN:
        return "broken, known" if result["matches"] else "broken, NEW"
    if o == "equivalent" and partly(result):
        return "safe, partly"
    return _WORD[o]


def partly(result: dict) -> bool:
    """An equivalent cell that does not vouch for all it trains (its detail says what: "not vouched for")."""
    return "not vouched for" in result.get("detail", "")


def short(reason: str, limit: int = 110) -> str:
    """The first clause of a reason, for one line."""
    head = re.split(r"(?<=[a-z)\]'`])[.;:](?:\s|$)", reason, maxsplit=1)[0]
    return head if len(head) <= limit else head[:limit - 1].rstrip() + "…"


def line(result: dict) -> str:
    """`ok`/`FAIL` (as expected or not), the verdict, the id, the outcome, and for a cell that is not safe the cause
    and link on a second line."""
    mark = "ok  " if result["matches"] else "FAIL"
    exp = "" if result["expected"] == "equivalent" else f" (expected {result['expected']})"
    out = (f"{mark} {verdict(result):<16} {result['id']}: {result['outcome']}{exp} [{result['seconds']:.2f}s] "
           f"{result['detail']}")
    if result["outcome"] != "equivalent" and result.get("reason"):
        out += f"\n     {'':<16} cause: {short(result['reason'])} {result.get('link', '')}".rstrip()
    return out


def histogram(results: list[dict]) -> str:
    c = Counter(r["outcome"] for r in results)
    return ", ".join(f"{k}: {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))


def summary(results: list[dict]) -> str:
    bad = sum(not r["matches"] for r in results)
    return (f"{len(results)} cells: {histogram(results)}; "
            f"{len(results) - bad} as expected, {bad} not as expected; "
            f"cell time {sum(r.get('seconds', 0.0) for r in results):.0f} s{_partly(results)}")


def _partly(results: list[dict]) -> str:
    n = sum(r["outcome"] == "equivalent" and partly(r) for r in results)
    return f"; {n} of the equivalent cells safe only in part (tensors not vouched for)" if n else ""


def pivot(results: list[dict], axis: str, only_broken: bool = False) -> list[str]:
    """Verdict counts per value of `axis` (a table); `only_broken`: the rows with a broken or unexpected cell."""
    rows: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        rows[r.get(axis, AXIS_DEFAULTS.get(axis, ""))][verdict(r)] += 1
        rows[r.get(axis, AXIS_DEFAULTS.get(axis, ""))]["not as expected"] += not r["matches"]
    cols = [v for v in VERDICTS if any(c[v] for c in rows.values())] + ["not as expected"]
    shown = sorted(k for k, c in rows.items()
                   if not only_broken or c["broken, NEW"] or c["broken, known"] or c["not as expected"])
    if not shown:
        return []
    width = max(len(axis), *map(len, shown))
    out = [f"  {axis:<{width}} " + " ".join(f"{c:>{max(len(c), 5)}}" for c in cols)]
    out += [f"  {k:<{width}} " + " ".join(f"{rows[k][c] or '.':>{max(len(c), 5)}}" for c in cols) for k in shown]
    if len(shown) < len(rows):
        out.append(f"  ({len(rows) - len(shown)} other {axis} values: no broken cell, all as expected)")
    return out


SAFE_AXES = ("gc_mode", "order", "inputs", "recipe")   # settings a user can change, nearest first


def safe_settings(results: list[dict]):
    """A function giving a cell the nearest setting measured safe in `results` for its backend, arch, method and task:
    the same cell with one of SAFE_AXES changed (the first axis that has one), e.g. "gc_mode=non_reentrant"; "" if
    none. Indexed once, so a product's summary stays linear."""
    same = ("backend", "arch", "method", "task")

    def key(r: dict, axis: str) -> tuple:
        return tuple(r.get(a, AXIS_DEFAULTS.get(a)) for a in same + SAFE_AXES if a != axis)

    safe: dict[tuple, dict[str, list]] = {axis: defaultdict(list) for axis in SAFE_AXES}
    for r in results:
        if r["outcome"] == "equivalent" and not partly(r):   # only what vouches for all it trains is offered
            for axis in SAFE_AXES:
                safe[axis][key(r, axis)].append(r.get(axis, AXIS_DEFAULTS.get(axis)))

    def nearest(result: dict) -> str:
        for axis in SAFE_AXES:
            mine = result.get(axis, AXIS_DEFAULTS.get(axis))
            for value in safe[axis].get(key(result, axis), ()):
                if value != mine:
                    return f"{axis}={value}"
        return ""
    return nearest


def by_cause(results: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Cells grouped by their recorded cause (reason, link); a cell without one under ("", "")."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in results:
        groups[(r.get("reason", ""), r.get("link", ""))].append(r)
    return dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))


def names(values, limit: int = 6) -> str:
    """The distinct values sorted, the first `limit` of them named and the rest counted."""
    values = sorted(set(values))
    return ", ".join(values[:limit]) + (f" and {len(values) - limit} more" if len(values) > limit else "")


def broken_section(results: list[dict]) -> list[str]:
    """The cells checkpointing breaks, by cause: how many, where, the cause and link, and what was safe instead."""
    broken = [r for r in results if r["outcome"] in BROKEN]
    if not broken:
        return []
    out = [f"broken by checkpointing: {len(broken)} cells"]
    nearest = safe_settings(results)
    for (reason, link), cells in by_cause(broken).items():
        alts = Counter(a for a in map(nearest, cells) if a)
        new = sum(not r["matches"] for r in cells)
        out.append(f"- {len(cells)} cells ({histogram(cells)}{f'; {new} NEW' if new else ''}): "
                   f"{short(reason) if reason else 'no recorded cause'}")
        out.append(f"    archs {names(r['arch'] for r in cells)}; methods {names(r['method'] for r in cells)}")
        case = CASE.search(reason)
        if link or case:
            out.append("    " + "; ".join(x for x in (link, case and case.group(0)) if x))
        if alts:
            alt, n = alts.most_common(1)[0]
            out.append(f"    safe in this run with {alt} ({n} of {len(cells)} cells)")
        out.append(f"    e.g. python -m harness repro {cells[0]['id']}")
    return out


def full_summary(results: list[dict]) -> str:
    """The pivots (by method; by arch, the rows with something broken) and the broken cells by cause, then the
    one-line summary."""
    out: list[str] = []
    if len({r["method"] for r in results}) > 1:
        out += ["by method:", *pivot(results, "method")]
    if len({r["arch"] for r in results}) > 1:
        out += ["by arch:", *(pivot(results, "arch", only_broken=True) or ["  no broken cell"])]
    out += broken_section(results)
    return "\n".join(out + [summary(results)])


def write_json(path: str, results: list[dict], complete: bool = True, options: dict | None = None) -> None:
    """`complete` is False for the interim files of a running or interrupted run; `options` (steps, dtype,
    device) let `run --resume` refuse to mix runs made otherwise."""
    dump(path, complete, **({"options": options} if options else {}), cells=results)


@contextlib.contextmanager
def atomic(path: str, mode: str = "w", opener=open):
    """A file written through a temporary one beside it and put in place when the block ends without an error: a
    reader never sees half a file (every file the harness and its tools write)."""
    tmp = path + ".tmp"
    with opener(tmp, mode) as fh:
        yield fh
    os.replace(tmp, path)


def dump(path: str, complete: bool, indent: int = 1, **fields) -> None:
    """Write {versions, complete, **fields} to `path` atomically."""
    with atomic(path) as fh:
        json.dump({"versions": versions(), "complete": complete, **fields}, fh, indent=indent)


def junit(path: str, results: list[dict], fail_on: str = "unexpected") -> None:
    """JUnit XML, one testcase per cell: a failure when not as expected (with --fail-on broken: or broken), a
    skipped (pytest's xfail) for a cell as expected that is not safe; the detail, reason and link in the message."""
    import xml.etree.ElementTree as ET

    def failed(r: dict) -> bool:
        return not r["matches"] or (fail_on == "broken" and r["outcome"] in BROKEN)

    suite = ET.Element("testsuite", name="gc-harness", tests=str(len(results)), failures=str(sum(map(failed, results))),
                       errors="0", skipped=str(sum(r["outcome"] != "equivalent" and not failed(r) for r in results)),
                       time=f"{sum(r.get('seconds', 0.0) for r in results):.3f}")
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"harness.{r['backend']}.{r['arch']}", name=r["id"],
                             time=f"{r.get('seconds', 0.0):.3f}")
        message = (f"{verdict(r)}: {r['outcome']} (expected {r['expected']}); {r.get('detail', '')}"
                   + (f"; cause: {r['reason']}" if r.get("reason") else "")
                   + (f"; {r['link']}" if r.get("link") else ""))
        if failed(r):
            ET.SubElement(case, "failure", message=message, type=r["outcome"]).text = message
        elif r["outcome"] != "equivalent":
            ET.SubElement(case, "skipped", message=message, type="pytest.xfail")
    tree = ET.ElementTree(ET.Element("testsuites"))
    tree.getroot().append(suite)
    with atomic(path, "wb") as fh:
        tree.write(fh, encoding="utf-8", xml_declaration=True)


class Progress:
    """Progress of a run: a bar with count and ETA on a terminal (tqdm, on stderr; cell lines go above it), a plain
    line every `every` seconds otherwise (a CI log)."""

    def __init__(self, total: int, done: int = 0, every: float = 60.0):
        import sys
        import time

        self.total, self.done, self.every, self._time = total, done, every, time.monotonic
        self.start = self.last = self._time()
        self._first = done
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, unit="cell", file=sys.stderr, dynamic_ncols=True, leave=False)

    def echo(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, flush=True)

    def step(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            return
        now = self._time()
        if now - self.last >= self.every and self.done < self.total:
            self.last = now
            rate = (now - self.start) / max(self.done - self._first, 1)
            print(f"# {self.done}/{self.total} cells, {_clock(now - self.start)} elapsed, about "
                  f"{_clock(rate * (self.total - self.done))} left", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"
