"""``JobsClient.run`` and ``delete`` on the session's real Ray head: helper commands that
read something on the cluster and leave no job record behind."""

from __future__ import annotations

import time
import uuid

import pytest

from rl_lustre import Cluster
from rl_lustre.errors import WaitTimeoutError
from rl_lustre.ray.jobs import JobsClient


def _jobs(cluster: Cluster) -> JobsClient:
    jobs: JobsClient = cluster._backend().jobs  # type: ignore[attr-defined]
    return jobs


def _ids(jobs: JobsClient) -> set[str]:
    return {j.submission_id for j in jobs.list()}


def test_run_returns_the_output_and_forgets_the_job(local_cluster: Cluster) -> None:
    jobs = _jobs(local_cluster)
    helper = f"rl-lustre-test-{uuid.uuid4().hex[:8]}"
    info, log = jobs.run(
        "echo listed; echo to-stderr >&2; exit 3", submission_id=helper, metadata={"rl_lustre.helper": "test"}
    )
    assert (info.submission_id, info.status, info.metadata) == (helper, "FAILED", {"rl_lustre.helper": "test"})
    # Ray adds lines of its own ("Running entrypoint for job ..."), in no fixed place.
    lines = log.splitlines()
    assert lines.index("listed") < lines.index("to-stderr")
    assert helper not in _ids(jobs)
    assert jobs.info(helper) is None
    assert jobs.delete(helper) is False
    # Ray's job monitor, seeing the helper's supervisor actor die, does not bring it back.
    time.sleep(2 * 1.0 + 0.5)
    assert helper not in _ids(jobs)


def test_run_past_its_timeout_stops_and_forgets_the_job(local_cluster: Cluster) -> None:
    jobs = _jobs(local_cluster)
    helper = f"rl-lustre-test-{uuid.uuid4().hex[:8]}"
    with pytest.raises(WaitTimeoutError, match=helper):
        jobs.run("sleep 60", submission_id=helper, timeout=0.5)
    assert helper not in _ids(jobs)


def test_rays_upload_lines_stay_out_of_the_users_terminal_unless_asked_for(local_cluster: Cluster) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    # Every submit uploads (or finds uploaded) the supervisor package; Ray logs that at INFO
    # through a handler of its own. A fresh process, as a user's script is.
    script = (
        "import logging, sys\n"
        "from rl_lustre import Cluster, GRPOJob\n"
        "if sys.argv[3] == 'debug':\n"
        "    logging.basicConfig()\n"
        "    logging.getLogger('rl_lustre').setLevel(logging.DEBUG)\n"
        "cluster = Cluster.local(sys.argv[1], volume_dir=sys.argv[2])\n"
        "cluster.submit(GRPOJob(name='quiet', recipe='grpo_math_1B', max_num_steps=1), fresh=True).stop()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

    def stderr(mode: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", script, local_cluster.name, local_cluster.mount_path, mode],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return done.stderr

    quiet = stderr("default")
    assert "dashboard_sdk" not in quiet
    assert "packaging.py" not in quiet
    assert "REHEARSAL" in quiet  # our own warning still shows
    assert "dashboard_sdk.py" in stderr("debug")  # asked for: rl_lustre's DEBUG logging shows them


def test_a_cluster_known_to_be_gone_is_said_so_once_not_retried_as_an_outage() -> None:
    import socket

    from rl_lustre.errors import NotReadyError, RayError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"http://127.0.0.1:{s.getsockname()[1]}"
    # Without a probe, or while the probe says the cluster runs, the connection error as is.
    with pytest.raises(RayError) as plain:
        JobsClient(address).version()
    assert not isinstance(plain.value, NotReadyError)
    with pytest.raises(RayError) as running:
        JobsClient(address, gone=lambda: None).version()
    assert not isinstance(running.value, NotReadyError)
    # With the probe's sentence: one NotReadyError saying why, at once (no outage budget spent).
    asked: list[int] = []

    def gone() -> str:
        asked.append(1)
        return "its Ray head was stopped"

    started = time.monotonic()
    with pytest.raises(NotReadyError, match=r"^cannot .*: its Ray head was stopped$"):
        list(JobsClient(address, gone=gone).follow("j1"))
    assert time.monotonic() - started < 10
    assert asked
