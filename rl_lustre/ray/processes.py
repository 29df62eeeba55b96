"""The processes of a local Ray head, found through ``/proc`` by the mark they carry.

Every process of a head (``ray start``, its raylets, job drivers, worker nodes) carries
``RL_LUSTRE_HEAD=<temp dir>`` (:data:`MARK`) in its environment. Job drivers escape the
head's process group (Ray starts each in a new session), so stopping a head finds
stragglers by that mark (:func:`sweep`), never with ``ray stop`` or by name.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "MARK",
    "is_ours",
    "kill_head_processes",
    "marked_pids",
    "proc_pids",
    "read_proc",
    "running",
    "send_signal",
    "sweep",
]

logger = logging.getLogger("rl_lustre.ray.head")

MARK = "RL_LUSTRE_HEAD"


def send_signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = read_proc(pid, "stat")
    return stat is None or stat.rsplit(b")", 1)[-1].split()[:1] != [b"Z"]


def read_proc(pid: int, name: str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return None


def is_ours(pid: int, temp_dir: Path, *, mark: str = MARK) -> bool:
    """Whether ``pid`` carries this head's mark (or another ``mark`` naming it); without
    ``/proc``, trust the pid."""
    if not Path("/proc/self/environ").exists():
        return True
    environ = read_proc(pid, "environ")
    return environ is not None and f"{mark}={temp_dir}".encode() in environ.split(b"\0")


def marked_pids(temp_dir: Path) -> list[int]:
    """Live processes carrying this head's mark (Linux; elsewhere an empty list)."""
    if not Path("/proc/self/environ").exists():
        return []
    me = {os.getpid(), os.getppid()}
    found = []
    for entry in proc_pids():
        if entry not in me and running(entry) and is_ours(entry, temp_dir):
            found.append(entry)
    return found


def proc_pids() -> Iterator[int]:
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def sweep(temp_dir: Path, settle: float) -> None:
    """Wait up to ``settle`` seconds for marked processes to exit, then SIGKILL the rest
    (again, until none is left: a shell may fork between our look and our kill)."""
    deadline = time.monotonic() + settle
    give_up = deadline + 10.0
    while left := marked_pids(temp_dir):
        now = time.monotonic()
        if now >= give_up:
            logger.warning("could not kill processes %s of the local Ray head in %s", left, temp_dir)
            return
        if now >= deadline:
            logger.debug("killing %d leftover process(es) of the local Ray head in %s", len(left), temp_dir)
            for pid in left:
                send_signal(pid, signal.SIGKILL)
        time.sleep(0.1)


def kill_head_processes(temp_dir: Path, *, spare_sessions: set[int]) -> int:
    """SIGKILL every process of the head in ``temp_dir`` at once, as a pod deletion or an OOM kill
    takes them (``ray start``, GCS, raylet, dashboard, job drivers), but those in ``spare_sessions``
    (its worker nodes, which are other pods); returns how many were killed."""
    from ..oncluster.procs import session_of

    killed: set[int] = set()
    for _ in range(50):
        victims = [pid for pid in marked_pids(temp_dir) if session_of(pid) not in spare_sessions]
        if not victims:
            break
        for pid in victims:
            send_signal(pid, signal.SIGKILL)
        killed.update(victims)
        time.sleep(0.05)
    return len(killed)
