"""The job the preemption tests preempt (``test_preemption``, ``test_capacity_resume``,
``test_goodput_preemption``), and how they follow its progress: the steps its attempts finish
and the attempts its log shows."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rl_lustre import Cluster, GRPOJob

STEP = re.compile(r"={3,} Step (\d+)/(\d+) ={3,}")
JOB_ARGS: dict[str, Any] = {
    "name": "preempt",
    "recipe": "grpo_math_1B",
    "model": "Qwen/Qwen2.5-1.5B",
    "max_num_steps": 10,
    "save_period": 2,
    "keep_top_k": 2,
    "num_prompts_per_step": 4,
    "num_generations_per_prompt": 4,
    "train_global_batch_size": 16,
}
STEP_SECONDS = 0.5


def wait_done(job: GRPOJob, cluster: Cluster, step: int, *, attempt: int = 1, timeout: float = 180) -> None:
    """Until attempt ``attempt`` (its ``exp_NNN``) has finished ``step``."""
    deadline = time.monotonic() + timeout
    metrics = Path(job.log_dir(cluster)) / f"exp_{attempt:03d}" / "rehearsal_metrics.jsonl"
    while time.monotonic() < deadline:
        if metrics.is_file() and any(
            json.loads(line)["step"] >= step for line in metrics.read_text().splitlines() if line.strip()
        ):
            return
        time.sleep(0.02)
    raise AssertionError(f"attempt {attempt} of {job.name} did not finish step {step} in {timeout}s")


def attempts_in(log: str) -> int:
    """How many times NeMo-RL started in ``log`` (each attempt loads its configuration once)."""
    return log.count("Loaded configuration from:")


def checkpoint_tree(checkpoint_dir: str) -> dict[str, int]:
    """Every file of a run's checkpoints, by path under the checkpoint directory, with its size.

    Each ``config.yaml`` is left out: it holds the run's own config, whose ``logger.log_dir``
    names the run, and a resumed attempt's overrides, so it differs between two runs whose
    checkpoints are otherwise the same."""
    root = Path(checkpoint_dir)
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "config.yaml"
    }


@contextmanager
def two_worker_cluster(prefix: str, volume_dir: Path, *, step_seconds: float = STEP_SECONDS) -> Iterator[Cluster]:
    """A local cluster with two real worker nodes of one GPU each, up for the block; its name
    is ``prefix`` and this process's id (skipped where there is no /proc: the local backend
    reads the process table from it)."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("the local backend reads the process table from /proc (Linux)")
    cluster = Cluster.local(
        f"{prefix}-{os.getpid()}",
        volume_dir=volume_dir,
        num_nodes=2,
        gpus_per_node=1,
        worker_nodes=2,
        rehearsal_step_seconds=step_seconds,
    )
    with cluster:
        yield cluster
