"""The goodput ledger: where billed GPU-node-seconds went, by cause, in seconds and USD.

:func:`build` attributes an :class:`~rl_lustre.goodput.timeline.Evidence` (see
:mod:`rl_lustre.goodput.attribute`) and keeps the segments of one scope: a run's own, all
of a cluster's (with one ledger per run and the cluster's own part), or a sweep's (its
runs and the cluster's own time inside its window). Each category's USD is its
node-seconds at the price of each node's own capacity kind.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import attrs

from .._public import public
from ..errors import ConfigError
from .attribute import CATEGORIES, Segment, attribute
from .recoveries import LostDetail, recovery_details
from .timeline import Evidence, Interval, NodeSpan, RunTimeline

__all__ = ["GoodputLedger", "NodeUsage", "Unattributed", "build"]

LOCAL_NOTE = "a local deployment has no cloud cost"
NOTHING_BILLED = "nothing was billed in this window"


@public("rl_lustre")
@attrs.frozen
class Unattributed:
    """Seconds no rule could place, for one missing record."""

    why: str
    seconds: float
    nodes: tuple[str, ...]
    first: float
    last: float


@public("rl_lustre")
@attrs.frozen
class NodeUsage:
    """One node's share of the ledger."""

    node: str
    kind: str
    gpus: int
    usd_per_hour: float | None
    seconds: Mapping[str, float]
    usd: Mapping[str, float]


def _zero() -> dict[str, float]:
    return dict.fromkeys(CATEGORIES, 0.0)


@public("rl_lustre")
@attrs.frozen
class GoodputLedger:
    """Billed GPU-node-seconds by cause: ``capacity``, ``startup``, ``training``,
    ``checkpoint``, ``validation``, ``lost``, ``hung``, ``idle`` and ``unattributed``.

    Get one from :meth:`Run.goodput <rl_lustre.Run.goodput>`, ``cluster.goodput()``
    or ``SweepResult.goodput()``.

    Attributes:
        scope: ``run``, ``cluster``, ``sweep`` or ``cluster-own``.
        name: the run's id, the cluster's name, or the sweep's.
        window: ``(start, end)`` of the time accounted for.
        complete: False while a run in it still runs (its ledger is *so far*).
        seconds: node-seconds per category (every category present).
        usd: USD per category.
        why: the unattributed seconds, by the record that is missing.
        notes: what is outside the counted total, or a caveat on it.
        nodes: each node's share.
        restarts: what each recovery cost (run scope; a cluster's are in ``runs``).
        runs: for a cluster or sweep, one run ledger per run.
        own: for a cluster or sweep, the cluster's own time (no run owned it).
        details: finer causes (``startup``, ``lost`` and ``idle`` by tag, ``queued_wall``,
            ``untimed_seconds`` of steps, capacity events).
        status: the run's status (run scope).
        fixed_usd: the deployment's cost besides its GPU nodes over the window, if known
            (not in the categories).
        unpriced_seconds: node-seconds of nodes without a known price.
        prices_as_of: the date of the price table used.
        segments: every piece, for plots and checks (not in the repr).
    """

    scope: str
    name: str
    window: tuple[float, float]
    complete: bool
    seconds: Mapping[str, float]
    usd: Mapping[str, float]
    why: tuple[Unattributed, ...] = ()
    notes: tuple[str, ...] = ()
    nodes: tuple[NodeUsage, ...] = ()
    restarts: tuple[LostDetail, ...] = ()
    runs: tuple[GoodputLedger, ...] = ()
    own: GoodputLedger | None = None
    details: Mapping[str, Any] = attrs.field(factory=dict)
    status: str | None = None
    fixed_usd: float | None = None
    unpriced_seconds: float = 0.0
    prices_as_of: str | None = None
    segments: tuple[Segment, ...] = attrs.field(default=(), repr=False, eq=False)
    _spans: Mapping[str, NodeSpan] = attrs.field(factory=dict, repr=False, eq=False, alias="spans")

    @property
    def total_seconds(self) -> float:
        """All node-seconds accounted for."""
        return math.fsum(self.seconds.values())

    @property
    def total_usd(self) -> float:
        """All USD accounted for (priced nodes only)."""
        return math.fsum(self.usd.values())

    @property
    def attributed_fraction(self) -> float:
        """``1 - unattributed / total``; 1.0 when nothing was billed."""
        total = self.total_seconds
        return 1.0 if total <= 0 else 1.0 - self.seconds["unattributed"] / total

    @property
    def goodput_fraction(self) -> float:
        """``training / total``: the share that trained the model (0.0 when nothing was billed)."""
        total = self.total_seconds
        return 0.0 if total <= 0 else self.seconds["training"] / total

    def node_hours(self, category: str | None = None) -> float:
        """Node-hours, of one category or all."""
        return (self.total_seconds if category is None else self.seconds[category]) / 3600

    def gpu_hours(self, category: str | None = None) -> float:
        """GPU-hours (node-hours times each node's GPUs), of one category or all."""
        gpus = {n.node: n.gpus for n in self.nodes}
        return (
            math.fsum(
                s.seconds * gpus.get(s.node, 0) for s in self.segments if category is None or s.category == category
            )
            / 3600
        )

    def run(self, job_id: str) -> GoodputLedger:
        """The ledger of one run of a cluster or sweep ledger.

        Raises:
            KeyError: no run of that id is in it.
        """
        for r in self.runs:
            if r.name == job_id:
                return r
        raise KeyError(f"no run {job_id!r} in this ledger (runs: {', '.join(r.name for r in self.runs) or 'none'})")

    def priced(self, usd_per_node_hour: float) -> GoodputLedger:
        """A copy with every node priced at ``usd_per_node_hour`` (e.g. a local rehearsal at a
        cloud price)."""
        if (
            isinstance(usd_per_node_hour, bool)
            or not isinstance(usd_per_node_hour, (int, float))
            or not math.isfinite(usd_per_node_hour)
            or usd_per_node_hour < 0
        ):
            raise ConfigError(
                "GoodputLedger.priced", "usd_per_node_hour", usd_per_node_hour, "must be a number of USD of at least 0"
            )
        spans = {k: attrs.evolve(n, usd_per_hour=float(usd_per_node_hour)) for k, n in self._spans.items()}
        return _from_segments(
            self.scope,
            self.name,
            self.window,
            self.segments,
            spans,
            complete=self.complete,
            notes=tuple(n for n in self.notes if n != LOCAL_NOTE),
            restarts=self.restarts,
            runs=tuple(r.priced(usd_per_node_hour) for r in self.runs),
            own=None if self.own is None else self.own.priced(usd_per_node_hour),
            details=self.details,
            status=self.status,
            fixed_usd=self.fixed_usd,
            prices_as_of=None,
        )

    def __add__(self, other: object) -> GoodputLedger:
        """Two ledgers of disjoint time or of different runs, as one."""
        if not isinstance(other, GoodputLedger):
            return NotImplemented
        if (
            self.scope == other.scope == "run"
            and self.name == other.name
            and self.window[0] < other.window[1]
            and other.window[0] < self.window[1]
        ):
            raise ConfigError(
                "GoodputLedger.__add__",
                "other",
                other.name,
                "the two ledgers of one run overlap in time: their seconds would count twice",
            )
        own = self.own if other.own is None else other.own if self.own is None else self.own + other.own
        scope = self.scope if self.scope == other.scope else "sweep"
        name = self.name if self.name == other.name else f"{self.name} + {other.name}"
        return _from_segments(
            scope,
            name,
            (min(self.window[0], other.window[0]), max(self.window[1], other.window[1])),
            (*self.segments, *other.segments),
            {**self._spans, **other._spans},
            complete=self.complete and other.complete,
            notes=_unique((*self.notes, *other.notes)),
            restarts=(*self.restarts, *other.restarts),
            runs=(*self.runs, *other.runs),
            own=own,
            details={},
            status=None,
            fixed_usd=None if self.fixed_usd is None or other.fixed_usd is None else self.fixed_usd + other.fixed_usd,
            prices_as_of=self.prices_as_of or other.prices_as_of,
        )

    def to_dict(self, *, segments: bool = False) -> dict[str, Any]:
        """A JSON-serialisable form (``rl-lustre goodput --json``)."""
        out: dict[str, Any] = {
            "scope": self.scope,
            "name": self.name,
            "complete": self.complete,
            "status": self.status,
            "window": {"start": self.window[0], "end": self.window[1]},
            "unit": "gpu-node-seconds",
            "categories": {c: {"seconds": self.seconds[c], "usd": self.usd[c]} for c in CATEGORIES},
            "total": {"seconds": self.total_seconds, "usd": self.total_usd},
            "attributed_fraction": self.attributed_fraction,
            "goodput_fraction": self.goodput_fraction,
            "unattributed": [attrs.asdict(u) for u in self.why],
            "nodes": [attrs.asdict(n) for n in self.nodes],
            "restarts": [attrs.asdict(r) for r in self.restarts],
            "runs": [r.to_dict(segments=segments) for r in self.runs],
            "own": None if self.own is None else self.own.to_dict(segments=segments),
            "details": _jsonable(self.details),
            "notes": list(self.notes),
            "fixed_usd": self.fixed_usd,
            "unpriced_seconds": self.unpriced_seconds,
            "prices_as_of": self.prices_as_of,
        }
        for key in ("unattributed", "nodes", "restarts"):
            out[key] = _jsonable(out[key])
        if segments:
            out["segments"] = [attrs.asdict(s) for s in self.segments]
        return out

    def __str__(self) -> str:
        total = self.total_seconds
        gpus = sorted({n.gpus for n in self.nodes})
        what = f"{len(self.nodes)} GPU node{'s' * (len(self.nodes) != 1)}"
        if len(gpus) == 1:
            what += f" × {gpus[0]} GPU{'s' * (gpus[0] != 1)}"
        head = "; ".join(x for x in (self.status, what, "so far" if not self.complete else None) if x)
        lines = [
            f"Goodput of {self.scope} {self.name} ({head})",
            f"  {_when(self.window[0])} → {_when(self.window[1])} UTC ({self.window[1] - self.window[0]:.1f} s)",
            f"  {'category':<14}{'node-h':>9}{'share':>9}{'USD':>12}",
        ]
        for c in CATEGORIES:
            share = 0.0 if total <= 0 else self.seconds[c] / total
            lines.append(f"  {c:<14}{self.seconds[c] / 3600:>9.3f}{share:>9.1%}{_usd(self.usd[c]):>12}")
        lines.append(
            f"  {'total':<14}{total / 3600:>9.3f}{1.0 if total > 0 else 0.0:>9.1%}{_usd(self.total_usd):>12}"
            f"   attributed {self.attributed_fraction:.1%} · goodput {self.goodput_fraction:.1%}"
        )
        for r in self.restarts:
            redone = (
                f"redid {r.steps_redone} step{'s' * (r.steps_redone != 1)} ({r.redone_wall:.1f} s)"
                if r.steps_redone
                else "redid no step"
            )
            waited = f"waited {r.capacity_wall:.1f} s for GPUs" if r.capacity_wall is not None else "no wait recorded"
            back = (
                f"first step again after {r.recovery_wall:.1f} s" if r.recovery_wall is not None else "not resumed yet"
            )
            what, silent = ("hung", f"silent {r.hung_wall:.1f} s, ") if r.cause == "hung" else ("lost", "")
            lines.append(f"  {what}: restart {r.number} at {_when(r.lost_at)[11:]} {silent}{redone}, {waited}, {back}")
        for u in self.why:
            lines.append(f"  unattributed {u.seconds:.1f} node-s: {u.why}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _usd(x: float) -> str:
    return f"${x:,.2f}"


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _from_segments(
    scope: str,
    name: str,
    window: tuple[float, float],
    segments: Iterable[Segment],
    spans: Mapping[str, NodeSpan],
    *,
    complete: bool,
    notes: Iterable[str] = (),
    restarts: tuple[LostDetail, ...] = (),
    runs: tuple[GoodputLedger, ...] = (),
    own: GoodputLedger | None = None,
    details: Mapping[str, Any] | None = None,
    status: str | None = None,
    fixed_usd: float | None = None,
    prices_as_of: str | None = None,
) -> GoodputLedger:
    segments = tuple(segments)
    seconds, usd = _zero(), _zero()
    per_node: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
    why: dict[str, list[Segment]] = defaultdict(list)
    tags: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    unpriced = 0.0
    for s in segments:
        span = spans.get(s.node)
        rate = None if span is None else span.usd_per_hour
        secs, dollars = per_node.setdefault(s.node, ({}, {}))
        seconds[s.category] += s.seconds
        secs[s.category] = secs.get(s.category, 0.0) + s.seconds
        if rate is None:
            unpriced += s.seconds
        else:
            cost = s.seconds * rate / 3600
            usd[s.category] += cost
            dollars[s.category] = dollars.get(s.category, 0.0) + cost
        if s.why is not None:
            why[s.why].append(s)
        if s.tag is not None:
            tags[s.category][s.tag.split(":")[0]] += s.seconds
    nodes = tuple(
        NodeUsage(
            k,
            spans[k].kind if k in spans else "unknown",
            spans[k].gpus if k in spans else 0,
            spans[k].usd_per_hour if k in spans else None,
            secs,
            dollars,
        )
        for k, (secs, dollars) in sorted(per_node.items())
    )
    unattributed = tuple(
        sorted(
            (
                Unattributed(
                    w,
                    math.fsum(s.seconds for s in segs),
                    tuple(sorted({s.node for s in segs})),
                    min(s.start for s in segs),
                    max(s.end for s in segs),
                )
                for w, segs in why.items()
            ),
            key=lambda u: -u.seconds,
        )
    )
    all_notes = list(notes)
    for k in per_node:
        if k in spans:
            all_notes += spans[k].notes
            if spans[k].usd_per_hour is None and spans[k].price_note:
                all_notes.append(f"{k} has no price: {spans[k].price_note}")
    if unpriced > 0:
        all_notes.append(f"{unpriced:.1f} node-seconds have no price: their USD is not counted")
    if not segments:
        all_notes.append(NOTHING_BILLED)
    info = dict(details or {})
    info.setdefault("by_tag", {c: dict(t) for c, t in tags.items()})
    return GoodputLedger(
        scope=scope,
        name=name,
        window=window,
        complete=complete,
        seconds=seconds,
        usd=usd,
        why=unattributed,
        notes=_unique(all_notes),
        nodes=nodes,
        restarts=restarts,
        runs=runs,
        own=own,
        details=info,
        status=status,
        fixed_usd=fixed_usd,
        unpriced_seconds=unpriced,
        prices_as_of=prices_as_of,
        segments=segments,
        spans=dict(spans),
    )


def _run_details(r: RunTimeline) -> dict[str, Any]:
    untimed = math.fsum(
        max(0.0, s.end - s.start - s.total_seconds)
        for a in r.attempts
        for s in a.steps
        if s.end is not None and s.total_seconds is not None
    )
    queued = math.fsum(q.end - q.start for q in r.queued if q.end is not None)
    return {"queued_wall": queued, "untimed_seconds": untimed, "attempts": len(r.attempts)}


def build(
    ev: Evidence,
    *,
    scope: str = "cluster",
    window: Interval | None = None,
    run: str | None = None,
    runs: Collection[str] | None = None,
    name: str | None = None,
    fixed_usd: float | None = None,
    prices_as_of: str | None = None,
) -> GoodputLedger:
    """The ledger of ``ev`` for one scope.

    Args:
        ev: the evidence.
        scope: ``run`` (give ``run``), ``cluster`` or ``sweep`` (give ``runs``).
        window: the time to account for; by default a run's life (so far), else from the
            first billed second to ``ev.now``.
        run: the run, for ``scope="run"``.
        runs: the sweep's runs, for ``scope="sweep"``.
        name: the ledger's name (the cluster's, the sweep's).
        fixed_usd: the deployment's non-GPU cost over the window, if known.
        prices_as_of: the date of the price table.

    Raises:
        ConfigError: an unknown scope, or a run that is not in the evidence.
    """
    if scope not in ("run", "cluster", "sweep"):
        raise ConfigError("goodput.build", "scope", scope, "must be 'run', 'cluster' or 'sweep'")
    timelines = {r.run: r for r in ev.runs}
    if scope == "run" and run not in timelines:
        raise ConfigError("goodput.build", "run", run, f"is not among the runs collected ({', '.join(timelines)})")
    if window is None:
        if scope == "run":
            r = timelines[run]  # type: ignore[index]
            window = Interval(r.submitted_at, r.ended_at)
        else:
            starts = [n.billed(ev.now)[0] for n in ev.nodes]
            window = Interval(min(starts, default=ev.now), None)
    w = (window.start, window.end if window.end is not None else ev.now)
    if w[1] < w[0]:
        raise ConfigError("goodput.build", "window", f"{w[0]}..{w[1]}", "must not end before it starts")
    spans = {n.key: n for n in ev.nodes}
    segments = attribute(ev, window)
    local = any(n.kind == "local" for n in ev.nodes)
    common = list(ev.notes) + ([LOCAL_NOTE] if local else [])

    def run_ledger(rid: str) -> GoodputLedger:
        r = timelines[rid]
        own = [s for s in segments if s.owner == rid]
        notes = [*common, *r.notes]
        if r.rehearsal:
            notes.append("rehearsal: no model is trained")
        if r.status in ("FAILED", "STOPPED") and not r.recoveries:
            last = max((s.step for a in r.attempts for s in a.steps), default=0)
            notes.append(
                f"run ended {r.status} after step {last}: work after its newest checkpoint is not kept "
                "unless it is resubmitted"
            )
        if r.ended_at is None:
            notes.append(f"run is {r.status}: the step in progress is counted as training so far")
        lo, hi = max(w[0], r.submitted_at), min(w[1], r.ended_at if r.ended_at is not None else ev.now)
        return _from_segments(
            "run",
            rid,
            (lo, max(lo, hi)),
            own,
            spans,
            complete=r.ended_at is not None,
            notes=notes,
            restarts=recovery_details(r, own),
            details=_run_details(r),
            status=r.status,
            prices_as_of=prices_as_of,
        )

    if scope == "run":
        assert run is not None
        return run_ledger(run)
    keep = set(timelines) if scope == "cluster" else set(runs or ())
    missing = keep - set(timelines)
    if missing:
        raise ConfigError("goodput.build", "runs", sorted(missing), "are not among the runs collected")
    touching = sorted(
        {s.owner for s in segments if s.owner in keep}
        | {r for r in keep if timelines[r].submitted_at < w[1] and (timelines[r].ended_at or ev.now) > w[0]}
    )
    run_ledgers = tuple(run_ledger(r) for r in touching)
    own_segments = [s for s in segments if s.owner is None]
    own = _from_segments(
        "cluster-own", name or "cluster", w, own_segments, spans, complete=True, notes=common, prices_as_of=prices_as_of
    )
    chosen = [s for s in segments if s.owner is None or s.owner in keep]
    complete = window.end is not None and window.end <= ev.now and all(r.complete for r in run_ledgers)
    return _from_segments(
        scope,
        name or scope,
        w,
        chosen,
        spans,
        complete=complete,
        notes=common,
        runs=run_ledgers,
        own=own,
        fixed_usd=fixed_usd,
        prices_as_of=prices_as_of,
        details=dict(ev.details),
    )
