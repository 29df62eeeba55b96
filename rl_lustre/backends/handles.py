"""The run handles a backend gives out, and what they read of the runs' records on the volume.

:class:`RunHandles` is the part of :class:`~rl_lustre.backends.submission.JobsBackend` that
makes :class:`~rl_lustre.Run` handles (``attach``, the queue's listing, each submission's)
and lets them follow a run across its Ray submissions (:class:`~rl_lustre.run_follow.RunFollow`):
by a run id or any of its submission ids, and from the run's directory on the volume when the
head has lost it (:meth:`RunHandles.run_view`: where this process sees the volume, as locally
and on the GKE fakes, whose volume is a directory here).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RayError
from ..oncluster import rundir
from ..oncluster.records import CHECKPOINT_DIR, JOB, RUN_DIR, RUN_ID, TOTAL_STEPS

if TYPE_CHECKING:
    from ..goodput import GoodputLedger
    from ..nemo_rl.checkpoints import Checkpoint
    from ..oncluster.runview import RunView
    from ..prices import Prices
    from ..queueing.state import QueueState
    from ..ray.jobs import JobInfo, JobsClient
    from ..run import Run
    from ..run_follow import RunFollow
    from ..spec import ClusterSpec

__all__ = ["RunHandles", "run_id_of", "usd_per_hour"]

# What a submission id adds to its run's id: a user's new attempt (-r2), the keeper's resubmission (-h<8 hex>).
_SUFFIX = re.compile(r"(?:-r\d+)?(?:-h[0-9a-f]{8})?$")


def run_id_of(job_id: str, info: JobInfo | None = None) -> str:
    """The run id of a submission: from its metadata, else from its id.

    Examples:
        >>> run_id_of("rl-lustre-tiny-0a1b2c3d-r2-h7d4bd5a5"), run_id_of("rl-lustre-tiny-0a1b2c3d")
        ('rl-lustre-tiny-0a1b2c3d', 'rl-lustre-tiny-0a1b2c3d')
    """
    if info is not None and (info.metadata or {}).get(RUN_ID):
        return str(info.metadata[RUN_ID])
    return _SUFFIX.sub("", job_id) or job_id


def usd_per_hour(cluster: ClusterSpec) -> float:
    """What the deployment costs per hour (its plan's cost), computed once per spec.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> usd_per_hour(c) == c.plan().cost().total_usd_per_hour
        True
    """
    from ..plan import build_plan

    return cluster._derive("usd_per_hour", lambda: build_plan(cluster).cost().total_usd_per_hour)


class RunHandles:
    """Run handles, following their runs (the backend provides ``cluster``, ``jobs``,
    ``list_checkpoints``, ``run_goodput`` and ``_where``)."""

    cluster: ClusterSpec
    _where: str

    @property
    def jobs(self) -> JobsClient:
        raise NotImplementedError

    def list_checkpoints(self, checkpoint_dir: str) -> list[Checkpoint]:
        raise NotImplementedError

    def run_goodput(self, job_id: str, *, prices: Prices | None = None) -> GoodputLedger:
        raise NotImplementedError

    # -- the runs' records on the volume (RunRecordsAccess) ---------------------------------

    def volume_here(self) -> bool:
        """Whether this process sees the volume (a directory here at its mount path)."""
        return Path(self.cluster.mount_path, rundir.RUNS).is_dir()

    def run_view(self, run_dir: str) -> RunView | None:
        """The run's directory, read here when this process sees the volume; None otherwise."""
        from ..oncluster.runview import RunView

        return RunView(run_dir) if self.volume_here() else None

    def head_losses(self) -> list[dict[str, Any]]:
        """The head losses the cluster's keeper recorded, oldest first (none where the volume is not seen)."""
        from ..oncluster.runview import history

        if not self.volume_here():
            return []
        return [r for r in history(self.cluster.mount_path, self.cluster.name) if r.get("event") == "lost"]

    def cluster_up(self) -> bool | None:
        """Whether the cluster is up (a head, or a keeper waiting for the next one); None: unknown."""
        return None

    # -- handles -------------------------------------------------------------------------------

    def attach(self, job_id: str) -> Run:
        """The handle of a run, by its run id or any of its submission ids (a run its head lost
        and its keeper resubmitted is found under its newest one)."""
        info = self.jobs.info(job_id)
        if info is not None:
            return self._run_of(info)
        run_id = run_id_of(job_id)
        mine = [j for j in self.jobs.list() if (j.metadata or {}).get(RUN_ID) == run_id]
        if mine:
            return self._run_of(max(mine, key=lambda j: (j.start_time or 0.0, j.submission_id)))
        path = rundir.run_dir(self.cluster.mount_path, run_id)
        view = self.run_view(path)
        if view is not None and view.exists:
            meta = (view.submission or {}).get("metadata") or {}
            steps = str(meta.get(TOTAL_STEPS, ""))
            return self._run(
                view.current or job_id,
                checkpoint_dir=meta.get(CHECKPOINT_DIR),
                total_steps=int(steps) if steps.isdigit() else None,
                run_id=run_id,
                run_dir=path,
            )
        raise RayError(f"the {self._where} of {self.cluster.name!r} has no job {job_id!r}")

    def queue(self) -> list[tuple[Run, QueueState]]:
        """The jobs rl_lustre submitted that have not ended, in the queue's order (holders
        first, then the queued by place), each with its queue state read from its log."""
        from ..queueing.state import parse_queue

        found = []
        for info in self.jobs.list():
            if info.terminal or JOB not in (info.metadata or {}):
                continue
            state = parse_queue(self.jobs.logs(info.submission_id))
            if state is None:
                continue
            found.append((self._run_of(info), state))

        def order(item: tuple[Run, QueueState]) -> tuple[int, float, float]:
            state = item[1]
            rank = {"running": 0, "recovering": 0, "queued": 1}.get(state.state, 2)
            return rank, float(state.place or 0), state.since or 0.0

        return sorted(found, key=order)

    def _run_of(self, info: JobInfo) -> Run:
        meta = info.metadata or {}
        steps = meta.get(TOTAL_STEPS, "")
        return self._run(
            info.submission_id,
            checkpoint_dir=meta.get(CHECKPOINT_DIR),
            total_steps=int(steps) if steps.isdigit() else None,
            run_id=meta.get(RUN_ID),
            run_dir=meta.get(RUN_DIR),
        )

    def _run(
        self,
        job_id: str,
        *,
        checkpoint_dir: str | None,
        total_steps: int | None,
        run_id: str | None = None,
        run_dir: str | None = None,
    ) -> Run:
        from ..metrics import cluster_metrics
        from ..run import Run
        from ..run_follow import RunFollow
        from .model_export import export_for

        lister = None if checkpoint_dir is None else functools.partial(self.list_checkpoints, checkpoint_dir)
        cluster = self.cluster
        follow = None
        if run_id is not None or run_dir is not None:
            follow = RunFollow(lambda: self.jobs, job_id, run_id=run_id, run_dir=run_dir, records=self)
        run = Run(
            self.jobs,
            job_id,
            total_steps=total_steps,
            list_checkpoints=lister,
            usd_per_hour=functools.partial(usd_per_hour, cluster),
            cluster_metrics=functools.partial(cluster_metrics, cluster) if cluster.backend == "gke" else None,
            follow=follow,
        )
        # One checkpoint of the run out (its newest submission's, whichever it is when asked).
        run._export_model = lambda dest, **kw: export_for(self, run.job_id, dest, **kw)  # type: ignore[arg-type]
        # The run's newest submission, whichever it is when asked.
        run._goodput = functools.partial(self._goodput_of, run, follow)
        return run

    def _goodput_of(self, run: Run, follow: RunFollow | None, *, prices: Prices | None = None) -> GoodputLedger:
        """The run's ledger from the cluster's evidence; once no head has it, from the run's
        records on the volume (:mod:`rl_lustre.goodput.records`)."""
        from ..errors import NotReadyError
        from ..goodput.records import records_goodput

        try:
            return self.run_goodput(run.job_id, prices=prices)
        except (NotReadyError, RayError):
            told = follow.offline() if follow is not None else None
            view = follow.view() if follow is not None else None
            if told is None or view is None:
                raise
            return records_goodput(view, told.status)
