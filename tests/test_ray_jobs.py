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
    info, log = jobs.run("echo listed; echo to-stderr >&2; exit 3", submission_id=helper,
                         metadata={"rl_lustre.helper": "test"})
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
