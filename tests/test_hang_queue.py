"""A queued job is not a stall (issue 33, point 1): the watchdog watches running attempts only.

On the session's Ray head (one node of 8 GPUs), a job that takes the whole cluster holds it for
several seconds while a second job, with a hang timeout far shorter than its wait, waits in the
cluster's queue; the second then runs and succeeds without a restart or a diagnostics bundle."""

from __future__ import annotations

import uuid

from rl_lustre import Cluster, GRPOJob
from rl_lustre.oncluster.records import read_journal

HANG_TIMEOUT = 2.0
BASE = {"recipe": "grpo_math_1B", "model": "Qwen/Qwen2.5-1.5B", "save_period": 100, "checkpointing": False}


def test_a_job_waiting_in_the_queue_longer_than_its_hang_timeout_is_not_stalled(local_cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    holder = GRPOJob(name=f"hq-hold-{tag}", max_num_steps=30, **BASE)
    waiter = GRPOJob(name=f"hq-wait-{tag}", max_num_steps=3, hang_timeout=HANG_TIMEOUT, startup_timeout=60, **BASE)
    first, second = local_cluster._backend().submit_all([holder, waiter], fresh=True)  # type: ignore[attr-defined]
    assert first.wait(timeout=240) == "SUCCEEDED"
    assert second.wait(timeout=240) == "SUCCEEDED"
    journal = read_journal(second.logs(records=True))
    queued = next(r["at"] for r in journal if r["event"] == "queued")
    granted = next(r["at"] for r in journal if r["event"] == "granted")
    # It waited far longer than its hang timeout, and nothing called that a stall.
    assert granted - queued > 3 * HANG_TIMEOUT
    assert second.restarts() == []
    assert second.diagnostics() == []
    assert "stalled" not in second.logs()
