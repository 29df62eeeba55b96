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
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "main", "image": "busybox"}]}}, **spec}}


def test_a_daemonset_gets_one_ready_pod_per_matching_node(kube: KubeFake) -> None:
    kube.add_nodes("gpu-pool", 3, {"cloud.google.com/gke-accelerator": "nvidia-b200"})
    kube.add_nodes("cpu-pool", 1)
    res = ResourceClient(kube.api_client(), "DaemonSet", "default")
    res.create({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "pull"},
                "spec": {"selector": {"matchLabels": {"app": "pull"}},
                         "template": {"metadata": {"labels": {"app": "pull"}},
                                      "spec": {"nodeSelector": {"cloud.google.com/gke-nodepool": "gpu-pool"},
                                               "containers": [{"name": "c", "image": "img"}]}}}})
    status = until(lambda: (s := res.get("pull")["status"])["numberReady"] == 3 and s)
    assert status["desiredNumberScheduled"] == 3
    pods = kube.objects("Pod")
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["gke-gpu-pool-0000", "gke-gpu-pool-0001",
                                                           "gke-gpu-pool-0002"]
    res.delete("pull")
    until(lambda: not kube.objects("Pod") and res.get("pull") is None)


def test_a_daemonset_whose_selector_misses_its_template_labels_is_refused(kube: KubeFake) -> None:
    from kubernetes.client.exceptions import ApiException

    res = ResourceClient(kube.api_client(), "DaemonSet", "default")
    with pytest.raises(ApiException) as err:
        res.create({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "bad"},
                    "spec": {"selector": {"matchLabels": {"app": "x"}},
                             "template": {"metadata": {"labels": {"app": "y"}}, "spec": {"containers": []}}}})
    assert err.value.status == 422


def test_a_job_completes_and_a_failing_one_stops_at_its_backoff_limit_with_the_pods_reason(kube: KubeFake) -> None:
    res = ResourceClient(kube.api_client(), "Job", "default")
    created = res.create(job("ok"))
    uid = created["metadata"]["uid"]
    assert created["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    done = until(lambda: any(c["type"] == "Complete" for c in (res.get("ok").get("status") or {}).get("conditions", []))
                 and res.get("ok"))
    assert done["status"]["succeeded"] == 1
    kube.faults.job_failure = "401 Client Error: Unauthorized"
    res.create(job("bad", backoffLimit=1))
    failed = until(lambda: any(c["type"] == "Failed" for c in (res.get("bad").get("status") or {}).get("conditions", []))
                   and res.get("bad"))
    assert failed["status"]["failed"] == 2
    pods = [p for p in kube.objects("Pod") if p["metadata"]["labels"].get("job-name") == "bad"]
    assert [p["status"]["phase"] for p in pods] == ["Failed", "Failed"]
    terminated = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["reason"], terminated["message"]) == ("Error", "401 Client Error: Unauthorized")


def test_pod_logs_are_served_with_tail_lines(kube: KubeFake) -> None:
    from kubernetes import client

    res = ResourceClient(kube.api_client(), "Job", "default")
    res.create(job("logs"))
    pod = until(lambda: next((p for p in kube.objects("Pod") if p["status"].get("phase") in ("Running", "Succeeded")),
                             None))
    kube.write_log(pod["metadata"]["name"], "one\ntwo\nthree\n")
    core = client.CoreV1Api(kube.api_client())
    assert core.read_namespaced_pod_log(pod["metadata"]["name"], "default", tail_lines=2) == "two\nthree\n"
