"""The keeper of a local deployment: a process beside the local Ray head, outside it.

It runs the on-cluster keeper (:mod:`rl_lustre.oncluster.keeper`), shipped the way a job
ships it (``python -m rl_lustre_oncluster.keeper``, from :func:`rl_lustre.recovery.shipped_package`),
so that what runs here is what runs on GKE. It finds the head through the head's state file
(its ports change with every head) and reads why a head went from the head's status file
(:func:`status_path`), which whatever ends a head the way a pod deletion does writes
(:func:`rl_lustre.testing.lose_head`).

It carries no mark of the head (:data:`rl_lustre.ray.processes.MARK`): stopping or losing the
head leaves it running. :meth:`LocalKeeper.stop` (``down()``, before the head) ends it. Its
pid is kept in ``<head temp dir>-keeper.json``, so another process finds it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs

from .nodes import TOKEN_FILE
from .processes import MARK, is_ours, running, send_signal

__all__ = ["LocalKeeper", "find_local_keeper", "keeper_log", "start_local_keeper", "status_path"]

logger = logging.getLogger("rl_lustre.ray.keeper")

# The keeper's own mark: how find_local_keeper tells it from a reused pid.
KEEPER_MARK = "RL_LUSTRE_KEEPER"


def status_path(temp_dir: Path) -> Path:
    """Where a local head's last termination is told (JSON ``{pid, reason, at}``), beside its temp dir.

    Examples:
        >>> status_path(Path("/tmp/rll-0123456789")).name
        'rll-0123456789-status.json'
    """
    return temp_dir.with_name(f"{temp_dir.name}-status.json")


def _state_path(temp_dir: Path) -> Path:
    return temp_dir.with_name(f"{temp_dir.name}-keeper.json")


def keeper_log(temp_dir: Path) -> Path:
    """The keeper's log (what it printed), beside the head's temp dir."""
    return temp_dir.with_name(f"{temp_dir.name}-keeper.log")


@attrs.define(repr=False)
class LocalKeeper:
    """The keeper process of the local head in ``temp_dir`` (a live handle)."""

    pid: int
    temp_dir: Path
    _process: subprocess.Popen[bytes] | None = attrs.field(default=None, alias="process")

    def __repr__(self) -> str:
        return f"LocalKeeper(pid={self.pid})"

    def alive(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return running(self.pid) and is_ours(self.pid, self.temp_dir, mark=KEEPER_MARK)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, SIGKILL after ``grace`` seconds; forget it."""
        if self.alive():
            send_signal(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.alive():
                logger.warning("the local keeper (pid %d) ignored SIGTERM for %gs; killing it", self.pid, grace)
                send_signal(self.pid, signal.SIGKILL)
        if self._process is not None:
            self._process.wait()
        with contextlib.suppress(OSError):
            _state_path(self.temp_dir).unlink()
        logger.info("stopped the local keeper (pid %d)", self.pid)

    def output_tail(self, lines: int = 30) -> list[str]:
        from .nodes import log_tail

        return log_tail(keeper_log(self.temp_dir), lines)


def start_local_keeper(
    temp_dir: Path, *, cluster: str, mount_path: str, poll: float = 0.5, max_losses: int = 3, loss_window: float = 1800
) -> LocalKeeper:
    """Start the keeper of the local head in ``temp_dir`` (one already running is returned as is)."""
    from .._secrets import looks_secret, secret_shape
    from ..recovery import shipped_package

    found = find_local_keeper(temp_dir)
    if found is not None:
        return found
    package = shipped_package()
    env = {
        k: v
        for k, v in os.environ.items()
        if k != MARK and not k.startswith("RAY_") and not (looks_secret(k) or secret_shape(v) is not None)
    }
    env["PYTHONPATH"] = os.path.dirname(package)
    env[KEEPER_MARK] = str(temp_dir)
    command = [
        sys.executable, "-m", "rl_lustre_oncluster.keeper",
        "--cluster", cluster,
        "--mount", mount_path,
        "--head-file", str(temp_dir / "head.json"),
        "--token-file", str(temp_dir / TOKEN_FILE),
        "--head-status", str(status_path(temp_dir)),
        "--poll", repr(poll),
        "--max-losses", str(max_losses),
        "--loss-window", repr(loss_window),
    ]  # fmt: skip
    with open(keeper_log(temp_dir), "ab") as log:
        process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    _state_path(temp_dir).write_text(json.dumps({"pid": process.pid, "started_at": time.time()}))
    logger.info("started the local keeper (pid %d) beside the Ray head", process.pid)
    return LocalKeeper(process.pid, temp_dir, process=process)


def find_local_keeper(temp_dir: Path) -> LocalKeeper | None:
    """The keeper of the local head in ``temp_dir``, if it runs (from any process)."""
    try:
        pid = int(json.loads(_state_path(temp_dir).read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    keeper = LocalKeeper(pid, temp_dir)
    return keeper if keeper.alive() else None
