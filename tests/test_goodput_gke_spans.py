"""GKE's evidence as node spans: Nodes, Pods and Events in the API server's shape, Ray's table."""

from __future__ import annotations

from rl_lustre.backends.goodput_gke import PoolPrice, gke_node_spans
from rl_lustre.kube.readiness import seconds
from rl_lustre.ray.state import RayNode

POOLS = {"gpu-pool": PoolPrice("spot", 37.0, 8)}
T = seconds("2025-12-01T20:00:00Z")
assert T is not None


def stamp(offset: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T + offset))


def node(name: str, uid: str, created: float, ready: float, pool: str = "gpu-pool") -> dict:
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "creationTimestamp": stamp(created),
            "labels": {"cloud.google.com/gke-nodepool": pool},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp(ready)}]},
    }


def event(kind: str, name: str, uid: str, reason: str, at: float, last: float | None = None) -> dict:
    return {
        "involvedObject": {"kind": kind, "name": name, "uid": uid},
        "reason": reason,
        "firstTimestamp": stamp(at),
        "lastTimestamp": stamp(at if last is None else last),
        "message": reason,
    }


def raylet(node_id: str, name: str, start: float, end: float | None = None, gpus: float = 8) -> RayNode:
    return RayNode(
        node_id, name, "10.8.0.2", "DEAD" if end else "ALIVE", gpus, T + start, None if end is None else T + end
    )


def test_a_live_node_and_a_preempted_one_that_is_gone() -> None:
    nodes = [node("gke-gpu-pool-0001", "u1", 0, 5), node("gke-cpu-pool-0000", "c1", 0, 1, pool="cpu-pool")]
    events = [
        event("Node", "gke-gpu-pool-0000", "u0", "RegisteredNode", 0),
        event("Node", "gke-gpu-pool-0000", "u0", "NodeReady", 4),
        event("Node", "gke-gpu-pool-0000", "u0", "RemovingNode", 100),
        event("Node", "gke-gpu-pool-0001", "u1", "RegisteredNode", 0),
        event("Node", "gke-gpu-pool-0001", "u1", "NodeReady", 3),
    ]
    ray = [raylet("r0", "gke-gpu-pool-0000", 20, 101), raylet("r1", "gke-gpu-pool-0001", 25)]
    spans, _, notes, _ = gke_node_spans(nodes, [], events, ray, POOLS, T + 200)
    gone, live = spans
    assert (gone.key, gone.billed_from - T, gone.ready_at - T, gone.worker_at - T, gone.billed_to - T) == (
        "gke-gpu-pool-0000",
        0,
        4,
        20,
        100,
    )
    assert gone.ray_node_ids == ("r0",)
    assert gone.evidence["billed_to"] == "event RemovingNode"
    # The first NodeReady, not the condition's latest transition.
    assert (live.billed_from - T, live.ready_at - T, live.worker_at - T, live.billed_to) == (0, 3, 25, None)
    assert (live.kind, live.usd_per_hour, live.gpus) == ("spot", 37.0, 8)
    assert notes == []


def test_a_reused_name_is_two_nodes_and_an_old_raylet_of_that_name_is_not_matched() -> None:
    nodes = [node("gke-gpu-pool-0000", "new", 200, 203)]
    events = [
        event("Node", "gke-gpu-pool-0000", "old", "RegisteredNode", 0),
        event("Node", "gke-gpu-pool-0000", "old", "RemovingNode", 100),
    ]
    # An earlier test's raylet of the same name (long before), the old node's, the new node's.
    ray = [
        raylet("ancient", "gke-gpu-pool-0000", -5000, -4000),
        raylet("r-old", "gke-gpu-pool-0000", 10, 101),
        raylet("r-new", "gke-gpu-pool-0000", 210),
    ]
    spans, _, notes, _ = gke_node_spans(nodes, [], events, ray, POOLS, T + 300)
    assert [(s.key, s.ray_node_ids) for s in spans] == [
        ("gke-gpu-pool-0000", ("r-old",)),
        ("gke-gpu-pool-0000#2", ("r-new",)),
    ]
    assert any("10.8.0.2 ran from" in n and "not counted" in n for n in notes)  # the ancient one: unknown node


def test_events_expired_are_said_never_guessed() -> None:
    # The Node and its Events are gone; only Ray remembers a raylet on it: not billed, but said.
    spans, _, notes, _ = gke_node_spans([], [], [], [raylet("r", "gke-gpu-pool-0003", 0, 50)], POOLS, T + 100)
    assert spans == []
    assert any("not counted" in n for n in notes)
    # Only the RemovingNode survives: billed from the raylet's start, with a note; its Ray worker is known.
    events = [event("Node", "gke-gpu-pool-0003", "u3", "RemovingNode", 60)]
    spans, _, _, _ = gke_node_spans([], [], events, [raylet("r", "gke-gpu-pool-0003", 10, 61)], POOLS, T + 100)
    [span] = spans
    assert (span.billed_from - T, span.billed_to - T, span.ready_at - T) == (10, 60, 10)
    assert any("before" in n and "not counted" in n for n in span.notes)
    # A node without its raylet's start and without a worker pod: C2 (when its Ray worker started is unknown).
    spans, _, _, _ = gke_node_spans([node("gke-gpu-pool-0004", "u4", 0, 2)], [], [], [], POOLS, T + 100)
    assert spans[0].worker_at is None


def test_pending_pods_and_the_autoscalers_words() -> None:
    pods = [
        {
            "metadata": {"name": "w-1", "uid": "p1", "creationTimestamp": stamp(10)},
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "lastTransitionTime": stamp(11),
                    }
                ]
            },
        },
        {
            "metadata": {"name": "w-2", "uid": "p2", "creationTimestamp": stamp(0)},
            "spec": {"nodeName": "n"},
            "status": {
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(30)},
                    {"type": "Ready", "status": "True", "lastTransitionTime": stamp(40)},
                ]
            },
        },
    ]
    events = [
        event("Pod", "w-2", "p2", "FailedScheduling", 1, 25),
        event("Pod", "w-0", "p0", "FailedScheduling", 50, 70),
        event("Pod", "w-0", "p0", "Scheduled", 80),
        {**event("Pod", "w-1", "p1", "FailedScaleUp", 12), "message": "GCE out of resources", "count": 3},
    ]
    _, pending, _, details = gke_node_spans([], pods, events, [], POOLS, T + 100)
    assert sorted((p.start - T, None if p.end is None else p.end - T) for p in pending) == [
        (0, 30),
        (10, None),
        (50, 80),
    ]
    [said] = details["capacity_evidence"]
    assert (said["reason"], said["message"], said["count"]) == ("FailedScaleUp", "GCE out of resources", 3)


def test_each_pool_is_priced_as_its_capacity_kind() -> None:
    from google.cloud import container_v1

    from rl_lustre.backends.goodput_gke import pool_prices
    from rl_lustre.catalog import PRICES
    from rl_lustre.prices import Prices

    def pool(name: str, **config: object) -> container_v1.NodePool:
        accelerators = [container_v1.AcceleratorConfig(accelerator_count=8, accelerator_type="nvidia-b200")]
        return container_v1.NodePool(
            name=name, config=container_v1.NodeConfig(machine_type="a4-highgpu-8g", accelerators=accelerators, **config)
        )

    live = [pool("spot-pool", spot=True), pool("od-pool"), container_v1.NodePool(name="cpu")]
    prices = pool_prices(live, {"gone-pool": ("a4-highgpu-8g", "Spot", 8)}, Prices(), "us-east1")
    a4 = PRICES.machines["a4-highgpu-8g"]
    assert prices["spot-pool"] == PoolPrice("spot", a4.spot, 8)
    assert (prices["od-pool"].kind, prices["od-pool"].usd_per_hour) == ("on-demand", a4.on_demand)
    assert "cpu" not in prices
    assert prices["gone-pool"].kind == "spot"
    assert "gone" in prices["gone-pool"].note
    assert pool_prices(live, {}, Prices(spot_discount=0.5), "us-east1")["spot-pool"].usd_per_hour == a4.spot / 2
