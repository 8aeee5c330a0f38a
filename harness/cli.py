"""`python -m harness run|list|check|calibrate|repro` (docs/design.md, the command line).

Exit codes: 0 every selected cell matches its expectation (with --fail-on broken: and none is broken by
checkpointing), 1 otherwise, 2 bad usage, 3 the harness itself failed (a bug to report, not a cell's outcome).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _selected(args, tier: str, **fixed) -> list:
    """The cells of the command's filters (an axis it has no filter for: all values, or `fixed`)."""
    from .cells import AXES, select

    return select(**{**{a: getattr(args, a, None) for a in AXES}, **fixed}, tier=tier, shard=args.shard)


def _parser() -> argparse.ArgumentParser:
    from . import options

    ap = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run the selected cells")
    for option in options.RUN:
        option.add(run.add_argument)
    run.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    run.add_argument("--json", metavar="PATH")
    run.add_argument("--resume", action="store_true",
                     help="keep the selected cells already in --json (a run cut short, same versions and "
                          "steps/dtype/device), re-judge them, run only the rest")
    run.add_argument("-q", "--quiet", action="store_true", help="print only non-matching cells and the summary")
    run.add_argument("--fail-on", choices=FAIL_ON, default="unexpected", help=FAIL_ON_HELP)
    run.add_argument("--junitxml", metavar="PATH", help=JUNIT_HELP)
    cal = sub.add_parser("calibrate", help="run only the plain baselines of the selection once; record which fail "
                                           "(--table-from: write the generated table from such runs)")
    for option in options.CALIBRATE:
        option.add(cal.add_argument)
    cal.add_argument("--failing-in", metavar="BACKEND",
                     help="only the baseline keys the installed table of BACKEND lists as failing (transformers_peft "
                          "in peft's: the tuners are peft's; its table then covers those keys)")
    cal.add_argument("--json", metavar="PATH", help="write the records here (every 60 s, and at the end)")
    cal.add_argument("--table-from", nargs="+", metavar="JSON",
                     help="do not run: merge these complete calibration runs into harness/tables/ (filtered ones "
                          "update the unfiltered ones, or else the installed table)")
    cal.add_argument("--resume", action="store_true", help="keep the records already in --json (same selection and "
                                                          "versions) and run only the rest")
    cal.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    ls = sub.add_parser("list", help="archs, methods and axes, with why anything is not covered")
    ls.add_argument("--backend")
    ck = sub.add_parser("check", help="re-judge the cells of runs' --json against the current expectations (several: "
                                      "the shards of one matrix, merged into one summary)")
    ck.add_argument("json_paths", nargs="+", metavar="JSON")
    ck.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    ck.add_argument("--fail-on", choices=FAIL_ON, default="unexpected", help=FAIL_ON_HELP)
    ck.add_argument("--junitxml", metavar="PATH", help=JUNIT_HELP)
    rep = sub.add_parser("report", help="render runs' JSONs or ledgers as an HTML page with an arch x method heatmap, "
                                        "a Markdown file and PNG heatmaps (no rerun; records as recorded)")
    rep.add_argument("inputs", nargs="+", metavar="RUN_OR_LEDGER")
    rep.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for report.html, report.md, *.png")
    rep.add_argument("--title", default="")
    led = sub.add_parser("ledger", help="write the cells of runs' JSONs (the shards of one release) to a compact "
                                        "per-cell ledger (.jsonl.gz) that `report` renders")
    led.add_argument("json_paths", nargs="+", metavar="JSON")
    led.add_argument("-o", "--output", required=True, metavar="LEDGER.jsonl.gz")
    led.add_argument("--label", default="", help="what the ledger covers, shown by the report")
    bi = sub.add_parser("bisect", help="the first release of a package where a cell's outcome changes (an "
                                       "environment per release, the cell's repro script run in each)")
    bi.add_argument("cell_id", nargs="?", help="the cell (or --script)")
    bi.add_argument("--package", required=True, choices=BISECTED)
    bi.add_argument("--good", metavar="V", help="one end of the releases searched (default: the oldest)")
    bi.add_argument("--bad", metavar="V", help="the other end (default: the newest)")
    bi.add_argument("--script", metavar="FILE", help="bisect this script's `OUTCOME:` line instead of a cell's")
    bi.add_argument("--index-url", metavar="URL", help="the package index to list and install releases from")
    bi.add_argument("--envs", metavar="DIR", help="where the environments are kept (default ~/.cache/gc-harness/"
                                                  "bisect)")
    rp = sub.add_parser("repro", help="write a standalone script reproducing one cell")
    rp.add_argument("cell_id")
    rp.add_argument("-o", "--output")
    rp.add_argument("--minimal", action="store_true", help="a short script of the user's calls and a plain compare "
                                                           "(the plain loop of a head with a loss)")
    for option in options.OWN:   # a cell of a run made with them is written from them
        option.add(rp.add_argument)
    return ap


BISECTED = ("transformers", "peft", "adapters")   # the packages `bisect` searches the releases of
JUNIT_HELP = ("write JUnit XML here: one testcase per cell, failed when not as expected (or, with --fail-on broken, "
              "broken), skipped (xfail) when a known non-safe outcome; detail, cause and link in the message")
FAIL_ON = ("unexpected", "broken")
FAIL_ON_HELP = ("exit 1 on: a cell not as expected (default), or also any cell checkpointing breaks (mismatch, "
                "missing_grad, gc_error), known or not")


def _exit_code(results: list[dict], fail_on: str, complete: bool = True) -> int:
    from .outcomes import BROKEN

    ok = complete and all(r["matches"] for r in results)
    if fail_on == "broken":
        ok = ok and not any(r["outcome"] in BROKEN for r in results)
    return 0 if ok else 1


def _usage_error(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _main(args)
    except Exception as exc:  # noqa: BLE001  (a cell's own failure is its outcome; this is the harness's)
        if os.environ.get("HARNESS_TRACEBACK"):
            raise
        where = exc.__traceback__
        while where.tb_next:
            where = where.tb_next
        print(f"harness error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
              f"({os.path.basename(where.tb_frame.f_code.co_filename)}:{where.tb_lineno}); a failure of the harness "
              f"itself, not of a cell: please report it with the command (HARNESS_TRACEBACK=1 shows the traceback)",
              file=sys.stderr)
        return 3


def _main(args) -> int:
    from .cells import SelectionError

    try:
        if args.cmd == "run":
            return _run(args)
        if args.cmd == "list":
            from .listing import listing

            print(listing(args.backend))
            return 0
        if args.cmd == "check":
            return _check(args)
        if args.cmd == "calibrate":
            return _calibrate(args)
        if args.cmd == "bisect":
            return _bisect(args)
        if args.cmd == "report":
            return _report(args)
        if args.cmd == "ledger":
            return _ledger(args)
        if args.cmd == "repro":
            from .repro import write_repro

            _check_output("-o", args.output)
            _own(args)
            path = write_repro(args.cell_id, args.output, args.minimal)
            print(path if args.output else "", end="")
            return 0
    except SelectionError as exc:
        return _usage_error(str(exc))
    return 2


def _run(args) -> int:
    from . import records, report
    from .cells import SelectionError
    from .run import Options, Runner, cap_memory
    from .train import DTYPES
    from .versions import versions

    if args.dtype not in DTYPES:
        raise SelectionError(f"unknown dtype {args.dtype!r}; valid: {', '.join(DTYPES)}")
    if args.steps < 1:
        raise SelectionError("--steps must be >= 1")
    if args.cell_timeout is not None and args.cell_timeout <= 0:
        raise SelectionError(f"--cell-timeout must be > 0 seconds, not {args.cell_timeout:g}")
    _check_device(args.device)
    _check_memory_and_json(args)
    _check_output("--junitxml", args.junitxml)
    own = _own(args)
    cells = _selected(args, args.tier)
    if not cells:
        raise SelectionError("the filters select no cell (a backend whose library is missing has none); "
                             "see `python -m harness list`")
    cap_memory(args.memory_gb)
    runner = Runner(Options(steps=args.steps, dtype=args.dtype, device=args.device, timeout=args.cell_timeout,
                             threads=args.threads))
    options = {"steps": args.steps, "dtype": args.dtype, "device": args.device, **own}
    print(f"# {len(cells)} cells; versions {versions()}", flush=True)
    results = records.resume_run(args.json, options, cells) if args.resume else []
    if args.resume:
        print(f"# resuming: {len(results)} cells kept", flush=True)
    kept = {r["id"] for r in results}

    def write(complete: bool) -> None:
        if args.json:
            report.write_json(args.json, results, complete=complete, options=options)
    interim = _every(JSON_EVERY, lambda: write(False))
    progress = report.Progress(len(cells), len(results))
    with _until_interrupted(lambda: f"{len(results)} of {len(cells)} cells"):
        for cell in sorted((c for c in cells if c.id not in kept), key=lambda c: (c.baseline_key, c.id)):
            r = runner.run_cell(cell)
            results.append(r)
            if not (args.quiet and r["matches"]):
                progress.echo(report.line(r))
            progress.step()
            interim()   # a long run leaves its results so far
    progress.close()
    complete = len(results) == len(cells)
    write(complete)
    if args.junitxml:
        report.junit(args.junitxml, results, args.fail_on)
    print(report.full_summary(results))
    return _exit_code(results, args.fail_on, complete)


def _own(args) -> dict:
    """Install the user's configs (harness/own.py); their implied filters fill the axes the user left open. The
    options a run's JSON records for them (none when not given)."""
    from . import options, own

    given = {o.dest: getattr(args, o.dest, None) for o in options.OWN}
    implied = own.install(**given)
    for notice in own.NOTICES:
        print(f"# {notice}")
    for axis, value in implied.items():
        if getattr(args, axis, None) is None:
            setattr(args, axis, value)
    return {k: v for k, v in given.items() if v is not None}


def _calibrate(args) -> int:
    from . import calibrate
    from . import records as records_mod
    from .cells import AXES, SelectionError, parse_shard
    from .run import Options, Runner, cap_memory

    if args.table_from:
        try:
            for path in calibrate.write_tables(args.table_from):
                print(path)
        except calibrate.TableError as exc:
            raise SelectionError(str(exc)) from None
        return 0
    _check_memory_and_json(args)
    # the tables say which plain runs fail, per (arch, method, inputs, task): measured on the plain loop, in one process
    cells = _selected(args, "full", recipe="loop", parallel="single")
    if args.failing_in:
        cells = calibrate.failing_in(cells, args.failing_in)
    if not cells:
        raise SelectionError("the filters select no cell; see `python -m harness list`")
    filters = {a: getattr(args, a) for a in AXES if a != "backend" and getattr(args, a, None)}
    if args.failing_in:
        filters["failing_in"] = args.failing_in
    selection = {"backends": sorted({c.backend for c in cells}), "shard": parse_shard(args.shard),
                 "filters": filters}
    cap_memory(args.memory_gb)
    runner = Runner(Options(timeout=args.cell_timeout))
    print(f"# {len({c.baseline_key for c in cells})} baselines of {len(cells)} cells", flush=True)
    records: dict = {}
    if args.resume:
        records = records_mod.resume_calibration(args.json, selection)
        cells = [c for c in cells if c.baseline_key not in records]
        print(f"# resuming: {len(records)} baselines kept", flush=True)
    interim = _every(JSON_EVERY, lambda: args.json and calibrate.write_json(args.json, records, selection,
                                                                                complete=False))
    t0 = time.perf_counter()
    complete = False
    with _until_interrupted(lambda: f"{len(records)} baselines"):
        calibrate.calibrate(cells, runner, records, (lambda s: None) if args.quiet else
                              (lambda s: print(s, flush=True)), interim)
        complete = True
    if args.json:
        calibrate.write_json(args.json, records, selection, complete=complete)
    failing = sum(1 for r in records.values() if r["outcome"])
    short = [r for r in records.values() if r.get("resource")]
    print(f"# {len(records)} baselines, {failing} fail or are vacuous; {time.perf_counter() - t0:.0f} s")
    if short:   # after one run exhausts the cap, every later run of the process fails too
        archs = sorted({r["arch"] for r in short[1:]} - {short[0]["arch"]})
        print(f"# {len(short)} ran out of memory (not tabled), first {short[0]['arch']}/{short[0]['method']}; "
              f"to measure the others, in a new process: calibrate --arch {','.join(archs) or '-'} (same --shard)")
    return 0 if complete else 1


JSON_EVERY = 60.0   # seconds between interim writes of --json during a run


def _interrupt(signum, frame):
    raise KeyboardInterrupt


@contextlib.contextmanager
def _until_interrupted(progress):
    """The loop inside may be ended by Ctrl-C or SIGTERM (a cancelled CI job): it then says how far it got
    (`progress()`) and the caller carries on to write what finished."""
    old_term = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    except KeyboardInterrupt:
        print(f"# interrupted after {progress()}", flush=True)
    finally:
        signal.signal(signal.SIGTERM, old_term)


def _every(seconds: float, action):
    """A function that calls `action()` when `seconds` have passed since the last call did."""
    last = [time.monotonic()]

    def maybe():
        if time.monotonic() - last[0] > seconds:
            action()
            last[0] = time.monotonic()
    return maybe


def _check(args) -> int:
    """Outcomes are a function of the cell and the installed versions; expectations are data. After editing
    the data, this re-judges finished runs without re-running them (same versions required). Several JSONs
    (the shards of a CI matrix) are merged: one histogram; a cell in two of them is a usage error."""
    from . import records, report
    from .cells import SelectionError

    _check_output("--junitxml", args.junitxml)
    cells, seen, incomplete = [], {}, []
    for path in args.json_paths:
        data = records.read_run(path)
        if not data.get("complete", True):
            incomplete.append(path)
        for r in data["cells"]:
            if r["id"] in seen:
                raise SelectionError(f"cell {r['id']} is in both {seen[r['id']]} and {path} (overlapping runs)")
            seen[r["id"]] = path
            records.rejudge(r)
            if not (args.quiet or r["matches"]):
                print(report.line(r))
            cells.append(r)
    if args.junitxml:
        report.junit(args.junitxml, cells, args.fail_on)
    print(report.full_summary(cells) + (f" ({len(incomplete)} incomplete run(s): {', '.join(incomplete)})"
                                        if incomplete else ""))
    return _exit_code(cells, args.fail_on)


def _bisect(args) -> int:
    import tempfile

    from . import bisect
    from .cells import SelectionError

    if bool(args.cell_id) == bool(args.script):
        raise SelectionError("bisect takes a CELL_ID or --script FILE")
    if args.script and not os.path.isfile(args.script):
        raise SelectionError(f"--script {args.script!r} is not a file")
    with tempfile.TemporaryDirectory() as tmp:
        script = args.script
        if not script:
            from .repro import script as repro_script

            script = os.path.join(tmp, "repro.py")
            with open(script, "w") as fh:
                fh.write(repro_script(args.cell_id, with_outcome=False))
        result = bisect.bisect(os.path.abspath(script), args.package, args.good, args.bad, args.index_url,
                               args.envs or bisect.ENVS, say=lambda s: print(s, flush=True))
    print(result.summary())
    return 0


def _report(args) -> int:
    from . import records
    from .cells import SelectionError
    from .render import render

    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise SelectionError(f"-o {args.output!r} is a file; name a folder")
    parent = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(parent):
        raise SelectionError(f"-o {args.output!r}: folder {parent!r} does not exist")
    runs = [records.read_any(p) for p in args.inputs]
    t0 = time.perf_counter()
    paths = render(runs, args.output, args.title)
    print(f"# {len(args.inputs)} inputs, {sum(len(r['cells']) for r in runs)} records rendered in "
          f"{time.perf_counter() - t0:.1f} s")
    for p in paths:
        print(p)
    if not any(p.endswith(".png") for p in paths):
        print("# no PNG heatmaps: matplotlib is not installed (pip install '.[report]')")
    return 0


def _ledger(args) -> int:
    from . import records
    from .cells import SelectionError

    if not args.output.endswith(".jsonl.gz"):
        raise SelectionError(f"-o {args.output!r}: a ledger's name ends in .jsonl.gz")
    _check_output("-o", args.output)
    runs = [records.read_any(p) for p in args.json_paths]
    n = records.write_ledger(args.output, runs, args.label)
    print(f"{args.output}: {n} cells, {os.path.getsize(args.output)} bytes")
    return 0


def _check_memory_and_json(args) -> None:
    """--memory-gb >= 0, and the folder of --json exists (before hours of running, not after)."""
    from .cells import SelectionError
    from .options import check_memory_gb

    complaint = check_memory_gb(args.memory_gb)
    if complaint:
        raise SelectionError(complaint)
    _check_output("--json", args.json)


def _check_output(flag: str, path: str | None) -> None:
    """A file the command will write: not a folder, in a folder that exists and can be written (checked before
    anything runs)."""
    from .cells import SelectionError

    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise SelectionError(f"{flag} {path!r} is a folder; name a file in it")
    if not os.path.isdir(folder):
        raise SelectionError(f"{flag} {path!r}: folder {folder!r} does not exist")
    import tempfile

    try:   # the run writes its file through a temporary one beside it
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
        if os.path.exists(path):
            with open(path, "a"):
                pass
    except OSError as exc:
        raise SelectionError(f"{flag} {path!r} cannot be written here: {exc.strerror}") from None


def _check_device(device: str) -> None:
    import torch

    from .cells import SelectionError

    try:
        torch.empty(1, device=device)
    except Exception as exc:  # noqa: BLE001
        raise SelectionError(f"device {device!r} is not usable here: {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0]}; try cpu") from None


if __name__ == "__main__":
    sys.exit(main())
