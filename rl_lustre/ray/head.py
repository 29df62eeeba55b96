"""A real Ray head on this machine: ``ray start --head --block`` as a child process.

The head listens on 127.0.0.1 only, on free ports, with its own short temp dir (Ray
puts Unix sockets there, whose paths must stay under 108 bytes). It runs in a session
of its own, so a Ctrl-C in the terminal reaches the Python process, whose clean-up
then stops the head, rather than killing Ray half-way.

Every process of a head carries ``RL_LUSTRE_HEAD=<temp dir>`` in its environment.
Job drivers escape the head's process group (Ray starts each in a new session), so
:meth:`LocalHead.stop` finds stragglers by that mark (:mod:`rl_lustre.ray.processes`).
It never runs ``ray stop``, which would kill every Ray on the machine. What a head
shares with its worker nodes (:mod:`rl_lustre.ray.workers`) is in
:mod:`rl_lustre.ray.nodes` and :mod:`rl_lustre.ray.ports`.

Ray 2.5x+ authenticates its HTTP and gRPC endpoints with a bearer token when
``RAY_AUTH_MODE=token``. The launcher generates a token per head, writes it into the
head's temp dir (mode 0600) and points the head at it with ``RAY_AUTH_TOKEN_PATH``,
never touching ``~/.ray/auth_token``; clients send ``Authorization: Bearer <token>``
(:meth:`LocalHead.headers`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import attrs

from ..errors import ConfigError, RayError, WaitTimeoutError
from .nodes import (
    TOKEN_FILE,
    AuthMode,
    OverloadedStart,
    indent,
    log_tail,
    node_env,
    overloaded_start,
    retry_overloaded,
)
from .ports import free_port_range, free_ports
from .processes import is_ours, running, send_signal, sweep

__all__ = ["LocalHead", "find_local_head", "head_dir", "start_local_head"]

logger = logging.getLogger("rl_lustre.ray.head")

_STATE_FILE = "head.json"
_LOG_FILE = "head.log"
_WORKER_PORTS = 100
# ``ray start`` prints this once every process of the node runs; the dashboard
# answers earlier, before the raylet exists (and a raylet that fails to start then
# takes the whole head down).
_STARTED = "Ray runtime started."


def head_dir(key: str) -> Path:
    """The temp dir of the head for ``key``: short, per user, and the same in every process.

    Being deterministic is what lets a later process find (and adopt or stop) a head
    that an earlier one left running.

    Examples:
        >>> head_dir("local:/data/volume") == head_dir("local:/data/volume")
        True
        >>> len(str(head_dir("x"))) < 32
        True
    """
    import hashlib

    digest = hashlib.sha256(f"{os.getuid()}:{key}".encode()).hexdigest()[:10]
    root = tempfile.gettempdir()
    # Ray's socket paths below the temp dir are long; keep the prefix short.
    if len(root) > 16:
        root = "/tmp"
    return Path(root) / f"rll-{digest}"


@attrs.define(repr=False)
class LocalHead:
    """A running local Ray head (a live handle, not a spec).

    Attributes:
        pid: the ``ray start`` process, leader of the head's process group.
        temp_dir: Ray's ``--temp-dir``; also holds the token, log and state file.
        dashboard_url: the Jobs API / dashboard, ``http://127.0.0.1:PORT``.
        gcs_address: the GCS address (``127.0.0.1:PORT``), what ``ray.init`` takes.
        auth_mode: ``"token"`` or ``"disabled"``.
        launched_at: when ``ray start`` was launched (seconds since the epoch), if recorded.
    """

    pid: int
    temp_dir: Path
    dashboard_url: str
    gcs_address: str
    auth_mode: AuthMode
    launched_at: float | None = None
    _process: subprocess.Popen[bytes] | None = attrs.field(default=None, alias="process")

    def __repr__(self) -> str:
        return f"LocalHead(pid={self.pid}, dashboard_url={self.dashboard_url!r}, auth_mode={self.auth_mode!r})"

    @property
    def token_path(self) -> Path | None:
        """The token file, in token mode."""
        return self.temp_dir / TOKEN_FILE if self.auth_mode == "token" else None

    def headers(self) -> dict[str, str]:
        """HTTP headers for the Jobs API: the bearer token in token mode, else none.

        Examples:
            >>> head.headers()  # doctest: +SKIP
            {'Authorization': 'Bearer 3f9c...'}
        """
        if self.token_path is None:
            return {}
        try:
            token = self.token_path.read_text().strip()
        except OSError as exc:
            raise RayError(f"cannot read the local Ray head's token {self.token_path}: {exc}") from exc
        return {"Authorization": f"Bearer {token}"}

    def alive(self) -> bool:
        """Whether the head's ``ray start`` process is still running."""
        if self._process is not None:
            return self._process.poll() is None
        return running(self.pid) and is_ours(self.pid, self.temp_dir)

    def output_tail(self, lines: int = 30) -> list[str]:
        """The last lines ``ray start`` printed (its stdout and stderr)."""
        return log_tail(self.temp_dir / _LOG_FILE, lines)

    def stop(self, grace: float = 15.0) -> None:
        """Stop the head and every process it started, then remove its temp dir.

        SIGTERM to ``ray start`` (which stops its children in order), SIGKILL to its
        process group after ``grace`` seconds, then SIGKILL to any process still
        carrying this head's mark. A second Ctrl-C while waiting skips to SIGKILL.

        Examples:
            >>> head = start_local_head(head_dir("demo"))  # doctest: +SKIP
            >>> head.stop()  # doctest: +SKIP
        """
        logger.info("stopping local Ray head (pid %d)", self.pid)
        # First, so that no process finds (adopts, attaches to) a head going away: a client
        # whose request fails from here on learns that the head is gone, not "disconnected".
        with contextlib.suppress(OSError):
            (self.temp_dir / _STATE_FILE).unlink()
        interrupted: KeyboardInterrupt | None = None
        try:
            if self.alive():
                send_signal(self.pid, signal.SIGTERM)
                if not self._wait_leader(grace):
                    logger.warning(
                        "local Ray head (pid %d) ignored SIGTERM for %gs; killing it",
                        self.pid,
                        grace,
                    )
                    self._kill_group()
        except KeyboardInterrupt as exc:
            interrupted = exc
            self._kill_group()
        finally:
            if self._process is not None:
                self._process.wait()
            # Drivers and their watchers die on their own within a second or two of
            # their supervisor; whatever is left after that is killed.
            sweep(self.temp_dir, settle=0 if interrupted else 2.0)
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        if interrupted is not None:
            raise interrupted

    def _kill_group(self) -> None:
        # Only while the leader lives is its pid surely still our process group's id.
        if self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    def _wait_leader(self, grace: float) -> bool:
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if self._process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(timeout=0.1)
                    return True
            elif not running(self.pid):
                return True
            else:
                time.sleep(0.1)
        return False

    def _write_state(self) -> None:
        state = {
            "pid": self.pid,
            "dashboard_url": self.dashboard_url,
            "gcs_address": self.gcs_address,
            "auth_mode": self.auth_mode,
            "launched_at": self.launched_at,
        }
        (self.temp_dir / _STATE_FILE).write_text(json.dumps(state))


def start_local_head(
    temp_dir: Path,
    *,
    num_cpus: int | None = 2,
    num_gpus: int | None = None,
    env: Mapping[str, str] | None = None,
    auth: AuthMode | None = None,
    timeout: float = 90.0,
    keep: tuple[str, ...] = (),
    memory: int | None = None,
) -> LocalHead:
    """Start ``ray start --head --block`` and wait until its Jobs API answers.

    Any earlier head in ``temp_dir`` must be stopped first (see :func:`find_local_head`);
    leftovers of a dead one are cleared. Ray gives a new node's raylet a fixed 30 s to
    register; a start that fails that way (a loaded machine) is tried again, up to
    ``START_ATTEMPTS`` times, each with ``timeout``.

    Examples:
        >>> head = start_local_head(head_dir("demo"), auth="token")  # doctest: +SKIP
        >>> head.dashboard_url  # doctest: +SKIP
        'http://127.0.0.1:45123'

    Args:
        temp_dir: Ray's temp dir (see :func:`head_dir`); created, and removed on stop.
        num_cpus: CPUs the head offers to jobs; None lets Ray count them.
        num_gpus: GPUs the head offers; None lets Ray count them (0 keeps GPU work
            on worker nodes).
        env: the environment of the head and so of every job driver; by default this
            process's. Ray address and token variables in it are replaced.
        auth: ``"token"`` or ``"disabled"``; by default ``$RAY_AUTH_MODE``, else token.
        timeout: seconds to wait for the Jobs API.
        keep: files of ``temp_dir`` kept across its clearing (what outlives one head of a
            deployment: its worker nodes' records, ``workers.json``).
        memory: bytes of Ray's ``memory`` resource the head offers to tasks and jobs that
            ask for memory; None lets Ray count them (from this machine's free memory).

    Raises:
        RayError: the head exited during start-up, or refused our token.
        WaitTimeoutError: the Jobs API did not answer in time.
    """
    mode = _auth_mode(auth)
    existing = find_local_head(temp_dir)
    if existing is not None:
        raise RayError(f"a local Ray head is already running in {temp_dir} (pid {existing.pid})")
    head = retry_overloaded(
        "the local Ray head",
        lambda: _start_head_once(
            temp_dir, env, mode, num_cpus=num_cpus, num_gpus=num_gpus, memory=memory, timeout=timeout, keep=keep
        ),
    )
    logger.info("local Ray head is up at %s", head.dashboard_url)
    return head


def _start_head_once(
    temp_dir: Path,
    env: Mapping[str, str] | None,
    mode: AuthMode,
    *,
    num_cpus: int | None,
    num_gpus: int | None,
    timeout: float,
    keep: tuple[str, ...] = (),
    memory: int | None = None,
) -> LocalHead:
    head = _launch_head(temp_dir, env, mode, num_cpus=num_cpus, num_gpus=num_gpus, memory=memory, keep=keep)
    try:
        _wait_ready(head, timeout)
        head._write_state()
    except RayError as exc:
        overloaded = not head.alive() and overloaded_start(head.output_tail(200))
        head.stop(grace=5.0)
        if overloaded:
            raise OverloadedStart(str(exc)) from None
        raise
    except BaseException:
        head.stop(grace=5.0)
        raise
    return head


def _launch_head(
    temp_dir: Path,
    env: Mapping[str, str] | None,
    mode: AuthMode,
    *,
    num_cpus: int | None,
    num_gpus: int | None,
    keep: tuple[str, ...] = (),
    memory: int | None = None,
) -> LocalHead:
    """Clear ``temp_dir`` (but the files ``keep``), write a fresh token and spawn ``ray start --head --block`` there."""
    kept = {}
    for name in keep:
        with contextlib.suppress(OSError):
            kept[name] = (temp_dir / name).read_bytes()
    sweep(temp_dir, settle=0)
    shutil.rmtree(temp_dir, ignore_errors=True)
    temp_dir.mkdir(mode=0o700, parents=True)
    for name, content in kept.items():
        (temp_dir / name).write_bytes(content)

    head_env = node_env(temp_dir, env, mode)
    if mode == "token" and not (temp_dir / TOKEN_FILE).exists():  # (a kept one stays: see keep)
        token_path = temp_dir / TOKEN_FILE
        fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))

    ports = free_ports(10)
    worker_lo = free_port_range(_WORKER_PORTS, exclude=ports)
    gcs, dashboard = ports[0], ports[1]
    # Jobs on this head (the queue's supervisors) read its dashboard here: Ray's own variable
    # for the dashboard's address (as `serve` reads it); on a RayCluster it is Ray's default port.
    head_env["RAY_DASHBOARD_ADDRESS"] = f"http://127.0.0.1:{dashboard}"
    command = [
        *_ray_cli(), "start", "--head", "--block",
        "--node-ip-address", "127.0.0.1",
        "--dashboard-host", "127.0.0.1",
        "--port", str(gcs),
        "--dashboard-port", str(dashboard),
        "--ray-client-server-port", str(ports[2]),
        "--dashboard-agent-listen-port", str(ports[3]),
        "--dashboard-agent-grpc-port", str(ports[4]),
        "--runtime-env-agent-port", str(ports[5]),
        "--metrics-export-port", str(ports[6]),
        "--object-manager-port", str(ports[7]),
        "--node-manager-port", str(ports[8]),
        "--min-worker-port", str(worker_lo),
        "--max-worker-port", str(worker_lo + _WORKER_PORTS - 1),
        "--temp-dir", str(temp_dir),
        "--disable-usage-stats",
        "--log-style", "record",
    ]  # fmt: skip
    if num_cpus is not None:
        command += ["--num-cpus", str(num_cpus)]
    if num_gpus is not None:
        command += ["--num-gpus", str(num_gpus)]
    if memory is not None:
        command += ["--memory", str(memory)]
    launched_at = time.time()
    with open(temp_dir / _LOG_FILE, "wb") as log:
        process = subprocess.Popen(
            command,
            env=head_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    head = LocalHead(
        pid=process.pid,
        temp_dir=temp_dir,
        dashboard_url=f"http://127.0.0.1:{dashboard}",
        gcs_address=f"127.0.0.1:{gcs}",
        auth_mode=mode,
        launched_at=launched_at,
        process=process,
    )
    logger.info(
        "starting local Ray head (pid %d, dashboard %s, auth %s)",
        process.pid,
        head.dashboard_url,
        mode,
    )
    return head


def find_local_head(temp_dir: Path) -> LocalHead | None:
    """The head still running in ``temp_dir`` (started by this or an earlier process), if any.

    A head counts only if its ``ray start`` process is alive and carries our mark, and is
    not being stopped (:meth:`LocalHead.stop` removes its state file first).

    Examples:
        >>> find_local_head(head_dir("nothing-runs-here")) is None
        True
    """
    try:
        state = json.loads((temp_dir / _STATE_FILE).read_text())
        head = LocalHead(
            pid=int(state["pid"]),
            temp_dir=temp_dir,
            dashboard_url=str(state["dashboard_url"]),
            gcs_address=str(state["gcs_address"]),
            auth_mode=state["auth_mode"],
            launched_at=float(state["launched_at"]) if isinstance(state.get("launched_at"), (int, float)) else None,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return head if head.alive() else None


def _auth_mode(auth: str | None) -> AuthMode:
    mode = auth if auth is not None else os.environ.get("RAY_AUTH_MODE", "token").strip().lower()
    if mode == "token":
        return "token"
    if mode == "disabled":
        return "disabled"
    raise ConfigError(
        "LocalHead",
        "auth" if auth is not None else "RAY_AUTH_MODE",
        mode,
        "must be 'token' or 'disabled'",
    )


def _ray_cli() -> list[str]:
    """The ``ray`` CLI of the Ray this Python imports (never one found on PATH)."""
    exe = Path(sys.executable).with_name("ray")
    if exe.is_file() and os.access(exe, os.X_OK):
        return [str(exe)]
    return [sys.executable, "-m", "ray.scripts.scripts"]


def _wait_ready(head: LocalHead, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(f"{head.dashboard_url}/api/version", headers=head.headers())
    last = "no answer yet"
    while True:
        if not head.alive():
            code = head._process.returncode if head._process is not None else None
            raise RayError(
                f"the local Ray head exited with code {code} while starting; its last output:\n"
                + indent(head.output_tail())
            )
        if any(_STARTED in line for line in head.output_tail(200)):
            try:
                with urllib.request.urlopen(request, timeout=2) as response:
                    version = json.loads(response.read()).get("ray_version")
                logger.debug("Ray %s Jobs API answers at %s", version, head.dashboard_url)
                return
            except urllib.error.HTTPError as exc:
                exc.close()  # the response it holds, at once rather than when collected
                if exc.code in (401, 403):
                    raise RayError(
                        f"the local Ray head at {head.dashboard_url} refused our token (HTTP {exc.code})"
                    ) from exc
                last = f"HTTP {exc.code}"
            except (OSError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
        else:
            last = "ray start has not finished starting the node"
        if time.monotonic() >= deadline:
            raise WaitTimeoutError(
                f"the local Ray head's Jobs API at {head.dashboard_url}; its last output:\n"
                + indent(head.output_tail()),
                timeout,
                last,
            )
        time.sleep(0.2)
