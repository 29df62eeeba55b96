"""Capacity the run did not want first: a run whose GPU nodes are on-demand, though the
capacity policy starts with another kind, says so in its journal and loudly in its log.

The client tells the supervisor at submission (``rl_lustre.backends.granted``), only when the
policy lists on-demand after another kind:

``--on-demand PREFIX`` (any number)
    nodes whose name starts with ``PREFIX`` are on-demand: the deployment's on-demand GPU
    pools, named by their managed instance groups (GKE names a pool's nodes after them, and
    Ray the RayCluster's nodes after their Kubernetes nodes, as for ``--lifetime``:
    :mod:`.lifetimes`);
``--fallback-note TEXT``
    what that means: the policy's first choice and what an on-demand node costs more.

When an attempt's placement groups hold nodes of those pools (the supervisor learns them
from Ray, :mod:`.watch`), the journal gets one ``on_demand`` record per attempt and new
nodes (``attempt``, ``nodes``: their names, ``note``) and the log a line
``ON-DEMAND FALLBACK: ...``; the run handle shows the same words (``Run.notes()``).

    >>> import io
    >>> watch = OnDemand(["gke-c-gpu-ondemand-b-1a2b3c4d-"], "the policy starts with spot")
    >>> held = [{"name": "gke-c-gpu-ondemand-b-1a2b3c4d-x7k2"}, {"name": "gke-c-gpu-pool-5e6f7a8b-q1w2"}]
    >>> record = watch.held(2, held, say=print, out=io.StringIO())  # doctest: +NORMALIZE_WHITESPACE
    ON-DEMAND FALLBACK: attempt 2 runs on 1 on-demand GPU node(s), the costliest kind of the capacity
    policy: gke-c-gpu-ondemand-b-1a2b3c4d-x7k2 (the policy starts with spot)
    >>> record["nodes"], watch.held(2, held, say=print, out=io.StringIO())
    (['gke-c-gpu-ondemand-b-1a2b3c4d-x7k2'], None)

Standard library only (part of the on-cluster package).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from . import records

__all__ = ["EVENT", "OnDemand", "describe"]

# The journal record's event.
EVENT = "on_demand"


class OnDemand:
    """The run's on-demand nodes, recorded once per attempt (see the module's text)."""

    def __init__(self, prefixes: Sequence[str], note: str = "") -> None:
        self.prefixes = tuple(p for p in prefixes if p)
        self.note = note
        self._said: set[tuple[int, str]] = set()

    def held(
        self,
        attempt: int,
        nodes: Iterable[dict[str, Any]],
        *,
        say: Callable[[str], None],
        out: TextIO | None = None,
    ) -> dict[str, Any] | None:
        """Record the attempt's on-demand nodes among ``nodes`` (those its placement groups
        hold, as the supervisor names them) when some were not recorded yet; the record, or None."""
        if not self.prefixes:
            return None
        names = sorted({str(n.get("name")) for n in nodes if str(n.get("name") or "").startswith(self.prefixes)})
        if all((attempt, name) in self._said for name in names):
            return None
        self._said.update((attempt, name) for name in names)
        record = {"event": EVENT, "attempt": attempt, "nodes": names, "note": self.note}
        records.write(record, out=out)
        say(describe(record))
        return record


def describe(record: dict[str, Any]) -> str:
    """An ``on_demand`` record in words: the log's line and the run handle's note."""
    nodes = [str(n) for n in record.get("nodes") or []]
    text = (
        f"ON-DEMAND FALLBACK: attempt {record.get('attempt')} runs on {len(nodes)} on-demand GPU node(s), the "
        f"costliest kind of the capacity policy: {', '.join(nodes)}"
    )
    note = record.get("note")
    return f"{text} ({note})" if note else text
