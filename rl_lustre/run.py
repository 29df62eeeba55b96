"""``Run``: the live handle of one submitted job, the same on every backend.

It talks to the cluster only through a :class:`~rl_lustre.ray.jobs.JobsClient`
(the local head's address, or a port-forwarded dashboard on GKE) and reads
checkpoints through a function the backend supplies. Progress and metrics come
from the job's own log, parsed as NeMo-RL prints it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, overload

import attrs

from . import _output
from . import _validate as _v
from ._public import public
from ._warnings import warn_caller
from .errors import (
    ConfigError,
    JobFailedError,
    NothingToDoWarning,
    RayError,
    WaitTimeoutError,
    nothing_to_do_advice,
)
from .oncluster.fallback import describe as describe_fallback
from .oncluster.records import JOB, NOTHING_TO_DO_NOTE, REHEARSAL_NOTE
from .outages import TRANSIENT, Outage, OutageBudget
from .run_accounts import RunAccounts

if TYPE_CHECKING:
    from .backends.export import ModelExport
    from .goodput import GoodputLedger
    from .metrics import ClusterMetrics
    from .nemo_rl.checkpoints import Checkpoint
    from .nemo_rl.logs import CheckpointSave, LogParser, StepRecord
    from .queueing.state import QueueState, Timeline
    from .ray.jobs import JobInfo, JobsClient
    from .recovery import Diagnostics, Restart
    from .run_follow import RunFollow

__all__ = ["Progress", "Run"]

logger = logging.getLogger("rl_lustre.run")

_TAIL_LINES = 30


@public("rl_lustre")
@attrs.frozen
class Progress:
    """How far a run has come, from its step lines.

    Attributes:
        step: the step running now (its header was printed); 0 before the first.
        completed: the steps known to be done: the last step whose results were
            printed, or, after a resume, the steps before the first one this attempt ran.
        total: the run's number of steps, once known.
    """

    step: int
    completed: int
    total: int | None

    @property
    def fraction(self) -> float | None:
        """``completed / total``, once the total is known."""
        return None if not self.total else self.completed / self.total

    def __str__(self) -> str:
        return f"step {self.completed}/{self.total if self.total is not None else '?'}"


@public("rl_lustre")
class Run(RunAccounts):
    """A submitted job: watch it, wait for it, stop it, list its checkpoints.

    Get one from :meth:`Cluster.submit <rl_lustre.Cluster.submit>` or
    :meth:`Cluster.attach <rl_lustre.Cluster.attach>`.

    Examples:
        >>> with Cluster.local("demo") as cluster:  # doctest: +SKIP
        ...     run = cluster.submit(GRPOJob(name="tiny", recipe="grpo_math_1B", max_num_steps=4))
        ...     run.wait(timeout=600)
        ...     [(c.step, c.size_bytes) for c in run.checkpoints()]

    Args:
        jobs: the cluster's Jobs API.
        job_id: the Ray submission id.
        total_steps: the number of steps, until the log says.
        list_checkpoints: returns the run's complete checkpoints, oldest first.
        usd_per_hour: returns what the deployment costs per hour (see :meth:`cost_so_far`).
        cluster_metrics: reads the deployment's Cloud Monitoring metrics (GKE only).
        outage_budget: how long :meth:`wait` and ``logs(follow=True)`` ride out an
            unreachable cluster (see :mod:`rl_lustre.outages`).
        goodput: computes the run's goodput ledger (see :meth:`goodput`).
        follow: follows the run across its Ray submissions (a head loss resubmits it under
            a new id; see :mod:`rl_lustre.run_follow`).
        export_model: copies one checkpoint out (see :meth:`export_model`).
    """

    def __init__(
        self,
        jobs: JobsClient,
        job_id: str,
        *,
        total_steps: int | None = None,
        list_checkpoints: Callable[[], list[Checkpoint]] | None = None,
        usd_per_hour: Callable[[], float] | None = None,
        cluster_metrics: Callable[..., ClusterMetrics] | None = None,
        outage_budget: OutageBudget | None = None,
        goodput: Callable[..., GoodputLedger] | None = None,
        follow: RunFollow | None = None,
        export_model: Callable[..., ModelExport] | None = None,
    ) -> None:
        self._job_id = job_id
        self.outage_budget = outage_budget if outage_budget is not None else OutageBudget()
        self._follow = follow
        self._jobs: JobsClient | RunFollow = follow if follow is not None else jobs
        self._total = total_steps
        self._list_checkpoints = list_checkpoints
        self._usd_per_hour = usd_per_hour
        self._cluster_metrics = cluster_metrics
        self._goodput = goodput
        self._export_model = export_model
        self._lock = threading.Lock()
        self._parser: LogParser | None = None
        self._fed, self._fed_id = 0, job_id
        self._partial = ""
        self._idle: str | None = None
        # The last queue state read, and whether the run has been seen holding its nodes.
        self._queue: QueueState | None = None
        self._started = False
        # Where the run was read from, for one read back with from_results() (None: a live run).
        self.results_uri: str | None = None
        self._run_id: str | None = None

    @classmethod
    def from_results(cls, uri: str) -> Run:
        """A finished run, read back from where teardown exported it: no cluster needed.

        ``uri`` is the run's place in ``Cluster.results``: ``gs://BUCKET/PREFIX/<run id>``
        (or, for a local cluster, the run's directory). The handle answers as the live one
        did: :meth:`status`, :attr:`progress`, :meth:`steps` and :meth:`metrics`,
        :meth:`restarts`, :meth:`logs`, :meth:`checkpoints` (each with its ``uri`` in the
        results and its size), :meth:`goodput` (the ledger as the cluster told it at
        teardown, at its prices), :meth:`cost_so_far` and :meth:`plot`; it cannot be
        stopped, and ``cluster_metrics()`` is None.

        Examples:
            >>> run = Run.from_results("gs://my-bucket/rl/rl-lustre-grpo-0a1b2c3d")  # doctest: +SKIP
            >>> run.status(), run.progress, [(c.step, c.uri) for c in run.checkpoints()]  # doctest: +SKIP
            ('SUCCEEDED', Progress(step=20, completed=20, total=20), [(18, 'gs://...'), (20, 'gs://...')])

        Raises:
            ConfigError: ``uri`` does not name a run's results (checked before any remote call).
            NotFoundError: no finished export there (no manifest).
        """
        from .run_results import read_results

        stored = read_results(uri)
        rate, ledger, checkpoints = stored.usd_per_hour, stored.ledger, list(stored.checkpoints)

        def goodput(*, prices: Any = None) -> GoodputLedger:
            if ledger is None:
                raise NotImplementedError(f"the results at {stored.uri} hold no goodput ledger")
            return ledger

        run = cls(
            stored.jobs,  # type: ignore[arg-type]
            stored.job_id,
            total_steps=stored.total_steps,
            list_checkpoints=lambda: list(checkpoints),
            usd_per_hour=None if rate is None else (lambda: rate),
            goodput=goodput,
            follow=stored.follow,
        )
        run.results_uri, run._run_id = stored.uri, stored.run_id
        return run

    @property
    def job_id(self) -> str:
        """The Ray submission id of the run's newest submission known here: after a head
        loss its keeper resubmits it under an id of its own, which the handle follows."""
        return self._follow.current if self._follow is not None else self._job_id

    @property
    def run_id(self) -> str:
        """The run's id: the same for all its Ray submissions (its first one's id), the name of
        its directory on the volume and in ``Cluster.results``."""
        if self._run_id is not None:
            return self._run_id
        return self._follow.run_id if self._follow is not None else self._job_id

    def __repr__(self) -> str:
        # Only what is already known: a repr makes no remote call.
        notes = "".join(f", {n.split(':', 1)[0]}" for n in self._known_notes())
        q = self._queue
        if q is not None and q.state == "queued" and q.place and q.queued:
            notes += f", queued {q.place}/{q.queued}"
        return f"Run(job_id={self.job_id!r}{notes})"

    def notes(self) -> list[str]:
        """What to know about this run beyond its status, read from its log so far.

        ``"rehearsal: ..."`` when it runs the rehearsal driver (no model is trained; its
        metrics are synthetic), and ``"nothing left to do: ..."`` when it ended SUCCEEDED
        without training a step (its checkpoint directory already reached
        ``max_num_steps``; ``cluster.submit(job, fresh=True)`` starts over), and
        ``"ON-DEMAND FALLBACK: ..."`` when an attempt ran on on-demand GPU nodes though the
        capacity policy starts with another kind (its journal's ``on_demand`` record). The
        repr shows their first words.

        Examples:
            >>> run.notes()  # doctest: +SKIP
            ['rehearsal: no model is trained and its metrics are synthetic']
        """
        parser = self._refresh()
        if self._idle is None and parser.current_step is None and (info := self.info()).status == "SUCCEEDED":
            self._idle = self._idle_note(self._refresh(), info)
        return self._known_notes()

    def _known_notes(self) -> list[str]:
        notes = []
        if self._parser is not None and self._parser.rehearsal:
            notes.append(REHEARSAL_NOTE)
        if self._idle is not None:
            notes.append(self._idle)
        if self._parser is not None and self._parser.on_demand is not None:
            notes.append(describe_fallback(self._parser.on_demand))
        return notes

    def _idle_note(self, parser: LogParser, info: JobInfo) -> str | None:
        """The nothing-left-to-do note, for a run that SUCCEEDED: None when it trained."""
        if parser.current_step is not None:
            return None
        if JOB not in (info.metadata or {}):
            return None  # not a NeMo-RL job we submitted (a helper, or someone else's): no steps to expect
        return (
            f"{NOTHING_TO_DO_NOTE}: job {self.job_id} SUCCEEDED without training a step (the newest "
            f"checkpoint in its checkpoint directory already reaches max_num_steps). "
            f"{nothing_to_do_advice()}."
        )

    def info(self) -> JobInfo:
        """The Jobs API's record of this run (status, message, times).

        Raises:
            RayError: the cluster has no such job (any more).
        """
        info = self._jobs.info(self.job_id)
        if info is None:
            raise RayError(f"the cluster has no job {self.job_id!r}")
        return info

    def status(self) -> str:
        """``PENDING``, ``QUEUED``, ``RUNNING``, ``SUCCEEDED``, ``FAILED`` or ``STOPPED``.

        ``QUEUED``: the job waits in its cluster's queue for its nodes (Ray's dashboard
        shows it RUNNING: its supervisor runs, NeMo-RL has not started); :meth:`queue`
        says where it stands. A job recovering from lost nodes is ``RUNNING``
        (:meth:`restarts` says more).

        Examples:
            >>> run.status()  # doctest: +SKIP
            'QUEUED'
        """
        info = self.info()
        if info.status in ("PENDING", "RUNNING") and not self._started and JOB in (info.metadata or {}):
            state = self.queue()
            if state is not None and state.state == "queued":
                return "QUEUED"
        return info.status

    def queue(self) -> QueueState | None:
        """Where the run stands in its cluster's queue: its place, what it waits for, since when.

        Read from the run's log, where its supervisor on the cluster records each step, so
        every process that attaches to the run sees the same. None before the supervisor
        joined the queue (or for a job rl_lustre did not submit).

        Examples:
            >>> print(run.queue())  # doctest: +SKIP
            2nd of 3, waiting for 4 nodes: 2 of the cluster's 8 are free (6 held by 1 job)
        """
        from .queueing.state import parse_queue

        state = parse_queue(self._jobs.logs(self.job_id))
        self._queue = state
        if state is not None and state.state != "queued":
            self._started = True
        return state

    def timeline(self) -> Timeline | None:
        """When the run waited in its cluster's queue and when it held which of its nodes
        (the head's clock); None when it never joined a queue."""
        from .queueing.state import timeline

        return timeline(self._jobs.logs(self.job_id))

    def done(self) -> bool:
        """Whether the run has ended, in any way."""
        return self.info().terminal

    @overload
    def logs(self, follow: Literal[False] = False, *, records: bool = False) -> str: ...
    @overload
    def logs(self, follow: Literal[True], *, records: bool = False) -> Iterator[str]: ...

    def logs(self, follow: bool = False, *, records: bool = False) -> str | Iterator[str]:
        """The run's log: all of it so far, or (``follow=True``) its lines as they come.

        Following starts from the beginning and ends when the run does; ``break``
        out of the loop to stop early. A dropped stream (a port-forward or API server
        outage) is reopened and resumed after the last character already returned: no
        line twice, none missing. Retries are logged and bounded by
        :attr:`outage_budget`.

        The supervisor's journal records (``RL_LUSTRE_EVENT {...}`` lines, the goodput
        ledger's evidence) are left out unless ``records=True``; its lines for people and
        its ``RL_LUSTRE_RESTART`` / ``RL_LUSTRE_RESUMED`` records stay.

        Examples:
            >>> for line in run.logs(follow=True):  # doctest: +SKIP
            ...     print(line)
        """
        _v.need("Run.logs", "follow", follow, bool, "True or False")
        _v.need("Run.logs", "records", records, bool, "True or False")
        from .oncluster.records import MARK

        if follow:
            lines = self._jobs.follow(self.job_id, outage_budget=self.outage_budget)
            return lines if records else (line for line in lines if not line.startswith(MARK))
        text = self._jobs.logs(self.job_id)
        if records or MARK not in text:
            return text
        return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(MARK))

    @property
    def progress(self) -> Progress:
        """Where the run is, from its latest step lines.

        Examples:
            >>> run.progress  # doctest: +SKIP
            Progress(step=3, completed=2, total=10)
        """
        parser = self._refresh()
        step = parser.current_step or 0
        return Progress(
            step=step,
            # "Step k/N" means steps 1..k-1 are done, by this attempt or an earlier one.
            completed=max(parser.completed_steps, step - 1),
            total=parser.total_steps if parser.total_steps is not None else self._total,
        )

    def steps(self) -> list[StepRecord]:
        """Every completed step of this attempt, with its metrics, timings and throughput."""
        return list(self._refresh().steps)

    def metrics(self) -> dict[int, dict[str, float]]:
        """Per-step training results (``loss``, ``avg_reward``, ...), by step.

        Examples:
            >>> run.metrics()[1]["avg_reward"]  # doctest: +SKIP
            0.3125
        """
        return {record.step: dict(record.metrics) for record in self._refresh().steps}

    def saves(self) -> list[CheckpointSave]:
        """The checkpoint saves this attempt's log reports, with NeMo-RL's own timing."""
        return list(self._refresh().saves)

    def restarts(self) -> list[Restart]:
        """Every recovery from lost nodes so far, oldest first: when, which nodes and why,
        the step resumed from, and the seconds from the loss to the rerun's first step.

        The supervisor that runs the job on the cluster records them in the job's log, so
        any process that attaches to the run later reads the same list.

        Examples:
            >>> [(r.number, r.resumed_from_step, round(r.seconds_lost or 0)) for r in run.restarts()]  # doctest: +SKIP
            [(1, 4, 38)]
        """
        from .recovery import parse_restarts

        return parse_restarts(self._jobs.logs(self.job_id))

    def diagnostics(self) -> list[Diagnostics]:
        """The evidence kept each time the run stalled, oldest first: where its bundle is on the
        volume and a summary of who was where (see :class:`~rl_lustre.Diagnostics`).

        Examples:
            >>> print(run.diagnostics()[-1])  # doctest: +SKIP
            2026-03-02 04:11:37 UTC: attempt 1 stalled at step 143 (step; no progress for 612s)
              7 of 8 processes in all_reduce (torch/distributed/distributed_c10d.py) (step 143): ...
              VllmWorker pid 4242 on node gke-rl-gpu-pool-1a2b-x7k2: in __next__ (torch/utils/data/dataloader.py)
              evidence: /lustre/rl_lustre/runs/rl-lustre-qwen-1a2b3c4d/diagnostics/20260302T041137Z-attempt1-step143
        """
        from .recovery import parse_diagnostics

        return parse_diagnostics(self._jobs.logs(self.job_id))

    def checkpoints(self) -> list[Checkpoint]:
        """The run's complete checkpoints (``step_N``), oldest first, with size and write time.

        A save this attempt's log reports takes its time from NeMo-RL's own
        ``checkpointing`` timer (``save_seconds_from == "log"``); the others from the files'
        modification times, which Lustre keeps in whole seconds.

        Examples:
            >>> [(c.step, c.size_bytes, c.save_seconds) for c in run.checkpoints()]  # doctest: +SKIP
            [(4, 1048576, 0.02), (6, 1048576, 0.02)]

        Raises:
            NotImplementedError: this backend cannot read the run's checkpoint directory.
        """
        if self._list_checkpoints is None:
            raise NotImplementedError(f"this backend cannot list the checkpoints of {self.job_id}")
        found = self._list_checkpoints()
        try:
            timed = {s.step: s.timed_seconds for s in self.saves() if s.timed_seconds is not None}
        except RayError as exc:
            # The files still tell the checkpoints apart; only the finer timing is lost.
            logger.debug("no log timings for the checkpoints of %s: %s", self.job_id, exc)
            timed = {}
        return [
            attrs.evolve(c, save_seconds=timed[c.step], save_seconds_from="log") if c.step in timed else c
            for c in found
        ]

    def wait(self, timeout: float | None = None, *, poll: float = 0.5) -> str:
        """Block until the run ends; return ``"SUCCEEDED"``, or ``"STOPPED"`` for a run that was
        stopped (:meth:`stop`, from this process or any other, or ``rl-lustre stop``). A run
        that FAILED raises. A progress bar shows when output is on.

        Examples:
            >>> run.wait(timeout=900)  # doctest: +SKIP
            'SUCCEEDED'

        A failed status check (the cluster unreachable: a dropped port-forward, an API
        server restarting) does not end the wait: it is retried with backoff and logged
        at WARNING, for up to ``outage_budget.max_outage`` seconds of continuous failure
        (600 by default; see :mod:`rl_lustre.outages`).

        Args:
            timeout: seconds; None waits for ever.
            poll: seconds between status checks.

        Raises:
            JobFailedError: the run ended FAILED; carries its last log lines.
            WaitTimeoutError: ``timeout`` passed; carries the last status and progress.
            RayError: the cluster stayed unreachable longer than the outage budget, or
                no longer knows the job.
            NotReadyError: the cluster is gone for good: a local head stopped by the
                process that owns it (then at once, with no retries).
        """
        _check_seconds("Run.wait", timeout=timeout, poll=poll)
        deadline = None if timeout is None else time.monotonic() + timeout
        outage = Outage(self.outage_budget, f"waiting for job {self.job_id}")
        last = "unknown"
        with _output.progress(self.job_id, total=self._total) as update:
            while True:
                try:
                    found = self._jobs.info(self.job_id)
                    if found is not None and _output.output_enabled():
                        p = self.progress
                        update(completed=p.completed, total=p.total)
                except TRANSIENT as exc:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise WaitTimeoutError(f"job {self.job_id}", timeout or 0, f"{last} (then: {exc})") from exc
                    outage.failed(exc, deadline=deadline)
                    continue
                outage.ok()
                if found is None:
                    raise RayError(f"the cluster has no job {self.job_id!r}")
                info, last = found, found.status
                if info.terminal:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    raise WaitTimeoutError(f"job {self.job_id}", timeout or 0, f"{info.status}, {self.progress}")
                remaining = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
                time.sleep(remaining)
        if info.status == "FAILED":
            tail = self.logs().splitlines()[-_TAIL_LINES:]  # for people: without the journal's records
            raise JobFailedError(self.job_id, info.status, tail, why=info.message if info.from_records else "")
        logger.info("job %s %s", self.job_id, info.status)
        if self._idle is None and info.status == "SUCCEEDED":
            self._idle = self._idle_note(self._refresh(), info)
            if self._idle is not None:
                logger.info("%s", self._idle)
                warn_caller(self._idle, NothingToDoWarning)
        return info.status

    def stop(self, *, wait: bool = True, timeout: float = 60.0) -> str:
        """Ask the run to stop; by default wait until it has. Returns the status then.

        Stopping a run that already ended changes nothing.

        Examples:
            >>> run.stop()  # doctest: +SKIP
            'STOPPED'

        Raises:
            WaitTimeoutError: ``wait`` and the run still had not stopped after ``timeout``.
        """
        _v.need("Run.stop", "wait", wait, bool, "True or False")
        _check_seconds("Run.stop", timeout=timeout, none_ok=False)
        if self._jobs.stop(self.job_id):
            logger.info("asked job %s to stop", self.job_id)
        if not wait:
            return self.status()
        deadline = time.monotonic() + timeout
        while not (info := self.info()).terminal:
            if time.monotonic() >= deadline:
                raise WaitTimeoutError(f"job {self.job_id} to stop", timeout, info.status)
            time.sleep(0.2)
        return info.status

    def export_model(
        self,
        dest: str,
        *,
        step: str | int = "final",
        format: Literal["hf"] | None = None,
        dry_run: bool = False,
        timeout: float = 3600.0,
    ) -> ModelExport:
        """Copy one checkpoint of the run to ``dest`` while the cluster is up, in Hugging Face
        format when asked (converted first with NeMo-RL's own converter for the policy's
        backend, on a node with the memory the whole model needs).

        Examples:
            >>> run.export_model("gs://my-bucket/models/qwen-grpo", step="final", format="hf",
            ...                  dry_run=True)  # doctest: +SKIP
            >>> print(run.export_model("gs://my-bucket/models/qwen-grpo", format="hf"))  # doctest: +SKIP

        Args:
            dest: ``gs://BUCKET/PREFIX`` on GKE (your bucket), a directory locally.
            step: ``"final"`` (the newest checkpoint), ``"best"`` (the one ``keep_top_k``
                ranks first, by the job's ``checkpointing.metric_name``) or a step number.
            format: None (the checkpoint as NeMo-RL saved it) or ``"hf"`` (Hugging Face:
                ``config.json``, the weights, the tokenizer's files).
            dry_run: say what would run (the converter's command, the memory it asks for,
                what goes where) and run nothing.
            timeout: seconds the conversion may take.

        Raises:
            ConfigError: a bad ``dest``, ``step`` or ``format``, or no such checkpoint.
            RayError: the conversion failed (its log's last lines say why).
            ExportError: the copy failed or did not verify.
        """
        _v.need("Run.export_model", "dry_run", dry_run, bool, "True or False")
        if format not in (None, "hf"):
            raise ConfigError("Run.export_model", "format", format, "must be None (as saved) or 'hf' (Hugging Face)")
        if self._export_model is None:
            raise NotImplementedError(f"{self.job_id}: a run read back from its results is exported already")
        _check_seconds("Run.export_model", timeout=timeout, none_ok=False)
        return self._export_model(dest, step=step, format=format, dry_run=dry_run, timeout=timeout)

    def _refresh(self) -> LogParser:
        """Feed the parser the part of the log it has not seen yet."""
        from .nemo_rl.logs import LogParser

        with self._lock:
            text = self._jobs.logs(self.job_id)
            if self._parser is None or len(text) < self._fed or self._fed_id != self.job_id:
                self._fed_id = self.job_id
                self._parser, self._fed, self._partial = LogParser(), 0, ""
            new, self._fed = self._partial + text[self._fed :], len(text)
            *lines, self._partial = new.split("\n")
            for line in lines:
                self._parser.feed(line)
            return self._parser


def _check_seconds(owner: str, *, none_ok: bool = True, **values: Any) -> None:
    """Each value is a number of seconds (``timeout`` may be None, no limit, when ``none_ok``),
    ``poll`` positive."""
    import math

    for name, value in values.items():
        optional = none_ok and name == "timeout"
        if value is None and optional:
            continue
        _v.need(owner, name, value, (int, float), "a number of seconds" + (" or None" if optional else ""))
        if math.isnan(value) or value < 0 or (name == "poll" and not 0 < value < math.inf):
            raise ConfigError(
                owner,
                name,
                value,
                "must be a positive number of seconds"
                if name == "poll"
                else "must be a number of seconds of at least 0",
            )
