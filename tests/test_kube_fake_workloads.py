"""KubeFake's nodes, DaemonSets and Jobs, through the real kubernetes client."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rl_lustre.kube.client import ResourceClient
from rl_lustre.testing.kube import KubeFake


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeFake]:
    with KubeFake() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _clean(kube: KubeFake) -> None:
    kube.reset()


def until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return result


def job(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}},
            **spec,
        },
    }


def test_a_daemonset_gets_one_ready_pod_per_matching_node(kube: KubeFake) -> None:
    kube.add_nodes("gpu-pool", 3, {"cloud.google.com/gke-accelerator": "nvidia-b200"})
    kube.add_nodes("cpu-pool", 1)
    res = ResourceClient(kube.api_client(), "DaemonSet", "default")
    res.create(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "pull"},
            "spec": {
                "selector": {"matchLabels": {"app": "pull"}},
                "template": {
                    "metadata": {"labels": {"app": "pull"}},
                    "spec": {
                        "nodeSelector": {"cloud.google.com/gke-nodepool": "gpu-pool"},
                        "containers": [{"name": "c", "image": "img"}],
                    },
                },
            },
        }
    )
    status = until(lambda: (s := res.get("pull")["status"])["numberReady"] == 3 and s)
    assert status["desiredNumberScheduled"] == 3
    pods = kube.objects("Pod")
    assert sorted(p["spec"]["nodeName"] for p in pods) == [
        "gke-gpu-pool-0000",
        "gke-gpu-pool-0001",
        "gke-gpu-pool-0002",
    ]
    res.delete("pull")
    until(lambda: not kube.objects("Pod") and res.get("pull") is None)


def test_a_daemonset_whose_selector_misses_its_template_labels_is_refused(kube: KubeFake) -> None:
    from kubernetes.client.exceptions import ApiException

    res = ResourceClient(kube.api_client(), "DaemonSet", "default")
    with pytest.raises(ApiException) as err:
        res.create(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "bad"},
                "spec": {
                    "selector": {"matchLabels": {"app": "x"}},
                    "template": {"metadata": {"labels": {"app": "y"}}, "spec": {"containers": []}},
                },
            }
        )
    assert err.value.status == 422


def test_a_job_completes_and_a_failing_one_stops_at_its_backoff_limit_with_the_pods_reason(kube: KubeFake) -> None:
    res = ResourceClient(kube.api_client(), "Job", "default")
    created = res.create(job("ok"))
    uid = created["metadata"]["uid"]
    assert created["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    done = until(
        lambda: (
            any(c["type"] == "Complete" for c in (res.get("ok").get("status") or {}).get("conditions", []))
            and res.get("ok")
        )
    )
    assert done["status"]["succeeded"] == 1
    kube.faults.job_failure = "401 Client Error: Unauthorized"
    res.create(job("bad", backoffLimit=1))
    failed = until(
        lambda: (
            any(c["type"] == "Failed" for c in (res.get("bad").get("status") or {}).get("conditions", []))
            and res.get("bad")
        )
    )
    assert failed["status"]["failed"] == 2
    pods = [p for p in kube.objects("Pod") if p["metadata"]["labels"].get("job-name") == "bad"]
    assert [p["status"]["phase"] for p in pods] == ["Failed", "Failed"]
    terminated = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["reason"], terminated["message"]) == ("Error", "401 Client Error: Unauthorized")


def test_pod_logs_are_served_with_tail_lines(kube: KubeFake) -> None:
    from kubernetes import client

    res = ResourceClient(kube.api_client(), "Job", "default")
    res.create(job("logs"))
    pod = until(
        lambda: next((p for p in kube.objects("Pod") if p["status"].get("phase") in ("Running", "Succeeded")), None)
    )
    kube.write_log(pod["metadata"]["name"], "one\ntwo\nthree\n")
    core = client.CoreV1Api(kube.api_client())
    assert core.read_namespaced_pod_log(pod["metadata"]["name"], "default", tail_lines=2) == "two\nthree\n"


def _pod(kube: KubeFake, name: str, image: str, pool: str) -> None:
    ResourceClient(kube.api_client(), "Pod", "default").create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"cloud.google.com/gke-nodepool": pool},
                "containers": [{"name": "main", "image": image}],
            },
        }
    )


def _running_after(kube: KubeFake, names: list[str], timeout: float = 10.0) -> dict[str, float]:
    """Seconds from now until each pod is Running."""
    started, seen = time.monotonic(), {}
    while len(seen) < len(names):
        assert time.monotonic() - started < timeout, f"timed out; Running: {sorted(seen)}"
        for p in kube.objects("Pod"):
            name = p["metadata"]["name"]
            if name in names and name not in seen and (p.get("status") or {}).get("phase") == "Running":
                seen[name] = time.monotonic() - started
        time.sleep(0.01)
    return seen


@pytest.fixture
def timings(kube: KubeFake) -> Iterator[Any]:
    saved = (kube.timings.start, kube.timings.image_pull, dict(kube.timings.image_pulls), kube.timings.job_start)
    yield kube.timings
    (kube.timings.start, kube.timings.image_pull, kube.timings.image_pulls, kube.timings.job_start) = saved


def test_each_image_takes_its_own_pull_time(kube: KubeFake, timings: Any) -> None:
    timings.image_pull, timings.image_pulls = 0.0, {"nvcr.io/nvidia/nemo-rl:v0.4.0": 0.8}
    kube.add_nodes("gpu-pool", 2)
    _pod(kube, "big", "nvcr.io/nvidia/nemo-rl:v0.4.0", "gpu-pool")
    _pod(kube, "small", "pause", "gpu-pool")
    after = _running_after(kube, ["big", "small"])
    assert after["small"] < 0.6 <= 0.8 <= after["big"]


def test_the_pull_begins_when_the_pod_is_bound_and_the_start_follows_it(kube: KubeFake, timings: Any) -> None:
    # The kubelet pulls, then starts the containers: a pull and one start, not start + pull + start.
    timings.start, timings.image_pulls = 0.5, {"img": 0.8}
    kube.add_nodes("gpu-pool", 1)
    _pod(kube, "p", "img", "gpu-pool")
    assert 1.3 <= _running_after(kube, ["p"])["p"] < 1.65


def test_a_replacement_node_of_the_same_name_pulls_again(kube: KubeFake, timings: Any) -> None:
    timings.image_pulls = {"img": 0.6}
    [node] = kube.add_nodes("gpu-pool", 1)
    _pod(kube, "first", "img", "gpu-pool")
    assert _running_after(kube, ["first"])["first"] >= 0.6
    _pod(kube, "second", "img", "gpu-pool")  # the same node: the image is there
    assert _running_after(kube, ["second"])["second"] < 0.5
    kube.remove_nodes("gpu-pool")
    assert kube.add_nodes("gpu-pool", 1) == [node]  # a new VM under the old name, with an empty disk
    _pod(kube, "third", "img", "gpu-pool")
    assert _running_after(kube, ["third"])["third"] >= 0.6


def test_job_pods_start_after_job_start_ray_pods_after_start(kube: KubeFake, timings: Any) -> None:
    timings.start, timings.job_start = 0.8, 0.05
    kube.add_nodes("cpu-pool", 1)
    _pod(kube, "ray", "busybox", "cpu-pool")
    ResourceClient(kube.api_client(), "Job", "default").create(job("quick"))
    pods = until(lambda: [p["metadata"]["name"] for p in kube.objects("Pod") if p["metadata"]["name"] != "ray"])
    after = _running_after(kube, ["ray", pods[0]])
    assert after[pods[0]] < 0.5 < 0.8 <= after["ray"]


def test_nodes_of_a_preloaded_pool_start_the_image_without_pulling_it(kube: KubeFake, timings: Any) -> None:
    timings.image_pulls = {"nvcr.io/nvidia/nemo-rl:v0.4.0": 0.8}
    kube.preload("gpu-pool", ["nvcr.io/nvidia/nemo-rl:v0.4.0"])
    kube.add_nodes("gpu-pool", 1)
    kube.add_nodes("cpu-pool", 1)
    _pod(kube, "preloaded", "nvcr.io/nvidia/nemo-rl:v0.4.0", "gpu-pool")
    _pod(kube, "pulled", "nvcr.io/nvidia/nemo-rl:v0.4.0", "cpu-pool")
    after = _running_after(kube, ["preloaded", "pulled"])
    assert after["preloaded"] < 0.6 <= 0.8 <= after["pulled"]
    # A replacement node of the pool boots from the same disk image.
    kube.remove_nodes("gpu-pool")
    kube.add_nodes("gpu-pool", 1)
    _pod(kube, "replacement", "nvcr.io/nvidia/nemo-rl:v0.4.0", "gpu-pool")
    assert _running_after(kube, ["replacement"])["replacement"] < 0.6


def test_nodes_are_registered_and_removed_with_the_node_controllers_events(kube: KubeFake) -> None:
    names = kube.add_nodes("gpu-pool", 2)
    kube.remove_nodes("gpu-pool")
    events = [e for e in kube.objects("Event", include_events=True) if e["involvedObject"]["kind"] == "Node"]
    said = sorted((e["involvedObject"]["name"], e["reason"], e["source"]["component"]) for e in events)
    assert said == sorted(
        [
            (n, r, c)
            for n in names
            for r, c in (
                ("RegisteredNode", "node-controller"),
                ("NodeReady", "kubelet"),
                ("RemovingNode", "node-controller"),
            )
        ]
    )
    # As the API server stores them: in "default", about an object of no namespace.
    assert {(e["metadata"]["namespace"], e["involvedObject"].get("namespace", "")) for e in events} == {("default", "")}
    assert next(e for e in events if e["reason"] == "RemovingNode")["message"] == (
        f"Node {names[0]} event: Removing Node {names[0]} from Controller"
    )


def test_a_worker_pods_raylet_is_named_and_sized_as_its_manifest_makes_ray_start_do_it() -> None:
    from rl_lustre.testing.kube import KubeTimings

    started: list[tuple[str, str, dict[str, int]]] = []

    class Raylet:
        def kill(self) -> None:
            pass

    def start(pod: str, name: str, resources: dict[str, int]) -> Raylet:
        started.append((pod, name, resources))
        return Raylet()

    # As rl_lustre's RayCluster sizes an A4 worker: CPU, memory and GPUs pinned in the limits.
    worker = {
        "name": "ray-worker",
        "image": "rayproject/ray:2.46.0",
        "env": [{"name": "RL_LUSTRE_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {
            "limits": {"nvidia.com/gpu": "8", "cpu": "100", "memory": "1000Gi"},
            "requests": {"nvidia.com/gpu": "8", "cpu": "100", "memory": "1000Gi"},
        },
    }
    # A CPU request without a limit, and rayStartParams that override the container (KubeRay's order).
    plain = {
        **worker,
        "env": [],
        "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8", "cpu": "15500m"}},
    }
    groups = [
        {
            "groupName": "named",
            "replicas": 1,
            "minReplicas": 1,
            "maxReplicas": 1,
            "rayStartParams": {"node-name": "$RL_LUSTRE_NODE_NAME"},
            "template": {"spec": {"containers": [worker]}},
        },
        {
            "groupName": "plain",
            "replicas": 1,
            "minReplicas": 1,
            "maxReplicas": 1,
            "rayStartParams": {"num-gpus": "4"},
            "template": {"spec": {"containers": [plain]}},
        },
    ]
    rc = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "default"},
        "spec": {
            "rayVersion": "2.46.0",
            "workerGroupSpecs": groups,
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}},
            },
        },
    }
    with KubeFake(raylets=start, timings=KubeTimings(schedule=0.0, start=0.0)) as fake:
        fake.add_nodes("gpu-pool", 2, {"cloud.google.com/gke-accelerator": "nvidia-b200"})  # 8 GPUs each
        ResourceClient(fake.api_client(), "RayCluster", "default").create(rc)
        until(lambda: len(started) == 2, timeout=30)
        pods = {p["metadata"]["name"]: p for p in fake.objects("Pod")}
    by_group = {pods[pod]["metadata"]["labels"]["ray.io/group"]: (pod, name, res) for pod, name, res in started}
    pod, name, resources = by_group["named"]
    assert name == pods[pod]["spec"]["nodeName"]
    assert name.startswith("gke-gpu-pool-")
    assert resources == {"CPU": 100, "GPU": 8, "memory": 1000 * 2**30}
    pod, name, resources = by_group["plain"]
    # Without --node-name Ray names the node by its address.
    assert name in (pods[pod]["status"].get("podIP"), pod)
    assert not name.startswith("gke-")
    # No memory limit: Ray sizes its memory itself.
    assert resources == {"CPU": 16, "GPU": 4}


def test_the_nodes_of_a_gke_node_pool_are_ready_with_the_node_controllers_events(kube: KubeFake) -> None:
    from google.cloud import container_v1

    pool = container_v1.NodePool(
        name="gpu",
        initial_node_count=2,
        locations=["us-east1-b"],
        self_link="https://container.googleapis.com/v1/projects/p/locations/us-east1/clusters/c/nodePools/gpu",
        config=container_v1.NodeConfig(
            machine_type="a4-highgpu-8g",
            spot=True,
            accelerators=[container_v1.AcceleratorConfig(accelerator_type="nvidia-b200", accelerator_count=8)],
        ),
    )
    names = kube.node_pool_ready(pool)
    assert len(names) == 2
    # Registering a running pool again adds nothing (FakeGCP calls it on every read of a RUNNING pool).
    assert kube.node_pool_ready(pool) == names
    nodes = {n["metadata"]["name"]: n for n in kube.objects("Node")}
    for name in names:
        [ready] = [c for c in nodes[name]["status"]["conditions"] if c["type"] == "Ready"]
        assert ready["status"] == "True"
    events = [e for e in kube.objects("Event", include_events=True) if e["involvedObject"]["kind"] == "Node"]
    said = sorted((e["involvedObject"]["name"], e["involvedObject"]["uid"], e["reason"]) for e in events)
    assert said == sorted((n, nodes[n]["metadata"]["uid"], r) for n in names for r in ("RegisteredNode", "NodeReady"))


def _one_worker_raycluster() -> dict:
    worker = {
        "name": "ray-worker",
        "image": "rayproject/ray:2.46.0",
        "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "default"},
        "spec": {
            "rayVersion": "2.46.0",
            "workerGroupSpecs": [
                {
                    "groupName": "w",
                    "replicas": 1,
                    "minReplicas": 1,
                    "maxReplicas": 1,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [worker]}},
                }
            ],
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}},
            },
        },
    }


class _FlakyRaylets:
    """A raylet start that fails its first ``fails`` calls as Ray does when out of its 30 s."""

    class Raylet:
        def kill(self) -> None:
            pass

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.calls: list[str] = []

    def __call__(self, pod: str, name: str, resources: dict[str, int]) -> Raylet:
        self.calls.append(pod)
        if len(self.calls) <= self.fails:
            raise RuntimeError("The current node timed out during startup.")
        return self.Raylet()


def _run_one_worker(raylets: _FlakyRaylets, done: Callable[[KubeFake], bool]) -> None:
    from rl_lustre.testing.kube import KubeTimings

    with KubeFake(raylets=raylets, timings=KubeTimings(schedule=0.0, start=0.0)) as fake:
        fake.add_nodes("gpu-pool", 1, {"cloud.google.com/gke-accelerator": "nvidia-b200"})
        ResourceClient(fake.api_client(), "RayCluster", "default").create(_one_worker_raycluster())
        until(lambda: done(fake), timeout=30)


def test_a_raylet_start_that_fails_then_works_is_no_controller_failure() -> None:
    raylets = _FlakyRaylets(fails=1)

    def running(fake: KubeFake) -> bool:
        return any(
            p["metadata"]["labels"].get("ray.io/node-type") == "worker"
            and (p.get("status") or {}).get("phase") == "Running"
            for p in fake.objects("Pod")
        )

    _run_one_worker(raylets, running)  # stops without raising
    assert len(raylets.calls) == 2


def test_a_raylet_that_never_starts_fails_the_fakes_stop_naming_its_pod() -> None:
    raylets = _FlakyRaylets(fails=10**6)
    with pytest.raises(RuntimeError, match=r"raylet behind pod rc-\S+: The current node timed out during startup"):
        _run_one_worker(raylets, lambda _: len(raylets.calls) >= 3)
