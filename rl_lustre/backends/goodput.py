"""What every backend's goodput collector shares: the runs, read from the Jobs API.

Each job submitted through rl_lustre (metadata ``rl_lustre.job``) becomes a
:class:`~rl_lustre.goodput.timeline.RunTimeline` from its raw log
(:func:`rl_lustre.goodput.runlog.run_timeline`); rl_lustre's helper jobs (metadata
``rl_lustre.helper``, on the head only) are left out; any other job is *foreign*: the
ledger cannot tell what it used, and says so for the time it ran. The backends add the
nodes (:mod:`.goodput_local`, :mod:`.goodput_gke`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from ..errors import RayError
from ..goodput.ledger import build
from ..goodput.runlog import run_timeline
from ..goodput.timeline import Interval, RunTimeline

if TYPE_CHECKING:
    from ..goodput import GoodputLedger
    from ..prices import Prices
    from ..ray.jobs import JobInfo, JobsClient
    from .submission import JobsBackend

__all__ = ["TimelineCache", "cluster_goodput", "collect_runs", "run_goodput"]

logger = logging.getLogger("rl_lustre.backends.goodput")

_JOB, _HELPER = "rl_lustre.job", "rl_lustre.helper"


class TimelineCache:
    """Timelines of ended jobs (their logs no longer change), the newest 64."""

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._items: OrderedDict[str, RunTimeline] = OrderedDict()

    def get(self, info: JobInfo) -> RunTimeline | None:
        found = self._items.get(info.submission_id) if info.terminal else None
        if found is not None:
            self._items.move_to_end(info.submission_id)
        return found

    def put(self, info: JobInfo, timeline: RunTimeline) -> None:
        if info.terminal and timeline.ended_at is not None:
            self._items[info.submission_id] = timeline
            while len(self._items) > self._size:
                self._items.popitem(last=False)


def collect_runs(
    jobs: JobsClient, since: float, until: float | None, now: float, cache: TimelineCache | None = None
) -> tuple[list[RunTimeline], list[tuple[str, Interval]]]:
    """The runs overlapping ``[since, until)`` (to ``now`` when None), and the foreign jobs' intervals."""
    end = now if until is None else until
    runs, foreign = [], []
    for info in jobs.list():
        start = info.start_time
        if start is None or start >= end or (info.end_time is not None and info.end_time <= since):
            continue
        if info.metadata.get(_HELPER):
            continue
        if _JOB not in info.metadata:
            foreign.append((info.submission_id, Interval(start, info.end_time)))
            continue
        timeline = cache.get(info) if cache is not None else None
        if timeline is None:
            timeline = run_timeline(
                info.submission_id,
                jobs.logs(info.submission_id),
                status=info.status,
                submitted_at=_began(info, jobs),
                ended_at=info.end_time,
                name=info.metadata.get(_JOB),
            )
            if cache is not None:
                cache.put(info, timeline)
        runs.append(timeline)
    runs.sort(key=lambda r: (r.submitted_at, r.run))
    logger.debug(
        "goodput: %d runs and %d foreign jobs in [%s, %s)",
        len(runs),
        len(foreign),
        since,
        "now" if until is None else until,
    )
    return runs, foreign


def run_goodput(backend: JobsBackend, job_id: str, *, prices: Prices | None = None) -> GoodputLedger:
    """The ledger of one run: from its submission to its end, or so far.

    Raises:
        RayError: the cluster has no such job.
        NotImplementedError: the backend cannot collect the evidence.
    """
    info = backend.jobs.info(job_id)
    if info is None:
        raise RayError(f"the {backend._where} of {backend.cluster.name!r} has no job {job_id!r}")
    if info.start_time is None:
        raise RayError(f"job {job_id} has not started (status {info.status}): it has no ledger yet")
    # A run resubmitted after a head loss began before this submission: its log replays its records.
    since = _began(info, backend.jobs)
    ev = backend.goodput_evidence(since, info.end_time, prices=prices)
    return build(ev, scope="run", run=job_id, prices_as_of=_as_of(prices))


def cluster_goodput(
    backend: JobsBackend,
    since: float | None,
    until: float | None,
    *,
    prices: Prices | None = None,
    runs: list[str] | None = None,
) -> GoodputLedger:
    """The cluster's ledger over ``[since, until)`` (from its first billed second, to now), or a
    sweep's (``runs``: its runs and the cluster's own time)."""
    ev = backend.goodput_evidence(since if since is not None else 0.0, until, prices=prices)
    start = since if since is not None else min((n.billed(ev.now)[0] for n in ev.nodes), default=ev.now)
    window = Interval(min(start, ev.now), until)
    if runs is not None:
        return build(
            ev, scope="sweep", window=window, runs=runs, name=f"sweep of {len(runs)} runs", prices_as_of=_as_of(prices)
        )
    return build(ev, scope="cluster", window=window, name=backend.cluster.name, prices_as_of=_as_of(prices))


def _began(info: JobInfo, jobs: JobsClient) -> float:
    """When the run of a submission began: its start, or for a resubmission after a head loss
    (metadata ``rl_lustre.head_lost``) its first record, which its log replays."""
    from ..oncluster.records import HEAD_LOST, read_journal

    assert info.start_time is not None
    if HEAD_LOST not in (info.metadata or {}):
        return info.start_time
    records = read_journal(jobs.logs(info.submission_id))
    return min([info.start_time, *(float(r["at"]) for r in records[:1] if isinstance(r.get("at"), (int, float)))])


def _as_of(prices: Prices | None) -> str:
    from ..catalog import PRICES

    return (prices.table if prices is not None else PRICES).as_of
