"""Hang benchmark: how long past its ``hang_timeout`` a stalled run is found.

On a local deployment with two real worker raylets (``Cluster.local(..., worker_nodes=2)``),
a rehearsal whose workers meet in an all-reduce every step (as NeMo-RL's ranks meet in
collectives) runs with ``hang_timeout=T``; after its third step one worker node's workers are
stopped with SIGSTOP (:func:`rl_lustre.testing.freeze`), as a stuck rank stops. The supervisor's
watchdog finds the stall, keeps the evidence and reruns the run; the benchmark reads the
stall's ``detected_at`` from the bundle the supervisor wrote (the head's clock, this machine's)
and reports ``detected_at - (frozen_at + T)``: the seconds past the timeout detection took (the
silence counts from the run's last progress, a moment before the freeze, so it can be a little
negative). Each run is then stopped.

Reported: each run's figure and, last, ``hang_detect_seconds_over_timeout=<x>``, the worst of
``--runs`` runs (default 3); the target is <= 30 (exit status 1 when missed). Run
``python -m benchmarks.hang [--runs 3] [--hang-timeout 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from benchmarks import report

if TYPE_CHECKING:
    from rl_lustre import Cluster

TARGET = 30.0
RUNS = 3
HANG_TIMEOUT = 5.0
STEP_SECONDS = 1.0
FREEZE_AFTER_STEP = 3


@attrs.frozen
class Sample:
    """One run: when its workers were frozen, when the stall was found, and where its evidence is."""

    job_id: str
    frozen_at: float
    detected_at: float
    silence: float
    node: str
    bundle: str

    def over(self, hang_timeout: float) -> float:
        return self.detected_at - (self.frozen_at + hang_timeout)


@attrs.frozen
class Result:
    hang_timeout: float
    samples: tuple[Sample, ...]

    @property
    def worst(self) -> float:
        return max(s.over(self.hang_timeout) for s in self.samples)

    def table(self) -> str:
        lines = [f"hang_timeout={self.hang_timeout:g}s; a worker node frozen after step {FREEZE_AFTER_STEP}"]
        lines.append(f"{'run':<44}{'node':>10}{'silence s':>11}{'found after timeout s':>23}")
        for s in self.samples:
            lines.append(f"{s.job_id:<44}{s.node:>10}{s.silence:>11.1f}{s.over(self.hang_timeout):>23.2f}")
        lines.append(f"hang_detect_seconds_over_timeout={self.worst:.2f}")
        return "\n".join(lines)

    def missed(self) -> list[str]:
        if self.worst <= TARGET:
            return []
        return [f"hang_detect_seconds_over_timeout={self.worst:.2f} is over the target of {TARGET:g}"]


@contextmanager
def workers_cluster(step_seconds: float = STEP_SECONDS) -> Iterator[Cluster]:
    """A local deployment with two worker raylets of one GPU each, torn down after."""
    from rl_lustre import Cluster

    volume = tempfile.mkdtemp(prefix="rl-lustre-bench-hang-")
    cluster = Cluster.local(
        f"rll-bench-hang-{os.getpid()}",
        volume_dir=volume,
        num_nodes=2,
        gpus_per_node=1,
        worker_nodes=2,
        rehearsal_step_seconds=step_seconds,
    )
    try:
        with cluster:
            yield cluster
    finally:
        shutil.rmtree(volume, ignore_errors=True)


def measure(cluster: Cluster, *, hang_timeout: float, timeout: float = 300.0) -> Sample:
    """One run: submit, freeze a worker node after step :data:`FREEZE_AFTER_STEP`, read the
    stall's bundle, stop the run."""
    from rl_lustre import GRPOJob
    from rl_lustre.oncluster.diagnostics import BUNDLE_JSON
    from rl_lustre.testing import freeze

    job = GRPOJob(
        name=f"bench-hang-{uuid.uuid4().hex[:6]}",
        recipe="grpo_math_1B",
        model="Qwen/Qwen2.5-1.5B",
        max_num_steps=40,
        save_period=2,
        num_prompts_per_step=4,
        num_generations_per_prompt=4,
        train_global_batch_size=16,
        hang_timeout=hang_timeout,
        startup_timeout=120,
    )
    run = cluster.submit(job)
    metrics = Path(job.log_dir(cluster)) / "exp_001" / "rehearsal_metrics.jsonl"
    deadline = time.monotonic() + timeout
    stuck = None
    try:
        while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= FREEZE_AFTER_STEP):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{run.job_id} did not finish step {FREEZE_AFTER_STEP} in {timeout:g}s")
            time.sleep(0.02)
        stuck = freeze(cluster, nodes=1)
        while not run.diagnostics():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{run.job_id}: no stall found {timeout:g}s after its workers were frozen")
            time.sleep(0.5)
        bundle = run.diagnostics()[0].path
        record = json.loads((Path(bundle) / BUNDLE_JSON).read_text())
        detected, silence = float(record["detected_at"]), float(record["silence"])
        return Sample(run.job_id, stuck.at, detected, silence, stuck.nodes[0], bundle)
    finally:
        if stuck is not None:
            stuck.thaw()
        run.stop(timeout=120)


def run(runs: int = RUNS, *, hang_timeout: float = HANG_TIMEOUT, cluster: Cluster | None = None) -> Result:
    """``runs`` stalls, measured on ``cluster`` (a local deployment with two worker raylets;
    by default one made for the benchmark)."""
    if cluster is None:
        with workers_cluster() as made:
            return run(runs, hang_timeout=hang_timeout, cluster=made)
    return Result(hang_timeout, tuple(measure(cluster, hang_timeout=hang_timeout) for _ in range(runs)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hang", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="stalls measured (default: %(default)s)")
    parser.add_argument("--hang-timeout", type=float, default=HANG_TIMEOUT, help="the jobs' hang_timeout")
    args = parser.parse_args(argv)
    return report(run(args.runs, hang_timeout=args.hang_timeout))


if __name__ == "__main__":
    sys.exit(main())
