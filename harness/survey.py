"""The zoo survey: build and train every model_type of the installed transformers, check full-backend non_reentrant,
write the survey table (:mod:`harness.tables`) that :func:`harness.archs.discover.discover` reads.

``python -m harness.survey`` lists what the table gives; ``--survey`` (with ``--only TYPE,...``) surveys and writes it.
"""
from __future__ import annotations

import os
import re
from typing import Any

import torch

from . import tables
from .archs.inputs import _accepts
from .archs.per_arch import COMPOSITES, per_arch
from .archs.discover import discover, survey_table
from .archs.zoo import (MAX_TASKS, ZooSpec, _class, _entry, _one_line, arch_overrides, candidate_tasks, default_inputs,
                        generic_overrides, spec_from_entry)

# ---------------------------------------------------------------------------------------------
# The survey: build and train every candidate once, check full-backend non_reentrant, write the table.
_HUB = re.compile(r"HF_HUB_OFFLINE|offline mode|huggingface\.co|hf\.co|LocalEntryNotFound|from_pretrained|"
                  r"We couldn't connect|Can't load|outgoing traffic has been disabled", re.I)
_PKG = re.compile(r"requires the (\S+) library|No module named '([^']+)'|requires? (\S+) to be installed", re.I)


def classify(error: str) -> str:
    """A not-covered reason from a run's error."""
    if _HUB.search(error):
        return f"needs hub assets: {error}"
    m = _PKG.search(error)
    if m:
        return f"needs package {next(g for g in m.groups() if g)}: {error}"
    if error.startswith("build:"):
        return f"construction fails: {error[len('build:'):].strip()}"
    return f"baseline fails: {error}"


def _dead(trace) -> list[str]:
    alive = {n for step in trace.grads for n, g in step.items() if g is not None and bool((g != 0).any())}
    return [n for n in trace.trainable if n not in alive]


def verify(spec: ZooSpec, task: str, inputs: str, timeout: float) -> dict[str, Any]:
    """The harness's own verdict on the full-backend non_reentrant gc_first cell (Runner.run_cell:
    baseline, replay, candidate, float64 calibration of small float32 mismatches)."""
    from .cells import Cell
    from .run import Options, Runner

    cell = Cell("full", spec.name, "full", "non_reentrant", inputs, "gc_first", task, True)
    r = Runner(Options(timeout=timeout), archs={spec.name: spec}).run_cell(cell)
    return {"outcome": r["outcome"], "detail": r["detail"], "seconds": r["seconds"]}


def survey_one(model_type: str, timeout: float = 120.0, check: bool = True) -> dict[str, Any]:
    """Build and train a model_type's candidates; the table entry (covered or not, and why).

    Every candidate task's baseline is trained once. The primary task is the first (in PREFERENCE
    order) whose baseline gives every trainable tensor a gradient, else the first that trains at
    all (its unexercised tensors are then named by the verdict); one more task that trains with the
    same feed (or contrastive) is kept as a secondary task."""
    from .backends import get
    from .train import train

    fix = per_arch(model_type)
    if "skip" in fix:
        return {"status": "not_covered", "reason": fix["skip"]}
    if model_type in COMPOSITES:
        return _survey_composite(model_type, timeout, check)
    cands = candidate_tasks(model_type)
    if "task" in fix:
        cands.sort(key=lambda c: c[0] != fix["task"])
    if not cands:
        return {"status": "not_covered", "reason": "no trainable head/task"}
    classes, tried = [], []
    for task, name in cands:
        try:
            cls = _class(name)
        except Exception as exc:  # noqa: BLE001
            tried.append(f"{task}: import {name}: {type(exc).__name__}: {_one_line(exc)}")
            continue
        if task == "contrastive" and not _accepts(cls, "return_loss"):
            continue
        if getattr(cls, "supports_gradient_checkpointing", False):
            classes.append((task, name, cls))
    if not classes:
        if tried:
            return {"status": "not_covered", "reason": f"construction fails: {tried[0]}"}
        return {"status": "not_covered", "reason": "no gradient checkpointing support"}
    try:
        from transformers import AutoConfig

        cfg0 = AutoConfig.for_model(model_type)
        fixed = arch_overrides(model_type, cfg0)
        overrides = {**generic_overrides(model_type, fixed), **fixed}
    except Exception as exc:  # noqa: BLE001
        return {"status": "not_covered", "reason": f"construction fails: config: {type(exc).__name__}: "
                                                    f"{_one_line(exc)}"}
    be = get("full")
    method = be.methods["full"]
    trained = []   # (task, entry, spec, unexercised tensor names) of every task whose baseline trains
    for task, name, cls in classes:
        entry, why = _entry(model_type, task, name, cls, cfg0, overrides)
        if entry is None:
            tried.append(f"{task}: {why}")
            continue
        spec = spec_from_entry(model_type, entry)
        b = train(spec, task, be, method, inputs=entry["inputs"][0], timeout=timeout)
        if not b.ok and entry["inputs"][0] == "masked" and "attention_mask" in (b.error or ""):
            entry["inputs"] = ("unmasked",)
            spec = spec_from_entry(model_type, entry)
            b = train(spec, task, be, method, inputs="unmasked", timeout=timeout)
        if not b.ok:
            tried.append(f"{task}: {b.error}")
            continue
        dead = _dead(b)
        if len(dead) == len(b.trainable):
            tried.append(f"{task}: vacuous baseline: no trainable tensor gets a gradient")
            continue
        if dead:
            tried.append(f"{task}: {len(dead)} of {len(b.trainable)} trainable tensors never get a gradient "
                         f"(first {dead[0]})")
        trained.append((task, entry, spec, dead))
    if not trained:
        return {"status": "not_covered", "reason": classify(tried[0].split(": ", 1)[1]) if tried else
                "no gradient checkpointing support", "tried": tried}
    task, chosen, spec, dead = min(trained, key=lambda t: bool(t[3]))   # stable: preference order kept
    for t2, e2, _, dead2 in trained:   # a secondary task: same feed (or contrastive)
        if len(chosen["tasks"]) < MAX_TASKS and t2 != task and (e2["feed"] == chosen["feed"] or t2 == "contrastive") \
                and (e2["inputs"] == chosen["inputs"] or t2 == "contrastive"):
            chosen["tasks"] = (*chosen["tasks"], t2)
            chosen["head_classes"] = {**chosen["head_classes"], **e2["head_classes"]}
    if "padded" in chosen["inputs"]:
        p = train(spec, task, be, method, inputs="padded", timeout=timeout)
        if not p.ok or len(_dead(p)) == len(p.trainable):
            chosen["inputs"] = tuple(i for i in chosen["inputs"] if i != "padded")
            chosen["padded_fails"] = p.error or "vacuous baseline"
    if check:
        chosen.update(verify(spec, task, chosen["inputs"][0], timeout))
        if chosen["outcome"] == "error":   # the harness itself cannot run the baseline
            return {"status": "not_covered", "reason": f"baseline fails: {chosen['detail']}", "tried": tried}
    chosen["status"] = "covered"
    if tried:
        chosen["skipped_tasks"] = tried
    return chosen


def _survey_composite(model_type: str, timeout: float, check: bool) -> dict[str, Any]:
    from .backends import get
    from .train import train

    c = COMPOSITES[model_type]
    cls = _class(c["head"])
    if not getattr(cls, "supports_gradient_checkpointing", False):
        return {"status": "not_covered", "reason": "no gradient checkpointing support"}
    entry = dict(tasks=("seq2seq_lm",), modality=c["modality"], decoder_only=False,
                 inputs=default_inputs(c["feed"]), feed=c["feed"], enc_dec=True,
                 compose=c["compose"])
    spec = spec_from_entry(model_type, entry)
    be = get("full")
    b = train(spec, "seq2seq_lm", be, be.methods["full"], inputs=entry["inputs"][0], timeout=timeout)
    if not b.ok:
        return {"status": "not_covered", "reason": classify(b.error)}
    if check:
        entry.update(verify(spec, "seq2seq_lm", entry["inputs"][0], timeout))
        if entry["outcome"] == "error":
            return {"status": "not_covered", "reason": f"baseline fails: {entry['detail']}"}
    entry["status"] = "covered"
    return entry


_TABLE_KEYS = ("status", "reason", "tasks", "modality", "decoder_only", "inputs", "feed", "enc_dec", "compose",
               "overrides", "head_classes", "outcome", "detail")


def write_table(results: dict[str, dict], path: str, seconds: float) -> None:
    import pprint

    import transformers

    doc = ["Survey table of the zoo: GENERATED by `python -m harness.survey --survey`; do not edit.",
           "",
           "Per model_type of the surveyed transformers: covered (spec fields that trained with the full",
           "backend, and the outcome of the non_reentrant gradient checkpointing check) or not covered (why)."]
    head = {"transformers": transformers.__version__, "torch": torch.__version__, "seconds": round(seconds)}
    lines = []
    for mt in sorted(results):
        e = {k: results[mt][k] for k in _TABLE_KEYS if k in results[mt]}
        if e.get("status") == "covered":
            e = {k: v for k, v in e.items() if v not in ({}, False) or k in ("decoder_only",)}
        body = pprint.pformat(e, width=110, sort_dicts=False)
        lines.append(f"    {mt!r}: " + body.replace("\n", "\n    ") + ",")
    tables.write(path, doc, ("SURVEYED_ON", head), ("TABLE", "{", lines, "}"))


def survey_main(argv: list[str] | None = None) -> int:
    import argparse
    import gc
    import json
    import time
    import warnings

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    ap = argparse.ArgumentParser(prog="python -m harness.survey")
    ap.add_argument("--survey", action="store_true", help="build and train every model_type; write the table")
    ap.add_argument("--only", help="comma-separated model types (merged into the survey json, else into the "
                                   "installed version's table)")
    ap.add_argument("--json", help="survey results (resumable; default /tmp/zoo/survey-<installed transformers>.json, "
                                   "so that --only never merges results of another release)")
    ap.add_argument("--table", help="table to write (default: harness/tables/zoo_v<installed transformers>.py)")
    ap.add_argument("--timeout", type=float, default=120.0, help="per training run, seconds")
    ap.add_argument("--no-table", action="store_true")
    ap.add_argument("--resume", action="store_true", help="skip model types already in --json")
    ap.add_argument("--memory-gb", type=float, default=8.0, help="address-space cap of the survey process")
    args = ap.parse_args(argv)
    if args.json is None:
        import transformers

        args.json = f"/tmp/zoo/survey-{transformers.__version__}.json"
    if not args.survey:
        covered, missing = discover()
        for name, spec in sorted(covered.items()):
            print(f"{name}\t{','.join(spec.tasks)}\t{spec.feed}\t{spec.notes}")
        for name, why in sorted(missing.items()):
            print(f"{name}\tNOT COVERED\t{why}")
        print(f"# {len(covered)} covered, {len(missing)} not covered")
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    results: dict[str, dict] = {}
    if (args.only or args.resume) and os.path.exists(args.json):
        results = json.load(open(args.json))
    elif args.only:   # no survey json on this machine: merge into the installed version's table
        import transformers

        data = survey_table()
        if data is not None and data.SURVEYED_ON.get("transformers") == transformers.__version__:
            results = {mt: dict(e) for mt, e in data.TABLE.items()}
    todo = args.only.split(",") if args.only else list(CONFIG_MAPPING_NAMES)
    if args.resume:
        todo = [mt for mt in todo if mt not in results]
    from .run import cap_memory

    cap_memory(args.memory_gb)   # a model that still is huge fails with MemoryError instead of taking the machine
    t0 = time.perf_counter()
    for i, mt in enumerate(todo):
        t = time.perf_counter()
        try:
            r = survey_one(mt, timeout=args.timeout)
        except Exception as exc:  # noqa: BLE001 - the survey must reach every model type
            r = {"status": "not_covered", "reason": f"construction fails: {type(exc).__name__}: {_one_line(exc)}"}
        r["survey_seconds"] = round(time.perf_counter() - t, 2)
        results[mt] = json.loads(json.dumps(r, default=list))
        what = r.get("outcome") if r["status"] == "covered" else r["reason"]
        print(f"[{i + 1}/{len(todo)}] {mt} {r['survey_seconds']}s {r.get('tasks', '')} {what}", flush=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        gc.collect()
    total = time.perf_counter() - t0
    print(f"# survey {total:.0f}s", flush=True)
    if not args.no_table:
        # tuples were lists in json: restore the spec fields that are tuples
        for e in results.values():
            for k in ("tasks", "inputs"):
                if k in e:
                    e[k] = tuple(e[k])
        seconds = total
        if args.only:   # a partial rerun: keep the figure of the full survey
            data = survey_table()
            seconds = data.SURVEYED_ON.get("seconds", total) if data else total
        import transformers

        table = args.table or tables.path(tables.name("zoo", transformers.__version__))
        write_table(results, table, seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(survey_main())
