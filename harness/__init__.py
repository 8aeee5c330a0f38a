"""Gradient-checkpointing equivalence harness.

A *cell* (backend x arch x method x gc_mode x inputs x order x task) is trained twice from the
same seed on the same batches, once plainly and once with gradient checkpointing, and the two
traces are compared by :func:`harness.compare.compare`.
"""
