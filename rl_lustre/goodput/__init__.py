"""Where the GPU-hours went: a ledger of every billed GPU-node-second, by cause.

A run's, a sweep's or a cluster's billed GPU-node-seconds are split, each second exactly
once, into ``capacity`` (nodes requested, not ready), ``startup`` (ready, before the
first step), ``training``, ``checkpoint`` (steps blocked on saves), ``validation``,
``lost`` (work redone after a preemption, and the recovery's wait), ``idle`` and
``unattributed`` (a record is missing; the ledger says which) -- in seconds and in USD.

Every boundary is a recorded event: the supervisor's journal in the job's log (NeMo-RL's
step, save and validation lines stamped on the Ray head, its attempts, waits and
recoveries), Ray's node table, and on GKE the Kubernetes Nodes, Pods and Events. The
modules here are pure (plain values in, a ledger out): :mod:`.timeline` the evidence,
:mod:`.attribute` the rules, :mod:`.ledger` the result; :mod:`.runlog` reads a job's log
into a timeline. The collectors that read a cluster live with the backends.

Examples:
    >>> ledger = run.goodput()  # doctest: +SKIP
    >>> print(ledger)  # doctest: +SKIP
    >>> ledger.seconds["lost"], ledger.attributed_fraction  # doctest: +SKIP
    (41.2, 0.987)
"""

from __future__ import annotations

from .attribute import CATEGORIES, Segment
from .ledger import GoodputLedger, NodeUsage, Unattributed
from .recoveries import LostDetail

__all__ = ["CATEGORIES", "GoodputLedger", "LostDetail", "NodeUsage", "Segment", "Unattributed"]
