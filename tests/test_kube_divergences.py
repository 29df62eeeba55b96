"""The divergences issue 20 listed between KubeFake and a real control plane, each run on
both (``kube_both``: the real plane under ``nox -s tests-kube``, KubeFake in the default
run), against our production code.

- field validation: our writes ask for ``fieldValidation=Strict``, so a field the server's
  schema lacks is refused, naming it, instead of being dropped with a Warning header;
- a Job's pod template is immutable (422) while it runs; adopting one whose template
  changed reports it rather than sending the patch;
- a pod template change of an adopted RayCluster: KubeRay does not replace the pods, our
  ``wait_ready`` does (``kube.rollout``);
- a head pod that ends is replaced by the operator, and the cluster is ready again;
- pods being deleted still count in the operator's status.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import kube_both
from helpers.kube_both import SPEC, wait
from helpers.kube_kubelet import job_pods_held

from rl_lustre import Cluster, naming
from rl_lustre.errors import KubernetesError


def _rc_api(kube: Any) -> Any:
    from rl_lustre.kube.client import ResourceClient

    return ResourceClient(kube.api_client(), "RayCluster", "default")


def _pods(kube: Any, name: str, node_type: str | None = None) -> list[Any]:
    selector = f"ray.io/cluster={name}" + (f",ray.io/node-type={node_type}" if node_type else "")
    return [
        p
        for p in kube_both.core(kube).list_namespaced_pod("default", label_selector=selector).items
        if not p.metadata.deletion_timestamp
    ]


def test_a_field_the_servers_schema_lacks_is_refused_naming_it_not_dropped(kube: Any) -> None:
    """Without ``fieldValidation`` the server drops an unknown field of a custom resource and
    says so only in a Warning header: the object is created without it and "drifts" on
    every later ``up()``. (A built-in kind's unknown field never leaves the client: its
    models refuse it.)"""
    from rl_lustre.kube.apply import apply_manifests, delete_manifests
    from rl_lustre.kube.manifests import build_manifests

    cluster = Cluster(**{**SPEC, "name": "kf"})
    cluster.volume._live.mount_point = "10.90.1.4@tcp:/lustrefs"
    manifests = build_manifests(cluster, secret_values={"RAY_AUTH_TOKEN": "t"}, redact=False)
    api = kube.api_client()
    pv = json.loads(json.dumps(next(m for m in manifests if m["kind"] == "PersistentVolume")))
    pv["spec"]["mountOption"] = ["flock"]  # mountOptions, mistyped
    with pytest.raises(KubernetesError, match=r"spec\.mountOption"):
        apply_manifests(api, [pv], deployment=cluster.name)
    assert kube_both.core(kube).list_persistent_volume().items == []

    good = next(m for m in manifests if m["kind"] == "RayCluster")
    rc = json.loads(json.dumps(good))
    rc["spec"]["headGroupSpec"]["rayStartParam"] = {"num-cpus": "0"}  # rayStartParams, mistyped
    with pytest.raises(KubernetesError, match=r"no field spec\.headGroupSpec\.rayStartParam\b.*older than these"):
        apply_manifests(api, [rc], deployment=cluster.name)
    assert _rc_api(kube).get(naming.raycluster_name(cluster)) is None

    # Adoption is held to the same rule (the create that comes first is refused before the
    # server looks for the object); what is stored stays as it was.
    assert apply_manifests(api, [good], deployment=cluster.name)[0].action == "created"
    with pytest.raises(
        KubernetesError, match=r"(create|adopt) RayCluster .*no field spec\.headGroupSpec\.rayStartParam\b"
    ):
        apply_manifests(api, [rc], deployment=cluster.name)
    assert "rayStartParam" not in (_rc_api(kube).get(naming.raycluster_name(cluster)) or {})["spec"]["headGroupSpec"]
    delete_manifests(api, [good], deployment=cluster.name, timeout=60)
    wait("the RayCluster's pods to go", lambda: not _pods(kube, naming.raycluster_name(cluster)))


def _job(cluster: Cluster) -> dict[str, Any]:
    from rl_lustre.kube.prefetch import prefetch_job

    job = prefetch_job(cluster)
    job["spec"]["template"]["spec"].pop("volumes")  # no claim needed to hold the pod running
    job["spec"]["template"]["spec"]["containers"][0].pop("volumeMounts")
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    return job


def test_a_running_jobs_pod_template_is_immutable_and_adoption_says_so_without_the_422(kube: Any) -> None:
    from kubernetes.client.exceptions import ApiException

    from rl_lustre.kube.apply import apply_manifests, delete_manifests, immutable_drift
    from rl_lustre.kube.client import ResourceClient

    cluster = Cluster(**{**SPEC, "name": "kj", "prefetch_models": ("Qwen/Qwen2.5-0.5B",)})
    job = _job(cluster)
    api = kube.api_client()
    jobs = ResourceClient(api, "Job", "default")
    with job_pods_held(kube, cluster.image):
        (created,) = apply_manifests(api, [job], deployment=cluster.name)
        assert created.action == "created"
        name = created.name
        wait(
            "the Job's pod to run",
            lambda: [
                p
                for p in kube_both.core(kube).list_namespaced_pod("default", label_selector=f"job-name={name}").items
                if p.status.phase == "Running"
            ],
        )
        # What the real server answers a template change of a running Job.
        with pytest.raises(ApiException) as info:
            jobs.patch(
                name,
                {
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        **job["spec"]["template"]["spec"]["containers"][0],
                                        "image": "rayproject/ray:2.60.1",
                                    }
                                ]
                            }
                        }
                    }
                },
            )
        assert info.value.status == 422
        assert "spec.template" in str(info.value.body)
        assert "field is immutable" in str(info.value.body)

        # Our adoption never sends that patch: it names the field (PrefetchDriver replaces the Job).
        newer = json.loads(json.dumps(job))
        newer["spec"]["template"]["spec"]["containers"][0]["image"] = "rayproject/ray:2.60.1"
        assert immutable_drift(newer, jobs.get(name) or {}, deployment=cluster.name) == ["spec.template"]
        with pytest.raises(KubernetesError, match=r"Job .*spec\.template"):
            apply_manifests(api, [newer], deployment=cluster.name)
        # A mutable field still adopts.
        more = json.loads(json.dumps(job))
        more["spec"]["backoffLimit"] = job["spec"]["backoffLimit"] + 1
        (adopted,) = apply_manifests(api, [more], deployment=cluster.name)
        assert adopted.action == "adopted"
        assert (jobs.get(name) or {})["spec"]["backoffLimit"] == job["spec"]["backoffLimit"] + 1
    delete_manifests(api, [job], deployment=cluster.name, timeout=60)
    wait(
        "the Job's pods to go",
        lambda: not kube_both.core(kube).list_namespaced_pod("default", label_selector=f"job-name={name}").items,
    )


def test_a_pod_template_change_recreates_the_pods_kuberay_leaves_on_the_old_one(
    kube: Any, deployed: tuple[Cluster, list[dict[str, Any]]]
) -> None:
    """KubeRay v1.5 reports the adopted cluster ready with every pod on the old template;
    ``wait_ready`` deletes those pods (KubeRay makes them again from the current
    template) and returns once every group runs its current one."""
    from rl_lustre.kube.apply import apply_manifests, wait_ready
    from rl_lustre.kube.pod_templates import (
        TEMPLATE_HASH_ANNOTATION,
        outdated_pods,
        stamp_templates,
    )

    cluster, manifests = deployed
    api = kube.api_client()
    name = naming.raycluster_name(cluster)
    wait_ready(api, manifests, timeout=120)
    before = {p.metadata.uid for p in _pods(kube, name)}
    assert len(before) == 1 + SPEC["num_nodes"]

    changed = json.loads(json.dumps(manifests))
    rc = next(m for m in changed if m["kind"] == "RayCluster")
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = "rayproject/ray:2.60.1"
    stamp_templates(rc)  # as build_manifests does for a changed cluster
    assert {a.kind: a.action for a in apply_manifests(api, changed, deployment=cluster.name)}["RayCluster"] == "adopted"
    stored = _rc_api(kube).get(name)
    pods = [kube.api_client().sanitize_for_serialization(p) for p in _pods(kube, name)]
    # What KubeRay left: the workers on the old template (the head's did not change).
    assert len(outdated_pods(stored, pods)) == SPEC["num_nodes"]

    wait_ready(api, changed, timeout=120)
    now = _pods(kube, name)
    workers = [p for p in now if p.metadata.labels["ray.io/node-type"] == "worker"]
    (head,) = [p for p in now if p.metadata.labels["ray.io/node-type"] == "head"]
    assert len(workers) == SPEC["num_nodes"]
    assert {w.spec.containers[0].image for w in workers} == {"rayproject/ray:2.60.1"}
    want = rc["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]
    assert {w.metadata.annotations[TEMPLATE_HASH_ANNOTATION] for w in workers} == {want}
    assert not {w.metadata.uid for w in workers} & before
    assert head.metadata.uid in before  # the head's template did not change: it kept running


def test_a_head_pod_that_ends_is_replaced_and_the_cluster_is_ready_again(
    kube: Any, deployed: tuple[Cluster, list[dict[str, Any]]]
) -> None:
    from rl_lustre.kube.apply import wait_ready

    cluster, manifests = deployed
    api = kube.api_client()
    name = naming.raycluster_name(cluster)
    wait_ready(api, manifests, timeout=120)
    (head,) = _pods(kube, name, "head")
    kube.evict(head.metadata.name)
    wait(
        "a new head pod",
        lambda: [
            p for p in _pods(kube, name, "head") if p.metadata.uid != head.metadata.uid and p.status.phase == "Running"
        ],
        timeout=90,
    )
    wait_ready(api, manifests, timeout=90)
    (new,) = _pods(kube, name, "head")
    assert new.metadata.uid != head.metadata.uid
    events = kube_both.core(kube).list_namespaced_event("default").items
    assert any(e.reason == "DeletedHeadPod" and head.metadata.name in (e.message or "") for e in events), sorted(
        {e.reason for e in events}
    )


def test_the_operators_status_counts_a_worker_being_deleted(
    kube: Any, deployed: tuple[Cluster, list[dict[str, Any]]]
) -> None:
    """Scaled from 2 workers to 1: the status desires 1 at once; the worker pod on its way
    out is counted until it is gone, so ready may exceed desired for a while (``wait_ready``
    only asks ready >= desired)."""
    from rl_lustre.kube.apply import apply_manifests, wait_ready

    cluster, manifests = deployed
    api = kube.api_client()
    name = naming.raycluster_name(cluster)
    wait_ready(api, manifests, timeout=120)
    scaled = json.loads(json.dumps(manifests))
    next(m for m in scaled if m["kind"] == "RayCluster")["spec"]["workerGroupSpecs"][0].update(
        replicas=1, minReplicas=1, maxReplicas=1
    )
    apply_manifests(api, scaled, deployment=cluster.name)
    status = wait(
        "the status to desire 1 worker",
        lambda: (s := (_rc_api(kube).get(name) or {}).get("status") or {}).get("desiredWorkerReplicas") == 1 and s,
        timeout=60,
    )
    assert status["readyWorkerReplicas"] >= 1
    wait_ready(api, scaled, timeout=60)
    wait("one worker", lambda: len(_pods(kube, name, "worker")) == 1)
    wait(
        "the status to count one ready worker",
        lambda: ((_rc_api(kube).get(name) or {}).get("status") or {}).get("readyWorkerReplicas") == 1,
        timeout=60,
    )


def test_a_pod_the_server_refuses_is_kuberays_replica_failure_and_the_diagnosis_names_it(kube: Any) -> None:
    """A ResourceQuota leaves room for the head and one worker of two: the API server refuses
    the second worker (403 exceeded quota), KubeRay reports ``ReplicaFailure``, and
    ``wait_ready``'s timeout says so instead of only counting ready pods."""
    from kubernetes import client

    from rl_lustre.errors import WaitTimeoutError
    from rl_lustre.kube.apply import apply_manifests, delete_manifests, wait_ready
    from rl_lustre.kube.manifests import build_manifests

    cluster = Cluster(**{**SPEC, "name": "kq"})
    cluster.volume._live.mount_point = "10.90.1.4@tcp:/lustrefs"
    manifests = build_manifests(cluster, secret_values={"RAY_AUTH_TOKEN": "t"}, redact=False)
    core = kube_both.core(kube)
    core.create_namespaced_resource_quota(
        "default",
        client.V1ResourceQuota(
            metadata=client.V1ObjectMeta(name="pods"), spec=client.V1ResourceQuotaSpec(hard={"pods": "2"})
        ),
    )
    api = kube.api_client()
    try:
        apply_manifests(api, manifests, deployment=cluster.name)
        with pytest.raises(WaitTimeoutError) as info:
            wait_ready(api, manifests, timeout=10)
        text = str(info.value)
        assert "ReplicaFailure" in {p.reason for p in info.value.last_state.problems}, text
        assert "KubeRay cannot create its pods (FailedCreateWorkerPod)" in text
        assert "exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2" in text
        assert "raise the quota" in text
        assert len(_pods(kube, cluster.name)) == 2
    finally:
        core.delete_namespaced_resource_quota("pods", "default", _preload_content=False)
        delete_manifests(api, manifests, deployment=cluster.name, timeout=60)
    wait("the RayCluster's pods to go", lambda: not _pods(kube, cluster.name))


def test_a_failing_jobs_pods_are_retried_after_a_doubling_backoff_and_our_diagnosis_names_why(kube: Any) -> None:
    """The Job controller waits before it replaces a failed pod, 10 s then 20 s on a real
    server (KubeFake: its ``timings.job_backoff``, here 1 s, then twice that); after
    ``backoffLimit`` retries the Job is Failed. It does not matter to us: the prefetch Job's
    ``backoffLimit`` of 2 costs at most 30 s of back-off, inside the start-up wait
    (``KUBE_TIMEOUT``), and the failure is named from the last pod's exit."""
    import time

    from helpers.kube_kubelet import job_pods_failing

    from rl_lustre.kube.apply import apply_manifests, delete_manifests
    from rl_lustre.kube.client import ResourceClient
    from rl_lustre.kube.diagnose import pod_problem
    from rl_lustre.kube.prefetch import PREFETCH_BACKOFF_LIMIT, job_state
    from rl_lustre.provision.context import KUBE_TIMEOUT

    cluster = Cluster(**{**SPEC, "name": "kb", "prefetch_models": ("Qwen/Qwen2.5-0.5B",)})
    job = _job(cluster)
    name = job["metadata"]["name"]
    assert job["spec"]["backoffLimit"] == PREFETCH_BACKOFF_LIMIT == 2
    assert KUBE_TIMEOUT / 10 > 10 + 20
    api = kube.api_client()
    jobs = ResourceClient(api, "Job", "default")
    core = kube_both.core(kube)
    seen: dict[str, float] = {}
    saved = getattr(kube, "timings", None) and kube.timings.job_backoff
    if not kube_both.is_real(kube):
        kube.timings.job_backoff = 1.0
    try:
        with job_pods_failing(kube, "401 Unauthorized"):
            apply_manifests(api, [job], deployment=cluster.name)
            deadline = time.monotonic() + 90
            while job_state(jobs.get(name)) != "failed":
                for pod in core.list_namespaced_pod("default", label_selector=f"job-name={name}").items:
                    seen.setdefault(pod.metadata.name, time.monotonic())
                assert time.monotonic() < deadline, f"the Job did not fail in 90 s ({len(seen)} pods)"
                time.sleep(0.05)
        pods = [
            api.sanitize_for_serialization(p)
            for p in core.list_namespaced_pod("default", label_selector=f"job-name={name}").items
        ]
    finally:
        if not kube_both.is_real(kube):
            kube.timings.job_backoff = saved
    assert len(seen) == len(pods) == PREFETCH_BACKOFF_LIMIT + 1
    at = sorted(seen.values())
    first, second = at[1] - at[0], at[2] - at[1]
    base = 10.0 if kube_both.is_real(kube) else 1.0
    assert first >= 0.8 * base, (first, second)
    assert 1.5 <= second / first <= 3.0, (first, second)
    problems = {p[0].split(": ", 1)[1] for p in (pod_problem(pod) for pod in pods) if p is not None}
    assert problems == {"container prefetch exited 1 (Error): 401 Unauthorized"}, problems
    delete_manifests(api, [job], deployment=cluster.name, timeout=60)
    wait(
        "the Job's pods to go", lambda: not core.list_namespaced_pod("default", label_selector=f"job-name={name}").items
    )
