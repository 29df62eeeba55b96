"""Submission benchmark: a sweep through ``run_sweep`` against Ray's own ``JobSubmissionClient``.

On one real local Ray head (``Cluster.local``), in one run:

- *raw*: N jobs sent with Ray's ``JobSubmissionClient.submit_job``, given the entrypoints
  and runtime envs rl_lustre sends for a twin sweep (``submission.prepare``, untimed): the
  same commands and environments, under other run names;
- *sdk*: the N jobs of the sweep through :func:`rl_lustre.run_sweep`, whose
  ``SweepResult.submit_seconds`` is the time it took to check every job (preflight
  on: recipe, overrides, batch arithmetic, volume space, secrets) and submit it.

Before either, one job goes each way untimed, as a researcher tries one job before
launching the sweep: the connection, the imports and the recipe (parsed once per
process) are warm for both. After each side is timed, its jobs are stopped and
awaited (up to ``SETTLE_SECONDS``), so that the other side starts on an idle head: the
benchmark measures submission, not the rehearsal runs.

Reported: both times, per job, and the last line ``sweep_submit_ratio=<sdk/raw>``;
the target is <= 1.5 (exit status 1 when missed). Run
``python -m benchmarks.submit [--jobs 50]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from benchmarks import report

if TYPE_CHECKING:
    from rl_lustre import Cluster, GRPOJob

RATIO_TARGET = 1.5
JOBS = 50
# Long enough that no rehearsal gets far before it is stopped.
STEP_SECONDS = 60.0
# How long each side's jobs may take to end once stopped, before the other side goes on.
SETTLE_SECONDS = 180.0


@attrs.frozen
class Result:
    """The benchmark's measurements.

    Attributes:
        jobs: jobs submitted each way.
        sdk: seconds ``run_sweep`` took to check and submit them.
        raw: seconds ``JobSubmissionClient`` took to submit them.
        sdk_ids: the submission ids of the sweep's runs.
        raw_ids: the submission ids of the raw jobs.
        busy: raw jobs that had not ended when the sweep was timed (0 on an idle machine).
    """

    jobs: int
    sdk: float
    raw: float
    sdk_ids: tuple[str, ...]
    raw_ids: tuple[str, ...]
    busy: int = 0

    @property
    def ratio(self) -> float:
        return self.sdk / self.raw

    def missed(self) -> list[str]:
        """The targets missed, in words (empty when met)."""
        if self.ratio <= RATIO_TARGET:
            return []
        return [f"run_sweep took {self.ratio:.2f} x the raw JobSubmissionClient (target <= {RATIO_TARGET})"]

    def table(self) -> str:
        """The report, as text; its last line is ``sweep_submit_ratio=<sdk/raw>``."""
        lines = [
            f"{self.jobs} jobs to one local Ray head, preflight on",
            "",
            f"{'path':<34} {'total s':>8} {'ms/job':>8}",
        ]
        for label, seconds in (("run_sweep (check + submit)", self.sdk), ("JobSubmissionClient.submit_job", self.raw)):
            lines.append(f"{label:<34} {seconds:8.3f} {seconds / self.jobs * 1000:8.1f}")
        verdict = "ok" if self.ratio <= RATIO_TARGET else "MISSED"
        if self.busy:
            lines.append(f"({self.busy} raw jobs were still stopping while the sweep was timed)")
        lines += [
            "",
            f"ratio sdk/raw {self.ratio:.3f} (target <= {RATIO_TARGET}) {verdict}",
            f"sweep_submit_ratio={self.ratio:.3f}",
        ]
        return "\n".join(lines)


def sweep(prefix: str, n: int) -> list[GRPOJob]:
    """``n`` jobs of one small sweep (the learning rate varies), named ``<prefix>-<i>``."""
    from rl_lustre import GRPOJob

    base = GRPOJob(
        name=f"{prefix}-base",
        recipe="grpo_math_1B",
        model="Qwen/Qwen2.5-1.5B",
        max_num_steps=4,
        num_prompts_per_step=4,
        num_generations_per_prompt=8,
        train_global_batch_size=32,
        save_period=2,
    )
    return [
        attrs.evolve(base, name=f"{prefix}-{i}", overrides={"policy.optimizer.kwargs.lr": 1e-6 * (i + 1)})
        for i in range(n)
    ]


def run(n: int = JOBS, *, cluster: Cluster | None = None) -> Result:
    """Submit ``n`` jobs each way to ``cluster`` (by default, a local one started here).

    Example:
        >>> result = run(5)  # doctest: +SKIP
        >>> result.ratio  # doctest: +SKIP
        1.12

    Args:
        n: jobs per side.
        cluster: a local cluster that is up; its jobs are left in its job list.
    """
    from rl_lustre import Cluster

    if cluster is not None:
        return _measure(cluster, n)
    volume = tempfile.mkdtemp(prefix="rll-bench-submit-")
    try:
        with Cluster.local(
            f"bench-submit-{os.getpid()}", volume_dir=volume, rehearsal_step_seconds=STEP_SECONDS
        ) as own:
            return _measure(own, n)
    finally:
        shutil.rmtree(volume, ignore_errors=True)


def _measure(cluster: Cluster, n: int) -> Result:
    from ray.job_submission import JobSubmissionClient

    from rl_lustre import run_sweep
    from rl_lustre.backends.submission import prepare

    tag = uuid.uuid4().hex[:6]
    backend: Any = cluster._backend()
    head = backend.head
    raw_client = JobSubmissionClient(head.dashboard_url, headers=head.headers(), verify=False)
    sdk_jobs = sweep(f"bench-{tag}-sdk", n + 1)
    raw_jobs = sweep(f"bench-{tag}-raw", n + 1)
    # What the SDK sends for the twin sweep (the supervisor around the job's command, its
    # runtime env with the supervisor's module), rendered untimed.
    raw_payloads = [(p.entrypoint, dict(p.runtime_env)) for p in (prepare(cluster, j) for j in raw_jobs)]
    raw_ids = [f"bench-{tag}-raw-{i}" for i in range(n + 1)]

    # Warm-up, untimed: one job each way.
    entrypoint, runtime_env = raw_payloads.pop()
    raw_client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env, submission_id=raw_ids.pop())
    warm = cluster.submit(sdk_jobs.pop())
    _settle(raw_client, [warm.job_id, *_ids(raw_client, f"bench-{tag}-raw-")])

    start = time.perf_counter()
    for (entrypoint, runtime_env), job_id in zip(raw_payloads, raw_ids, strict=True):
        raw_client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env, submission_id=job_id)
    raw = time.perf_counter() - start
    print(f"raw: {n} jobs in {raw:.3f}s", flush=True)
    busy = _settle(raw_client, raw_ids)

    result = run_sweep(cluster, sdk_jobs, timeout=0, poll=0.05)
    sdk_ids = [o.job_id for o in result]
    print(f"run_sweep: {n} jobs checked and submitted in {result.submit_seconds:.3f}s", flush=True)
    _settle(raw_client, sdk_ids)
    return Result(jobs=n, sdk=result.submit_seconds, raw=raw, sdk_ids=tuple(sdk_ids), raw_ids=tuple(raw_ids), busy=busy)


def _ids(client: Any, prefix: str) -> list[str]:
    return [d.submission_id for d in client.list_jobs() if (d.submission_id or "").startswith(prefix)]


def _settle(client: Any, ids: Sequence[str], timeout: float = SETTLE_SECONDS) -> int:
    """Stop these jobs and wait (at most ``timeout`` seconds) until each has ended; returns
    how many had not (on a loaded machine stopping 50 jobs can take minutes; the next
    side is then measured on a busier head, which the report says)."""
    from ray.job_submission import JobStatus

    for job_id in ids:
        client.stop_job(job_id)
    deadline = time.monotonic() + timeout
    left = list(ids)
    while left and time.monotonic() < deadline:
        left = [
            j
            for j in left
            if client.get_job_status(j) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)
        ]
        time.sleep(0.5)
    return len(left)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.submit", description="a sweep through run_sweep against the raw JobSubmissionClient"
    )
    parser.add_argument("--jobs", type=int, default=JOBS, help=f"jobs per side (default {JOBS})")
    # `python -m benchmarks` hands every benchmark the same arguments.
    args, _ = parser.parse_known_args(argv)
    result = run(args.jobs)
    return report(result)


if __name__ == "__main__":
    sys.exit(main())
