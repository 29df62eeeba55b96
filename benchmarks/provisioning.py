"""Provisioning benchmark: ``up()`` and ``down()`` of a GKE deployment on the fakes,
against the critical-path lower bound of the plan's graph.

The fakes take realistic *proportions* of time, in simulated minutes (Lustre 20, the
GKE cluster 8 with its initial CPU pool, the GPU pool 6, network and PSA 2 in all), and
one simulated minute lasts ``--unit`` seconds. Waits poll with the library's own
backoff policy, scaled by the same factor, so the polling counts are those of a real
deployment.

Reported, with targets (a missed target makes the exit status 1):

- ``up()`` wall time / the plan's critical path under the create times: <= 1.10;
- ``down()`` wall time / the critical path under the delete times: <= 1.10 (node pools
  are deleted with their cluster and cost nothing of their own);
- requests sent per resource while waiting, per simulated minute: <= 4 for every wait
  of 5 minutes or more (the backoff's 30-second cap allows 2 per minute once it is
  reached, after about 6 quicker polls in the first 80 seconds; short waits are
  dominated by those first polls and are shown, not judged). Polling once per 2-second
  tick would be 30.

The Kubernetes part (PV, PVC, Secret, RayCluster) is off: these are the Google Cloud
resources. Run ``python -m benchmarks.provisioning --unit 0.25``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from benchmarks import report

# Simulated minutes per remote change; the keys are the fake's latency keys.
CREATE_MINUTES = {
    "compute.create_network": 0.5,
    "compute.create_subnetwork": 0.5,
    "compute.create_address": 0.5,
    "servicenetworking.connect": 0.5,
    "compute.create_firewall": 0.5,
    "lustre.create": 20.0,
    "gke.create_cluster": 8.0,
    "gke.create_node_pool": 6.0,
}
DELETE_MINUTES = {
    "compute.delete_network": 0.5,
    "compute.delete_subnetwork": 0.5,
    "compute.delete_address": 0.5,
    "servicenetworking.disconnect": 1.0,
    "compute.delete_firewall": 0.5,
    "lustre.delete": 10.0,
    "gke.delete_cluster": 5.0,
    "gke.delete_node_pool": 4.0,
}
# Which latency each plan node's creation / deletion takes, by the node's kind (the
# fabric's two extra VPCs and nine subnets take a network's and a subnet's). The CPU
# pool is created by the cluster's own operation, and both pools go with the cluster's
# deletion.
CREATE_OF_KIND = {
    "compute.v1.Network": "compute.create_network",
    "compute.v1.Subnetwork": "compute.create_subnetwork",
    "compute.v1.GlobalAddress": "compute.create_address",
    "servicenetworking.v1.Connection": "servicenetworking.connect",
    "compute.v1.Firewall": "compute.create_firewall",
    "lustre.v1.Instance": "lustre.create",
    "container.v1.Cluster": "gke.create_cluster",
    "container.v1.NodePool": "gke.create_node_pool",
}
DELETE_OF_KIND = {
    "compute.v1.Network": "compute.delete_network",
    "compute.v1.Subnetwork": "compute.delete_subnetwork",
    "compute.v1.GlobalAddress": "compute.delete_address",
    "servicenetworking.v1.Connection": "servicenetworking.disconnect",
    "compute.v1.Firewall": "compute.delete_firewall",
    "lustre.v1.Instance": "lustre.delete",
    "container.v1.Cluster": "gke.delete_cluster",
}
# Nodes whose time is another's: the CPU pool comes with the cluster's creation.
NO_TIME_OF_ITS_OWN = {"cpu-pool"}


def durations(plan: Any, of_kind: Mapping[str, str], minutes: Mapping[str, float]) -> dict[str, float]:
    """Simulated minutes of each plan node, by its kind."""
    return {r.key: minutes[of_kind[r.kind]] for r in plan if r.kind in of_kind and r.key not in NO_TIME_OF_ITS_OWN}


RATIO_TARGET = 1.10
POLLS_PER_MINUTE_TARGET = 4.0
LONG_WAIT_MINUTES = 5.0


@attrs.frozen
class Phase:
    """One timed ``up()`` or ``down()``.

    Attributes:
        name: ``"up"`` or ``"down"``.
        wall: seconds it took.
        bound: the critical-path lower bound, in seconds.
        path: the plan keys on the critical path.
        waited: simulated minutes each resource's step took, by plan key.
        polls: requests each resource's waits sent, by plan key.
        requests: every request the fakes received during the phase.
    """

    name: str
    wall: float
    bound: float
    path: tuple[str, ...]
    waited: Mapping[str, float]
    polls: Mapping[str, int]
    requests: int

    @property
    def ratio(self) -> float:
        return self.wall / self.bound

    def polls_per_minute(self) -> dict[str, float]:
        """Requests per simulated minute of waiting, for each resource that waited."""
        return {k: self.polls[k] / m for k, m in self.waited.items() if m > 0 and self.polls.get(k)}


@attrs.frozen
class Result:
    """The benchmark's measurements."""

    unit: float
    up: Phase
    down: Phase

    def missed(self) -> list[str]:
        """The targets missed, in words (empty when all are met)."""
        out = [
            f"{p.name}() took {p.ratio:.3f} x its lower bound (target <= {RATIO_TARGET})"
            for p in (self.up, self.down)
            if p.ratio > RATIO_TARGET
        ]
        for phase in (self.up, self.down):
            for key, rate in phase.polls_per_minute().items():
                if phase.waited[key] >= LONG_WAIT_MINUTES and rate > POLLS_PER_MINUTE_TARGET:
                    out.append(
                        f"{phase.name} {key}: {rate:.1f} requests per minute of waiting "
                        f"(target <= {POLLS_PER_MINUTE_TARGET:g})"
                    )
        return out

    def table(self) -> str:
        """The report, as text."""
        lines = [
            f"one simulated minute = {self.unit:g} s",
            "",
            f"{'phase':<6} {'wall s':>8} {'bound s':>8} {'ratio':>6} {'target':>7}  critical path",
        ]
        for p in (self.up, self.down):
            ok = "ok" if p.ratio <= RATIO_TARGET else "MISSED"
            lines.append(
                f"{p.name:<6} {p.wall:8.2f} {p.bound:8.2f} {p.ratio:6.3f} {'<=' + str(RATIO_TARGET):>7}  "
                f"{' > '.join(p.path)}  {ok}"
            )
        lines += ["", f"{'phase':<6} {'resource':<16} {'waited min':>10} {'requests':>9} {'per min':>8}  judged"]
        for p in (self.up, self.down):
            rates = p.polls_per_minute()
            for key, rate in rates.items():
                judged = p.waited[key] >= LONG_WAIT_MINUTES
                verdict = ("ok" if rate <= POLLS_PER_MINUTE_TARGET else "MISSED") if judged else "-"
                lines.append(f"{p.name:<6} {key:<16} {p.waited[key]:10.2f} {p.polls[key]:9d} {rate:8.2f}  {verdict}")
            lines.append(f"{p.name:<6} {'(all requests)':<16} {'':>10} {p.requests:9d}")
        return "\n".join(lines)


def _phase(
    name: str,
    report: Any,
    wall: float,
    bound: tuple[float, list[str]],
    durations: Mapping[str, float],
    unit: float,
    polls: Counter[str],
    requests: int,
) -> Phase:
    waited = {k: r.seconds / unit for k, r in report.records.items() if r.seconds is not None}
    # Only the steps that take time; a teardown walks the path backwards.
    path = [k for k in bound[1] if durations.get(k)]
    return Phase(
        name, wall, bound[0] * unit, tuple(path if name == "up" else reversed(path)), waited, dict(polls), requests
    )


def run(unit: float = 0.25, *, project: str = "bench-project") -> Result:
    """Provision and tear down one deployment on the fakes; measure both.

    Example:
        >>> result = run(unit=0.01)  # doctest: +SKIP
        >>> result.up.ratio  # doctest: +SKIP
        1.03

    Args:
        unit: seconds per simulated minute.
        project: the fake project.
    """
    from rl_lustre import Cluster
    from rl_lustre.backends.gke import GKEBackend
    from rl_lustre.gcp._wait import DEFAULT_BACKOFF, Backoff
    from rl_lustre.provision.progress import Display
    from rl_lustre.testing import FakeGCP

    class CountingDisplay(Display):
        def __init__(self, operation: str) -> None:
            super().__init__(operation)
            self.polls: Counter[str] = Counter()

        def polled(self, rec: Any, state: str) -> None:
            self.polls[rec.key] += 1

    from rl_lustre.provision.context import Apis

    # Import the Google clients first: their import time is not provisioning time.
    Apis.from_env()
    scale = unit / 60.0
    # The library's own polling policy, in simulated time.
    backoff = Backoff(
        initial=DEFAULT_BACKOFF.initial * scale,
        maximum=DEFAULT_BACKOFF.maximum * scale,
        multiplier=DEFAULT_BACKOFF.multiplier,
    )
    cluster = Cluster(name="bench", project=project, region="us-east1", zone="us-east1-b")
    plan = cluster.plan()
    create_minutes = durations(plan, CREATE_OF_KIND, CREATE_MINUTES)
    delete_minutes = durations(plan, DELETE_OF_KIND, DELETE_MINUTES)

    with FakeGCP(latency={**CREATE_MINUTES, **DELETE_MINUTES}, time_scale=unit) as gcp:
        phases = []
        for name, minutes in (("up", create_minutes), ("down", delete_minutes)):
            display = CountingDisplay(name)
            backend = GKEBackend(cluster, gcp_only=True, backoff=backoff, display=display)
            before = len(gcp.requests)
            started = time.monotonic()
            report = backend.up() if name == "up" else backend.down()
            wall = time.monotonic() - started
            phases.append(
                _phase(
                    name,
                    report,
                    wall,
                    plan.critical_path(minutes),
                    minutes,
                    unit,
                    display.polls,
                    len(gcp.requests) - before,
                )
            )
        left = gcp.leaked()
        if left:
            raise RuntimeError(f"the benchmark leaked {left}")
    return Result(unit, phases[0], phases[1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.provisioning", description="up()/down() against the critical path, on the fakes"
    )
    parser.add_argument("--unit", type=float, default=0.25, help="seconds per simulated minute (default 0.25)")
    args = parser.parse_args(argv)
    result = run(args.unit)
    return report(result)


if __name__ == "__main__":
    sys.exit(main())
