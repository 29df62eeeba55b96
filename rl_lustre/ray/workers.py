"""Worker nodes of a local Ray head: more raylets on this machine, on loopback only.

Each worker node is one process (``_worker_node.py``, which does what
``ray start --address=<head GCS> --block`` does, on 127.0.0.1) in a process group of its own,
declaring the GPUs a GPU node of the cluster has (Ray counts them as resources; nothing runs
on a GPU). Killing that process group takes the raylet and every worker process it started
away at once, the way a Spot VM that vanishes does: Ray's GCS sees the node's health checks
fail, declares it dead, and every actor on it dies with it (see :func:`rl_lustre.testing.preempt`).

Worker nodes carry the head's mark (``RL_LUSTRE_HEAD``), so stopping the head also
finds any that are left. Their pids are kept in ``workers.json`` in the head's temp
dir, so another process (``testing.preempt`` on an adopted cluster) finds them too, with
when each was launched, when its raylet ran and when it was ended (``launched_at``,
``ready_at``, ``ended_at``): the goodput ledger bills a local node from its launch to its end.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import attrs

from ..errors import RayError, WaitTimeoutError
from ._worker_node import STARTED
from .head import LocalHead
from .nodes import OverloadedStart, indent, log_tail, node_env, overloaded_start, retry_overloaded
from .ports import free_port_range, free_ports
from .processes import proc_pids, running, send_signal

__all__ = ["WORKERS_FILE", "LocalWorker", "live_workers", "start_local_worker", "worker_records"]

_NODE_SCRIPT = Path(__file__).with_name("_worker_node.py")

logger = logging.getLogger("rl_lustre.ray.workers")

# What outlives one head of a deployment (rl_lustre.testing.lose_head keeps it for the next).
WORKERS_FILE = _STATE_FILE = "workers.json"
_NUMBERED = re.compile(r"worker-(\d+)")
_WORKER_PORTS = 20


@attrs.define(repr=False)
class LocalWorker:
    """A worker node of a local head (a live handle).

    Attributes:
        name: ``worker-<n>``, unique within the head.
        pid: the node's launcher process, leader of the node's own process group.
        num_gpus: the GPUs the node declares.
        log: where the node's launcher writes its output.
    """

    name: str
    pid: int
    num_gpus: int
    log: Path
    _process: subprocess.Popen[bytes] | None = attrs.field(default=None, alias="process")

    def __repr__(self) -> str:
        return f"LocalWorker({self.name!r}, pid={self.pid}, num_gpus={self.num_gpus})"

    def alive(self) -> bool:
        """Whether the node's launcher still runs."""
        if self._process is not None:
            return self._process.poll() is None
        return running(self.pid)

    def kill(self) -> None:
        """SIGKILL every process of the node at once: launcher, raylet, agents and workers.

        Ray starts each worker process (and so each actor) in a process group of its own,
        inside the node's session; a vanishing VM takes them all at the same moment, so
        the whole session goes, not only the launcher's group.

        Examples:
            >>> worker.kill()  # doctest: +SKIP
        """
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        for pid in _session_pids(self.pid):
            send_signal(pid, signal.SIGKILL)
        if self._process is not None:
            self._process.wait()
        _update_state(self.log.parent, self.name, ended_at=time.time(), only_if_missing=True)

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the node's launcher (it stops the raylet and agents), SIGKILL after ``grace``."""
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.kill()

    def output_tail(self, lines: int = 30) -> list[str]:
        """The last lines the node's launcher printed."""
        return log_tail(self.log, lines)


def start_local_worker(
    head: LocalHead,
    *,
    num_gpus: int,
    num_cpus: int = 1,
    memory: int | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 90.0,
    name: str | None = None,
) -> LocalWorker:
    """Start a worker node for ``head`` and wait until its raylet runs.

    Examples:
        >>> worker = start_local_worker(head, num_gpus=8)  # doctest: +SKIP
        >>> worker.alive()  # doctest: +SKIP
        True

    Args:
        head: the local head the node joins.
        num_gpus: the GPUs the node declares.
        num_cpus: the CPUs the node declares (its per-node work needs a worker process).
        memory: the bytes of Ray's logical ``memory`` resource the node declares (None: Ray's
            default, from this machine's memory); a number, as ``ray start --memory``.
        env: the environment of the node; by default this process's (like the head's).
        timeout: seconds to wait for the raylet.
        name: the node's name in Ray's node table (by default the next ``worker-<n>``);
            unique within the head.

    Raises:
        RayError: the node exited while starting.
        WaitTimeoutError: it did not start in time.
    """
    return retry_overloaded(
        "the local Ray worker node",
        lambda: _start_worker(
            head, num_gpus=num_gpus, num_cpus=num_cpus, memory=memory, env=env, timeout=timeout, name=name
        ),
    )


def _start_worker(
    head: LocalHead,
    *,
    num_gpus: int,
    num_cpus: int,
    memory: int | None,
    env: Mapping[str, str] | None,
    timeout: float,
    name: str | None = None,
) -> LocalWorker:
    temp_dir = head.temp_dir
    known = _read_state(temp_dir)
    if name is None:
        number = 1 + max((int(m.group(1)) for n in known if (m := _NUMBERED.fullmatch(n))), default=0)
        name = f"worker-{number}"
    elif name in known and running(int(known[name]["pid"] or 0)):
        raise RayError(f"a local Ray worker node named {name!r} already runs (pid {known[name]['pid']})")
    ports = free_ports(6)
    worker_lo = free_port_range(_WORKER_PORTS, exclude=ports)
    spec = {
        "gcs_address": head.gcs_address,
        "node_name": name,
        "node_manager_port": ports[0],
        "object_manager_port": ports[1],
        "dashboard_agent_listen_port": ports[2],
        "metrics_agent_port": ports[3],
        "runtime_env_agent_port": ports[4],
        "metrics_export_port": ports[5],
        "min_worker_port": worker_lo,
        "max_worker_port": worker_lo + _WORKER_PORTS - 1,
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "memory": memory,
        "object_store_memory": 80 * 1024 * 1024,
    }
    # Not `ray start --address`: it cannot join a loopback-only head (see _worker_node.py).
    command = [sys.executable, str(_NODE_SCRIPT), json.dumps(spec)]
    log_path = temp_dir / f"{name}.log"
    worker_env = node_env(temp_dir, env, head.auth_mode)
    launched_at = time.time()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            env=worker_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    worker = LocalWorker(name=name, pid=process.pid, num_gpus=num_gpus, log=log_path, process=process)
    logger.info("starting local Ray worker node %s (pid %d, %d GPUs)", name, process.pid, num_gpus)
    deadline = time.monotonic() + timeout
    try:
        while not any(STARTED in line for line in worker.output_tail(200)):
            if not worker.alive():
                error = OverloadedStart if overloaded_start(worker.output_tail(200)) else RayError
                raise error(
                    f"the local Ray worker node {name} exited while starting; its last output:\n"
                    + indent(worker.output_tail())
                )
            if time.monotonic() >= deadline:
                raise WaitTimeoutError(f"the local Ray worker node {name}", timeout, "the node has not started")
            time.sleep(0.1)
    except BaseException:
        worker.kill()
        raise
    _update_state(
        temp_dir, name, pid=process.pid, num_gpus=num_gpus, launched_at=launched_at, ready_at=time.time(), ended_at=None
    )
    return worker


def live_workers(head: LocalHead | Path) -> list[LocalWorker]:
    """The worker nodes of ``head`` (or of the head whose temp dir that is, alive or not)
    still running, oldest first (from any process).

    Examples:
        >>> [w.name for w in live_workers(head)]  # doctest: +SKIP
        ['worker-1', 'worker-2']
    """
    temp_dir = head if isinstance(head, Path) else head.temp_dir
    found = []
    state = _read_state(temp_dir)
    for name, record in sorted(state.items(), key=lambda kv: (kv[1].get("launched_at") or 0, kv[0])):
        worker = LocalWorker(
            name=name,
            pid=int(record["pid"] or 0),
            num_gpus=int(record["num_gpus"] or 0),
            log=temp_dir / f"{name}.log",
        )
        if worker.alive():
            found.append(worker)
    return found


def worker_records(temp_dir: Path) -> dict[str, dict[str, float | None]]:
    """Every worker node a head ever had (``workers.json``): ``{name: {pid, num_gpus,
    launched_at, ready_at, ended_at}}``, the times None when not recorded."""
    return _read_state(temp_dir)


def _read_state(temp_dir: Path) -> dict[str, dict[str, float | None]]:
    def when(value: object) -> float | None:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    try:
        state = json.loads((temp_dir / _STATE_FILE).read_text())
        return {
            str(k): {
                "pid": int(v["pid"]),
                "num_gpus": int(v["num_gpus"]),
                **{t: when(v.get(t)) for t in ("launched_at", "ready_at", "ended_at")},
            }
            for k, v in state.items()
        }
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def _update_state(temp_dir: Path, name: str, *, only_if_missing: bool = False, **fields: float | None) -> None:
    """Change one node's record in ``workers.json`` (under a lock: another process may write too)."""
    if not temp_dir.is_dir():
        return
    with open(temp_dir / f"{_STATE_FILE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = _read_state(temp_dir)
        record = state.get(name)
        if record is None and "pid" not in fields:
            return
        record = dict(record or {})
        for key, value in fields.items():
            if not (only_if_missing and record.get(key) is not None):
                record[key] = value
        state[name] = record
        tmp = temp_dir / f"{_STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, temp_dir / _STATE_FILE)


def _session_pids(sid: int) -> list[int]:
    """The live processes of session ``sid`` (Linux ``/proc``; elsewhere none)."""
    from ..oncluster.procs import session_of

    if not Path("/proc").is_dir():
        return []
    return [pid for pid in proc_pids() if session_of(pid) == sid]
