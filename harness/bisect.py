"""`harness bisect CELL_ID --package transformers|peft|adapters [--good V] [--bad V]`: the first release where a
cell's outcome changes.

Each release gets an environment of its own (kept under --envs for the next bisect): a venv without pip whose
site-packages come first and this environment's after (one .pth line), into which this environment's pip installs
the package at that release and whatever of its dependencies this environment lacks or has at other versions. So
torch and the rest are this environment's: no release pulls another torch. The cell's faithful repro script, written
here (or any script: --script, e.g. a cases/ one), runs in each; its `OUTCOME:` line is the release's outcome (a
script without one: its exit code).
Releases come from the package index (`pip index versions`; `--index-url` for another, e.g. a local one); the final
releases between --good and --bad (the two ends, either order; default the oldest and the newest) are searched, a
binary search for the first whose outcome differs from the older end's.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from .cells import SelectionError

ENVS = os.path.join(os.path.expanduser("~"), ".cache", "gc-harness", "bisect")


@dataclass
class Bisection:
    package: str
    tried: dict[str, str] = field(default_factory=dict)   # release -> outcome, in the order tried
    first: str | None = None         # the first release whose outcome differs from --good's
    before: str | None = None        # the release before it
    seconds: float = 0.0

    def summary(self) -> str:
        if self.first is None:
            return f"{self.package}: the same outcome at both ends ({self.tried})"
        return (f"{self.package} {self.first} is the first release with another outcome: {self.tried[self.first]} "
                f"(in {self.package} {self.before}: {self.tried[self.before]}); {len(self.tried)} releases run "
                f"in {self.seconds:.0f} s")


def releases(package: str, index_url: str | None = None) -> list[Version]:
    """The final releases of `package` on the index, oldest first."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"]
    if index_url:
        cmd += ["--index-url", index_url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    m = re.search(r"Available versions: (.+)", p.stdout)
    if p.returncode or not m:
        raise SelectionError(f"cannot list the releases of {package}: {(p.stderr or p.stdout).strip()[-200:]}")
    out = []
    for v in m.group(1).split(","):
        try:
            version = Version(v.strip())
        except InvalidVersion:
            continue
        if not version.is_prerelease and not version.is_devrelease:
            out.append(version)
    return sorted(out)


def environment(package: str, version: str, envs: str = ENVS, index_url: str | None = None) -> str:
    """The python of an environment holding `package`==`version` over this one's packages (made once)."""
    folder = os.path.join(envs, f"{package}-{version}")
    python = os.path.join(folder, "bin", "python")
    if os.path.exists(os.path.join(folder, ".done")):
        return python
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--clear", folder], check=True, timeout=300)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    here = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    with open(os.path.join(site, "_gc_harness_base.pth"), "w") as fh:
        fh.write("".join(f"{p}\n" for p in here))
    cmd = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--disable-pip-version-check",
           f"{package}=={version}"]
    if index_url:
        cmd += ["--index-url", index_url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode:
        raise RuntimeError(f"pip could not install {package}=={version}: {p.stderr.strip()[-300:]}")
    open(os.path.join(folder, ".done"), "w").close()
    return python


def outcome(python: str, script: str, timeout: float = 1800) -> tuple[str, str]:
    """(outcome, its last line) of a script run by `python`: its `OUTCOME: x` line's x, or for a script without
    one (a cases/ script: exit 0 behaves, 1 the bug is present) `exit N`."""
    with tempfile.TemporaryDirectory() as cwd:
        p = subprocess.run([python, script], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                           env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""})
    m = re.search(r"^OUTCOME: (\w+).*", p.stdout, re.M)
    if m:
        return m.group(1), m.group(0)[:160]
    last = (p.stdout.strip() or p.stderr.strip()).splitlines()[-1:] or [""]
    return f"exit {p.returncode}", last[0][:160]


def bisect(script: str, package: str, good: str | None = None, bad: str | None = None, index_url: str | None = None,
           envs: str = ENVS, say=print) -> Bisection:
    """Binary search of the releases of `package` between `good` and `bad` for the first one whose script outcome
    differs from the older end's."""
    t0 = time.perf_counter()
    known = releases(package, index_url)
    if not known:
        raise SelectionError(f"no final release of {package} on the index")
    lo_v, hi_v = Version(good) if good else known[0], Version(bad) if bad else known[-1]
    for v in (lo_v, hi_v):
        if v not in known:
            raise SelectionError(f"{package} {v} is not a release on the index ({len(known)} are, "
                                 f"{known[0]} to {known[-1]})")
    lo_v, hi_v = min(lo_v, hi_v), max(lo_v, hi_v)   # the two ends, whichever is older
    span = [str(v) for v in known if lo_v <= v <= hi_v]
    result = Bisection(package)

    def run(i: int) -> str:
        v = span[i]
        if v not in result.tried:
            result.tried[v], last = outcome(environment(package, v, envs, index_url), script)
            say(f"# {package} {v}: {result.tried[v]} ({last})")
        return result.tried[v]

    say(f"# {len(span)} releases of {package} from {span[0]} to {span[-1]}")
    lo, hi = 0, len(span) - 1
    start = run(lo)
    if run(hi) != start:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if run(mid) == start:
                lo = mid
            else:
                hi = mid
        result.first, result.before = span[hi], span[lo]
    result.seconds = time.perf_counter() - t0
    return result
