"""Capacity that ends, seen from the Ray head: when each attempt must have saved.

Flex-start nodes live at most ``max_run_duration`` after they were created; GKE deletes
them then. NeMo-RL saves, then stops, before ``checkpointing.checkpoint_must_save_by``
(a duration, ``DD:HH:MM:SS``, from the start of its training loop) has passed. That
duration must be worked out again for every attempt: a rerun after a preemption starts a
new clock, and may run on other nodes (the standby pool's flex-start nodes that replaced
lost Spot ones) than the attempt before. So the supervisor does it, just before each
attempt, from what the job was submitted with:

``--capacity-end T``
    the end of the capacity ``up()`` was granted, in seconds since the epoch: the time GKE
    put on its nodes (:data:`.nodeends.TERMINATION_ANNOTATION`, read by the client from the
    Kubernetes Nodes), else their arrival plus their ``max_run_duration``.
``--lifetime PREFIX=SECONDS`` (any number)
    nodes whose name starts with ``PREFIX`` live at most ``SECONDS``: a GPU pool of
    flex-start nodes (:func:`rl_lustre.gcp.pool_provisioning.node_lifetimes`: GKE names a pool's
    nodes after its managed instance group, and Ray the RayCluster's nodes after their
    Kubernetes nodes).
``--save-margin SECONDS``
    how long before the end the save must be done (``nemo_rl.deadline.SAVE_MARGIN_SECONDS``).

Of the live GPU nodes in Ray's node table, those with a lifetime may carry the attempt.
Each one's end is the time GKE put on its Kubernetes Node, read by the supervisor
(:mod:`.nodeends`; nodes that came after ``up()``, such as a ComputeClass's flex-start
fallback, included), else computed: the node is taken to have been created at the earliest
of its Ray node's start less :data:`ARRIVAL_ALLOWANCE` (the VM boots, joins Kubernetes,
pulls the image and starts the pod before its raylet starts) and, on a rerun, the loss the
rerun follows (nobody asked for a replacement before it), and to end its lifetime later.
The attempt's end is the earliest of those nodes' ends, and of ``--capacity-end``. Earlier
is safe: NeMo-RL saves a little sooner than it had to. A node with a lifetime that is up
but not used makes the run save sooner too: that errs on the same side.

    >>> from rl_lustre.oncluster.raystate import NodeView
    >>> standby = NodeView("n1", "gke-c-gpu-standby-1a2b3c4d-x7k2", "", True, False, 8, 0, started_at=10_000.0)
    >>> spot = NodeView("n2", "gke-c-gpu-pool-5e6f7a8b-q1w2", "", True, False, 8, 0, started_at=9_000.0)
    >>> end = attempt_end([spot, standby], [("gke-c-gpu-standby-1a2b3c4d-", 86400.0)], gpus_per_node=8)
    >>> end.end == 10_000.0 - ARRIVAL_ALLOWANCE + 86400.0, end.nodes, end.read
    (True, ['gke-c-gpu-standby-1a2b3c4d-x7k2'], [])
    >>> read = attempt_end([standby], [("gke-c-gpu-standby-1a2b3c4d-", 86400.0)], gpus_per_node=8,
    ...                    read=lambda names: {names[0]: 50_000.0})
    >>> read.end, read.read
    (50000.0, ['gke-c-gpu-standby-1a2b3c4d-x7k2'])
    >>> read.why
    '1 node(s) with a lifetime: gke-c-gpu-standby-1a2b3c4d-x7k2 (read from its Node)'
    >>> with_save_by("python run.py a=1", "00:23:00:00")
    'python run.py a=1 checkpointing.checkpoint_must_save_by=00:23:00:00'
    >>> with_save_by("python run.py checkpointing.checkpoint_must_save_by=01:00:00:00 a=1", "00:23:00:00")
    'python run.py checkpointing.checkpoint_must_save_by=00:23:00:00 a=1'

This module runs on the cluster's image (Python 3.12, no rl_lustre): the standard
library and the modules shipped with the supervisor only.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .nemo_formats import DEADLINE_KEY

__all__ = ["ARRIVAL_ALLOWANCE", "End", "attempt_end", "await_gone", "ended", "parse_lifetime", "with_save_by"]

# From a node's creation to its raylet's start: boot, joining Kubernetes, the GPU driver,
# the image (pulled, or on a preloaded disk) and the pod's start. Taken generously: 15 min.
ARRIVAL_ALLOWANCE = 900.0

_TOKEN = re.compile(r"(?<!\S)" + re.escape(DEADLINE_KEY) + r"=\d+:\d{2}:\d{2}:\d{2}(?!\S)")


@dataclasses.dataclass(frozen=True)
class End:
    """When an attempt's capacity ends (seconds since the epoch) and why: the nodes with a
    lifetime that may carry it (their names; ``read``: those whose end was read from their
    Kubernetes Node, the others' computed), or ``capacity-end`` alone."""

    end: float
    nodes: list[str]
    why: str
    read: list[str] = dataclasses.field(default_factory=list)


def parse_lifetime(text: str) -> tuple[str, float]:
    """``PREFIX=SECONDS`` as ``(prefix, seconds)``; ValueError for anything else.

    >>> parse_lifetime("gke-c-gpu-standby-1a2b3c4d-=604800")
    ('gke-c-gpu-standby-1a2b3c4d-', 604800.0)
    """
    prefix, sep, seconds = text.rpartition("=")
    value = float(seconds) if sep else -1.0
    if not prefix or not value > 0:
        raise ValueError(f"--lifetime {text!r}: expected PREFIX=SECONDS with SECONDS > 0")
    return prefix, value


def attempt_end(
    nodes: Iterable[Any],
    lifetimes: Sequence[tuple[str, float]],
    *,
    gpus_per_node: float,
    capacity_end: float | None = None,
    lost_at: float | None = None,
    read: Callable[[list[str]], Mapping[str, float]] | None = None,
) -> End | None:
    """The end of the capacity an attempt may run on (see the module's text), or None: none ends.

    ``nodes``: Ray's worker nodes (:class:`rl_lustre.oncluster.raystate.NodeView`); ``lost_at``:
    on a rerun, when the nodes it replaces were lost; ``read``: the ends GKE put on the
    Kubernetes Nodes of the names it is given, by name (:func:`.nodeends.reader`).
    """
    lives: dict[str, tuple[float, float | None]] = {}
    for node in nodes:
        if not node.alive or node.gpus < gpus_per_node:
            continue
        matching = [seconds for prefix, seconds in lifetimes if node.name.startswith(prefix)]
        if not matching:
            continue
        started = node.started_at - ARRIVAL_ALLOWANCE if node.started_at else None
        known = [t for t in (started, lost_at) if t is not None]
        lives[node.name] = (min(matching), min(known) if known else None)
    given = dict(read(sorted(lives))) if read is not None and lives else {}
    ends: list[tuple[float, str]] = []
    for name, (life, born) in lives.items():
        if name in given:
            ends.append((given[name], name))
        elif born is not None:
            ends.append((born + life, name))
    if capacity_end is not None:
        ends.append((capacity_end, ""))
    if not ends:
        return None
    end = min(t for t, _ in ends)
    names = sorted(name for _, name in ends if name)
    said = [f"{n} ({'read from its Node' if n in given else 'computed'})" for n in names]
    why = f"{len(names)} node(s) with a lifetime: {', '.join(said)}" if names else "the capacity up() was granted"
    return End(end=end, nodes=names, why=why, read=[n for n in names if n in given])


def with_save_by(command: str, value: str) -> str:
    """``command`` with NeMo-RL's save-by set to ``value``: the value put there at submission
    replaced, or the override added at the end."""
    token = f"{DEADLINE_KEY}={value}"
    if _TOKEN.search(command):
        return _TOKEN.sub(token, command, count=1)
    return f"{command} {token}"


def await_gone(
    read: Callable[[], Iterable[Any]],
    end: End,
    stopping: threading.Event,
    *,
    poll: float,
    grace: float,
    say: Callable[[str], None],
) -> tuple[list[dict[str, Any]], list[str]]:
    """Wait until the nodes of ``end`` are dead or gone from Ray's node table (``read``: its
    worker nodes), or, without names, until ``end.end``; at most until ``grace`` seconds past
    the end, or a stop. Returns the records of the nodes gone (as the supervisor names lost
    nodes, the reason being that their capacity ended) and the names still up at the bound."""
    names = set(end.nodes)
    gone: dict[str, dict[str, Any]] = {}
    while not stopping.is_set():
        now = time.time()
        try:
            seen = {n.name: n for n in read() if n.name in names}
        except Exception as exc:  # the dashboard may be busy: try again
            say(f"could not read Ray's node table ({type(exc).__name__}: {exc}); trying again")
            seen = None
        if seen is not None:
            for name in sorted(names - set(gone)):
                node = seen.get(name)
                if node is None or not node.alive:
                    gone[name] = ended(name, node, at=now)
            if (len(gone) == len(names)) if names else now >= end.end:
                break
        if now >= end.end + grace:
            break
        stopping.wait(poll)
    return list(gone.values()) or [ended("")], sorted(names - set(gone))


def ended(name: str, node: Any = None, *, at: float | None = None) -> dict[str, Any]:
    """A node whose capacity ended, as the supervisor records lost nodes (``node``: its
    entry in Ray's node table, if it has one; ``at``: when it was seen gone)."""
    return {
        "node_id": node.node_id if node else "",
        "address": node.address if node else "",
        "name": name,
        "reason": "its capacity ended",
        "dead_at": node.dead_at if node else None,
        "detected_at": time.time() if at is None else at,
    }
