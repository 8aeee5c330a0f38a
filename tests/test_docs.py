"""The documentation: README.md for users (short), docs/*.md for the rest; every relative link resolves, the test
command is CI's, and the product figures are the committed ledgers'. Reads files only: no torch, no network."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
README_LIMIT = 12 * 1024   # bytes

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(path: Path):
    """(line number, text) of the lines outside fenced code blocks, with inline code removed."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, INLINE_CODE.sub("", line)


def links(path: Path) -> list[tuple[int, str]]:
    return [(n, m.group(1)) for n, line in prose_lines(path) for m in LINK.finditer(line)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, markup and punctuation dropped, lower case, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a markdown file; repeated headings get -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of `path` whose file does not exist, or whose #anchor names no heading there."""
    bad = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):   # http(s), mailto, ...: not fetched
            continue
        file_part, _, anchor = target.partition("#")
        where = (path.parent / file_part).resolve() if file_part else path
        if not where.exists():
            bad.append(f"{path.relative_to(root)}:{number}: {target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            bad.append(f"{path.relative_to(root)}:{number}: {target}: no heading with that anchor")
    return bad


def test_the_readme_is_at_most_12_kb():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes, over {README_LIMIT}: move the detail to docs/"


def test_the_docs_folder_holds_the_four_documents():
    assert {p.name for p in DOCS} >= {"design.md", "outcomes.md", "findings.md", "product.md"}


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_in_the_docs_resolves(path):
    assert links(path) or path != README, "README.md links to nothing"
    assert broken_links(path) == []


def test_the_link_checker_sees_a_missing_file_and_a_missing_heading(tmp_path):
    doc = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Known failures\n## 2. Outcomes\n## Outcomes\n## Outcomes\n")
    doc.write_text("[ok](b.md#known-failures) [ok](b.md#2-outcomes) [ok](b.md#outcomes-1) [web](https://x.invalid/y)\n"
                   "[gone](c.md) [no heading](b.md#nothing) `[in code](d.md)`\n```\n[fenced](e.md)\n```\n")
    assert broken_links(doc, tmp_path) == [
        "a.md:2: c.md: no such file", "a.md:2: b.md#nothing: no heading with that anchor"]


def test_the_readme_test_command_is_the_one_ci_runs():
    """README shows the command to run the tests as a line of its own; .ci/run runs exactly that command."""
    readme = [line.split("#")[0].strip() for line in README.read_text(encoding="utf-8").splitlines()
              if line.startswith("pytest -n auto")]
    assert readme, "README.md has no line starting with `pytest -n auto`"
    ci = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if line.strip().startswith("pytest -n auto")]
    assert ci, ".ci/run does not run `pytest -n auto`"
    assert set(readme) <= set(ci), f"README's test command {readme} is not what .ci/run runs ({ci})"


def test_the_product_doc_shows_the_committed_product_ledgers():
    """docs/product.md's product table is the committed ledgers' (data/product/*.json), header and rows as
    `python tools/ledger_table.py data/product/*.json` prints them: figures in the docs come from data, and a
    ledger committed without its row (or a row edited by hand) fails here."""
    ledgers = sorted((ROOT / "data" / "product").glob("*.json"))
    assert ledgers, "no ledger under data/product/"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "ledger_table.py"), *map(str, ledgers)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    table = done.stdout.strip().splitlines()
    assert len(table) == 2 + len(ledgers)
    product = (ROOT / "docs" / "product.md").read_text(encoding="utf-8").splitlines()
    for line in table:
        assert line in product, f"docs/product.md lacks the ledger table's line {line}"
