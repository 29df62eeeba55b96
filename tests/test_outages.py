"""Waits and follows ride out outages: a real Ray head reached through the KubeFake's
port-forward (as on GKE), whose streams are dropped and whose API server goes away for a
while, as a zonal control plane does when it restarts."""

from __future__ import annotations

import logging
import shlex
import socket
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from helpers.kube_deploy import deploy_reference

from rl_lustre import Cluster
from rl_lustre.errors import RayError
from rl_lustre.kube.portforward import PortForward
from rl_lustre.outages import OutageBudget
from rl_lustre.ray.jobs import JobsClient
from rl_lustre.run import Run
from rl_lustre.testing.kube import KubeFake

NAME = "rl-outage"
LINES = 40
# Prints numbered lines for a few seconds, then ends.
SCRIPT = f"import time\nfor i in range({LINES}):\n    print(f'line {{i}}', flush=True)\n    time.sleep(0.05)\n"
FAST = OutageBudget(max_outage=60, initial_delay=0.1, max_delay=0.5)


@pytest.fixture(scope="module")
def world(local_cluster: Cluster) -> Iterator[tuple[KubeFake, JobsClient]]:
    head = local_cluster._backend().head  # type: ignore[attr-defined]
    host, port = head.dashboard_url.removeprefix("http://").rsplit(":", 1)
    with KubeFake(head_target=(host, int(port))) as fake:
        api = deploy_reference(fake, NAME)
        with PortForward(api, f"{NAME}-head-svc", resolve_timeout=120) as pf:
            yield fake, JobsClient(pf.url, headers=head.headers())


def _submit(jobs: JobsClient) -> Run:
    job_id = f"rl-lustre-outage-{uuid.uuid4().hex[:8]}"
    jobs.submit(f"{sys.executable} -c {shlex.quote(SCRIPT)}", submission_id=job_id)
    return Run(jobs, job_id, outage_budget=FAST)


def _until_down(fake: KubeFake, within: float = 30.0) -> None:
    """Return once the fake refuses connections. outage() only schedules the outage on the
    fake's loop, which a loaded machine may run seconds later: a CI run once saw a wait's
    first poll reach the fake before its outage began and find the short job ended."""
    host, port = fake.endpoint.rsplit(":", 1)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            return
        time.sleep(0.02)
    raise AssertionError(f"the fake still accepted connections {within:g}s after outage()")


@pytest.mark.slow
def test_a_follow_resumes_without_duplicates_or_gaps(world, caplog: pytest.LogCaptureFixture) -> None:
    fake, jobs = world
    caplog.set_level(logging.INFO, logger="rl_lustre.outages")
    run = _submit(jobs)
    seen: list[str] = []
    for line in run.logs(follow=True):
        seen.append(line)
        if len(seen) == 10:
            fake.kill_portforwards()  # the stream drops (close code 1006)
        if len(seen) == 20:
            fake.outage(2.0)  # the API server goes away and comes back
    numbered = [line for line in seen if line.startswith("line ")]
    assert numbered == [f"line {i}" for i in range(LINES)]
    retries = [r for r in caplog.records if r.levelno == logging.WARNING and "retry" in r.getMessage()]
    assert retries, "the outages were ridden out with logged retries"
    assert run.wait(timeout=60) == "SUCCEEDED"


def test_a_wait_survives_a_control_plane_restart(world, caplog: pytest.LogCaptureFixture) -> None:
    fake, jobs = world
    caplog.set_level(logging.INFO, logger="rl_lustre.outages")
    run = _submit(jobs)
    time.sleep(0.5)
    fake.kill_portforwards()
    fake.outage(3.0)
    _until_down(fake)
    assert run.wait(timeout=120, poll=0.2) == "SUCCEEDED"
    messages = [r.getMessage() for r in caplog.records]
    assert any("retry" in m for m in messages)
    assert any("reachable again" in m for m in messages)


def test_an_outage_longer_than_the_budget_ends_the_wait(world) -> None:
    fake, jobs = world
    run = _submit(jobs)
    run.outage_budget = OutageBudget(max_outage=1.0, initial_delay=0.1, max_delay=0.2)
    fake.kill_portforwards()
    fake.outage(3.0)
    _until_down(fake)
    started = time.monotonic()
    with pytest.raises(RayError, match=r"gave up after \d+s of failures \(outage budget 1s\)"):
        run.wait(timeout=120, poll=0.2)
    assert time.monotonic() - started < 30
    fake.outages[-1].result(30)  # the fake is back for whoever comes next
    assert run.wait(timeout=120) == "SUCCEEDED"
