"""Benchmarks, run by ``nox -s bench`` (``python -m benchmarks``).

Each module has a ``main(argv) -> int`` that prints a table and returns non-zero when
a target is missed.
"""

from __future__ import annotations

import sys
from typing import Protocol


class _Result(Protocol):
    def table(self) -> str: ...
    def missed(self) -> list[str]: ...


def report(result: _Result) -> int:
    """Print ``result``'s table and every missed target (on stderr); 1 if any was missed."""
    print(result.table())
    missed = result.missed()
    for line in missed:
        print(f"MISSED: {line}", file=sys.stderr)
    return 1 if missed else 0
