"""Print the product ledgers' table (one row per ledger under one header), as the README shows it.

    python tools/ledger_table.py data/product/*.json
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from matrix import ledger_table  # noqa: E402


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: python tools/ledger_table.py LEDGER.json...", file=sys.stderr)
        return 2
    tables = []
    for p in paths:
        try:
            with open(p) as fh:
                tables.append(ledger_table(json.load(fh)).splitlines())
        except (OSError, ValueError, KeyError) as exc:
            print(f"error: cannot read a ledger from {p!r}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
    print("\n".join(tables[0][:2] + [t[-1] for t in tables]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
