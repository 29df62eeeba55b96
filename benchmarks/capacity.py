"""Capacity benchmark: ``up()`` end to end on the fakes when the GPUs are not all there.

Three scenarios, each a whole deployment (Google Cloud and Kubernetes parts: the
RayCluster's workers land on the nodes that came) through ``GKEBackend.up()``:

1. ``spot-moves-zone``: Spot is stocked out in the cluster's zone and present in the
   next; policy ``("spot",)`` over two zones.
2. ``flex-after-20min``: Spot is out everywhere; flex-start (queued: a
   ProvisioningRequest) is granted 20 simulated minutes after it is asked; policy
   ``("spot", "flex-start")`` over two zones.
3. ``reservation-fits``: a specific reservation with enough free nodes; policy
   ``("reservation", "spot")``.

The fakes take realistic proportions of time in simulated minutes (Lustre 20, the GKE
cluster 8, a node pool 6, its stock-out after the same 6), one simulated minute lasting
``--unit`` seconds; the library polls with its own backoff policy scaled alike. A
scenario is OK when ``up()`` returns with the expected lane, the RayCluster is ready,
and ``down()`` leaves nothing behind. The reaction time of a stock-out is from the
moment the fake's operation failed (its stock event) to the next node-pool request;
``stockout_to_fallback_minutes`` is the slowest, in simulated minutes (target: <= 2).

Run ``python -m benchmarks.capacity`` (about 40 s at the default ``--unit 0.15``; smaller units let
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
LATENCY_MINUTES = {
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
    """Simulated minutes from each stock-out to the next node-pool request."""
    creates = [r.time for r in gcp.requests if r.method == "gke.CreateNodePool"]
    out = []
    for ev in gcp.stock.events:
        if ev.what in ("stockout", "reservation-full", "reservation-missing", "failed"):
            later = [t for t in creates if t >= ev.at]
            if later:
                out.append((later[0] - ev.at) / unit)
    return tuple(out)


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
        capacity_zones=ZONES,
        **s.extra,
    )
    with KubeFake() as kube, FakeGCP(latency=LATENCY_MINUTES, time_scale=unit, kube=kube) as gcp:
        s.setup(gcp)
        backend = GKEBackend(cluster, backoff=backoff, time_scale=scale)
        lane, attempts, error = "", 0, ""
        started = time.monotonic()
        with _lines("rl_lustre.provision.capacity") as lines:
            try:
                report = backend.up(check=False)
                lane = report.records["gpu-pool"].note or ""
                attempts = sum("asking for" in x for x in lines)
                ready = report.records["raycluster"].outcome in ("created", "adopted")
            except Exception as exc:  # reported in the table
                error, ready = f"{type(exc).__name__}: {str(exc).splitlines()[0]}", False
        up_seconds = time.monotonic() - started
        reactions = _reactions(gcp, unit)
        try:
            backend.down()
        except Exception as exc:  # reported in the table
            error = error or f"down(): {type(exc).__name__}: {exc}"
        leaked = tuple(gcp.leaked())
    ok = ready and lane.startswith(s.expect) and not leaked and not error
    return Outcome(s.name, ok, lane, attempts, up_seconds, reactions, leaked, error)


@attrs.frozen
class Result:
    unit: float
    outcomes: tuple[Outcome, ...]

    @property
    def slowest_reaction(self) -> float:
        return max((o.reaction for o in self.outcomes if o.reaction is not None), default=0.0)

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
        return "\n".join(lines)

    def missed(self) -> list[str]:
        out = [f"{o.name} failed" for o in self.outcomes if not o.ok]
        if self.slowest_reaction > REACTION_TARGET_MINUTES:
            out.append(f"slowest reaction {self.slowest_reaction:.2f} > {REACTION_TARGET_MINUTES} simulated minutes")
        return out


def run(unit: float = 0.15) -> Result:
    from rl_lustre.provision.context import Apis

    Apis.from_env()  # the clients' import time is not the benchmark's
    return Result(unit, tuple(run_one(s, unit) for s in SCENARIOS))


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    parser = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__.splitlines()[0])
    parser.add_argument("--unit", type=float, default=0.15, help="seconds per simulated minute (default 0.15)")
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
