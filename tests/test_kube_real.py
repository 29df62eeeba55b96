"""Our Kubernetes code against a real control plane (``nox -s tests-kube``; see ``helpers/kube_plane.py``).

kube-apiserver, etcd, controller-manager, scheduler, kwok and the KubeRay operator, built
from Go modules; Nodes shaped like the node pools a ``Cluster`` plans; the production
modules (``rl_lustre.kube.*``) unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import kube_both
from helpers.kube_both import SPEC, wait
from helpers.kube_plane import ControlPlane

from rl_lustre import Cluster, naming
from rl_lustre.errors import KubernetesError

# Tests that take ``kube`` run twice: against the real control plane (marked ``kube``) and
# against KubeFake (in the default run), so that the fake is held to the real thing (kube_both).


@pytest.mark.kube
def test_the_api_server_is_kubernetes_of_a_gke_regular_minor_with_token_auth(kube_plane: ControlPlane) -> None:
    from kubernetes import client

    from rl_lustre.kube.client import ResourceClient, translate_errors

    version = client.VersionApi(kube_plane.api_client()).get_code()
    assert version.git_version == kube_plane.versions["KUBERNETES"] == "v1.35.4"

    # A bearer token it did not issue is refused, and our boundary says so.
    stranger = ResourceClient(kube_plane.api_client(token="not-a-token"), "Secret", "default")
    with pytest.raises(KubernetesError, match="401"), translate_errors("read Secret anything"):
        stranger.get("anything")
    assert "not-a-token" not in str(stranger)

    # The CRDs: KubeRay's from its module, GKE's networking ones from our vendored schemas.
    ext = client.ApiextensionsV1Api(kube_plane.api_client())
    crds = {c.metadata.name: c for c in ext.list_custom_resource_definition().items}
    assert {"rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io"} <= set(crds)
    assert [v.name for v in crds["rayclusters.ray.io"].spec.versions if v.storage] == ["v1"]
    for name in ("gkenetworkparamsets.networking.gke.io", "networks.networking.gke.io"):
        assert crds[name].spec.scope == "Cluster"
    assert crds["computeclasses.cloud.google.com"].spec.scope == "Cluster"


@pytest.mark.kube
def test_the_real_api_server_takes_our_compute_class_and_holds_it_to_the_vendored_schema(
    kube_plane: ControlPlane,
) -> None:
    """Our ComputeClass, applied as up() applies it, is accepted by the real API server with the
    CRD made from the vendored schema; a class that breaks the schema is refused there too."""
    from kubernetes import client

    from rl_lustre.kube.apply import apply_manifests, delete_manifests
    from rl_lustre.kube.computeclass import compute_class_manifest
    from rl_lustre.kube.manifests import build_manifests

    cluster = Cluster(**{**SPEC, "name": "kcc", "capacity": ("spot", "flex-start", "on-demand")})
    [cc] = [m for m in build_manifests(cluster) if m["kind"] == "ComputeClass"]
    assert cc == compute_class_manifest(cluster)
    api = kube_plane.api_client()
    custom = client.CustomObjectsApi(api)
    try:
        [applied] = apply_manifests(api, [cc], deployment=cluster.name)
        assert (applied.kind, applied.action) == ("ComputeClass", "created")
        stored = custom.get_cluster_custom_object("cloud.google.com", "v1", "computeclasses", "kcc-gpus")
        assert stored["spec"] == cc["spec"]  # nothing pruned: every field is in the schema
        [again] = apply_manifests(api, [cc], deployment=cluster.name)
        assert again.action == "unchanged"
        bad = {**cc, "metadata": {"name": "kcc-bad"}, "spec": {**cc["spec"], "whenUnsatisfiable": "Maybe"}}
        with pytest.raises(client.ApiException) as refused:
            custom.create_cluster_custom_object("cloud.google.com", "v1", "computeclasses", bad)
        assert refused.value.status == 422
        assert "whenUnsatisfiable" in refused.value.body
    finally:
        delete_manifests(api, [cc], deployment=cluster.name, timeout=30)
    assert not custom.list_cluster_custom_object("cloud.google.com", "v1", "computeclasses")["items"]


@pytest.mark.kube
def test_the_heads_account_may_get_a_node_through_our_cluster_role_and_nothing_more(kube_plane: ControlPlane) -> None:
    """The head's ClusterRole and ClusterRoleBinding, applied as up() applies them, are accepted
    by the real API server, whose RBAC then lets the head's service account token (from the
    TokenRequest API, as the kubelet mounts it) get a Node, and read a flex-start node's end as
    the supervisor does; without the binding the same read is refused (403), and the account
    may never list Nodes nor read Secrets."""
    import urllib.error

    from kubernetes import client

    from rl_lustre.kube.apply import apply_manifests, delete_manifests
    from rl_lustre.kube.manifests import build_manifests
    from rl_lustre.oncluster.incluster import connect
    from rl_lustre.oncluster.nodeends import TERMINATION_ANNOTATION, read_ends

    cluster = Cluster(**{**SPEC, "name": "kheadrbac"})
    rbac = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
    account, role, binding, nodes_role, nodes_binding = [m for m in build_manifests(cluster) if m["kind"] in rbac]
    api = kube_plane.api_client()
    core = client.CoreV1Api(api)
    node = "gke-kheadrbac-gpu-flex-0a1b2c3d-x1y2"
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "annotations": {TERMINATION_ANNOTATION: "2026-12-12T01:00:00Z"}},
        }
    )
    ca = kube_plane.ca_pem.decode()
    try:
        apply_manifests(api, [account, role, binding], deployment=cluster.name)
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=["https://kubernetes.default.svc.cluster.local"])
        )
        token = core.create_namespaced_service_account_token(
            naming.head_account_name(cluster), cluster.namespace, request
        ).status.token
        refused = read_ends([node], api=kube_plane.url, token=token, ca_pem=ca)
        assert refused.ends == {}
        assert f"GET Node {node}: HTTP 403" in refused.failed
        assert "may not get Nodes" in refused.failed

        applied = apply_manifests(api, [nodes_role, nodes_binding], deployment=cluster.name)
        assert [(a.kind, a.action) for a in applied] == [("ClusterRole", "created"), ("ClusterRoleBinding", "created")]
        name = naming.head_nodes_role_name(cluster)
        assert client.RbacAuthorizationV1Api(api).read_cluster_role(name).rules[0].resources == ["nodes"]
        read = wait(
            "the binding to take effect", lambda: read_ends([node], api=kube_plane.url, token=token, ca_pem=ca).ends, 15
        )
        assert read == {node: 1797037200.0}

        kube = connect(api=kube_plane.url, token=token, ca_pem=ca, timeout=5)
        for path in ("/api/v1/nodes", "/api/v1/namespaces/default/secrets", "/api/v1/secrets"):
            with pytest.raises(urllib.error.HTTPError) as denied:
                kube.get(path)
            assert denied.value.code == 403, path
        assert [a.action for a in apply_manifests(api, [nodes_role, nodes_binding], deployment=cluster.name)] == [
            "unchanged",
            "unchanged",
        ]
    finally:
        gone = delete_manifests(
            api, [account, role, binding, nodes_role, nodes_binding], deployment=cluster.name, timeout=30
        )
        core.delete_node(node)
    assert f"ClusterRole {naming.head_nodes_role_name(cluster)}" in gone


@pytest.mark.kube
def test_nodes_carry_what_gke_gives_a4_spot_and_cpu_nodes_and_the_scheduler_holds_pods_to_it(
    kube_plane: ControlPlane, nodes: dict[str, list[str]]
) -> None:
    core = kube_both.core(kube_plane)
    gpu = [core.read_node(n) for n in nodes["gpu-pool"]]
    (cpu,) = [core.read_node(n) for n in nodes["cpu-pool"]]
    assert len(gpu) == SPEC["num_nodes"]
    for node in gpu:
        labels = node.metadata.labels
        assert labels["cloud.google.com/gke-accelerator"] == "nvidia-b200"
        assert labels["cloud.google.com/gke-spot"] == "true"
        assert labels["cloud.google.com/gke-nodepool"] == naming.gpu_pool_name(Cluster(**SPEC))
        assert labels["node.kubernetes.io/instance-type"] == "a4-highgpu-8g"
        # GKE's GPU taint, and the ComputeClass's: the pool joins the class (issue 34).
        assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
            ("nvidia.com/gpu", "present", "NoSchedule"),
            ("cloud.google.com/compute-class", naming.compute_class_name(Cluster(**SPEC)), "NoSchedule"),
        ]
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.allocatable["cpu"] == "223370m"
    assert "cloud.google.com/gke-spot" not in cpu.metadata.labels
    assert not cpu.spec.taints

    def pod(name: str, resources: dict[str, str], *, tolerate: bool = True) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": resources, "limits": resources}}
            ],
            "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-b200"},
        }
        if tolerate:
            spec["tolerations"] = [
                {"key": key, "operator": "Exists", "effect": "NoSchedule"}
                for key in ("nvidia.com/gpu", "cloud.google.com/compute-class")
            ]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}

    def scheduled(name: str) -> Any:
        status = core.read_namespaced_pod(name, "default").status
        return next((c for c in status.conditions or [] if c.type == "PodScheduled"), None)

    try:
        core.create_namespaced_pod("default", pod("fits", {"nvidia.com/gpu": "8", "cpu": "100"}))
        core.create_namespaced_pod("default", pod("nine-gpus", {"nvidia.com/gpu": "9"}))
        core.create_namespaced_pod("default", pod("no-toleration", {"cpu": "1"}, tolerate=False))
        core.create_namespaced_pod("default", pod("too-much-disk", {"ephemeral-storage": "10Ti"}))
        assert wait("fits to be scheduled", lambda: (c := scheduled("fits")) is not None and c.status == "True")
        wait("fits to run", lambda: core.read_namespaced_pod("fits", "default").status.phase == "Running")
        for name, why in (
            ("nine-gpus", "nvidia.com/gpu"),
            ("no-toleration", "untolerated taint"),
            ("too-much-disk", "ephemeral-storage"),
        ):
            condition = wait(f"{name} to be refused", lambda n=name: (c := scheduled(n)) is not None and c)
            assert (condition.status, condition.reason) == ("False", "Unschedulable"), name
            assert why in condition.message, (name, condition.message)
    finally:
        for name in ("fits", "nine-gpus", "no-toleration", "too-much-disk"):
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        wait("the pods to go", lambda: not core.list_namespaced_pod("default").items)


@pytest.mark.kube
def test_a_killed_test_process_leaves_no_component_behind(kube_plane: ControlPlane, tmp_path: Path) -> None:
    """The watchdog ends every component (and removes the work directory) when the process
    that started them dies without a chance to stop them."""
    script = textwrap.dedent("""
        import json, sys, time
        sys.path.insert(0, sys.argv[1])
        from helpers.kube_plane import ControlPlane
        from pathlib import Path
        plane = ControlPlane(Path(sys.argv[2]))
        plane.start()
        print(json.dumps({"pids": plane.pids(), "workdir": str(plane.workdir)}), flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(Path(__file__).parent), str(kube_plane.build_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        started = json.loads(child.stdout.readline())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    pids, workdir = started["pids"], Path(started["workdir"])
    assert len(pids) == 6
    assert workdir.is_dir()

    def gone(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    wait("the components to end", lambda: all(gone(pid) for pid in pids), timeout=30)
    wait("the work directory to go", lambda: not workdir.exists(), timeout=15)
    assert os.getpid() not in pids


@pytest.mark.kube
@pytest.mark.parametrize("kube", ["real"], indirect=True)
def test_the_raycluster_is_ready_through_the_real_operator_which_keeps_our_commands(
    kube_plane: ControlPlane, deployed: tuple[Cluster, list[dict[str, Any]]]
) -> None:
    """(KubeFake copies the pod templates as they are: it has no generated ``ray start``,
    probes or init containers to compare; what it does keep is our commands.)"""
    from rl_lustre.kube.apply import wait_ready
    from rl_lustre.kube.raycluster import NODE_NAME_ENV, NODE_NAME_FLAG

    cluster, manifests = deployed
    wait_ready(kube_plane.api_client(), manifests, timeout=120)

    pods = (
        kube_both.core(kube_plane).list_namespaced_pod("default", label_selector=f"ray.io/cluster={cluster.name}").items
    )
    by_type: dict[str, list[Any]] = {}
    for pod in pods:
        by_type.setdefault(pod.metadata.labels["ray.io/node-type"], []).append(pod)
    assert len(by_type["head"]) == 1
    assert len(by_type["worker"]) == SPEC["num_nodes"]
    (head,) = by_type["head"]
    # The head on the on-demand CPU pool, the workers one per A4 Spot node.
    assert head.spec.node_name.startswith(f"gke-{cluster.name}-{naming.cpu_pool_name(cluster)}-")
    assert sorted(w.spec.node_name for w in by_type["worker"]) == sorted(
        n.metadata.name
        for n in kube_both.core(kube_plane)
        .list_node(label_selector=f"cloud.google.com/gke-nodepool={naming.gpu_pool_name(cluster)}")
        .items
    )

    # KubeRay honoured ray.io/overwrite-container-cmd: our commands run, and hand over to its
    # generated `ray start ... --block`.
    for pod in [head, *by_type["worker"]]:
        container = pod.spec.containers[0]
        assert container.command == ["/bin/bash", "-lc", "--"]
        # (A worker names its raylet after its Kubernetes node: the goodput ledger's join key.)
        suffix = f" {NODE_NAME_FLAG}" if pod in by_type["worker"] else ""
        assert container.args[0].endswith("exec ${KUBERAY_GEN_RAY_START_CMD}" + suffix)
        if suffix:
            names = {e.name: e.value_from for e in container.env}
            assert names[NODE_NAME_ENV].field_ref.field_path == "spec.nodeName"
        generated = {e.name: e.value for e in container.env}["KUBERAY_GEN_RAY_START_CMD"]
        assert generated.startswith("ray start")
        assert "--block" in generated
        # ... and added its exec probes, which the kubelet would run in the container.
        assert "local_raylet_healthz" in " ".join(container.readiness_probe._exec.command)
    assert "gcs_healthz" in " ".join(head.spec.containers[0].readiness_probe._exec.command)
    assert "--head" in {e.name: e.value for e in head.spec.containers[0].env}["KUBERAY_GEN_RAY_START_CMD"]
    for worker in by_type["worker"]:
        assert [c.name for c in worker.spec.init_containers] == ["wait-gcs-ready"]


def test_an_adopted_raycluster_whose_pod_template_changed_is_ready_without_waiting_out_the_timeout(
    kube: Any, deployed: tuple[Cluster, list[dict[str, Any]]]
) -> None:
    """KubeRay writes ``observedGeneration`` only along with another status change, and a
    template-only change (image, env) changes no status: the status stays at the old
    generation with every pod ready."""
    from kubernetes import client

    from rl_lustre.kube.apply import apply_manifests, wait_ready

    cluster, manifests = deployed
    api = kube.api_client()
    wait_ready(api, manifests, timeout=120)
    changed = json.loads(json.dumps(manifests))
    rc = next(m for m in changed if m["kind"] == "RayCluster")
    for group in (rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]):
        group["template"]["spec"]["containers"][0]["image"] = "rayproject/ray:2.60.1"
    actions = {a.kind: a.action for a in apply_manifests(api, changed, deployment=cluster.name)}
    assert actions["RayCluster"] == "adopted"

    custom = client.CustomObjectsApi(api)

    def stored() -> dict[str, Any]:
        got: dict[str, Any] = custom.get_namespaced_custom_object(
            "ray.io", "v1", "default", "rayclusters", cluster.name
        )
        return got

    time.sleep(3)  # the operator has reconciled the new generation by now, and written nothing
    now = stored()
    assert now["metadata"]["generation"] == 2
    assert now["status"]["observedGeneration"] == 1
    started = time.monotonic()
    wait_ready(api, changed, timeout=30)
    assert time.monotonic() - started < 10

    # A change the operator does act on (scale) is waited for until its status catches up.
    scaled = json.loads(json.dumps(changed))
    next(m for m in scaled if m["kind"] == "RayCluster")["spec"]["workerGroupSpecs"][0].update(
        replicas=1, minReplicas=1, maxReplicas=1
    )
    apply_manifests(api, scaled, deployment=cluster.name)
    wait_ready(api, scaled, timeout=60)
    assert stored()["status"]["desiredWorkerReplicas"] == 1
    # (readyWorkerReplicas may still count the worker being removed: ready >= desired holds.)
    wait(
        "one worker",
        lambda: (
            len(
                kube_both.core(kube)
                .list_namespaced_pod("default", label_selector=f"ray.io/cluster={cluster.name},ray.io/node-type=worker")
                .items
            )
            == 1
        ),
    )


def test_a_grown_lustre_volume_is_adopted_without_resizing_the_static_claim(
    kube: Any, deployed: tuple[Cluster, list[dict[str, Any]]]
) -> None:
    """A real API server refuses to resize a statically provisioned claim
    (``storageClassName: ""``) with 403 (admission plugin PersistentVolumeClaimResize); the
    volume's own capacity is what grows."""
    from rl_lustre.kube.apply import apply_manifests, wait_ready

    cluster, manifests = deployed
    api = kube.api_client()
    wait_ready(api, manifests, timeout=120)
    grown = json.loads(json.dumps(manifests))
    for m in grown:
        if m["kind"] == "PersistentVolume":
            m["spec"]["capacity"]["storage"] = "36000Gi"
        if m["kind"] == "PersistentVolumeClaim":
            m["spec"]["resources"]["requests"]["storage"] = "36000Gi"
    actions = {a.kind: a.action for a in apply_manifests(api, grown, deployment=cluster.name)}
    assert actions["PersistentVolume"] == "adopted"
    assert actions["PersistentVolumeClaim"] == "unchanged"
    core = kube_both.core(kube)
    pv = core.read_persistent_volume(naming.pv_name(cluster))
    assert pv.spec.capacity["storage"] == "36000Gi"
    claim = core.read_namespaced_persistent_volume_claim(naming.pvc_name(cluster), "default")
    assert claim.status.phase == "Bound"
    wait_ready(api, grown, timeout=30)
