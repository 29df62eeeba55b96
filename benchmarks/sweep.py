"""Sweep benchmark: 12 rehearsal jobs of mixed sizes share one 8-node local cluster.

The jobs (``i`` = 0..11): ``num_nodes`` cycling 1, 2, 4, 8 and ``max_num_steps`` from
130 down to 20 (at ``--step-seconds`` 0.6: 78 s down to 12 s), submitted longest first
through :func:`rl_lustre.run_sweep` to ``Cluster.local(num_nodes=8, gpus_per_node=8)``
with 8 worker raylets (``--head-only``: the head declares the 64 GPUs; the same queue
decisions, no per-node placement). Every job's rehearsal reserves its GPUs as NeMo-RL does,
with NeMo-RL's own retries and 180 s timeout (no short overrides), so a job started while
its nodes are taken would fail and show here. One untimed 2-step job warms the head first.

Printed: the sweep's table (nodes, queued_s, run_s, gpu_h per job), then
``makespan_seconds=``, ``lower_bound_seconds=`` (the larger of the longest job and the
total node-seconds over 8 nodes, from each job's *measured* run time: the time it held its
nodes, its own start-up inside), ``sweep_makespan_ratio_nominal=`` (the bound from steps x
step seconds instead), ``strict_fifo_ratio_whatif=`` (a labelled simulation: the measured
run times replayed under strict FIFO with the measured median gap between a release and
the next start), then ``failed_for_resources=<n>`` (jobs whose log has NeMo-RL's
placement-group failure; target 0) and last ``sweep_makespan_ratio=<x>`` (target <= 1.15).
Exit status 1 when a target is missed. Run ``python -m benchmarks.sweep [--head-only]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from benchmarks import report

if TYPE_CHECKING:
    from rl_lustre import Cluster, GRPOJob
    from rl_lustre.sweep_result import SweepResult

RATIO_TARGET = 1.15
NODES = 8
GPUS_PER_NODE = 8
STEP_SECONDS = 0.6
SIZES = (1, 2, 4, 8)
# NeMo-RL's failures when its placement groups cannot be had.
RESOURCE_FAILURES = ("Timed out waiting for placement groups to be ready", "Maximum number of retries reached")


def jobs(n: int = 12, *, longest: int = 130, step: int = 10) -> list[GRPOJob]:
    """The sweep: sizes interleaved as a nested loop writes them, longest first."""
    from rl_lustre import GRPOJob

    base = GRPOJob(name="sweep-base", recipe="grpo_math_1B", model="Qwen/Qwen2.5-1.5B", save_period=50, keep_top_k=1)
    return [
        attrs.evolve(base, name=f"s{i:02d}-n{SIZES[i % 4]}", num_nodes=SIZES[i % 4], max_num_steps=longest - step * i)
        for i in range(n)
    ]


@attrs.frozen
class Result:
    """The benchmark's measurements: the sweep, how many jobs NeMo-RL's placement failed,
    and the nominal bound (from steps x step seconds)."""

    sweep: SweepResult
    failed_for_resources: int
    nominal_bound: float
    strict_whatif: float | None
    worker_nodes: int

    @property
    def ratio(self) -> float:
        return self.sweep.makespan_ratio or float("inf")

    def missed(self) -> list[str]:
        out = []
        if self.failed_for_resources:
            out.append(f"{self.failed_for_resources} job(s) failed for want of their GPUs (target 0)")
        if not self.ratio <= RATIO_TARGET:
            out.append(f"the sweep took {self.ratio:.3f} x its lower bound (target <= {RATIO_TARGET})")
        if not self.sweep.ok:
            out.append("not every job succeeded")
        return out

    def table(self) -> str:
        s = self.sweep
        where = f"{self.worker_nodes} worker raylets" if self.worker_nodes else "the head declaring every GPU"
        lines = [
            f"{len(s)} rehearsal jobs on {NODES} nodes x {GPUS_PER_NODE} GPUs ({where})",
            "",
            str(s),
            "",
            f"makespan_seconds={s.makespan_seconds:.1f}" if s.makespan_seconds is not None else "makespan_seconds=nan",
            f"lower_bound_seconds={s.lower_bound_seconds:.1f}"
            if s.lower_bound_seconds is not None
            else "lower_bound_seconds=nan",
            f"gpu_hours={s.gpu_hours:.3f}" if s.gpu_hours is not None else "gpu_hours=nan",
            f"sweep_makespan_ratio_nominal={(s.makespan_seconds or 0) / self.nominal_bound:.3f}",
            f"strict_fifo_ratio_whatif={self.strict_whatif:.3f} (simulated from the measured run times)"
            if self.strict_whatif is not None
            else "strict_fifo_ratio_whatif=nan",
            f"failed_for_resources={self.failed_for_resources}",
            f"sweep_makespan_ratio={self.ratio:.3f}",
        ]
        return "\n".join(lines)


def strict_fifo(runs: Sequence[tuple[int, float]], nodes: int, gap: float) -> float:
    """The makespan of ``runs`` (``(nodes, seconds)`` in submission order) under strict FIFO:
    the head of the queue starts when it fits, ``gap`` seconds after the release it waited for.

    Examples:
        >>> strict_fifo([(8, 10.0), (1, 5.0), (8, 10.0)], 8, 0.0)
        25.0
    """
    t, running, queue = 0.0, [], list(runs)
    while queue or running:
        while queue and queue[0][0] <= nodes - sum(n for _, n in running):
            n, seconds = queue.pop(0)
            running.append((t + seconds, n))
        running.sort()
        end, _ = running.pop(0)
        t = max(t, end) + (gap if queue else 0.0)
    return t


def run(
    *,
    head_only: bool = False,
    step_seconds: float = STEP_SECONDS,
    n: int = 12,
    longest: int = 130,
    cluster: Cluster | None = None,
) -> Result:
    """Run the sweep on ``cluster`` (by default an 8-node local one started here, untimed)."""
    from rl_lustre import Cluster

    if cluster is not None:
        return _measure(cluster, step_seconds, n, longest)
    volume = tempfile.mkdtemp(prefix="rll-bench-sweep-")
    try:
        with Cluster.local(
            f"bench-sweep-{os.getpid()}",
            volume_dir=volume,
            num_nodes=NODES,
            gpus_per_node=GPUS_PER_NODE,
            worker_nodes=0 if head_only else NODES,
            rehearsal_step_seconds=step_seconds,
        ) as own:
            return _measure(own, step_seconds, n, longest)
    finally:
        shutil.rmtree(volume, ignore_errors=True)


def _measure(cluster: Cluster, step_seconds: float, n: int, longest: int) -> Result:
    from rl_lustre import run_sweep

    warm = attrs.evolve(jobs(1)[0], name=f"warm-{os.getpid()}", max_num_steps=2, num_nodes=1)
    cluster.submit(warm, fresh=True).wait(timeout=600)
    sweep = jobs(n, longest=longest, step=max(1, longest // 13))
    started = time.monotonic()
    result = run_sweep(cluster, sweep, poll=0.25, timeout=1800, fresh=True)
    print(f"sweep of {len(sweep)} jobs ended in {time.monotonic() - started:.1f}s", flush=True)
    jobs_api = cluster._backend().jobs  # type: ignore[attr-defined]
    failed = sum(1 for o in result if any(text in jobs_api.logs(o.job_id) for text in RESOURCE_FAILURES))
    capacity = cluster.num_nodes
    nominal = [(j.num_nodes or capacity, (j.max_num_steps or 0) * step_seconds) for j in sweep]
    nominal_bound = max(max(s for _, s in nominal), sum(k * s for k, s in nominal) / capacity)
    return Result(
        sweep=result,
        failed_for_resources=failed,
        nominal_bound=nominal_bound,
        strict_whatif=_whatif(result, capacity),
        worker_nodes=cluster.worker_nodes,
    )


def _whatif(result: SweepResult, capacity: int) -> float | None:
    """Strict FIFO replayed on the measured run times, over the same lower bound."""
    runs = [(o.nodes, o.run_seconds) for o in result if o.nodes is not None and o.run_seconds is not None]
    bound = result.lower_bound_seconds
    if len(runs) != len(result) or not bound:
        return None
    # The gap between a release and the next admission that waited for it, as measured.
    starts = sorted(o.ended_at - (o.run_seconds or 0.0) for o in result if o.ended_at is not None)
    ends = sorted(o.ended_at for o in result if o.ended_at is not None)
    gaps = [
        g for g in (min((s - e for e in ends if e <= s), default=None) for s in starts) if g is not None and g <= 10.0
    ]
    gap = statistics.median(gaps) if gaps else 0.0
    first = min(starts) - min(o.submitted_at or 0.0 for o in result)
    return (first + strict_fifo([(int(k), float(s)) for k, s in runs], capacity, gap)) / bound


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep", description="12 mixed-size jobs on 8 nodes")
    parser.add_argument("--head-only", action="store_true", help="no worker raylets: the head declares the GPUs")
    parser.add_argument("--step-seconds", type=float, default=STEP_SECONDS, help="a rehearsed step's seconds")
    parser.add_argument("--quick", action="store_true", help="4 short jobs (a format check, not a measurement)")
    args, _ = parser.parse_known_args(argv)
    if args.quick:
        result = run(head_only=args.head_only, step_seconds=args.step_seconds, n=4, longest=8)
    else:
        result = run(head_only=args.head_only, step_seconds=args.step_seconds)
    return report(result)


if __name__ == "__main__":
    sys.exit(main())
