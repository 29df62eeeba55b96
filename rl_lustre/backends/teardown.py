"""Teardown exports first, and never deletes the only copy of a run's results.

``down()`` (and the end of a ``with cluster:`` block, on success, on an exception, on
Ctrl-C), on either backend:

1. stops what still runs: the keeper first (nothing resubmits a run from then on), then every
   run is recorded as stopped by teardown (its ``stopped`` marker,
   :func:`rl_lustre.oncluster.runrecords.mark_stopped`: no later keeper brings it back) and
   stopped through the Jobs API;
2. writes each run's summary (status, attempts, goodput ledger) while the cluster can still
   tell, and seals the runs on the volume (:mod:`rl_lustre.oncluster.seal`): what is
   exported, what is withheld (a save cut short, anything like a credential);
3. exports them to ``Cluster.results`` (:mod:`rl_lustre.backends.export`), one transfer
   after another, each verified;
4. deletes the volume (GKE; a local volume is a directory and always stays) only when no
   run's results exist on it alone: without a destination, or when an export fails or is
   interrupted, the volume is **kept** while everything else goes, and a
   :class:`~rl_lustre.errors.ResultsKeptWarning` names each run, its newest checkpoint,
   what keeping the volume costs, and the ways forward; ``down(discard_results=True)``
   is the explicit word that deletes it anyway.

This module holds what both backends share and the local flow; the GKE flow is
:mod:`rl_lustre.backends.teardown_gke`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .. import _output
from .._warnings import warn_caller
from ..errors import ExportError, ResultsKeptWarning
from ..oncluster.nemo_formats import checkpoint_name
from ..oncluster.records import CHECKPOINT_DIR, JOB, LOG_DIR, MODEL, RECIPE, RUN_DIR, RUN_ID, TOTAL_STEPS

if TYPE_CHECKING:
    from ..ray.jobs import JobInfo, JobsClient
    from ..spec import ClusterSpec
    from .local import LocalBackend

__all__ = ["RunOnCluster", "kept_message", "local_down", "runs_on_cluster", "stop_runs", "summaries"]

logger = logging.getLogger("rl_lustre.teardown")

# How long a run is given to stop before teardown seals what it left.
STOP_TIMEOUT = 120.0
# How long teardown spends on the runs' goodput ledgers, all runs together (each reads the
# cluster's evidence): past it, the remaining summaries say so instead.
GOODPUT_BUDGET = 120.0


@attrs.define
class RunOnCluster:
    """One run as the cluster's Jobs API knows it: its attempts (Ray submissions), oldest first."""

    run_id: str
    attempts: list[JobInfo]

    @property
    def last(self) -> JobInfo:
        return self.attempts[-1]

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.last.metadata or {})

    def record(self, summary: dict[str, Any] | None = None) -> dict[str, Any]:
        """What the seal is told about the run."""
        m = self.metadata
        return {
            "run_id": self.run_id,
            "run_dir": m.get(RUN_DIR),
            "checkpoint_dir": m.get(CHECKPOINT_DIR),
            "log_dir": m.get(LOG_DIR),
            "attempts": [a.submission_id for a in self.attempts],
            **({"summary": summary} if summary is not None else {}),
        }


def runs_on_cluster(jobs: JobsClient) -> list[RunOnCluster]:
    """The runs rl_lustre submitted to the cluster (grouped by run id), oldest attempt first."""
    by_run: dict[str, list[JobInfo]] = {}
    for info in jobs.list():
        meta = info.metadata or {}
        if JOB not in meta or RUN_ID not in meta or RUN_DIR not in meta:
            continue
        by_run.setdefault(meta[RUN_ID], []).append(info)

    def attempt(info: JobInfo) -> int:
        value = (info.metadata or {}).get("rl_lustre.attempt", "1")
        return int(value) if value.isdigit() else 1

    return [RunOnCluster(run_id, sorted(infos, key=attempt)) for run_id, infos in sorted(by_run.items())]


def stop_runs(
    jobs: JobsClient, runs: Sequence[RunOnCluster], mark: Callable[[list[str]], None], *, timeout: float = STOP_TIMEOUT
) -> set[str]:
    """Record the runs that have not ended as stopped by teardown (``mark`` gets their
    run directories), then stop them and wait; returns the ids of the runs stopped."""
    live = [r for r in runs if not r.last.terminal]
    if not live:
        return set()
    mark([str(r.metadata[RUN_DIR]) for r in live])
    for r in live:
        if jobs.stop(r.last.submission_id):
            logger.info("teardown: stopping run %s (job %s)", r.run_id, r.last.submission_id)
    deadline = time.monotonic() + timeout
    for r in live:
        while True:
            info = jobs.info(r.last.submission_id)
            if info is None or info.terminal or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if info is not None:
            r.attempts[-1] = info
    return {r.run_id for r in live}


def summaries(
    cluster: ClusterSpec,
    runs: Sequence[RunOnCluster],
    stopped: set[str],
    goodput: Callable[[str], Any] | None,
) -> list[dict[str, Any]]:
    """Each run's seal record with its summary: status, attempts, the goodput ledger (as the
    cluster tells it now: after teardown it cannot), what the deployment cost per hour."""
    from .handles import usd_per_hour

    rate = usd_per_hour(cluster) if cluster.backend == "gke" else 0.0
    out = []
    budget = time.monotonic() + GOODPUT_BUDGET
    for r in runs:
        m = r.metadata
        ledger: dict[str, Any] | None = None
        error = None
        if goodput is not None and time.monotonic() > budget:
            error = f"not computed: teardown spends at most {GOODPUT_BUDGET:.0f} s on the runs' ledgers"
        elif goodput is not None:
            try:
                ledger = goodput(r.last.submission_id).to_dict(segments=True)
            except Exception as exc:  # the ledger is a bonus: its evidence may be gone
                error = f"{type(exc).__name__}: {exc}"
                logger.info("teardown: no goodput ledger for %s: %s", r.run_id, error)
        total = m.get(TOTAL_STEPS, "")
        summary = {
            "run_id": r.run_id,
            "job": m.get(JOB),
            "cluster": cluster.name,
            "backend": cluster.backend,
            "model": m.get(MODEL),
            "recipe": m.get(RECIPE),
            "total_steps": int(total) if total.isdigit() else None,
            "checkpoint_dir": m.get(CHECKPOINT_DIR),
            "log_dir": m.get(LOG_DIR),
            "status": r.last.status,
            "stopped_by": "teardown" if r.run_id in stopped else None,
            "attempts": [
                {
                    "submission_id": a.submission_id,
                    "status": a.status,
                    "message": a.message,
                    "start_time": a.start_time,
                    "end_time": a.end_time,
                    "metadata": dict(a.metadata or {}),
                }
                for a in r.attempts
            ],
            "usd_per_hour": rate,
            "goodput": ledger,
            "goodput_error": error,
            "written_at": round(time.time(), 3),
        }
        out.append(r.record(summary))
    return out


def secret_values(cluster: ClusterSpec) -> list[str]:
    """This process's values of the cluster's secrets (a file holding one is never exported)."""
    return [os.environ.get(name, "") for name in cluster.secrets]


def _size(n: int | None) -> str:
    if not n:
        return "0 B"
    return f"{n / 1e12:,.2f} TB" if n >= 1e12 else f"{n / 1e9:,.2f} GB" if n >= 1e7 else f"{n / 1e6:,.2f} MB"


def runs_text(sealed: Sequence[dict[str, Any]] | None) -> list[str]:
    """One line per run: its newest checkpoint and its size."""
    if sealed is None:
        return [
            "  (the cluster is gone: the runs were listed when the volume was first kept; their records are "
            "in the volume's rl_lustre/runs/)"
        ]
    lines = []
    for s in sealed:
        newest = s.get("newest")
        what = (
            f"newest checkpoint {checkpoint_name(newest['step'])} ({_size(newest.get('bytes'))}), "
            f"{s.get('checkpoints', 0)} checkpoint(s), {_size(s.get('bytes'))} in all"
            if newest
            else f"no checkpoint, {_size(s.get('bytes'))} of records and logs"
        )
        lines.append(f"  {s['run_id']}: {what}")
    return lines


def kept_message(
    cluster: ClusterSpec,
    reason: str,
    sealed: Sequence[dict[str, Any]] | None,
    *,
    volume: str,
    usd_per_hour: float | None,
) -> str:
    """The message of a kept volume: why, which runs (newest checkpoint, size), what it
    costs, and the three ways forward."""
    cost = (
        f"Keeping it costs ${usd_per_hour:,.2f}/hour (${usd_per_hour * 730:,.0f}/month)."
        if usd_per_hour is not None
        else "Keeping it costs its Managed Lustre rate until it is deleted."
    )
    runs = len(sealed) if sealed is not None else None
    head = (
        f"down() KEPT the Lustre instance {volume} (everything else is deleted, the GPU nodes included): "
        f"{reason}, and the results of {runs if runs is not None else 'its'} run(s) on it exist nowhere else:"
    )
    spec = (
        f"Cluster(name={cluster.name!r}, project={cluster.project!r}, region={cluster.region!r}, "
        f"zone={cluster.zone!r}, ...)"
    )
    ways = [
        "Ways forward:",
        f"  1. give a destination and call down() again: {spec[:-5]} results='gs://BUCKET/PREFIX', ...).down() "
        f"(or `rl-lustre down {cluster.name} --project {cluster.project} --results gs://BUCKET/PREFIX`)",
        f"  2. keep it on purpose: it stays until then (`rl-lustre ls --project {cluster.project}` shows it as "
        f'"kept: results not exported"); LustreVolume(name={volume!r}, existing=True) mounts it in another cluster',
        f"  3. discard the results: {spec}.down(discard_results=True) "
        f"(or `rl-lustre down {cluster.name} --project {cluster.project} --discard-results`)",
    ]
    return "\n".join([head, *runs_text(sealed), cost, *ways])


def warn_kept(message: str) -> None:
    """Say a kept volume loud: the log, the console, and a warning at the caller's line."""
    logger.warning("%s", message)
    _output.echo(message, style="yellow")
    warn_caller(message, ResultsKeptWarning)


def local_down(backend: LocalBackend, *, discard_results: bool = False) -> None:
    """The local teardown: the keeper first, then the runs recorded as stopped by teardown
    (:mod:`rl_lustre.oncluster.teardown`), stopped and sealed, then the worker nodes and the
    head, then the export to ``results`` (a directory). The volume directory always stays
    (it is yours), so nothing is lost either way; ``discard_results`` changes nothing here."""
    from pathlib import Path

    from ..oncluster.runrecords import mark_stopped
    from ..oncluster.seal import seal_runs
    from ..oncluster.teardown import teardown
    from ..plan.results import results_location
    from ..ray.jobs import JobsClient
    from ..ray.keeper import status_path
    from ..ray.processes import sweep
    from ..ray.workers import live_workers
    from ..results_store import ResultsStore
    from .export import DirectoryMover, export_runs

    cluster = backend.cluster
    keeper = backend.keeper()
    if keeper is not None:
        keeper.stop()  # first: nothing resubmits a run from here on
    head = backend.head if backend.head is not None and backend.head.alive() else backend._find()
    sealed: list[dict[str, Any]] | None = None
    volume_here = Path(cluster.mount_path).is_dir()
    if volume_here:
        marked = teardown(cluster.mount_path, cluster.name, lost=None if head else backend._status())
        if marked:
            logger.info("marked %d run(s) stopped by teardown: %s", len(marked), ", ".join(marked))
    try:
        if head is not None:
            jobs = JobsClient(head.dashboard_url, headers=head.headers())
            runs = runs_on_cluster(jobs)

            def mark(dirs: list[str]) -> None:
                for d in dirs:
                    mark_stopped(d, "teardown")

            stopped = stop_runs(jobs, runs, mark)
            records = summaries(cluster, runs, stopped, lambda job_id: backend.run_goodput(job_id))
            sealed = seal_runs(
                cluster.mount_path, records, volume_id=cluster.mount_path, logs_of=jobs.logs,
                secret_values=secret_values(cluster), cluster=cluster.name,
            )  # fmt: skip
        elif volume_here:
            # The head is gone: the runs' directories on the volume are all there is to seal.
            sealed = seal_runs(
                cluster.mount_path,
                [],
                volume_id=cluster.mount_path,
                secret_values=secret_values(cluster),
                cluster=cluster.name,
            )
    finally:
        # (Reading the runs' ledgers above may have adopted the head again: forget it only now.)
        backend.head, backend._jobs = None, None
        for worker in live_workers(backend.temp_dir):
            worker.kill()
        if head is None:
            # A head lost for good leaves its worker nodes' processes: none may outlive the deployment.
            sweep(backend.temp_dir, settle=0)
            logger.info("no local Ray head of %r is running", cluster.name)
        else:
            status_path(backend.temp_dir).unlink(missing_ok=True)
            head.stop()
    where = results_location(cluster)
    if where is None:
        if sealed:
            logger.info(
                "the results of %d run(s) stay in the volume directory %s (down() never deletes it); "
                "Cluster.local(..., results=DIR) copies them out at down()",
                len(sealed),
                cluster.mount_path,
            )
        return
    store = ResultsStore(where)
    try:
        export_runs(
            store,
            DirectoryMover(where.path),
            mount=cluster.mount_path,
            volume_id=cluster.mount_path,
            sealed=sealed,
            deployment=cluster.name,
            abandon=threading.Event(),
            echo=_echo,
        )
    except (ExportError, OSError) as exc:
        warn_kept(
            f"down(): the results could not be copied to {where.uri} ({exc}); they stay in the volume directory "
            f"{cluster.mount_path} (down() never deletes it):\n" + "\n".join(runs_text(sealed))
        )


def _echo(line: str) -> None:
    logger.info("%s", line)
    _output.echo(line)
