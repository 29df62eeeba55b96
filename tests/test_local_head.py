"""The local Ray head: loopback only, token auth, and nothing of ours left after it stops.

Besides the session's head (``ray_fixtures``, whose teardown checks the exception
path of ``with cluster:``), one more head is started here, for keep, adoption by
another process and Ctrl-C; readiness is checked against stand-in heads.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers.ray_fixtures import ray_processes

from rl_lustre import Cluster
from rl_lustre.errors import ConfigError, RayError
from rl_lustre.ray.head import LocalHead, head_dir, start_local_head
from rl_lustre.ray.jobs import JobsClient

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads the process table from /proc")


def _listening_addresses(pids: set[int]) -> set[str]:
    """Local addresses of TCP sockets in LISTEN state owned by ``pids`` (from /proc/net)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as f:
            for row in list(f)[1:]:
                fields = row.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in inodes:
                    address = local.split(":")[0]
                    assert len(address) == width
                    found.add(address)
    return found


# 127.0.0.1 as /proc/net/tcp writes it, and ::1 / ::ffff:127.0.0.1 in tcp6.
_LOOPBACK = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}


def test_session_head_listens_on_loopback_only_and_demands_the_token(
    local_cluster: Cluster,
) -> None:
    head = local_cluster._backend().head  # type: ignore[attr-defined]
    assert head is not None
    assert head.auth_mode == "token"
    assert len(str(head.temp_dir)) <= 24  # Ray's Unix socket paths below it must stay < 108 bytes

    pids = {pid for pid, _ in ray_processes(head.temp_dir)}
    listening = _listening_addresses(pids)
    assert len(listening) >= 1
    assert listening <= _LOOPBACK, f"a Ray process listens beyond loopback: {listening - _LOOPBACK}"

    token_file = head.temp_dir / "auth_token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert len(token) >= 32
    # The head was pointed at its own token file, not at ~/.ray/auth_token.
    leader_env = Path(f"/proc/{head.pid}/environ").read_bytes().split(b"\0")
    assert f"RAY_AUTH_TOKEN_PATH={token_file}".encode() in leader_env
    assert b"RAY_AUTH_MODE=token" in leader_env
    # Its jobs (the queue's supervisors) find its dashboard, not Ray's default port.
    assert f"RAY_DASHBOARD_ADDRESS={head.dashboard_url}".encode() in leader_env

    url = f"{head.dashboard_url}/api/version"
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url, timeout=5)
    missing.value.close()
    assert missing.value.code == 401
    wrong = urllib.request.Request(url, headers={"Authorization": "Bearer " + "0" * 64})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(wrong, timeout=5)
    refused.value.close()
    assert refused.value.code == 403
    right = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(right, timeout=5) as response:
        assert json.loads(response.read())["ray_version"]

    with pytest.raises(RayError, match=r"(?i)authentication"):
        JobsClient(head.dashboard_url).list()
    assert isinstance(JobsClient(head.dashboard_url, headers=head.headers()).list(), list)
    assert token not in repr(head)
    assert token not in repr(local_cluster._backend())


def test_auth_mode_must_be_token_or_disabled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "sometimes")
    with pytest.raises(ConfigError, match="RAY_AUTH_MODE") as err:
        start_local_head(tmp_path / "never-created")
    assert err.value.value == "sometimes"
    assert not (tmp_path / "never-created").exists()


def test_head_dir_is_short_and_stable() -> None:
    assert head_dir("a:/v") == head_dir("a:/v")
    assert head_dir("a:/v") != head_dir("b:/v")
    assert len(str(head_dir("x" * 200))) < 32


_FAKE_HEAD = textwrap.dedent(
    """
    import http.server, sys, threading, time
    port, log, started = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"

    class Version(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"ray_version": "2.60.0"}')

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Version)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with open(log, "a") as f:
        f.write("Local node IP: 127.0.0.1\\n")
        if started:
            f.write("Ray runtime started.\\n")
        else:
            f.write("ValueError: the raylet could not start\\n")
    time.sleep(60 if started else 1.5)
    sys.exit(0 if started else 3)
    """
)


@pytest.mark.parametrize("starts", [False, True], ids=["raylet-fails", "starts"])
def test_readiness_needs_ray_start_to_finish_not_just_the_dashboard(tmp_path: Path, starts: bool) -> None:
    # Ray's dashboard answers /api/version before the raylet exists, and a raylet that
    # then fails takes the head down: a stand-in head reproduces both orders.
    from rl_lustre.ray.head import LocalHead, _wait_ready
    from rl_lustre.ray.ports import free_ports

    (port,) = free_ports(1)
    script = tmp_path / "fake_head.py"
    script.write_text(_FAKE_HEAD)
    process = subprocess.Popen([sys.executable, str(script), str(port), str(tmp_path / "head.log"), str(int(starts))])
    head = LocalHead(
        pid=process.pid, temp_dir=tmp_path, dashboard_url=f"http://127.0.0.1:{port}",
        gcs_address="127.0.0.1:1", auth_mode="disabled", process=process,
    )  # fmt: skip
    try:
        if starts:
            _wait_ready(head, timeout=30)
            assert head.alive()
        else:
            with pytest.raises(RayError, match="exited with code 3") as err:
                _wait_ready(head, timeout=30)
            assert "the raylet could not start" in str(err.value)
    finally:
        process.kill()
        process.wait()


def _fail_inside(cluster: Cluster, exc: Exception, seen: list[LocalHead]) -> None:
    with cluster:
        seen.append(cluster._backend().head)  # type: ignore[attr-defined]
        raise exc


_CTRL_C_SCRIPT = textwrap.dedent(
    """
    import faulthandler, signal, sys, time
    from rl_lustre import Cluster, GRPOJob

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's view on a hang
    # As at a terminal, whatever started the tests: a shell without job control starts its
    # background commands with SIGINT ignored, and that is inherited down to this script.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    cluster = Cluster.local(sys.argv[1], volume_dir=sys.argv[2], rehearsal_step_seconds=120)
    with cluster:
        head = cluster._backend().head
        print("HEAD", head.pid, head.temp_dir, flush=True)
        run = cluster.submit(GRPOJob(name="forever", recipe="grpo_math_1B", max_num_steps=50))
        while run.status() != "RUNNING":
            time.sleep(0.2)
        print("RUNNING", run.job_id, flush=True)
        time.sleep(600)
    """
)


@pytest.mark.slow
def test_keep_leaves_the_head_up_and_ctrl_c_in_a_process_that_adopted_it_stops_everything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # One head for three things: keep=True at an exception, adoption by another
    # process, and Ctrl-C in that process's with block (job driver included). The
    # plain exception path is the session head's teardown (see ray_fixtures).
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    volume = tmp_path / "volume"
    name = f"rll-keep-{os.getpid()}"
    caplog.set_level(logging.INFO, logger="rl_lustre")

    kept = Cluster.local(name, volume_dir=volume, keep=True)
    seen: list[LocalHead] = []
    with pytest.raises(RuntimeError, match="boom"):
        _fail_inside(kept, RuntimeError("boom"), seen)
    (head,) = seen
    assert head.auth_mode == "disabled"
    assert head.headers() == {}
    assert head.alive()
    temp_dir = head.temp_dir
    assert any(pid == head.pid for pid, _ in ray_processes(temp_dir))
    hint = " ".join(r.getMessage() for r in caplog.records if "keep=True" in r.getMessage())
    assert "raised RuntimeError" in hint
    assert f"kill -TERM {head.pid}" in hint
    # Disabled mode: the Jobs API answers without a token.
    assert JobsClient(head.dashboard_url).list() == []

    script = tmp_path / "script.py"
    script.write_text(_CTRL_C_SCRIPT)
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",  # the adopted head keeps the mode it was started with
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        "RL_LUSTRE_OUTPUT": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, str(script), name, str(volume)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(300, proc.kill)  # a hung script must not hang the suite
    watchdog.start()
    adopted = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("HEAD "):
                adopted = line
            if line.startswith("RUNNING "):
                break
        assert adopted == f"HEAD {head.pid} {temp_dir}\n", proc.stderr.read() if proc.stderr else ""
        # The job's driver is the recovery supervisor, which then starts the rehearsal.
        deadline = time.monotonic() + 30
        while True:
            running = ray_processes(temp_dir)
            drivers = [pid for pid, cmd in running if "rl_lustre.rehearsal" in cmd]
            if drivers or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert drivers, f"the job driver should be running: {running}"
        # Ray starts each job driver in a session of its own, outside the head's process group.
        assert all(os.getsid(pid) != os.getsid(head.pid) for pid in drivers)

        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=240)  # stopping the head and its job
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # the script's stacks, to stderr
            time.sleep(2)
            proc.kill()
            stdout, stderr = proc.communicate()
            pytest.fail(f"Ctrl-C did not end the script in 240 s:\n{stdout}\n{stderr}")
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in stderr
    assert "the with block was interrupted" in stdout
    assert ray_processes(temp_dir) == []
    assert not temp_dir.exists()
    assert volume.is_dir()  # the volume is user data: kept


# A stand-in for a node's launcher: the first FAILS runs print OUTPUT and exit 1, as Ray
# does when its fixed 30 s wait for a new raylet runs out; later runs exec the real launcher.
_FLAKY_LAUNCHER = textwrap.dedent(
    """
    import os, sys
    counter, fails, output, *real = sys.argv[1:]
    runs = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
    open(counter, "w").write(str(runs))
    if runs <= int(fails):
        print("Traceback (most recent call last):")
        print(output, flush=True)
        sys.exit(1)
    os.execv(real[0], real)
    """
)
_RAY_TIMEOUT = (
    "Exception: The current node timed out during startup. This could happen because some "
    "of the raylet failed to startup or the GCS has become overloaded."
)


def _flaky(tmp_path: Path, fails: int, output: str) -> tuple[list[str], Path]:
    script, counter = tmp_path / "flaky.py", tmp_path / "runs"
    script.write_text(_FLAKY_LAUNCHER)
    return [sys.executable, str(script), str(counter), str(fails), output], counter


@pytest.mark.parametrize(
    ("fails", "output", "runs", "error"),
    [
        (99, _RAY_TIMEOUT, 3, "timed out during startup"),
        (99, "ValueError: port 6379 is already in use", 1, "already in use"),
    ],
    ids=["ray-timeout-every-time", "a-real-fault"],
)
def test_a_head_start_is_retried_only_when_ray_ran_out_of_its_raylet_wait(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fails: int,
    output: str,
    runs: int,
    error: str,
) -> None:
    from rl_lustre.ray import head as head_module

    launcher, counter = _flaky(tmp_path, fails, output)
    monkeypatch.setattr(head_module, "_ray_cli", lambda: launcher)
    temp_dir = tmp_path / "head"
    with (
        caplog.at_level(logging.WARNING, logger="rl_lustre.ray.head"),
        pytest.raises(RayError, match="exited with code 1") as err,
    ):
        start_local_head(temp_dir, auth="disabled", timeout=30)
    assert error in str(err.value)
    assert int(counter.read_text()) == runs
    retries = [r.getMessage() for r in caplog.records if "starting it again" in r.getMessage()]
    assert retries == [
        f"the local Ray head gave up waiting for its own raylet (Ray allows it 30 s; "
        f"is the machine overloaded?); starting it again (attempt {n} of 3)"
        for n in range(2, runs + 1)
    ]
    assert not temp_dir.exists()  # every failed attempt cleaned up after itself


@pytest.mark.slow
def test_a_head_whose_raylet_wait_ran_out_once_starts_on_the_second_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rl_lustre.ray import head as head_module

    real = head_module._ray_cli()
    launcher, counter = _flaky(tmp_path, 1, _RAY_TIMEOUT)
    monkeypatch.setattr(head_module, "_ray_cli", lambda: [*launcher, *real])
    temp_dir = Path(f"/tmp/rll-retry-{os.getpid()}")
    head = start_local_head(temp_dir, auth="disabled", timeout=120)
    try:
        assert int(counter.read_text()) == 2
        with urllib.request.urlopen(f"{head.dashboard_url}/api/version", timeout=10) as response:
            assert json.loads(response.read())["ray_version"]
    finally:
        head.stop()
    assert not temp_dir.exists()


@pytest.mark.parametrize(
    ("output", "runs"),
    [(_RAY_TIMEOUT, 3), ("RuntimeError: Failed to get the system config from raylet", 1)],
    ids=["ray-timeout-every-time", "a-real-fault"],
)
def test_a_worker_node_start_is_retried_only_when_ray_ran_out_of_its_raylet_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str, runs: int
) -> None:
    from rl_lustre.ray import workers

    launcher, counter = _flaky(tmp_path, 99, output)
    # The launcher is run as `python <script> <spec>`: the stand-in takes the script's place.
    script = tmp_path / "node.py"
    script.write_text(f"import subprocess, sys\nsys.exit(subprocess.call([sys.executable, *{launcher[1:]!r}]))\n")
    monkeypatch.setattr(workers, "_NODE_SCRIPT", script)
    head = LocalHead(
        pid=os.getpid(),
        temp_dir=tmp_path,
        dashboard_url="http://127.0.0.1:1",
        gcs_address="127.0.0.1:1",
        auth_mode="disabled",
    )
    with pytest.raises(RayError, match="worker node worker-1 exited while starting") as err:
        workers.start_local_worker(head, num_gpus=8, timeout=30)
    assert output in str(err.value)
    assert int(counter.read_text()) == runs
    assert workers.live_workers(head) == []
