"""The matrix: one test per cell, id = cell id. A failing cell's message is its detail line;
a known non-equivalent cell (harness/expectations.py) is a strict expected failure."""
import pytest


def test_cell(cell, runner):
    r = runner.run_cell(cell)
    if not r["matches"]:
        if r["expected"] == "equivalent":
            pytest.fail(f"{r['outcome']}: {r['detail']}", pytrace=False)
        pytest.fail(f"expected {r['expected']} ({r['reason']} {r['link']}), got {r['outcome']}: {r['detail']}",
                    pytrace=False)
    if r["expected"] != "equivalent":
        pytest.xfail(f"{r['outcome']} as known: {r['reason']} {r['link']}")
