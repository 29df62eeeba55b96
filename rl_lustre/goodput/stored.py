"""A goodput ledger read back from its JSON form (:meth:`GoodputLedger.to_dict
<rl_lustre.goodput.GoodputLedger.to_dict>`): teardown writes each run's into its summary,
and a run read from its results (:meth:`rl_lustre.Run.from_results`) hands it back as it was.

Examples:
    >>> from rl_lustre.goodput.attribute import CATEGORIES
    >>> zero = dict.fromkeys(CATEGORIES, 0.0)
    >>> ledger = GoodputLedger("run", "r1", (0.0, 10.0), True, {**zero, "training": 8.0}, zero)
    >>> again = ledger_from_dict(ledger.to_dict(segments=True))
    >>> again == ledger, again.seconds["training"]
    (True, 8.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .attribute import CATEGORIES, Segment
from .ledger import GoodputLedger, LostDetail, NodeUsage, Unattributed

__all__ = ["ledger_from_dict"]


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else ()


def ledger_from_dict(data: Mapping[str, Any]) -> GoodputLedger:
    """The ledger ``data`` (``to_dict(segments=True)``, or without segments) describes.

    Raises:
        ValueError: ``data`` is not a ledger's JSON form.
    """
    try:
        categories = data["categories"]
        return GoodputLedger(
            scope=str(data["scope"]),
            name=str(data["name"]),
            window=(float(data["window"]["start"]), float(data["window"]["end"])),
            complete=bool(data["complete"]),
            seconds={c: float(categories[c]["seconds"]) for c in CATEGORIES},
            usd={c: float(categories[c]["usd"]) for c in CATEGORIES},
            why=tuple(Unattributed(u["why"], u["seconds"], _tuple(u["nodes"]), u["first"], u["last"])
                      for u in data.get("unattributed") or []),
            notes=_tuple(data.get("notes")),
            nodes=tuple(NodeUsage(n["node"], n["kind"], n["gpus"], n["usd_per_hour"], n["seconds"], n["usd"])
                        for n in data.get("nodes") or []),
            restarts=tuple(LostDetail(**{**r, "nodes_lost": _tuple(r.get("nodes_lost"))})
                           for r in data.get("restarts") or []),
            runs=tuple(ledger_from_dict(r) for r in data.get("runs") or []),
            own=None if not data.get("own") else ledger_from_dict(data["own"]),
            details=dict(data.get("details") or {}),
            status=data.get("status"),
            fixed_usd=data.get("fixed_usd"),
            unpriced_seconds=float(data.get("unpriced_seconds") or 0.0),
            prices_as_of=data.get("prices_as_of"),
            segments=tuple(Segment(**s) for s in data.get("segments") or []),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a goodput ledger's JSON form: {exc!r}") from exc
