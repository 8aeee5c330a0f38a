"""Gradient-checkpointing equivalence harness.

A *cell* (backend x arch x method x gc_mode x inputs x order x task) is trained twice from the
same seed on the same batches, once plainly and once with gradient checkpointing, and the two
traces are compared by :func:`harness.compare.compare`.
"""

# the cell axes that run/calibrate/pytest filter on, and their command-line spelling: here, not in harness.cells,
# so that building the command lines (pytest's options, --help) imports no torch
AXES = ("backend", "arch", "method", "gc_mode", "inputs", "order", "task", "recipe", "parallel")
# the value an axis has in a record made before the axis existed
AXIS_DEFAULTS = {"recipe": "loop", "parallel": "single"}
OPTIONS = tuple(a.replace("_", "-") for a in AXES)
