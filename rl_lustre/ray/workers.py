"""Worker nodes of a local Ray head: more raylets on this machine, ``ray start --address=...``.

Each worker node is one ``ray start --address=<head GCS> --block`` in a process group
of its own, declaring the GPUs a GPU node of the cluster has (Ray counts them as
resources; nothing runs on a GPU). Killing that process group takes the raylet and
every worker process it started away at once, the way a Spot VM that vanishes does:
Ray's GCS sees the node's health checks fail, declares it dead, and every actor on it
dies with it (see :func:`rl_lustre.testing.preempt`).

Worker nodes carry the head's mark (``RL_LUSTRE_HEAD``), so stopping the head also
finds any that are left. Their pids are kept in ``workers.json`` in the head's temp
dir, so another process (``testing.preempt`` on an adopted cluster) finds them too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import attrs

from ..errors import RayError, WaitTimeoutError
from .head import (
    _STARTED,
    LocalHead,
    _free_port_range,
    _free_ports,
    _indent,
    _ray_cli,
    _running,
    node_env,
)

__all__ = ["LocalWorker", "live_workers", "start_local_worker"]

logger = logging.getLogger("rl_lustre.ray.workers")

_STATE_FILE = "workers.json"
_WORKER_PORTS = 20


@attrs.define(repr=False)
class LocalWorker:
    """A worker node of a local head (a live handle).

    Attributes:
        name: ``worker-<n>``, unique within the head.
        pid: the ``ray start`` process, leader of the node's own process group.
        num_gpus: the GPUs the node declares.
        log: where ``ray start`` writes its output.
    """

    name: str
    pid: int
    num_gpus: int
    log: Path
    _process: subprocess.Popen[bytes] | None = attrs.field(default=None, alias="process")

    def __repr__(self) -> str:
        return f"LocalWorker({self.name!r}, pid={self.pid}, num_gpus={self.num_gpus})"

    def alive(self) -> bool:
        """Whether the node's ``ray start`` still runs."""
        if self._process is not None:
            return self._process.poll() is None
        return _running(self.pid)

    def kill(self) -> None:
        """SIGKILL the node's whole process group: raylet, agents and workers, at once.

        Examples:
            >>> worker.kill()  # doctest: +SKIP
        """
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self._process is not None:
            self._process.wait()

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the node's ``ray start`` (it stops the raylet in order), SIGKILL after ``grace``."""
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.kill()

    def output_tail(self, lines: int = 30) -> list[str]:
        try:
            return self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return []


def start_local_worker(
    head: LocalHead,
    *,
    num_gpus: int,
    num_cpus: int = 1,
    env: Mapping[str, str] | None = None,
    timeout: float = 90.0,
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
        env: the environment of the node; by default this process's (like the head's).
        timeout: seconds to wait for the raylet.

    Raises:
        RayError: the node exited while starting.
        WaitTimeoutError: it did not start in time.
    """
    temp_dir = head.temp_dir
    known = _read_state(temp_dir)
    number = 1 + max((int(n.rsplit("-", 1)[1]) for n in known), default=0)
    name = f"worker-{number}"
    ports = _free_ports(7)
    worker_lo = _free_port_range(_WORKER_PORTS, exclude=ports)
    command = [
        *_ray_cli(), "start", "--block",
        "--address", head.gcs_address,
        "--node-ip-address", "127.0.0.1",
        "--node-manager-port", str(ports[0]),
        "--object-manager-port", str(ports[1]),
        "--dashboard-agent-listen-port", str(ports[2]),
        "--dashboard-agent-grpc-port", str(ports[3]),
        "--runtime-env-agent-port", str(ports[4]),
        "--metrics-export-port", str(ports[5]),
        "--min-worker-port", str(worker_lo),
        "--max-worker-port", str(worker_lo + _WORKER_PORTS - 1),
        "--num-cpus", str(num_cpus),
        "--num-gpus", str(num_gpus),
        "--object-store-memory", str(80 * 1024 * 1024),
        "--disable-usage-stats",
        "--log-style", "record",
    ]  # fmt: skip
    log_path = temp_dir / f"{name}.log"
    worker_env = node_env(temp_dir, env, head.auth_mode)
    # The head sets it to 0 to stay on loopback; a worker node refuses to start with it.
    worker_env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
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
        while not any(_STARTED in line for line in worker.output_tail(200)):
            if not worker.alive():
                raise RayError(
                    f"the local Ray worker node {name} exited while starting; its last output:\n"
                    + _indent(worker.output_tail())
                )
            if time.monotonic() >= deadline:
                raise WaitTimeoutError(f"the local Ray worker node {name}", timeout, "ray start has not finished")
            time.sleep(0.1)
    except BaseException:
        worker.kill()
        raise
    _write_state(temp_dir, {**known, name: {"pid": process.pid, "num_gpus": num_gpus}})
    return worker


def live_workers(head: LocalHead) -> list[LocalWorker]:
    """The worker nodes of ``head`` still running, oldest first (from any process).

    Examples:
        >>> [w.name for w in live_workers(head)]  # doctest: +SKIP
        ['worker-1', 'worker-2']
    """
    found = []
    state = _read_state(head.temp_dir)
    for name, record in sorted(state.items(), key=lambda kv: int(kv[0].rsplit("-", 1)[1])):
        worker = LocalWorker(name=name, pid=record["pid"], num_gpus=record["num_gpus"],
                             log=head.temp_dir / f"{name}.log")
        if worker.alive():
            found.append(worker)
    return found


def _read_state(temp_dir: Path) -> dict[str, dict[str, int]]:
    try:
        state = json.loads((temp_dir / _STATE_FILE).read_text())
        return {str(k): {"pid": int(v["pid"]), "num_gpus": int(v["num_gpus"])} for k, v in state.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def _write_state(temp_dir: Path, state: Mapping[str, Mapping[str, int]]) -> None:
    tmp = temp_dir / f"{_STATE_FILE}.tmp"
    tmp.write_text(json.dumps(dict(state)))
    os.replace(tmp, temp_dir / _STATE_FILE)
