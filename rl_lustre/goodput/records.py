"""A run's goodput ledger from its records on the volume alone, once no head has its evidence.

When the head that ran a run is gone for good (the cluster torn down after the run, or after
its head was lost), Ray's node table and the run's job log went with it; the run's directory
on the volume (:class:`~rl_lustre.oncluster.runview.RunView`) still has its log and journal.
The nodes are what its placement groups held (its ``held`` records), each billed from the
first record of it to the run's last: what a node cost before or after it served the run is
not in the run's records, and the ledger says so in its notes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..oncluster.records import JOB
from .ledger import build
from .runlog import run_timeline
from .timeline import Evidence, NodeSpan

if TYPE_CHECKING:
    from ..oncluster.runview import RunView
    from . import GoodputLedger

__all__ = ["records_goodput"]

_NOTE = "read from the run's records on the volume (its head is gone): each node billed only while the run held it"


def records_goodput(view: RunView, status: str, *, prices_as_of: str | None = None) -> GoodputLedger:
    """The ledger of the run in ``view``, which ended ``status`` (or is still in flight).

    Raises:
        ValueError: the directory holds no record of the run.
    """
    records = view.records
    stamps = [float(r["at"]) for r in records if isinstance(r.get("at"), (int, float))]
    if not stamps:
        raise ValueError(f"{view.path} holds no record of the run")
    start, last = min(stamps), max(stamps)
    ended = last if status in ("SUCCEEDED", "FAILED", "STOPPED") else None
    run = view.current or view.path.name
    meta = (view.submission or {}).get("metadata") or {}
    timeline = run_timeline(run, view.log(), status=status, submitted_at=start, ended_at=ended, name=meta.get(JOB))
    spans: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.get("event") != "held":
            continue
        for node in record.get("nodes") or []:
            key = str(node.get("name") or node.get("node_id") or "")
            span = spans.setdefault(key, {"from": float(record["at"]), "gpus": 0, "ids": []})
            span["gpus"] = max(span["gpus"], int(float(node.get("gpus") or 0)))
            if node.get("node_id") and node["node_id"] not in span["ids"]:
                span["ids"].append(str(node["node_id"]))
    nodes = tuple(
        NodeSpan(
            key=key,
            kind="unknown",
            usd_per_hour=None,
            gpus=span["gpus"],
            billed_from=span["from"],
            ready_at=span["from"],
            worker_at=span["from"],
            billed_to=last,
            first_seen=span["from"],
            ray_node_ids=tuple(span["ids"]),
            evidence={"billed_from": "the run's held record", "billed_to": "the run's last record"},
            price_note="the run's records hold no price",
            notes=(_NOTE,),
        )
        for key, span in spans.items()
    )
    ev = Evidence(nodes=nodes, runs=(timeline,), now=time.time(), foreign=(), notes=(_NOTE,))
    return build(ev, scope="run", run=run, prices_as_of=prices_as_of)
