"""KubeFake's cluster autoscaler follows GKE's documented behaviour (issue 34, point 5): a
pod's ComputeClass's priorities in order, the compute-class label and taint on pools made by
hand, whenUnsatisfiable, node groups scaled to 0 after the class's consolidation delay, a
preempted VM re-created by its instance group, a flex-start node's run ending."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.cloud import container_v1

from rl_lustre.catalog import COMPUTE_CLASS_LABEL, GKE_NODEPOOL_LABEL, GKE_TERMINATION_ANNOTATION
from rl_lustre.kube.capacity_signals import classify_event
from rl_lustre.kube.client import ResourceClient
from rl_lustre.testing import KubeFake
from rl_lustre.testing.kube import KubeTimings

CLASS = "demo-gpus"
MINUTE = 0.2  # wall seconds per simulated minute
SELF_LINK = "https://container.googleapis.com/v1/projects/my-project/locations/us-east1/clusters/demo/nodePools/"


def pool(
    name: str,
    *,
    zone: str = "us-east1-b",
    spot: bool = False,
    flex: bool = False,
    joins: bool = True,
    taint: bool = True,
    autoscaled: bool = True,
    count: int = 0,
    maximum: int = 2,
    run_hours: float | None = None,
) -> container_v1.NodePool:
    """A GPU pool as up() makes one: A4 nodes with the GPU taint, in the class when ``joins``."""
    taints = [container_v1.NodeTaint(key="nvidia.com/gpu", value="present", effect="NO_SCHEDULE")]
    if joins and taint:
        taints.append(container_v1.NodeTaint(key=COMPUTE_CLASS_LABEL, value=CLASS, effect="NO_SCHEDULE"))
    config = container_v1.NodeConfig(
        machine_type="a4-highgpu-8g",
        spot=spot,
        flex_start=flex,
        accelerators=[container_v1.AcceleratorConfig(accelerator_type="nvidia-b200", accelerator_count=8)],
        labels={COMPUTE_CLASS_LABEL: CLASS} if joins else {},
        taints=taints,
    )
    if run_hours is not None:
        config.max_run_duration = datetime.timedelta(hours=run_hours)
    return container_v1.NodePool(
        name=name,
        initial_node_count=count,
        locations=[zone],
        self_link=SELF_LINK + name,
        config=config,
        autoscaling=container_v1.NodePoolAutoscaling(
            enabled=autoscaled, total_min_node_count=0, total_max_node_count=maximum if autoscaled else 0
        ),
    )


def compute_class(*rules: list[str], when: str = "DoNotScaleUp", delay: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": CLASS},
        "spec": {
            "priorities": [{"nodepools": pools, **extra.get(pools[0], {})} for pools in rules],
            "whenUnsatisfiable": when,
            "activeMigration": {"optimizeRulePriority": False},
            "autoscalingPolicy": {"consolidationDelayMinutes": delay},
            "nodePoolAutoCreation": {"enabled": False},
        },
    }


def worker(name: str, *, gpus: int = 8, tolerate: bool = True) -> dict[str, Any]:
    """A pod as the RayCluster's worker is: it selects the class and tolerates its taint."""
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if tolerate:
        tolerations.append({"key": COMPUTE_CLASS_LABEL, "operator": "Equal", "value": CLASS, "effect": "NoSchedule"})
    limits: dict[str, Any] = {"cpu": "1", "memory": "1Gi", **({"nvidia.com/gpu": gpus} if gpus else {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "w"}},
        "spec": {
            "nodeSelector": {COMPUTE_CLASS_LABEL: CLASS},
            "tolerations": tolerations,
            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": limits}}],
        },
    }


class Capacity:
    """The capacity decider a test steers: a pool's scale-ups are granted unless it is out."""

    def __init__(self) -> None:
        self.out: set[str] = set()
        self.waiting: set[str] = set()
        self.asked: list[tuple[str, int]] = []

    def __call__(self, name: str, count: int, asked_at: float) -> tuple[str, str, list[Any]]:
        self.asked.append((name, count))
        if name in self.out:
            return "failed", "", []
        if name in self.waiting:
            return "wait", "Waiting for resources.", []
        return "granted", "", []


@pytest.fixture
def kube() -> Iterator[KubeFake]:
    with KubeFake(timings=KubeTimings(minute=MINUTE)) as fake:
        yield fake


def until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {check}")


def pool_of(kube: KubeFake, pod: str) -> str | None:
    found = kube.get("Pod", pod)
    node = kube.get("Node", (found or {}).get("spec", {}).get("nodeName") or "", None)
    return None if node is None else node["metadata"]["labels"][GKE_NODEPOOL_LABEL]


def events(kube: KubeFake, reason: str) -> list[str]:
    return [str(e["message"]) for e in kube.objects("Event") if e.get("reason") == reason]


def test_priorities_in_order_and_a_stockout_moves_on_at_once(kube: KubeFake) -> None:
    capacity = Capacity()
    capacity.out.add("gpu-spot-b")
    kube.autoscaling = capacity
    for p in (pool("gpu-spot-b", spot=True), pool("gpu-flex-b", flex=True), pool("gpu-ondemand-b")):
        kube.node_pool_ready(p)
    kube.create(compute_class(["gpu-spot-b"], ["gpu-flex-b"], ["gpu-ondemand-b"]))
    kube.create(worker("w-0"))
    kube.create(worker("w-1"))
    assert until(lambda: pool_of(kube, "w-0") and pool_of(kube, "w-1")) == "gpu-flex-b"
    assert pool_of(kube, "w-1") == "gpu-flex-b"
    # Spot asked first, refused: FailedScaleUp, and flex-start in the same pass; on-demand never.
    assert [name for name, _ in capacity.asked][:2] == ["gpu-spot-b", "gpu-flex-b"]
    assert "gpu-ondemand-b" not in {name for name, _ in capacity.asked}
    assert any("GCE out of resources" in m for m in events(kube, "FailedScaleUp"))
    assert any("gpu-flex-b 0->2" in m for m in events(kube, "TriggeredScaleUp"))


def test_a_pod_that_comes_while_a_scale_up_is_in_flight_joins_it(kube: KubeFake) -> None:
    """One pod asks, the group's VMs are still coming, a second pod arrives: the scale-up grows
    to both (the autoscaler sizes it for every pending pod the group can take), and neither is
    told that no rule can be met."""
    capacity = Capacity()
    capacity.waiting.add("gpu-ondemand-b")
    kube.autoscaling = capacity
    kube.node_pool_ready(pool("gpu-ondemand-b"))
    kube.create(compute_class(["gpu-ondemand-b"]))
    kube.create(worker("w-0"))
    until(lambda: any("gpu-ondemand-b 0->1" in m for m in events(kube, "TriggeredScaleUp")))
    kube.create(worker("w-1"))
    until(lambda: ("gpu-ondemand-b", 2) in capacity.asked)
    capacity.waiting.clear()
    assert until(lambda: pool_of(kube, "w-0") and pool_of(kube, "w-1")) == "gpu-ondemand-b"
    assert pool_of(kube, "w-1") == "gpu-ondemand-b"
    assert len({kube.get("Pod", w)["spec"]["nodeName"] for w in ("w-0", "w-1")}) == 2
    assert events(kube, "NotTriggerScaleUp") == []


def test_a_pool_without_the_class_label_and_taint_is_not_the_classs(kube: KubeFake) -> None:
    kube.autoscaling = Capacity()
    kube.node_pool_ready(pool("gpu-bare", joins=False))
    kube.node_pool_ready(pool("gpu-untainted", taint=False))
    kube.node_pool_ready(pool("gpu-ok"))
    kube.create(compute_class(["gpu-bare"], ["gpu-untainted"], ["gpu-ok"]))
    kube.create(worker("w-0"))
    assert until(lambda: pool_of(kube, "w-0")) == "gpu-ok"


def test_do_not_scale_up_leaves_the_pod_pending(kube: KubeFake) -> None:
    capacity = Capacity()
    capacity.out.update({"gpu-spot-b", "gpu-ondemand-b"})
    kube.autoscaling = capacity
    kube.node_pool_ready(pool("gpu-spot-b", spot=True))
    kube.node_pool_ready(pool("gpu-ondemand-b"))
    kube.create(compute_class(["gpu-spot-b"], ["gpu-ondemand-b"]))
    kube.create(worker("w-0"))
    said = until(lambda: events(kube, "NotTriggerScaleUp"))
    # In the cluster autoscaler's words, which rl_lustre's classifier reads as a backoff.
    assert said[0].startswith("pod didn't trigger scale-up: 2 in backoff after failed scale-up")
    assert f"no rule of ComputeClass {CLASS} can be met; DoNotScaleUp" in said[0]
    assert classify_event("NotTriggerScaleUp", said[0]).kind == "backoff"
    time.sleep(1.0)
    assert pool_of(kube, "w-0") is None
    assert not kube.objects("Node")


def test_scale_up_anyway_creates_a_default_node_only_for_a_pod_it_fits(kube: KubeFake) -> None:
    capacity = Capacity()
    capacity.out.add("gpu-spot-b")
    kube.autoscaling = capacity
    kube.node_pool_ready(pool("gpu-spot-b", spot=True))
    kube.create(compute_class(["gpu-spot-b"], when="ScaleUpAnyway"))
    kube.create(worker("gpu-pod"))
    kube.create(worker("cpu-pod", gpus=0))
    # The default configuration (e2-standard-2) has no GPU: only the CPU pod gets a node.
    until(lambda: kube.get("Pod", "cpu-pod")["spec"].get("nodeName"))
    node = kube.get("Node", kube.get("Pod", "cpu-pod")["spec"]["nodeName"], None)
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "e2-standard-2"
    assert node["metadata"]["labels"][COMPUTE_CLASS_LABEL] == CLASS
    assert any("default configuration" in m for m in until(lambda: events(kube, "NotTriggerScaleUp")))
    assert not kube.get("Pod", "gpu-pod")["spec"].get("nodeName")


def test_unneeded_nodes_go_after_the_consolidation_delay_down_to_zero(kube: KubeFake) -> None:
    kube.autoscaling = Capacity()
    kube.node_pool_ready(pool("gpu-spot-b", spot=True, count=2))  # two nodes nobody uses
    kube.create(compute_class(["gpu-spot-b"], delay=5))
    kube.create(worker("w-0"))
    start = time.monotonic()
    assert until(lambda: pool_of(kube, "w-0")) == "gpu-spot-b"
    # The node with the pod stays; the other goes, once unneeded for 5 (simulated) minutes.
    gone = until(lambda: len(kube.objects("Node")) == 1 and time.monotonic())
    assert gone - start >= 5 * MINUTE - 0.1
    assert any("unneeded for 5 minutes" in m for m in events(kube, "ScaleDown"))
    kube.delete("Pod", "w-0")
    until(lambda: not kube.objects("Node"))


def test_a_preempted_vm_is_recreated_by_its_group_and_removed_when_unneeded(kube: KubeFake) -> None:
    capacity = Capacity()
    kube.autoscaling = capacity
    kube.node_pool_ready(pool("gpu-spot-b", spot=True))
    kube.node_pool_ready(pool("gpu-flex-b", flex=True))
    kube.create(compute_class(["gpu-spot-b"], ["gpu-flex-b"]))
    kube.create(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "default"},
            "spec": {
                "rayVersion": "2.46.0",
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [{"name": "ray-head", "image": "busybox"}]}},
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": 1,
                        "minReplicas": 1,
                        "maxReplicas": 1,
                        "rayStartParams": {},
                        "template": {
                            "spec": worker("x")["spec"] | {"containers": [worker("x")["spec"]["containers"][0]]}
                        },
                    }
                ],
            },
        }
    )
    until(lambda: _ready_workers(kube) == {"gpu-spot-b"})
    # Spot is out for the next 3 s (15 simulated minutes) from the loss.
    lost = time.monotonic()
    kube.preempt("rc", nodes=1, back_after=3.0)
    # Its instance group cannot re-create it: a failed scale-up, and the next rule's nodes.
    until(lambda: _ready_workers(kube) == {"gpu-flex-b"})
    assert time.monotonic() - lost < 3.0
    assert any("re-creation" in m and "failed" in m for m in events(kube, "FailedScaleUp"))
    # Spot back: the instance group's VM joins, nobody needs it, it goes after a minute.
    back = until(lambda: [n for n in kube.objects("Node") if "gpu-spot-b" in n["metadata"]["name"]])
    assert back
    until(lambda: not [n for n in kube.objects("Node") if "gpu-spot-b" in n["metadata"]["name"]])
    assert _ready_workers(kube) == {"gpu-flex-b"}  # the run is not moved (active migration off)


def _ready_workers(kube: KubeFake) -> set[str]:
    out = set()
    for p in kube.objects("Pod"):
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in p.get("status", {}).get("conditions", [])
        )
        if p["metadata"].get("labels", {}).get("ray.io/node-type") == "worker" and ready:
            out.add(pool_of(kube, p["metadata"]["name"]) or "")
    return out


def test_a_flex_start_node_ends_its_run_and_the_pod_moves_on(kube: KubeFake) -> None:
    capacity = Capacity()
    kube.autoscaling = capacity
    # A run of 6 simulated minutes.
    kube.node_pool_ready(pool("gpu-flex-b", flex=True, run_hours=0.1))
    kube.node_pool_ready(pool("gpu-ondemand-b"))
    kube.create(compute_class(["gpu-flex-b"], ["gpu-ondemand-b"]))
    kube.create(worker("w-0"))
    assert until(lambda: pool_of(kube, "w-0")) == "gpu-flex-b"
    [node] = [n for n in kube.objects("Node") if "gpu-flex-b" in n["metadata"]["name"]]
    # GKE's annotation says when the run ends, in real time (6 minutes after it joined).
    end = datetime.datetime.fromisoformat(node["metadata"]["annotations"][GKE_TERMINATION_ANNOTATION])
    assert 5 * 60 < (end - datetime.datetime.now(datetime.timezone.utc)).total_seconds() <= 6 * 60
    capacity.out.add("gpu-flex-b")  # no new flex-start nodes
    until(lambda: kube.get("Pod", "w-0")["status"].get("phase") == "Failed", timeout=6 * MINUTE + 10)
    assert any("max run duration" in m for m in events(kube, "FlexStartRunEnded"))
    assert kube.get("Node", node["metadata"]["name"], None) is None


def test_flex_start_waits_its_capacity_check_time_then_the_next_rule(kube: KubeFake) -> None:
    capacity = Capacity()
    capacity.waiting.add("gpu-flex-b")
    kube.autoscaling = capacity
    kube.node_pool_ready(pool("gpu-flex-b", flex=True))
    kube.node_pool_ready(pool("gpu-ondemand-b"))
    kube.create(
        compute_class(["gpu-flex-b"], ["gpu-ondemand-b"], **{"gpu-flex-b": {"capacityCheckWaitTimeSeconds": 180}})
    )
    started = time.monotonic()
    kube.create(worker("w-0"))
    assert until(lambda: pool_of(kube, "w-0")) == "gpu-ondemand-b"
    # Three simulated minutes in the flex-start queue first.
    assert time.monotonic() - started >= 3 * MINUTE - 0.1


def test_the_fake_holds_a_computeclass_to_its_schema(kube: KubeFake) -> None:
    from kubernetes.client.exceptions import ApiException

    classes = ResourceClient(kube.api_client(), "ComputeClass", None)
    created = classes.create(compute_class(["gpu-pool"]))
    assert created["metadata"]["uid"]
    bad = compute_class(["gpu-pool"])
    bad["spec"]["autoscalingPolicy"]["consolidationDelayMinutes"] = 0
    bad["metadata"]["name"] = "bad"
    with pytest.raises(ApiException) as info:
        classes.create(bad)
    assert info.value.status == 422
    assert "consolidationDelayMinutes" in str(info.value.body)
