"""Capacity benchmark: ``up()`` end to end on the fakes when the GPUs are not all there.

Five scenarios, each a whole deployment (Google Cloud and Kubernetes parts: the
RayCluster's workers land on the nodes that came) through ``GKEBackend.up()``; the last two
go on after ``up()``, where the deployment's ComputeClass alone decides (GKE's cluster
autoscaler, played by KubeFake's):

1. ``spot-moves-zone``: Spot is stocked out in the cluster's zone and present in the
   next; policy ``("spot",)`` over two zones.
2. ``flex-after-20min``: Spot is out everywhere; flex-start (queued: a
   ProvisioningRequest) is granted 20 simulated minutes after it is asked; policy
   ``("spot", "flex-start")`` over two zones.
3. ``reservation-fits``: a specific reservation with enough free nodes; policy
   ``("reservation", "spot")``.
4. ``spot-lost-midrun``: policy ``("spot", "on-demand")``; once the run's workers are up on
   Spot, both Spot nodes are preempted and Spot stays out for 30 simulated minutes. OK when
   the workers run again, on on-demand nodes. ``midrun_fallback_minutes`` is the time from
   the loss to the autoscaler's scale-up of the next kind (target: <= 2).
5. ``spot-back-idle``: the same, on until Spot is back: the Spot pool's instance group
   brings its VMs back while the workers are on on-demand. OK when those Spot nodes are
   removed (the class's ``consolidationDelayMinutes``) and the workers stay where they are
   (active migration is off). ``idle_spot_node_minutes`` is the longest a returning Spot
   node lived, registered to deleted, per node (target: <= 2).

The fakes take realistic proportions of time in simulated minutes (Lustre 20, the GKE
cluster 8, a node pool 6, its stock-out after the same 6), one simulated minute lasting
``--unit`` seconds; the library polls with its own backoff policy scaled alike. A
scenario is OK when ``up()`` returns with the expected lane, the RayCluster is ready,
and ``down()`` leaves nothing behind. The reaction time of a stock-out is from the
moment the fake's operation failed (its stock event) to the next node-pool request;
``stockout_to_fallback_minutes`` is the slowest, in simulated minutes (target: <= 2). A
scale-up takes a simulated minute (a stock-out is known after half of one).

Run ``python -m benchmarks.capacity`` (about a minute at the default ``--unit 0.25``; smaller units let
the fakes' fixed wall-clock overhead of a request inflate the reaction in simulated minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

REACTION_TARGET_MINUTES = 2.0
IDLE_TARGET_MINUTES = 2.0
SPOT_OUT_MINUTES = 30.0
LATENCY_MINUTES = {
    "gke.scale_up": 1.0,
    "gke.scale_up_stockout": 0.5,
    "compute.create_network": 0.5,
    "compute.create_subnetwork": 0.5,
    "compute.create_address": 0.5,
    "servicenetworking.connect": 0.5,
    "compute.create_firewall": 0.5,
    "lustre.create": 20.0,
    "gke.create_cluster": 8.0,
    "gke.create_node_pool": 6.0,
    "compute.delete_network": 0.5,
    "compute.delete_subnetwork": 0.5,
    "compute.delete_address": 0.5,
    "servicenetworking.disconnect": 1.0,
    "compute.delete_firewall": 0.5,
    "lustre.delete": 10.0,
    "gke.delete_cluster": 5.0,
    "gke.delete_node_pool": 4.0,
}
ZONES = ("us-east1-b", "us-east1-c")


@attrs.frozen
class Scenario:
    name: str
    policy: tuple[str, ...]
    expect: str  # the lane that must deliver ("spot in us-east1-c")
    setup: Callable[[Any], None]
    extra: dict[str, Any] = attrs.field(factory=dict)
    # After up(): what happens to the running deployment (kube, gcp, unit) -> what was seen.
    after_up: Callable[[Any, Any, float], dict[str, Any]] | None = None
    # Whether what after_up saw is what the scenario expects.
    check: Callable[[dict[str, Any]], bool] | None = None


def _nothing(gcp: Any) -> None:
    pass


def _worker_pools(kube: Any) -> dict[str, str]:
    """The node pool of each Ready worker pod."""
    from rl_lustre.catalog import GKE_NODEPOOL_LABEL

    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in kube.objects("Node")}
    out = {}
    for p in kube.objects("Pod"):
        conds = (p.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
        if p["metadata"].get("labels", {}).get("ray.io/node-type") == "worker" and ready:
            node = nodes.get((p.get("spec") or {}).get("nodeName") or "") or {}
            out[p["metadata"]["name"]] = node.get(GKE_NODEPOOL_LABEL, "")
    return out


def _until(what: str, cond: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.02)
    raise TimeoutError(what)


def _spot_lost_then_back(kube: Any, gcp: Any, unit: float) -> dict[str, Any]:
    """Preempt every Spot worker node with Spot out for SPOT_OUT_MINUTES; watch the workers come
    back on the next kind, then the returning Spot nodes come and go."""
    from rl_lustre.catalog import COMPUTE_CLASS_LABEL, GKE_NODEPOOL_LABEL, GKE_SPOT_LABEL

    before = _worker_pools(kube)
    spot_pools = set(before.values())
    lost_at = time.monotonic()
    kube.preempt("bench", nodes=len(before), back_after=SPOT_OUT_MINUTES * unit)
    moved = _until(
        "the workers run again",
        lambda: (lambda w: w if len(w) == len(before) and not set(w) & set(before) else None)(_worker_pools(kube)),
        timeout=SPOT_OUT_MINUTES * unit,
    )
    asks = [e.at for e in gcp.stock.events if e.what == "asked" and e.pool not in spot_pools and e.at >= lost_at]
    midrun = (min(asks) - lost_at) / unit if asks else None
    # Spot back: the Spot pool's VMs return; each is watched from registered to deleted.
    seen: dict[str, list[float]] = {}
    deadline = lost_at + (SPOT_OUT_MINUTES + 15) * unit
    while time.monotonic() < deadline:
        now = time.monotonic()
        spot = {
            n["metadata"]["name"]
            for n in kube.objects("Node")
            if n["metadata"]["labels"].get(GKE_SPOT_LABEL) == "true" and COMPUTE_CLASS_LABEL in n["metadata"]["labels"]
        }
        for name in spot:
            seen.setdefault(name, [now, now])[1] = now
        if seen and not spot:
            break
        time.sleep(0.02)
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in kube.objects("Node")}
    return {
        "moved_to": sorted(set(moved.values())),
        "kinds": sorted({nodes.get(p, {}).get(GKE_NODEPOOL_LABEL, "") for p in moved.values()}),
        "midrun": midrun,
        "idle": tuple((last - first) / unit for first, last in seen.values()),
        "spot_left": sorted(n for n in seen if n in nodes),
        "stayed": _worker_pools(kube) == moved,
    }


def _resumed_on_demand(seen: dict[str, Any]) -> bool:
    return seen["moved_to"] == ["gpu-ondemand-b"] and seen["midrun"] is not None


def _spot_gone_run_stayed(seen: dict[str, Any]) -> bool:
    return bool(seen["idle"]) and not seen["spot_left"] and seen["stayed"]


def _spot_moves(gcp: Any) -> None:
    gcp.stock.out("spot", zone="us-east1-b")


def _flex_after_20(gcp: Any) -> None:
    gcp.stock.out("spot")
    gcp.stock.flex_start(after=20.0)


def _reservation(gcp: Any) -> None:
    gcp.stock.reservation("bench-res", zone="us-east1-b", free=2)


SCENARIOS = (
    Scenario("spot-moves-zone", ("spot",), "spot in us-east1-c", _spot_moves),
    Scenario("flex-after-20min", ("spot", "flex-start"), "flex-start (queued, 7d) in us-east1-b", _flex_after_20),
    Scenario(
        "reservation-fits",
        ("reservation", "spot"),
        "reservation bench-res in us-east1-b",
        _reservation,
        {"reservation": "bench-res"},
    ),
    Scenario(
        "spot-lost-midrun",
        ("spot", "on-demand"),
        "spot in us-east1-b",
        _nothing,
        {"capacity_zones": ("us-east1-b",)},
        _spot_lost_then_back,
        _resumed_on_demand,
    ),
    Scenario(
        "spot-back-idle",
        ("spot", "on-demand"),
        "spot in us-east1-b",
        _nothing,
        {"capacity_zones": ("us-east1-b",)},
        _spot_lost_then_back,
        _spot_gone_run_stayed,
    ),
)


@attrs.frozen
class Outcome:
    name: str
    ok: bool
    lane: str
    attempts: int
    up_seconds: float
    reactions: tuple[float, ...]  # simulated minutes, one per stock-out
    leaked: tuple[str, ...]
    error: str = ""
    midrun: float | None = None  # simulated minutes from a mid-run loss to the next kind's scale-up
    idle: tuple[float, ...] = ()  # simulated minutes each returning, unused Spot node lived

    @property
    def reaction(self) -> float | None:
        return max(self.reactions) if self.reactions else None


@contextlib.contextmanager
def _lines(logger: str) -> Iterator[list[str]]:
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler, log = Keep(), logging.getLogger(logger)
    old = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield seen
    finally:
        log.removeHandler(handler)
        log.setLevel(old)


def _reactions(gcp: Any, unit: float) -> tuple[float, ...]:
    """Simulated minutes from each stock-out to the next ask for capacity elsewhere: a scale-up
    of another pool by the cluster autoscaler (the ComputeClass's next rule), or a node-pool
    request (``up()``'s)."""
    creates = [r.time for r in gcp.requests if r.method == "gke.CreateNodePool"]
    events = list(gcp.stock.events)
    out = []
    for ev in events:
        if ev.what in ("stockout", "reservation-full", "reservation-missing", "failed"):
            asks = [e.at for e in events if e.what == "asked" and e.pool != ev.pool and e.at >= ev.at]
            later = sorted([t for t in creates if t >= ev.at] + asks)
            if later:
                out.append((later[0] - ev.at) / unit)
    return tuple(out)


def _asked(gcp: Any) -> int:
    """How many pools were asked for capacity: scaled up, or (a reservation's) created holding nodes."""
    return len({e.pool for e in gcp.stock.events if e.what == "asked" or e.kind == "reservation"})


def run_one(s: Scenario, unit: float) -> Outcome:
    from rl_lustre import Cluster
    from rl_lustre.backends.gke import GKEBackend
    from rl_lustre.gcp._wait import DEFAULT_BACKOFF, Backoff
    from rl_lustre.testing import FakeGCP, KubeFake

    scale = unit / 60.0  # wall seconds per simulated second
    backoff = Backoff(
        initial=DEFAULT_BACKOFF.initial * scale,
        maximum=DEFAULT_BACKOFF.maximum * scale,
        multiplier=DEFAULT_BACKOFF.multiplier,
    )
    cluster = Cluster(
        name="bench",
        project="my-project",
        region="us-east1",
        zone="us-east1-b",
        num_nodes=2,
        fabric="tcp",
        preload_image=False,
        prepull_image=False,
        prefetch_models=(),
        secrets=(),
        capacity=s.policy,
        **{"capacity_zones": ZONES, **s.extra},
    )
    from rl_lustre.testing.kube import KubeTimings

    seen: dict[str, Any] = {}
    with (
        KubeFake(timings=KubeTimings(minute=unit)) as kube,
        FakeGCP(latency=LATENCY_MINUTES, time_scale=unit, kube=kube) as gcp,
    ):
        s.setup(gcp)
        backend = GKEBackend(cluster, backoff=backoff, time_scale=scale)
        lane, attempts, error = "", 0, ""
        started = time.monotonic()
        with _lines("rl_lustre.provision.capacity"):
            try:
                report = backend.up(check=False)
                lane = report.records["gpu-pool"].note or ""
                attempts = _asked(gcp)
                ready = report.records["raycluster"].outcome in ("created", "adopted")
            except Exception as exc:  # reported in the table
                error, ready = f"{type(exc).__name__}: {str(exc).splitlines()[0]}", False
        up_seconds = time.monotonic() - started
        reactions = _reactions(gcp, unit)
        if s.after_up is not None and ready and not error:
            try:
                seen = s.after_up(kube, gcp, unit)
            except Exception as exc:  # reported in the table
                error = f"after up(): {type(exc).__name__}: {exc}"
        try:
            backend.down()
        except Exception as exc:  # reported in the table
            error = error or f"down(): {type(exc).__name__}: {exc}"
        leaked = tuple(gcp.leaked())
    ok = ready and lane.startswith(s.expect) and not leaked and not error
    if s.check is not None:
        ok = ok and bool(seen) and s.check(seen)
    return Outcome(
        s.name, ok, lane, attempts, up_seconds, reactions, leaked, error, seen.get("midrun"), seen.get("idle", ())
    )


@attrs.frozen
class Result:
    unit: float
    outcomes: tuple[Outcome, ...]

    @property
    def slowest_reaction(self) -> float:
        return max((o.reaction for o in self.outcomes if o.reaction is not None), default=0.0)

    @property
    def midrun_fallback(self) -> float:
        return max((o.midrun for o in self.outcomes if o.midrun is not None), default=0.0)

    @property
    def idle_spot_node(self) -> float:
        return max((m for o in self.outcomes if o.name == "spot-back-idle" for m in o.idle), default=0.0)

    def table(self) -> str:
        rows = [("scenario", "ok", "GPUs from", "lanes asked", "up (wall s)", "reaction (sim min)")]
        for o in self.outcomes:
            rows.append(
                (
                    o.name,
                    "yes" if o.ok else "NO",
                    o.lane or o.error[:60],
                    str(o.attempts),
                    f"{o.up_seconds:.1f}",
                    "-" if o.reaction is None else f"{o.reaction:.2f}",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        lines += [f"  {o.name}: {o.error}" for o in self.outcomes if o.error]
        lines += [f"  {o.name}: leaked {', '.join(o.leaked)}" for o in self.outcomes if o.leaked]
        lines.append(f"scenarios_ok={sum(o.ok for o in self.outcomes)}/{len(self.outcomes)}")
        lines.append(f"stockout_to_fallback_minutes={self.slowest_reaction:.2f}")
        lines.append(f"midrun_fallback_minutes={self.midrun_fallback:.2f}")
        lines.append(f"idle_spot_node_minutes={self.idle_spot_node:.2f}")
        return "\n".join(lines)

    def missed(self) -> list[str]:
        out = [f"{o.name} failed" for o in self.outcomes if not o.ok]
        if self.slowest_reaction > REACTION_TARGET_MINUTES:
            out.append(f"slowest reaction {self.slowest_reaction:.2f} > {REACTION_TARGET_MINUTES} simulated minutes")
        if self.midrun_fallback > REACTION_TARGET_MINUTES:
            out.append(f"mid-run fallback {self.midrun_fallback:.2f} > {REACTION_TARGET_MINUTES} simulated minutes")
        if self.idle_spot_node > IDLE_TARGET_MINUTES:
            out.append(f"idle Spot node {self.idle_spot_node:.2f} > {IDLE_TARGET_MINUTES} simulated minutes")
        return out


def run(unit: float = 0.25) -> Result:
    from rl_lustre.provision.context import Apis

    Apis.from_env()  # the clients' import time is not the benchmark's
    return Result(unit, tuple(run_one(s, unit) for s in SCENARIOS))


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    parser = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__.splitlines()[0])
    parser.add_argument("--unit", type=float, default=0.25, help="seconds per simulated minute (default 0.25)")
    args = parser.parse_args(argv)
    result = run(args.unit)
    print(result.table())
    missed = result.missed()
    for line in missed:
        print(f"MISSED: {line}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
