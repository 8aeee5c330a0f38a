"""The ledger and the report at the size of a product: a committed part's ledger replicated over N renamed archs
(`python benchmarks/report_scale.py 100`: 228,000 cells), written, read back and rendered; prints sizes and times."""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from harness import records, render

PART = Path(__file__).resolve().parent.parent / "docs" / "ledger" / "part_peft_bert_llama_transformers_4_57_6.jsonl.gz"


def main(copies: int) -> None:
    run = records.read_any(str(PART))
    cells = [{**c, "arch": f"{c['arch']}{k}", "id": c["id"].replace(f"-{c['arch']}-", f"-{c['arch']}{k}-", 1)}
             for k in range(copies) for c in run["cells"]]
    with tempfile.TemporaryDirectory() as tmp:
        ledger = os.path.join(tmp, "big.jsonl.gz")
        t = time.perf_counter()
        n = records.write_ledger(ledger, [{**run, "cells": cells}])
        print(f"ledger: {n} cells, {os.path.getsize(ledger):,} bytes ({os.path.getsize(ledger) / n:.1f} per cell), "
              f"written in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        back = records.read_any(ledger)
        print(f"read back in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        paths = render.render([back], os.path.join(tmp, "report"))
        print(f"report rendered in {time.perf_counter() - t:.1f} s: " +
              ", ".join(f"{os.path.basename(p)} {os.path.getsize(p):,} bytes" for p in paths))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
