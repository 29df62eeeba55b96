"""Benchmarks, run by ``nox -s bench`` (``python -m benchmarks``).

Each module has a ``main(argv) -> int`` that prints a table and returns non-zero when
a target is missed.
"""
