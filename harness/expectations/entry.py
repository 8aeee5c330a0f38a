"""One known outcome: `Expect`, a cell pattern matched like OpInfo's DecorateInfo, and how it is matched."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..outcomes import Outcome
from ..versions import installed

TRAIT = "trait:"   # a pattern "trait:NAME" matches a cell whose method has that trait (MethodSpec.traits)


@dataclass(frozen=True)
class Expect:
    match: dict          # field -> fnmatch pattern or tuple of them (backend arch method gc_mode inputs order
                         # task, the arch's modality, and "trait:NAME" for the method's traits)
    outcome: Outcome | tuple[Outcome, ...]   # several: one cause that shows as either (e.g. a loss that no
    reason: str                                 # longer requires grad -> gc_error, else missing_grad)
    link: str = ""
    versions: dict = field(default_factory=dict)   # package -> specifier, e.g. {"adapters": ">=1.0"}
    refuses_checkpointing: bool = False   # the library's refusal in gradient_checkpointing_enable itself: it comes
                                          # before any plain run is needed (see expected())
    below_tolerance: bool = False   # a loss the comparator may not see: a tensor shared by every layer (UniLoRA's
                                    # one vector) keeps the other layers' part of its gradient, so losing some
                                    # layers' part is a value difference of that part's size, `equivalent` when it is
                                    # below the tolerance. The only entries that may list `equivalent` among other
                                    # outcomes: the strict entries of the methods with a tensor per layer still
                                    # show an upstream fix of the same loss. Also a difference whose size varies
                                    # by arch (PVeRA's other noise) when a case script is its strict guard.

    machine: str = ""   # a condition of the machine (a key of MACHINES) the entry holds on, e.g. no accelerator
    unless: dict = field(default_factory=dict)   # field -> patterns, as `match` (every axis): cells matching are not
                                                 # the entry's (e.g. the methods of a trait that behave otherwise)

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        return self.outcome if isinstance(self.outcome, tuple) else (self.outcome,)

    def applies(self, cell_fields: dict) -> bool:
        if not all(_matches(cell_fields, axis, pattern) for axis, pattern in self.match.items()):
            return False
        if self.unless and all(_matches(cell_fields, axis, pattern) for axis, pattern in self.unless.items()):
            return False
        return self.holds_here()

    def holds_here(self) -> bool:
        """The entry's versions are the installed ones, and its machine condition holds."""
        for pkg, spec in self.versions.items():
            v = installed(pkg)
            if v is None or Version(v) not in SpecifierSet(spec):
                return False
        return not self.machine or MACHINES[self.machine]()

    def pattern(self) -> str:
        """The cell pattern in one line: `axis=a|b`, then `unless axis=...`."""
        def axes(d: dict) -> str:
            return " ".join(f"{k}={v if isinstance(v, str) else '|'.join(v)}" for k, v in d.items())
        return axes(self.match) + (f" unless {axes(self.unless)}" if self.unless else "")


def patterns(pattern) -> tuple:
    """An axis's pattern as a tuple of patterns (one string, or several; none for an axis not matched on)."""
    return () if pattern is None else (pattern,) if isinstance(pattern, str) else tuple(pattern)


def _matches(cell_fields: dict, axis: str, pattern) -> bool:
    value = str(cell_fields.get(axis, ""))
    for p in patterns(pattern):
        if p.startswith(TRAIT) and p[len(TRAIT):] in cell_fields.get("traits", ()):
            return True
        if fnmatch.fnmatchcase(value, p):
            return True
    return False


def _no_accelerator() -> bool:
    import torch

    return torch.accelerator.current_accelerator() is None


def _bnb_cpu_repacks() -> bool:
    """bitsandbytes repacks a 4-bit weight for its CPU inference kernel on this CPU (AVX512-BF16)."""
    try:
        from bitsandbytes.functional import has_avx512bf16
    except Exception:  # noqa: BLE001 - not installed, or no CPU library
        return False
    return bool(has_avx512bf16())


MACHINES = {"no_accelerator": _no_accelerator, "bnb_cpu_repacks": _bnb_cpu_repacks}
