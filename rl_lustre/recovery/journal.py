"""The supervisor's journal: records for programs, one line each in the job's log.

A record is the line :data:`MARK` + a JSON object with at least ``v`` (the schema's
version, :data:`VERSION`), ``at`` (the head's ``time.time()`` when it was written,
rounded to milliseconds) and ``event`` (what happened). Any process reads them back
from the log through the Jobs API with :func:`read_journal`; people read the
``rl_lustre supervisor:`` lines printed beside them.

The events of the cluster's queue (``queued``, ``waiting``, ``granted``, ``held``,
``released``, ``reaped``) and their fields are listed in :mod:`rl_lustre.queueing`.
The recoveries keep their own marks, :data:`RESTART_MARK` and :data:`RESUMED_MARK`
(see :mod:`rl_lustre.recovery.supervisor`).

It runs on the cluster (shipped with the supervisor; standard library only).

    >>> import io
    >>> out = io.StringIO()
    >>> write({"event": "granted", "need": 2}, out=out, at=1.5)
    >>> out.getvalue()
    'RL_LUSTRE_EVENT {"at": 1.5, "event": "granted", "need": 2, "v": 1}\\n'
    >>> read_journal("a line\\n" + out.getvalue() + "RL_LUSTRE_EVENT {torn")
    [{'at': 1.5, 'event': 'granted', 'need': 2, 'v': 1}]
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

__all__ = ["MARK", "RESTART_MARK", "RESUMED_MARK", "VERSION", "read_journal", "write"]

MARK = "RL_LUSTRE_EVENT "
# A recovery's records (see rl_lustre.recovery.supervisor, and parse_restarts there).
RESTART_MARK = "RL_LUSTRE_RESTART "
RESUMED_MARK = "RL_LUSTRE_RESUMED "
VERSION = 1
# One write of a whole line at a time (the output copier writes from another thread).
LOCK = threading.Lock()


def write(record: dict[str, Any], *, out: TextIO | None = None, at: float | None = None) -> None:
    """Write one record (``v`` and ``at`` added) as one line, flushed."""
    full = {"v": VERSION, "at": round(time.time() if at is None else at, 3), **record}
    text = MARK + json.dumps(full, sort_keys=True) + "\n"
    stream = sys.stdout if out is None else out
    with LOCK:
        stream.write(text)
        stream.flush()


def read_journal(log: str) -> list[dict[str, Any]]:
    """Every record in ``log``, in order; lines that do not parse are left out."""
    out = []
    for line in log.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            record = json.loads(line[len(MARK) :])
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("event"), str):
            out.append(record)
    return out
