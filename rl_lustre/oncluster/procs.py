"""Processes: the session a process belongs to (from ``/proc``), and a watcher that kills
an attempt's processes should the supervisor die first.

An attempt's command runs in a session of its own (its pid is the session id), so
"is this pid part of the attempt" is a question about its session. Shared by the
supervisor on the cluster (standard library only, shipped with it) and by
:mod:`rl_lustre.ray.workers` here.
"""

from __future__ import annotations

import os
import subprocess

__all__ = ["orphan_watcher", "session_of"]


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


def orphan_watcher(pgid: int) -> subprocess.Popen[bytes]:
    """A process that kills the command's process group should this supervisor die first.

    The command runs in a session of its own, outside Ray's fate-sharing of the
    entrypoint's group: without this, a SIGKILLed supervisor would leave NeMo-RL holding
    its GPUs. It is killed when the attempt ends.
    """
    script = f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; kill -9 -{pgid} 2>/dev/null; exit 0"
    return subprocess.Popen(
        ["/bin/sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
