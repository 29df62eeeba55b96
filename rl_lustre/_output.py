"""Console output: off unless asked for or attached to a terminal; rich only when on.

The library logs through :mod:`logging` either way. Output is for people watching a
script: progress bars while waiting for a run, and a line saying why a ``with
cluster:`` block ended. It is on when :func:`enable_output` says so, else when
``RL_LUSTRE_OUTPUT`` is ``1``/``0``, else when stdout is a terminal.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._public import public

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["echo", "enable_output", "output_enabled", "progress"]

_forced: list[bool] = []


@public("rl_lustre")
class enable_output:  # lower case: used like a function, as modal.enable_output() is
    """Turn console output on (or off) for this process, or for a ``with`` block.

    Examples:
        >>> import rl_lustre._output as out
        >>> with out.enable_output():
        ...     out.output_enabled()
        True
        >>> with out.enable_output(False):
        ...     out.output_enabled()
        False

    Args:
        on: True to show progress bars and messages, False to silence them.
    """

    def __init__(self, on: bool = True) -> None:
        _forced.append(bool(on))
        self._depth = len(_forced)

    def __enter__(self) -> enable_output:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        del _forced[self._depth - 1 :]


def output_enabled() -> bool:
    """Whether progress bars and messages are shown.

    Examples:
        >>> import rl_lustre._output as out
        >>> with out.enable_output(False):
        ...     out.output_enabled()
        False
    """
    if _forced:
        return _forced[-1]
    env = os.environ.get("RL_LUSTRE_OUTPUT", "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        return True
    if env in ("0", "false", "no", "off"):
        return False
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty and isatty())


def _console() -> Console:
    from rich.console import Console

    # Built per use: sys.stdout may be swapped (pytest capture, notebooks).
    return Console(file=sys.stdout, highlight=False)


def echo(message: str, *, style: str | None = None) -> None:
    """Print ``message`` when output is on.

    Examples:
        >>> import rl_lustre._output as out
        >>> with out.enable_output(False):
        ...     out.echo("nobody sees this")
    """
    if output_enabled():
        _console().print(message, style=style, markup=False)


@contextmanager
def progress(description: str, total: int | None = None) -> Iterator[Callable[..., None]]:
    """A progress bar while the block runs; yields ``update(completed=, total=, description=)``.

    When output is off the update function does nothing and rich is not imported.

    Examples:
        >>> import rl_lustre._output as out
        >>> with out.enable_output(False), out.progress("steps", total=3) as update:
        ...     update(completed=1)
    """
    if not output_enabled():
        yield _ignore
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(),
        transient=False,
    ) as bar:
        task = bar.add_task(description, total=total)

        def update(**fields: Any) -> None:
            bar.update(task, **{k: v for k, v in fields.items() if v is not None})

        yield update


def _ignore(**fields: Any) -> None:
    del fields
