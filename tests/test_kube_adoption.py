"""Adoption scenarios of issue 20's point 3, on the real control plane and on KubeFake
(``kube_both``): the Released PersistentVolume a stopped teardown leaves, and the image
pre-pull DaemonSet and model prefetch Job adopted by a second ``up()`` while they run.
"""

from __future__ import annotations

import json
from typing import Any

from helpers import kube_both
from helpers.kube_both import SPEC, wait
from helpers.kube_kubelet import job_pods_held

from rl_lustre import Cluster, naming


def _cluster(**changes: Any) -> Cluster:
    cluster = Cluster(**{**SPEC, **changes})
    cluster.volume._live.mount_point = "10.90.1.4@tcp:/lustrefs"
    return cluster


def test_a_released_volume_whose_claim_is_gone_binds_the_new_claim(kube: Any) -> None:
    """A teardown stopped between deleting the claim and the volume leaves the volume
    Released, naming the old claim's uid: the PV binder would never bind a new claim to it.
    Adoption forgets the stale claimRef, and the new claim binds."""
    from rl_lustre.kube.apply import apply_manifests, delete_manifests, wait_ready
    from rl_lustre.kube.manifests import build_manifests

    cluster = _cluster(name="kp")
    storage = [
        m
        for m in build_manifests(cluster, secret_values={"RAY_AUTH_TOKEN": "t"}, redact=False)
        if m["kind"] in ("PersistentVolume", "PersistentVolumeClaim")
    ]
    api = kube.api_client()
    core = kube_both.core(kube)
    apply_manifests(api, storage, deployment=cluster.name)
    wait_ready(api, storage, timeout=60)
    old = core.read_namespaced_persistent_volume_claim(naming.pvc_name(cluster), "default").metadata.uid
    core.delete_namespaced_persistent_volume_claim(naming.pvc_name(cluster), "default")
    pv = wait(
        "the volume to be Released",
        lambda: (v := core.read_persistent_volume(naming.pv_name(cluster))).status.phase == "Released" and v,
        timeout=60,
    )
    assert pv.spec.claim_ref.uid == old

    actions = {a.kind: a.action for a in apply_manifests(api, storage, deployment=cluster.name)}
    assert actions == {"PersistentVolume": "adopted", "PersistentVolumeClaim": "created"}
    wait_ready(api, storage, timeout=60)
    claim = core.read_namespaced_persistent_volume_claim(naming.pvc_name(cluster), "default")
    assert claim.status.phase == "Bound"
    assert claim.spec.volume_name == naming.pv_name(cluster)
    assert core.read_persistent_volume(naming.pv_name(cluster)).spec.claim_ref.uid == claim.metadata.uid
    delete_manifests(api, storage, deployment=cluster.name, timeout=60)
    assert core.list_persistent_volume().items == []


def test_the_prepull_daemonset_and_a_running_prefetch_job_are_adopted_as_they_run(kube: Any) -> None:
    """A second ``up()`` while the pre-pull pods hold the image on every node and the
    prefetch pod downloads: both are adopted unchanged (the same pods go on), then removed."""
    from rl_lustre.kube.apply import apply_manifests, delete_manifests
    from rl_lustre.kube.client import ResourceClient
    from rl_lustre.kube.prefetch import job_state, prefetch_job
    from rl_lustre.kube.prepull import daemonset_progress, prepull_daemonset, prepull_node_count

    # The nodes are SPEC's deployment's (its ComputeClass's GPU nodes): the same deployment.
    cluster = _cluster(prefetch_models=("Qwen/Qwen2.5-0.5B",))
    api = kube.api_client()
    core = kube_both.core(kube)
    ds = prepull_daemonset(cluster)
    job = prefetch_job(cluster)
    # No claim here: the prefetch pod runs without the volume.
    job["spec"]["template"]["spec"].pop("volumes")
    job["spec"]["template"]["spec"]["containers"][0].pop("volumeMounts")
    daemonsets = ResourceClient(api, "DaemonSet", "default")
    jobs = ResourceClient(api, "Job", "default")

    def pods(selector: str) -> list[Any]:
        return [
            p
            for p in core.list_namespaced_pod("default", label_selector=selector).items
            if not p.metadata.deletion_timestamp
        ]

    prepull_selector = ",".join(f"{k}={v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())
    job_selector = f"job-name={naming.prefetch_name(cluster)}"
    with job_pods_held(kube, cluster.image):
        first = {a.kind: a.action for a in apply_manifests(api, [ds, job], deployment=cluster.name)}
        assert first == {"DaemonSet": "created", "Job": "created"}
        nodes = prepull_node_count(cluster)
        # One pre-pull pod per node of the GPU pool (its taint tolerated) and of the CPU pool.
        wait(
            "the pre-pull on every node",
            lambda: daemonset_progress(daemonsets.get(ds["metadata"]["name"]), nodes) == (nodes, nodes),
            timeout=60,
        )
        assert sorted(p.spec.node_name for p in pods(prepull_selector)) == sorted(
            n.metadata.name for n in core.list_node().items
        )
        wait("the prefetch pod to run", lambda: [p for p in pods(job_selector) if p.status.phase == "Running"])
        running = {p.metadata.uid for p in pods(prepull_selector) + pods(job_selector)}
        assert job_state(jobs.get(job["metadata"]["name"])) == "running"

        again = {
            a.kind: a.action
            for a in apply_manifests(
                api, [json.loads(json.dumps(ds)), json.loads(json.dumps(job))], deployment=cluster.name
            )
        }
        assert again == {"DaemonSet": "unchanged", "Job": "unchanged"}
        assert {p.metadata.uid for p in pods(prepull_selector) + pods(job_selector)} == running
        assert job_state(jobs.get(job["metadata"]["name"])) == "running"
    delete_manifests(api, [ds, job], deployment=cluster.name, timeout=60)
    wait("their pods to go", lambda: not pods(prepull_selector) and not pods(job_selector))
