"""The run behind a :class:`~rl_lustre.Run` handle, across the Ray heads that run it.

A run has a run id that outlives its Ray submissions (:data:`rl_lustre.oncluster.records.RUN_ID`):
when its head is lost, the keeper resubmits it to the next head under a new submission id
(:mod:`rl_lustre.oncluster.keeper`). :class:`RunFollow` stands between the handle and the
cluster's Jobs API, with the same calls (``info``, ``logs``, ``follow``, ``stop``), and serves
the run's newest submission whatever id it is asked about:

- the head does not know the submission (a new head): the run's newest submission on it
  (metadata ``rl_lustre.run_id``) becomes the handle's;
- the head does not answer, or knows nothing of the run: the run's directory on the volume
  (:class:`~rl_lustre.oncluster.runview.RunView`) tells its story, where this process can read
  it (:meth:`RunRecordsAccess.run_view`): in flight while its keeper waits for the next head,
  stopped, given up by the keeper (why, and the head's last termination reason), or ended;
  its log is the volume's copy;
- a log followed across the loss goes on with the resubmission's log, after the records it
  replays from the volume (which the follower already had); a follower whose stream ended
  before the keeper resubmitted the run waits for the resubmission, as through an outage.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from .errors import NotReadyError, RayError
from .oncluster.records import REPLAY_BEGIN, REPLAY_END, RUN_ID

if TYPE_CHECKING:
    from .oncluster.runview import RunView
    from .outages import OutageBudget
    from .ray.jobs import JobInfo, JobsClient

__all__ = ["RunFollow", "RunRecordsAccess", "Story", "resume_point", "story"]

logger = logging.getLogger("rl_lustre.run")

# A loss counts as the run's when it came at most this long before the run's last record.
_SLACK = 60.0
# The lines a follower keeps to find where it stopped in the run's log on the volume.
_WINDOW = 50


class RunRecordsAccess(Protocol):
    """What a backend offers to read a run's records on the volume."""

    def run_view(self, run_dir: str) -> RunView | None:
        """The run's directory read now; None when this process cannot read the volume now."""

    def head_losses(self) -> list[dict[str, Any]]:
        """The cluster's head losses its keeper recorded (``heads.jsonl``), oldest first."""

    def cluster_up(self) -> bool | None:
        """Whether the cluster is up (a head, or a keeper waiting for the next one); None: unknown."""


@attrs.frozen
class Story:
    """A run's status as its records tell it: ``status`` (as the Jobs API says it), ``message``."""

    status: str
    message: str


def story(view: RunView, losses: list[dict[str, Any]], up: bool | None) -> Story:
    """The run's status from its directory and the cluster's head losses.

    Examples:
        >>> from types import SimpleNamespace as NS
        >>> lost = [{"lost_at": 100.0, "reason": "OOMKilled", "head": "demo-head-x"}]
        >>> v = NS(given_up=None, ended=None, stopped={"by": "teardown"}, last_at=90.0)
        >>> told = story(v, lost, up=False)
        >>> told.status, told.message.split(" at ")[0]
        ('FAILED', 'its Ray head was lost (OOMKilled: demo-head-x)')
    """
    if view.given_up is not None:
        return Story("FAILED", str(view.given_up.get("why") or "the keeper gave it up"))
    if view.ended == 0:
        return Story("SUCCEEDED", "it ended with exit status 0")
    last = view.last_at or 0.0
    mine = [x for x in losses if float(x.get("lost_at") or 0) >= last - _SLACK]
    loss = mine[-1] if mine else None
    lost = (
        f"its Ray head was lost ({loss.get('reason')}: {loss.get('head')}) at {_clock(loss.get('lost_at'))}"
        if loss is not None
        else "its Ray head was lost"
    )
    if view.stopped is not None:
        # Torn down after its head was lost, before the keeper brought it back: the loss ended it,
        # whether or not its supervisor recorded an end as the head went.
        if view.stopped.get("by") == "teardown" and loss is not None:
            return Story("FAILED", f"{lost}, and the cluster was torn down before the run was resubmitted")
        return Story("STOPPED", f"it was stopped ({view.stopped.get('by')})")
    if view.ended is not None:
        return Story("FAILED", f"its supervisor ended with exit status {view.ended}")
    if up is False:
        return Story("FAILED", f"{lost}, and the cluster is down: nothing will resubmit it")
    return Story("RUNNING", f"{lost}; its keeper resubmits it once the next head is up")


def _clock(at: object) -> str:
    if not isinstance(at, (int, float)):
        return "an unknown time"
    return time.strftime("%H:%M:%S UTC", time.gmtime(at))


def resume_point(lines: list[str], recent: list[str]) -> int | None:
    """Where a follower that had ``recent`` (the last non-empty lines it got, oldest first) goes
    on in ``lines``: after the place the longest run of them ends; None if none is found.

    The last line alone is not enough: a rehearsal's (or NeMo-RL's) timing lines repeat step
    after step, and its last copy in the log may be steps after the one the follower had.

    Examples:
        >>> log = ["Step 1", "took 0.5s", "Step 2", "took 0.5s", "Step 3", "took 0.5s"]
        >>> resume_point(log, ["Step 1", "took 0.5s"]), resume_point(log, ["Ray's own line", "Step 3"])
        (2, 5)
        >>> resume_point(log, ["nowhere"]) is None
        True
    """
    best, length = None, 0
    for i in range(len(lines) - 1, -1, -1):
        if lines[i] != recent[-1]:
            continue
        n = 1
        while n < len(recent) and n <= i and lines[i - n] == recent[-1 - n]:
            n += 1
        if n > length:
            best, length = i + 1, n
        if n == len(recent):
            break
    return best


class RunFollow:
    """The run of ``job_id`` (run ``run_id``, records in ``run_dir``) on whatever head runs it.

    Args:
        jobs: the cluster's Jobs API now (asked each time: a local head's address changes).
        job_id: the submission the handle was made for.
        run_id: the run's id (by default ``job_id``).
        run_dir: the run's directory on the volume, if it has one.
        records: how this process reads the volume (None: it cannot).
    """

    def __init__(
        self,
        jobs: Callable[[], JobsClient],
        job_id: str,
        *,
        run_id: str | None = None,
        run_dir: str | None = None,
        records: RunRecordsAccess | None = None,
    ) -> None:
        self._jobs = jobs
        self.current = job_id
        self.run_id = run_id or job_id
        self.run_dir = run_dir
        self.records = records
        # Whether the handle moved to a resubmission (its log then begins with a replay), and
        # whether the run was last seen in flight.
        self.moved = False
        self.alive = False

    def __repr__(self) -> str:
        return f"RunFollow({self.run_id!r}, current={self.current!r})"

    # -- the Jobs API's calls, for the run's newest submission --------------------------------

    def info(self, job_id: str) -> JobInfo | None:
        try:
            found = self._jobs().info(self.current)
        except (RayError, NotReadyError):
            offline = self.offline()
            if offline is None:
                raise
            return offline
        if found is not None:
            self.alive = not found.terminal
            return found
        told = self._newer() or self.offline()
        if told is None and self.alive:
            # A head that does not know a run seen running is a new head; the keeper brings it back.
            raise RayError(
                f"the cluster's Ray head has no job {self.current!r} (a new head after a loss?): waiting for "
                "its keeper to resubmit the run"
            )
        return told

    def logs(self, job_id: str) -> str:
        try:
            return self._jobs().logs(self.current)
        except (RayError, NotReadyError):
            if self._newer() is not None:
                return self._jobs().logs(self.current)
            view = self.view()
            if view is None or not view.exists:
                raise
            return view.log()

    def stop(self, job_id: str) -> bool:
        try:
            return self._jobs().stop(self.current)
        except (RayError, NotReadyError):
            view = self.view()
            if view is None or not view.in_flight:
                raise
            from .oncluster.runrecords import mark_stopped

            # The head is away: the keeper, which reads the volume, must not bring the run back.
            return mark_stopped(view.path, "run.stop()")

    def follow(self, job_id: str, *, outage_budget: OutageBudget | None = None) -> Iterator[str]:
        """The run's log as it comes, from the submission followed on to each resubmission."""
        while True:
            following = self.current
            # A resubmission's log begins with the records it replays: the follower has them.
            replayed, skipping = not self.moved, False
            recent: collections.deque[str] = collections.deque(maxlen=_WINDOW)
            for line in self._jobs().follow(following, outage_budget=outage_budget):
                if not replayed and line == REPLAY_BEGIN:
                    skipping = True
                elif skipping:
                    skipping = line != REPLAY_END
                    replayed = not skipping
                else:
                    replayed = True
                    if line.strip():
                        recent.append(line)
                    yield line
            self._onto_next(following, outage_budget)
            if self.current == following:
                return
            # What the lost head printed after its stream broke is in the run's directory.
            yield from self._missed(following, list(recent))

    def _onto_next(self, following: str, outage_budget: OutageBudget | None) -> None:
        """Once the stream of ``following`` ended: move the handle onto the run's resubmission.

        A stream also ends when a new head, up after a loss, does not know ``following``; the
        keeper may resubmit the run only a little later. While the run is in flight by its records
        (or a new head does not know it yet), this waits for the resubmission, as an outage,
        within ``outage_budget``; it returns once the handle moved, or the run ended.
        """
        from .outages import Outage, OutageBudget

        outage = Outage(outage_budget or OutageBudget(), f"following run {self.run_id} onto its resubmission")
        while True:
            try:
                info = self.info(following)
            except RayError as exc:  # the head is away, or a new one does not know the run yet
                outage.failed(exc)
                continue
            if self.current != following or info is None or not info.from_records or info.terminal:
                return
            outage.failed(RayError(f"run {self.run_id} is not on the cluster's Ray head yet: {info.message}"))

    def _missed(self, submission: str, recent: list[str]) -> list[str]:
        """The lines of ``submission`` in the run's log on the volume after the last ``recent``
        ones the follower had (none when it cannot be read here, or they are not found)."""
        from .oncluster.runview import submission_log

        view = self.view()
        if view is None or not recent:
            return []
        lines = submission_log(view.log(), submission)
        at = resume_point(lines, recent)
        return [] if at is None else lines[at:]

    # -- the run's records ---------------------------------------------------------------------

    def view(self) -> RunView | None:
        if self.records is None or self.run_dir is None:
            return None
        return self.records.run_view(self.run_dir)

    def offline(self) -> JobInfo | None:
        """The run's status from its records on the volume; None where they cannot be read."""
        view = self.view()
        if view is None or not view.exists or self.records is None:
            return None
        from .ray.jobs import JobInfo

        told = story(view, self.records.head_losses(), self.records.cluster_up())
        firsts = [float(r["at"]) for r in view.records if isinstance(r.get("at"), (int, float))]
        return JobInfo(
            submission_id=self.current,
            status=told.status,
            message=told.message,
            metadata=dict((view.submission or {}).get("metadata") or {}),
            start_time=min(firsts, default=None),
            end_time=view.last_at if told.status in ("SUCCEEDED", "FAILED", "STOPPED") else None,
            from_records=True,
        )

    def _newer(self) -> JobInfo | None:
        """The run's newest submission on the head now, when it is not the one followed."""
        try:
            listing = self._jobs().list()
        except (RayError, NotReadyError):
            return None
        mine = [j for j in listing if (j.metadata or {}).get(RUN_ID) == self.run_id and j.submission_id != self.current]
        if not mine:
            return None
        newest = max(mine, key=lambda j: (j.start_time or 0.0, j.submission_id))
        logger.info("run %s goes on as job %s (it was %s)", self.run_id, newest.submission_id, self.current)
        self.current, self.moved, self.alive = newest.submission_id, True, not newest.terminal
        return newest
