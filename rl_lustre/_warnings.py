"""Warnings that point at the user's line, whichever way the call came."""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["warn_caller"]


def warn_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the first line outside rl_lustre: the caller's own.

    A fixed ``stacklevel`` points at the wrong line once the call comes through another
    path (a sweep calls ``submit`` one level deeper), and past the top of the stack
    Python names none (``sys:1:``).

    Examples:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn_caller("careful", UserWarning)
        >>> caught[0].filename.endswith("_warnings.py")
        False
    """
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 2

    def ours(filename: str) -> bool:
        # attrs compiles the specs' __init__ into "<attrs generated methods ...>": ours too.
        return filename.startswith("<attrs generated") or os.path.abspath(filename).startswith(package)

    while frame.f_back is not None and ours(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
