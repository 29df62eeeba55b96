"""What the ledger is computed from: plain, recorded values, one class per kind of evidence.

Collectors (:mod:`rl_lustre.backends.goodput_local`, :mod:`rl_lustre.backends.goodput_gke`)
read the cluster and hand these to :func:`rl_lustre.goodput.attribute.attribute`; nothing
here reads anything. Times are seconds since the epoch; ``None`` always means *not
recorded* (or, for an end, *not yet*), never zero.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

__all__ = ["Attempt", "Evidence", "HeldRecord", "Interval", "NodeSpan", "Recovery", "RunTimeline", "StepSpan"]


@attrs.frozen
class Interval:
    """``[start, end)``; ``end`` None: still open."""

    start: float
    end: float | None = None

    def closed(self, now: float) -> tuple[float, float]:
        """``(start, end)``, an open end taken as ``now``."""
        return self.start, self.end if self.end is not None else now


@attrs.frozen
class NodeSpan:
    """One billed GPU node: a GKE node, a local worker raylet, or one lane of a local head.

    Attributes:
        key: its stable name (the Kubernetes node name; ``worker-3``; ``head/2``).
        kind: the capacity kind its price is for (``spot``, ``on-demand``, ``reserved``,
            ``flex-start``, ``local``, ``unknown``).
        usd_per_hour: its price; None when not known (``price_note`` says why).
        gpus: its GPUs.
        billed_from: when billing began (GKE: the Node's registration; local: the launch);
            None when not known, then ``first_seen`` bounds it and a note says so.
        ready_at: when it could run pods (Node Ready; local: its raylet registered).
        worker_at: when its Ray worker registered (Ray's ``start_time_ms``).
        billed_to: when billing ended; None: still billed.
        first_seen: the earliest recorded evidence of the node.
        ray_node_ids: the Ray nodes that ran on it (a restarted raylet adds one).
        evidence: for each time above, where it came from (for people).
        price_note: why it has no price, or a remark on it.
        notes: what the collector knows is missing about it (see the ledger's ``notes``).
    """

    key: str
    kind: str
    usd_per_hour: float | None
    gpus: int
    billed_from: float | None
    ready_at: float | None
    worker_at: float | None
    billed_to: float | None
    first_seen: float
    ray_node_ids: tuple[str, ...] = ()
    evidence: Mapping[str, str] = attrs.field(factory=dict, eq=False)
    price_note: str = ""
    notes: tuple[str, ...] = ()

    def billed(self, now: float) -> tuple[float, float]:
        """The billed interval, ``now`` for an open end (``first_seen`` for an unknown start)."""
        start = self.billed_from if self.billed_from is not None else self.first_seen
        return start, self.billed_to if self.billed_to is not None else now


@attrs.frozen
class StepSpan:
    """One step as an attempt ran it.

    Attributes:
        step: the global step.
        start: when its header arrived.
        end: the next step's header, or (the attempt's last step) ``start`` + NeMo-RL's
            ``Total step time``; None: running, or cut off by the attempt's end.
        total_seconds: NeMo-RL's ``Total step time``, once printed.
        checkpoint: the blocking save (``Saving checkpoint`` + the ``checkpointing`` timer).
        validation: the validation (``Starting validation`` + ``Total validation time``).
    """

    step: int
    start: float
    end: float | None
    total_seconds: float | None = None
    checkpoint: Interval | None = None
    validation: Interval | None = None


@attrs.frozen
class Attempt:
    """One run of NeMo-RL's command by the supervisor.

    Attributes:
        number: 1, 2, ...
        started_at: when the supervisor started the command.
        ended_at: when the command exited; None: running.
        exit_code: its exit code.
        setup_done_at: NeMo-RL's ``SETUP COMPLETE``.
        initial_validation: the validation before the first step (``grpo.val_at_start``).
        steps: the steps it printed, in order.
    """

    number: int
    started_at: float
    ended_at: float | None
    exit_code: int | None = None
    setup_done_at: float | None = None
    initial_validation: Interval | None = None
    steps: tuple[StepSpan, ...] = ()

    @property
    def last_step_end(self) -> float | None:
        """The end of its last step, when that step completed."""
        return self.steps[-1].end if self.steps else None


@attrs.frozen
class Recovery:
    """One recovery from lost nodes (the supervisor's RESTART and RESUMED records).

    Attributes:
        number: 1, 2, ...
        lost_at: when Ray declared the first lost node dead.
        resume_step: the checkpoint the rerun resumed from; None: it started over.
        ended_attempt: the attempt the loss interrupted.
        capacity_wait_at: when the supervisor began waiting for the GPUs.
        capacity_back_at: when the wait ended.
        capacity_seconds: the seconds it waited, as the supervisor counted them.
        resumed_at: the rerun's first step header; None: not (yet) resumed.
        nodes_lost: the lost nodes' names (or addresses).
        cause: the restart's cause (``preempted``, ``hung``, ...).
        hung_from: for a hung run, its last progress (``lost_at`` is when it was stopped).
    """

    number: int
    lost_at: float
    resume_step: int | None
    ended_attempt: int
    capacity_wait_at: float | None = None
    capacity_back_at: float | None = None
    capacity_seconds: float | None = None
    resumed_at: float | None = None
    nodes_lost: tuple[str, ...] = ()
    cause: str = "preempted"
    hung_from: float | None = None

    @property
    def redone_until(self) -> float:
        """The end of the work the rerun redoes: the loss, or a hung run's last progress."""
        return self.hung_from if self.hung_from is not None and self.hung_from < self.lost_at else self.lost_at

    @property
    def silence(self) -> float:
        """A hung run's silence, its last progress to its stop (``hung``); 0 for any other cause."""
        return self.lost_at - self.redone_until


@attrs.frozen
class HeldRecord:
    """The supervisor found the Ray nodes an attempt's placement groups hold.

    Attributes:
        attempt: the attempt.
        at: when it found them.
        nodes: ``(Ray node id, GPUs held there or None)`` for each node.
    """

    attempt: int
    at: float
    nodes: tuple[tuple[str, float | None], ...]


@attrs.frozen
class RunTimeline:
    """One submitted job, from its Jobs API record and its log.

    Attributes:
        run: the submission id.
        name: the job's name.
        submitted_at: the Jobs API's start time.
        ended_at: its end time; None: still running.
        status: the Jobs API's status.
        nodes_needed: the GPU nodes it takes; None: not recorded (taken as all of them).
        queued: when it waited in the cluster's queue (from ``queued`` to ``granted``).
        attempts: the supervisor's attempts.
        recoveries: its recoveries from lost nodes.
        holds: the nodes each attempt's placement groups held.
        journal: whether its log has the supervisor's goodput records at all.
        rehearsal: it ran the rehearsal driver (no model is trained).
        notes: what the log lacks.
    """

    run: str
    name: str
    submitted_at: float
    ended_at: float | None
    status: str
    nodes_needed: int | None = None
    queued: tuple[Interval, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    recoveries: tuple[Recovery, ...] = ()
    holds: tuple[HeldRecord, ...] = ()
    journal: bool = True
    rehearsal: bool = False
    notes: tuple[str, ...] = ()

    @property
    def granted_at(self) -> float:
        """When it could first start: the end of its first queued wait, else its submission."""
        for q in self.queued:
            if q.end is not None:
                return max(self.submitted_at, q.end)
            return float("inf")
        return self.submitted_at


@attrs.frozen
class Evidence:
    """Everything a collector read, for one window of one cluster.

    Attributes:
        nodes: the GPU nodes billed in the window.
        runs: the runs submitted through rl_lustre that overlap it.
        pending: cluster-level intervals while a GPU worker pod waited for a node.
        foreign: ``(job id, interval)`` of jobs not submitted by rl_lustre, while they ran.
        now: when the collector read it (open ends end here).
        notes: what the collector could not read.
        details: what it learnt beyond the times (capacity events, start-up breakdowns).
    """

    nodes: tuple[NodeSpan, ...]
    runs: tuple[RunTimeline, ...]
    now: float
    pending: tuple[Interval, ...] = ()
    foreign: tuple[tuple[str, Interval], ...] = ()
    notes: tuple[str, ...] = ()
    details: Mapping[str, object] = attrs.field(factory=dict, eq=False)
