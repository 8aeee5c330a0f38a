"""Known non-equivalent cells, as data (matched like OpInfo's DecorateInfo).

Each entry: a cell pattern (fnmatch per axis), the library versions it holds for (PEP 440
specifiers, all must match the installed versions), the expected outcome, the reason and a link.
The first matching entry wins. Cells no entry matches are expected `equivalent`. Matching is
strict: an expected failure that now comes out `equivalent` fails the run, so an upstream fix
shows up.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .outcomes import Outcome


@dataclass(frozen=True)
class Expect:
    match: dict                      # axis -> fnmatch pattern (axes: backend arch method gc_mode inputs order task)
    outcome: Outcome
    reason: str
    link: str = ""
    versions: dict = field(default_factory=dict)   # package -> specifier, e.g. {"adapters": ">=1.0"}

    def applies(self, cell_fields: dict) -> bool:
        for axis, pattern in self.match.items():
            if not fnmatch.fnmatchcase(str(cell_fields[axis]), pattern):
                return False
        for pkg, spec in self.versions.items():
            v = installed(pkg)
            if v is None or Version(v) not in SpecifierSet(spec):
                return False
        return True


@lru_cache(maxsize=None)
def installed(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


ADAPTERS_REENTRANT = (
    "adapters' gradient_checkpointing_enable refuses use_reentrant=True: it needs context_fn to hand the "
    "ForwardContext to the recompute, which only the non-reentrant checkpoint supports"
)

EXPECTATIONS: list[Expect] = [
    Expect({"backend": "adapters", "gc_mode": "reentrant"}, Outcome.UNSUPPORTED, ADAPTERS_REENTRANT,
           "https://github.com/adapter-hub/adapters/pull/759", {"adapters": ">=1.1"}),
]


def expected(cell_fields: dict, table: list[Expect] | None = None) -> tuple[Outcome, Expect | None]:
    for e in EXPECTATIONS if table is None else table:
        if e.applies(cell_fields):
            return e.outcome, e
    return Outcome.EQUIVALENT, None
