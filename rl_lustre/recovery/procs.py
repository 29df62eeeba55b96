"""Processes, from ``/proc``: the session a process belongs to.

An attempt's command runs in a session of its own (its pid is the session id), so
"is this pid part of the attempt" is a question about its session. Shared by the
supervisor on the cluster (standard library only, shipped with it) and by
:mod:`rl_lustre.ray.workers` here.
"""

from __future__ import annotations

__all__ = ["session_of"]


def session_of(pid: int) -> int | None:
    """The session id of ``pid``, or None when it is gone (or there is no ``/proc``).

    Examples:
        >>> import os
        >>> session_of(os.getpid()) == os.getsid(0)
        True
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # After the command name (which may hold spaces and parentheses): state, ppid, pgrp, session.
    fields = stat.rsplit(b")", 1)[-1].split()
    try:
        return int(fields[3])
    except (IndexError, ValueError):
        return None
