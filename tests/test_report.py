"""What a user reads: the plain verdicts and summary of a run, JUnit XML, the per-cell ledger, and `harness report`
(HTML page checked in a real headless browser, Markdown, PNG) on the committed ledgers of docs/ledger/."""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import tempfile
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT
from harness import cli, records, render, report
from harness.versions import versions

pytestmark = pytest.mark.versionless   # renders records and ledgers; no library version changes it
LEDGERS = sorted((ROOT / "docs" / "ledger").glob("*.jsonl.gz"))
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
CHROMEDRIVER = shutil.which("chromedriver")


def record(arch, method, outcome, expected="equivalent", gc_mode="reentrant", reason="", link="", **kw):
    fields = {"backend": "peft", "arch": arch, "method": method, "gc_mode": gc_mode, "inputs": "masked",
              "order": "gc_first", "task": "seq_cls", "recipe": "loop", "modality": "text"}
    fields.update(kw)
    return {"id": "-".join(fields[a] for a in ("backend", "arch", "method", "gc_mode", "inputs", "order")),
            **fields, "outcome": outcome, "expected": expected, "matches": outcome in expected.split("|"),
            "reason": reason, "link": link, "detail": f"detail of {arch} {method} {gc_mode}", "seconds": 0.5}


KNOWN = "the recompute runs through the other adapter; more after this. cases/peft_switch_adapters_recompute.py"
LINK = "https://github.com/huggingface/peft/issues/2832"
RUN = [record("bert", "lora", "mismatch", "mismatch", reason=KNOWN, link=LINK),
       record("bert", "lora", "equivalent", gc_mode="non_reentrant"),
       record("llama", "lora", "gc_error"),                                  # broken, not recorded: NEW
       record("llama", "ia3", "error", "error", reason="the plain run fails: Llama has no seq_cls here"),
       record("t5", "ia3", "equivalent", "mismatch", reason=KNOWN, link=LINK)]          # a known failure no longer shows


def test_each_line_says_what_the_cell_means_for_the_user():
    words = [report.verdict(r) for r in RUN]
    assert words == ["broken, known", "safe", "broken, NEW", "plain fails", "safe"]
    line = report.line(RUN[0])
    assert line.startswith("ok   broken, known    peft-bert-lora-reentrant-masked-gc_first: mismatch")
    assert "cause: the recompute runs through the other adapter https://github.com/huggingface/peft/issues/2832" in line
    assert report.line(RUN[4]).startswith("FAIL safe ") and "(expected mismatch)" in report.line(RUN[4])
    assert "\n" not in report.line(RUN[1])   # a safe cell: one line


def test_the_summary_pivots_and_names_the_safe_setting():
    text = report.full_summary(RUN)
    lines = text.splitlines()
    by_method = lines[lines.index("by method:") + 1: lines.index("by arch:")]
    assert by_method[0].split() == ["method", "broken,", "NEW", "broken,", "known", "plain", "fails", "safe", "not",
                                    "as", "expected"]
    assert by_method[1].split() == ["ia3", ".", ".", "1", "1", "1"]
    assert by_method[2].split() == ["lora", "1", "1", ".", "1", "1"]
    arch_rows = lines[lines.index("by arch:") + 1: lines.index("broken by checkpointing: 2 cells")]
    assert [r.split()[0] for r in arch_rows[1:]] == ["bert", "llama", "t5"]   # broken, or not as expected
    quiet = report.pivot(RUN[:2] + [record("gpt2", "lora", "equivalent")], "arch", only_broken=True)
    assert [r.split()[0] for r in quiet[1:-1]] == ["bert"] and "(1 other arch values: no broken cell" in quiet[-1]
    known = text.index("the recompute runs through the other adapter")
    assert "safe in this run with gc_mode=non_reentrant (1 of 1 cells)" in text[known:]
    assert "no recorded cause" in text and "cases/peft_switch_adapters_recompute.py" in text
    assert lines[-1].startswith("5 cells: ") and "3 as expected, 2 not as expected" in lines[-1]


def test_an_equivalent_cell_that_does_not_vouch_for_all_it_trains_is_safe_only_in_part():
    """Tensors that never got a gradient in the plain run are not vouched for: the verdict says so, the summary
    counts it apart, and it is never offered as the setting that is safe for a broken cell."""
    partly = {**RUN[1], "detail": "3 steps, 16 trainable tensors; ...; 8 of 16 trainable tensors never get a non-zero "
                                  "gradient, not vouched for (first base_model.model.layers.0.lora_A.first.weight)"}
    assert report.verdict(partly) == "safe, partly" and report.line(partly).startswith("ok   safe, partly ")
    text = report.full_summary([RUN[0], partly])
    assert "safe in this run with" not in text
    assert text.splitlines()[-1].endswith("; 1 of the equivalent cells safe only in part (tensors not vouched for)")
    assert "safe in this run with gc_mode=non_reentrant" in report.full_summary(RUN[:2])


def test_junit_xml_has_a_testcase_per_cell(tmp_path):
    path = tmp_path / "j.xml"
    report.junit(str(path), RUN)
    suite = ET.parse(path).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert len(cases) == 5 and suite.get("failures") == "2" and suite.get("skipped") == "2"
    assert cases[RUN[2]["id"]].find("failure") is not None
    xfail = cases[RUN[0]["id"]].find("skipped")
    assert xfail.get("type") == "pytest.xfail" and "issues/2832" in xfail.get("message")
    assert cases[RUN[1]["id"]].find("*") is None
    report.junit(str(path), RUN, fail_on="broken")   # a known broken cell fails too, and is no longer skipped
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite.get("failures") == "3" and suite.get("skipped") == "1"
    assert suite.get("skipped") == str(sum(c.find("skipped") is not None for c in suite.iter("testcase")))


def test_the_ledger_keeps_what_the_report_needs(tmp_path):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"versions": versions(), "complete": True, "cells": RUN}))
    ledger = tmp_path / "l.jsonl.gz"
    assert cli.main(["ledger", str(run), "-o", str(ledger), "--label", "five cells"]) == 0
    back = records.read_any(str(ledger))
    assert back["label"] == "five cells" and back["versions"] == versions() and len(back["cells"]) == 5
    for a, b in zip(RUN, back["cells"]):
        for key in ("id", "backend", "arch", "method", "gc_mode", "inputs", "order", "task", "recipe", "outcome",
                    "expected", "matches", "reason", "link"):
            assert a[key] == b[key], key
        unexplained = a["outcome"] != "equivalent" and (not a["reason"] or not a["matches"])
        assert b["detail"] == (a["detail"] if unexplained else "")   # a recorded cause says the rest
    with gzip.open(ledger, "rt") as fh:   # one cause stored once
        assert len(json.loads(fh.readline())["causes"]) == 2


def test_the_ledger_keeps_a_safe_partly_cell_apart(tmp_path):
    """An equivalent cell that does not vouch for all it trains stays `safe, partly` when rendered from a ledger:
    the clause that says so is kept, however long the detail before it."""
    partly = record("bert", "lora", "equivalent", gc_mode="non_reentrant")
    partly["detail"] = ("3 steps, 16 trainable tensors; " + "x" * 400 + "; 8 of 16 trainable tensors never get a "
                        "non-zero gradient, not vouched for (first a.b)")
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"versions": versions(), "complete": True, "cells": [partly, RUN[1]]}))
    ledger = tmp_path / "l.jsonl.gz"
    assert cli.main(["ledger", str(run), "-o", str(ledger)]) == 0
    back = records.read_any(str(ledger))["cells"]
    assert [report.verdict(r) for r in back] == ["safe, partly", "safe"]
    assert back[0]["detail"].startswith("8 of 16 trainable tensors never get")


@pytest.mark.parametrize("args, needle", [
    (["report", "{run}", "-o", "{file}"], "is a file; name a folder"),
    (["report", "{run}", "-o", "/nonexistent/dir"], "folder '/nonexistent' does not exist"),
    (["report", "{file}", "-o", "{tmp}/out"], "cannot read a run's JSON or a ledger"),
    (["ledger", "{run}", "-o", "{tmp}/x.json"], "a ledger's name ends in .jsonl.gz"),
    (["check", "{file}"], "cannot read a run's JSON"),
])
def test_bad_report_input_exits_2_in_one_line(tmp_path, capsys, args, needle):
    run, file = tmp_path / "run.json", tmp_path / "not_a_run.txt"
    run.write_text(json.dumps({"versions": versions(), "cells": RUN}))
    file.write_text("{}")
    argv = [a.format(run=run, file=file, tmp=tmp_path) for a in args]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not_a_run.txt", "run.json"]   # nothing stray


def test_a_failure_of_the_harness_itself_exits_3_in_one_line(monkeypatch, capsys):
    def boom(*a, **k):
        raise RuntimeError("a bug")
    monkeypatch.setattr("harness.cli._check", boom)
    assert cli.main(["check", "x.json"]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("harness error: RuntimeError: a bug (test_report.py:") and "\n" not in err


def test_committed_ledgers_say_what_they_cover():
    assert LEDGERS, "docs/ledger/ holds the per-cell ledgers the docs' report is rendered from"
    for path in LEDGERS:
        data = records.read_any(str(path))
        assert data["label"] and data["complete"] and data["cells"], path


def test_the_product_doc_lists_every_committed_ledger_with_its_cell_count():
    text = (ROOT / "docs" / "product.md").read_text(encoding="utf-8")
    rows = {m.group(1): int(m.group(2).replace(",", "")) for m in
            re.finditer(r"^\| (\w+) \| ([\d,]+) \|", text, re.M)}
    assert rows == {p.name.removesuffix(".jsonl.gz"): len(records.read_any(str(p))["cells"]) for p in LEDGERS}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    runs = [records.read_any(str(p)) for p in LEDGERS]
    paths = render.render(runs, str(out))
    return out, runs, paths


def test_report_files_from_the_committed_ledgers(rendered):
    out, runs, paths = rendered
    names = sorted(os.path.basename(p) for p in paths)
    sections = render.sections(runs)
    assert {"report.html", "report.md"} <= set(names)
    assert sum(n.endswith(".png") for n in names) == len(sections)
    md = (out / "report.md").read_text()
    for (rel, backend), cells in sections.items():
        assert f"## {backend} ({rel})" in md and f"{len(cells)} cells: " in md
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _browser(user_dir: str):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000", f"--user-data-dir={user_dir}"):
        opts.add_argument(flag)
    # the browser reserves far more address space than the harness's --memory-gb cap of this worker allows
    return webdriver.Chrome(service=Service(CHROMEDRIVER, popen_kw={"preexec_fn": _uncap}), options=opts)


def _uncap() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (resource.getrlimit(resource.RLIMIT_AS)[1],) * 2)


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER) and not os.environ.get("CI"),
                    reason="no chromium and chromedriver here (Debian's chromium and chromium-driver; .ci/run "
                           "installs them, and under CI=true the test runs and fails without them)")
def test_the_report_page_in_a_real_browser(rendered):
    """Every arch x method of every section has a square; clicking one lists its cells with their cause and repro
    command; the cause table has a row per cause. HARNESS_SCREENSHOTS=DIR saves what the browser shows."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    out, runs, _ = rendered
    sections = render.sections(runs)
    driver = _browser(tempfile.mkdtemp())
    try:
        driver.get((out / "report.html").as_uri())
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
        tables = driver.find_elements(By.CSS_SELECTOR, "table.heatmap")
        assert len(tables) == len(sections)
        for table, ((rel, backend), cells) in zip(tables, sections.items()):
            assert (table.get_attribute("data-backend"), table.get_attribute("data-release")) == (backend, rel)
            shown = set(driver.execute_script(
                "return [...arguments[0].querySelectorAll('td.square')].map(t => t.dataset.arch + '|' + "
                "t.dataset.method)", table))
            assert shown == {f"{c['arch']}|{c['method']}" for c in cells}
        broken = next(c for cells in sections.values() for c in cells if c["outcome"] == "mismatch" and c["reason"])
        square = driver.find_element(By.CSS_SELECTOR, f"td.square[data-arch='{broken['arch']}']"
                                                      f"[data-method='{broken['method']}']")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", square)
        square.click()
        listing = driver.find_element(By.ID, "cells")
        assert listing.is_displayed()
        rows = {r.find_element(By.TAG_NAME, "code").text: r.text for r in listing.find_elements(By.CSS_SELECTOR,
                                                                                               "tr.listed")}
        assert broken["id"] in rows and report.short(broken["reason"]) in rows[broken["id"]]
        assert f"python -m harness repro {broken['id']}" in rows[broken["id"]]
        shots = os.environ.get("HARNESS_SCREENSHOTS")
        if shots:
            driver.save_screenshot(os.path.join(shots, "report_cells.png"))
        causes = driver.find_elements(By.CSS_SELECTOR, "#causes tr.cause")
        assert len(causes) == len(render.causes([c for cs in sections.values() for c in cs]))
        assert any(report.short(broken["reason"]) == r.find_element(By.TAG_NAME, "td").text for r in causes)
        if shots:
            driver.find_element(By.ID, "cells-close").click()
            driver.execute_script("window.scrollTo(0, 0)")
            driver.save_screenshot(os.path.join(shots, "report_top.png"))
    finally:
        driver.quit()
