"""`harness bisect`, without the network: a local package index of small wheels made here stands in for a package's
releases; a script whose outcome changes at one release is bisected to it."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.xdist_group("bisect"),   # one worker: the environments are shared
              pytest.mark.versionless]

from harness import bisect, cli

VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "2.0")
FIXED_IN = "1.4"
SCRIPT = '''import gcfake
from packaging.version import Version
print("OUTCOME: equivalent" if Version(gcfake.VERSION) >= Version("%s") else "OUTCOME: mismatch")
''' % FIXED_IN


def wheel(folder: Path, version: str) -> str:
    name = f"gcfake-{version}-py3-none-any.whl"
    info = f"gcfake-{version}.dist-info"
    files = {"gcfake/__init__.py": f"VERSION = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: gcfake\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / name, "w") as z:
        for f, text in files.items():
            z.writestr(f, text)
    return name


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> str:
    """A PEP 503 simple index (file://) of gcfake's releases, one a pre-release the search skips."""
    root = tmp_path_factory.mktemp("index")
    pkg = root / "simple" / "gcfake"
    pkg.mkdir(parents=True)
    names = [wheel(pkg, v) for v in (*VERSIONS, "2.1rc1")]
    (root / "simple" / "index.html").write_text('<a href="gcfake/">gcfake</a>')
    (pkg / "index.html").write_text("".join(f'<a href="{n}">{n}</a><br>' for n in names))
    return (root / "simple").as_uri()


@pytest.fixture(scope="module")
def envs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("envs")


def test_releases_are_the_final_ones_oldest_first(index):
    assert [str(v) for v in bisect.releases("gcfake", index)] == list(VERSIONS)


def test_bisect_finds_the_release_where_the_outcome_changes(index, envs, tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    result = bisect.bisect(str(script), "gcfake", index_url=index, envs=str(envs), say=lambda s: None)
    assert (result.first, result.before) == (FIXED_IN, "1.3")
    assert result.tried[FIXED_IN] == "equivalent" and result.tried["1.3"] == "mismatch"
    assert len(result.tried) <= 4 < len(VERSIONS)   # a binary search, not every release
    # the environments are kept and reused; they see this environment's packages (packaging) under their own
    assert sorted(p.name for p in envs.iterdir()) == sorted(f"gcfake-{v}" for v in result.tried)
    # the command line, between two given ends, in either order
    assert cli.main(["bisect", "--script", str(script), "--package", "transformers", "--good", "2.0", "--bad", "1.1",
                     "--index-url", index, "--envs", str(envs)]) == 2   # transformers is not on this index
    capsys.readouterr()


def test_the_same_outcome_at_both_ends_says_so(index, envs, tmp_path):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    result = bisect.bisect(str(script), "gcfake", good="2.0", bad="1.4", index_url=index, envs=str(envs),
                           say=lambda s: None)   # the ends in either order; their environments reused
    assert result.first is None and "the same outcome at both ends" in result.summary()


@pytest.mark.parametrize("argv, needle", [
    (["bisect", "--package", "peft"], "bisect takes a CELL_ID or --script FILE"),
    (["bisect", "--package", "peft", "--script", "/nonexistent.py"], "is not a file"),
])
def test_bad_bisect_input_exits_2(capsys, argv, needle):
    assert cli.main(argv) == 2
    assert needle in capsys.readouterr().err
