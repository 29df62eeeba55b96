"""Ctrl-C and SIGTERM during ``up()`` and ``down()``: :func:`cancel_on_signals` turns each
signal into an event the executor watches, so its bookkeeping stays whole."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["cancel_on_signals"]

logger = logging.getLogger("rl_lustre.provision")


@contextlib.contextmanager
def cancel_on_signals(*stages: tuple[threading.Event | None, str | Callable[[], str]]) -> Iterator[list[int]]:
    """While the block runs in the main thread, the n-th SIGINT or SIGTERM sets the
    event of ``stages[n-1]`` and logs its message, instead of raising
    KeyboardInterrupt; the previous handlers are restored afterwards.

    Setting an event rather than raising at an arbitrary bytecode keeps the executor's
    bookkeeping whole, so a rollback knows exactly what exists. Stages let a clean-up
    survive one impatient Ctrl-C and still be abandoned by a later one. A message may be a
    function, called when its signal arrives (to say what giving up would leave). Signals
    beyond the last stage are logged. Outside the main thread, handlers cannot be installed
    and nothing changes.

    Examples:
        >>> import os, signal, threading
        >>> stop, abandon = threading.Event(), threading.Event()
        >>> with cancel_on_signals((stop, "stopping"), (None, "press again to abandon"),
        ...                        (abandon, "abandoning")) as received:
        ...     os.kill(os.getpid(), signal.SIGTERM)
        ...     stop.wait(5), abandon.is_set()
        (True, False)
        >>> received == [signal.SIGTERM]
        True

    Yields:
        The signals received, in order.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: Any) -> None:
        received.append(signum)
        n = len(received)
        event, message = stages[n - 1] if n <= len(stages) else (None, "ignored: already abandoning")
        if event is not None:
            event.set()
        text = message() if callable(message) else message
        logger.warning("%s received: %s", signal.Signals(signum).name, text)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
