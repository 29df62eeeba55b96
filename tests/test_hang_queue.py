"""A queued job is not a stall (issue 33, point 1): the watchdog watches running attempts only.

On the session's Ray head (one node of 8 GPUs), a job that takes the whole cluster holds it
while a second job, with a hang timeout far shorter than its wait, waits in the cluster's queue;
once the first is stopped, the second runs and succeeds without a restart or a diagnostics bundle."""

from __future__ import annotations

import time
import uuid

from rl_lustre import Cluster, GRPOJob, Run
from rl_lustre.oncluster.records import read_journal

HANG_TIMEOUT = 2.0
BASE = {"recipe": "grpo_math_1B", "model": "Qwen/Qwen2.5-1.5B", "save_period": 100, "checkpointing": False}


def _recorded(run: Run, event: str, timeout: float = 180.0) -> float:
    """When ``run``'s journal first recorded ``event`` (its supervisor may take a minute to start here)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [r["at"] for r in read_journal(run.logs(records=True)) if r["event"] == event]
        if found:
            return float(found[0])
        assert time.monotonic() < deadline, f"{run.job_id} recorded no {event!r} in {timeout}s"
        time.sleep(0.2)


def test_a_job_waiting_in_the_queue_longer_than_its_hang_timeout_is_not_stalled(local_cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    # Long enough to hold the node until the test stops it.
    holder = GRPOJob(name=f"hq-hold-{tag}", max_num_steps=3000, **BASE)
    waiter = GRPOJob(name=f"hq-wait-{tag}", max_num_steps=3, hang_timeout=HANG_TIMEOUT, startup_timeout=60, **BASE)
    [first] = local_cluster._backend().submit_all([holder], fresh=True)  # type: ignore[attr-defined]
    try:
        _recorded(first, "granted")
        [second] = local_cluster._backend().submit_all([waiter], fresh=True)  # type: ignore[attr-defined]
        queued = _recorded(second, "queued")
        # Queued for well over its hang timeout, behind the job that holds the node.
        while time.time() - queued < 4 * HANG_TIMEOUT:
            time.sleep(0.2)
        assert second.status() == "QUEUED"
    finally:
        first.stop()
    assert second.wait(timeout=240) == "SUCCEEDED"
    granted = _recorded(second, "granted")
    # It waited far longer than its hang timeout, and nothing called that a stall.
    assert granted - queued > 3 * HANG_TIMEOUT
    assert second.restarts() == []
    assert second.diagnostics() == []
    assert "stalled" not in second.logs()
