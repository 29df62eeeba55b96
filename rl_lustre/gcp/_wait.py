"""Waiting for remote state: capped exponential backoff, a deadline, and progress.

Every wait refreshes at once, then sleeps ``initial``, ``initial × multiplier``, … up
to ``maximum`` between polls, so a long wait costs a fixed small number of requests
per minute rather than one per tick. Each poll is logged at DEBUG, each change of the
observed state at INFO. A timeout raises :class:`~rl_lustre.errors.WaitTimeoutError`
carrying the last state seen.

Progress goes to the ``progress`` callback of a wait, and to the hook installed with
:func:`progress_hook` (a context variable: worker threads that should report must
run in a copy of the installing context, e.g. ``contextvars.copy_context().run``).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import attrs

from ..errors import WaitTimeoutError

log = logging.getLogger("rl_lustre.gcp.wait")

T = TypeVar("T")


@attrs.frozen
class Backoff:
    """Delays between polls: ``initial`` growing by ``multiplier`` up to ``maximum`` seconds.

    Examples:
        >>> import itertools
        >>> list(itertools.islice(Backoff(initial=1, maximum=5, multiplier=2).delays(), 5))
        [1.0, 2.0, 4.0, 5.0, 5.0]
    """

    initial: float = 2.0
    maximum: float = 30.0
    multiplier: float = 1.6

    def delays(self) -> Iterator[float]:
        delay = float(self.initial)
        while True:
            yield min(delay, float(self.maximum))
            delay = min(delay * self.multiplier, float(self.maximum))


DEFAULT_BACKOFF = Backoff()
# An emulator (rl_lustre.testing's fakes) answers in milliseconds; polling it on the
# production cadence would only make every wait last seconds.
EMULATOR_BACKOFF = Backoff(initial=0.02, maximum=0.5, multiplier=1.5)


def default_backoff() -> Backoff:
    """The polling cadence of waits that were not given one.

    Production's (2 s growing to 30 s) unless a Google API emulator is configured
    (``RL_LUSTRE_GCP_EMULATOR_HOST`` or ``RL_LUSTRE_GCP_REST_EMULATOR``), whose fakes
    answer in milliseconds: then 20 ms growing to 0.5 s.

    Examples:
        >>> default_backoff().initial in (DEFAULT_BACKOFF.initial, EMULATOR_BACKOFF.initial)
        True
    """
    from ._clients import GRPC_EMULATOR_ENV, REST_EMULATOR_ENV

    if os.environ.get(GRPC_EMULATOR_ENV, "").strip() or os.environ.get(REST_EMULATOR_ENV, "").strip():
        return EMULATOR_BACKOFF
    return DEFAULT_BACKOFF


@attrs.frozen
class WaitProgress:
    """One observation during a wait.

    Attributes:
        what: what is awaited (``"Lustre instance demo-lustre to be ACTIVE"``).
        state: the state observed, in words.
        elapsed: seconds since the wait began.
        polls: requests made so far by this wait.
        done: True on the final observation.
    """

    what: str
    state: str
    elapsed: float
    polls: int
    done: bool


ProgressCallback = Callable[[WaitProgress], None]
_hook: contextvars.ContextVar[ProgressCallback | None] = contextvars.ContextVar("rl_lustre_wait_progress", default=None)


@contextlib.contextmanager
def progress_hook(callback: ProgressCallback | None) -> Iterator[None]:
    """Send the progress of every wait started in this context to ``callback``.

    Examples:
        >>> seen = []
        >>> with progress_hook(seen.append):
        ...     wait_for("a thing", lambda: "READY", done=lambda s: s == "READY", timeout=1)
        'READY'
        >>> [(p.state, p.done) for p in seen]
        [('READY', True)]
    """
    token = _hook.set(callback)
    try:
        yield
    finally:
        _hook.reset(token)


def report_progress(what: str, state: str) -> None:
    """Send one observation that is not a poll (a step's own progress line) to the installed hook.

    Examples:
        >>> seen = []
        >>> with progress_hook(seen.append):
        ...     report_progress("GPU capacity", "asking for spot in us-east1-b")
        >>> seen[0].state
        'asking for spot in us-east1-b'
    """
    hook = _hook.get()
    if hook is not None:
        hook(WaitProgress(what, state, 0.0, 0, False))


def wait_for(
    what: str,
    poll: Callable[[], T],
    *,
    done: Callable[[T], bool],
    timeout: float,
    describe: Callable[[T], str] = str,
    backoff: Backoff | None = None,
    progress: ProgressCallback | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Any] = time.sleep,
) -> T:
    """Call ``poll`` until ``done(result)``, with capped backoff, for at most ``timeout`` seconds.

    Errors raised by ``poll`` propagate (it should retry transient ones itself).

    Examples:
        >>> states = iter(["CREATING", "CREATING", "ACTIVE"])
        >>> wait_for("instance x to be ACTIVE", lambda: next(states), done=lambda s: s == "ACTIVE",
        ...          timeout=5, backoff=Backoff(initial=0.001, maximum=0.001))
        'ACTIVE'

    Raises:
        WaitTimeoutError: the deadline passed; ``last_state`` is ``describe`` of the last result.
    """
    hooks = [h for h in (progress, _hook.get()) if h is not None]
    delays = (backoff or default_backoff()).delays()
    start = clock()
    deadline = start + timeout
    polls = 0
    last_state: str | None = None
    while True:
        result = poll()
        polls += 1
        state = describe(result)
        finished = done(result)
        elapsed = clock() - start
        log.debug("poll %d of %s: %s (%.1fs)", polls, what, state, elapsed)
        if state != last_state and last_state is not None:
            log.info("%s: %s -> %s after %.1fs", what, last_state, state, elapsed)
        last_state = state
        for hook in hooks:
            hook(WaitProgress(what, state, elapsed, polls, finished))
        if finished:
            return result
        remaining = deadline - clock()
        if remaining <= 0:
            raise WaitTimeoutError(what, timeout, last_state)
        sleep(min(next(delays), remaining))
