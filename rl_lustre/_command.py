"""Command lines rl_lustre writes (the supervisor's options, the rehearsal driver's):
numbers written so that the program reading them gets the very same value."""

from __future__ import annotations

import math

__all__ = ["number"]


def number(x: float) -> str:
    """A number for a command line, exactly: a whole number without its ``.0``.

    Examples:
        >>> number(2), number(2.0), number(0.5), number(1e-05), number(float("inf"))
        ('2', '2', '0.5', '1e-05', 'inf')
    """
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and math.isfinite(x)):
        return str(int(x))
    return repr(float(x))
