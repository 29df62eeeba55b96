"""Kubernetes manifests: schema-valid, and carrying the behaviour the deployment relies on."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import kubernetes_validate
import pytest
import yaml
from helpers.specs import REFERENCE
from kubernetes.utils import parse_quantity

from rl_lustre import Cluster, LustreVolume
from rl_lustre.catalog import GPU_MACHINE_TYPES, ownership_labels, ray_version_for_image
from rl_lustre.errors import ConfigError, GCPError
from rl_lustre.kube import schema as rl_lustre_schema
from rl_lustre.kube.manifests import build_manifests
from rl_lustre.kube.persistent_volume import CSI_DRIVER, PENDING_ANNOTATION

K8S_VERSION = "1.33.0"
PLANTED = "hf_PLANTED-s3cr3t-9f8e7d"


def gke(**kwargs: Any) -> Cluster:
    # The reference workflow's objects; fabric="rdma" adds its own (see the rdma variants).
    return Cluster(**{**REFERENCE, "fabric": "tcp", **kwargs})


def by_kind(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["kind"]: m for m in manifests}


def head_of(rc: dict[str, Any]) -> dict[str, Any]:
    return rc["spec"]["headGroupSpec"]


def workers_of(rc: dict[str, Any]) -> dict[str, Any]:
    (group,) = rc["spec"]["workerGroupSpecs"]
    return group


def container(group: dict[str, Any]) -> dict[str, Any]:
    (c,) = group["template"]["spec"]["containers"]
    return c


@pytest.fixture(scope="module")
def raycluster_schema() -> Any:
    """A validator for KubeRay's v1 schema as shipped in the package, unknown fields
    forbidden (the API server would silently prune a misspelt field); the schema itself
    is checked here once (slow) so that the library need not do it at run time."""
    schema = rl_lustre_schema.raycluster_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_all(manifests: list[dict[str, Any]], raycluster_schema: Any) -> None:
    """Core objects strictly against Kubernetes' schemas; the RayCluster against the CRD,
    and its pod templates as strict core Pods (the CRD embeds PodSpec loosely)."""
    from rl_lustre.kube.schema import validate_compute_class, validate_networking

    for m in manifests:
        if m["apiVersion"] == "networking.gke.io/v1":
            validate_networking(m)
        elif m["kind"] == "ComputeClass":
            validate_compute_class(m)
        elif m["apiVersion"] == "ray.io/v1":
            raycluster_schema.validate(m)
            groups = [head_of(m), *m["spec"]["workerGroupSpecs"]]
            for group in groups:
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "template", **group["template"]["metadata"]},
                    "spec": group["template"]["spec"],
                }
                kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        else:
            kubernetes_validate.validate(m, K8S_VERSION, strict=True)


# -- schema validity -------------------------------------------------------------------


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param({}, id="reference-defaults"),
        pytest.param({"head_on_gpu_pool": True}, id="head-on-gpu-pool"),
        pytest.param({"spot": False, "reservation": "a4-reservation"}, id="reservation-not-spot"),
        pytest.param(
            {
                "machine_type": "a3-highgpu-4g",
                "num_nodes": 2,
                "namespace": "rl",
                "mount_path": "/mnt/lustre",
                "labels": {"team": "post-training"},
                "secrets": (),
            },
            id="a3-custom-namespace-no-secrets",
        ),
        pytest.param({"head_machine_type": "e2-standard-4"}, id="small-head"),
        pytest.param({"fabric": "rdma"}, id="rdma-fabric"),
    ],
)
def test_manifests_validate(variant: dict[str, Any], raycluster_schema: Any) -> None:
    manifests = build_manifests(gke(**variant))
    kinds = [m["kind"] for m in manifests]
    core = ["PersistentVolume", "PersistentVolumeClaim", "Secret", "ServiceAccount", "Role", "RoleBinding"]
    assert kinds[-9:] == [*core, "ClusterRole", "ClusterRoleBinding", "RayCluster"]
    assert len(kinds) == (10 + 9 + 9 + 1 if variant.get("fabric") == "rdma" else 10)
    assert kinds[-10] == "ComputeClass"
    validate_all(manifests, raycluster_schema)


def test_the_head_may_get_nodes_through_a_cluster_role_of_its_deployment_and_namespace() -> None:
    # Nodes are cluster-scoped: a ClusterRole, named after the namespace as well, so that two
    # deployments of one name in two namespaces do not share (or delete) one another's.
    objs = {ns: by_kind(build_manifests(gke(namespace=ns))) for ns in ("team-a", "team-b")}
    role, binding = objs["team-a"]["ClusterRole"], objs["team-a"]["ClusterRoleBinding"]
    assert role["metadata"]["name"] == binding["metadata"]["name"] == "ray-a4-gpu-spot-ray-head.team-a"
    assert objs["team-b"]["ClusterRole"]["metadata"]["name"] == "ray-a4-gpu-spot-ray-head.team-b"
    assert "namespace" not in role["metadata"]
    assert "namespace" not in binding["metadata"]
    # Read only, one resource, and not even a list: the supervisor knows its nodes' names.
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ray-a4-gpu-spot-ray-head", "namespace": "team-a"}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "ray-a4-gpu-spot-ray-head.team-a",
    }
    # The head pod runs as that account; our labels make the objects ours to adopt and delete.
    rc = objs["team-a"]["RayCluster"]
    assert head_of(rc)["template"]["spec"]["serviceAccountName"] == binding["subjects"][0]["name"]
    for obj in (role, binding):
        assert ownership_labels("ray-a4-gpu-spot").items() <= obj["metadata"]["labels"].items()


def test_live_volume_and_unredacted_secret_validate(raycluster_schema: Any) -> None:
    cluster = gke(fabric="rdma")
    assert cluster.volume is not None
    cluster.volume._live.mount_point = "10.90.1.4@tcp:/lustrefs"
    validate_all(build_manifests(cluster, secret_values={"HF_TOKEN": PLANTED}, redact=False), raycluster_schema)


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        (("spec", "headGroupSpec", "template", "spec", "nodeSelectr"), {"a": "b"}),
        (("spec", "headGroupSpec", "rayStartParams", "num-gpus"), 0),
        (("spec", "rayVersion"), 2.46),
    ],
)
def test_schema_check_is_not_vacuous(path: tuple[str, ...], bad: Any, raycluster_schema: Any) -> None:
    rc = copy.deepcopy(by_kind(build_manifests(gke()))["RayCluster"])
    node = rc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    with pytest.raises(jsonschema.ValidationError):
        raycluster_schema.validate(rc)


def test_core_schema_check_is_not_vacuous() -> None:
    pv = copy.deepcopy(by_kind(build_manifests(gke()))["PersistentVolume"])
    pv["spec"]["persistentVolumeReclaimPolicyy"] = "Retain"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pv, K8S_VERSION, strict=True)


# -- PersistentVolume and claim ----------------------------------------------------------


def test_pv_uses_three_part_volume_handle_and_retains_data() -> None:
    cluster = gke()
    pv = by_kind(build_manifests(cluster))["PersistentVolume"]
    csi = pv["spec"]["csi"]
    assert csi["driver"] == CSI_DRIVER == "lustre.csi.storage.gke.io"
    project, zone, instance = csi["volumeHandle"].split("/")
    assert (project, zone, instance) == ("my-project", "us-east1-b", "ray-a4-gpu-spot-lustre")
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["storageClassName"] == ""


def test_pv_reads_ip_and_filesystem_from_mount_point() -> None:
    cluster = gke(volume=LustreVolume(name="shared-ckpt", filesystem="lustrefs"))
    assert cluster.volume is not None
    cluster.volume._live.mount_point = "10.90.1.4@tcp:/scratch1"  # as refresh() would
    pv = by_kind(build_manifests(cluster))["PersistentVolume"]
    # The server's fsname wins over the spec's.
    assert pv["spec"]["csi"]["volumeAttributes"] == {"ip": "10.90.1.4", "filesystem": "scratch1"}
    assert PENDING_ANNOTATION not in pv["metadata"].get("annotations", {})


def test_pv_before_the_instance_exists_is_marked_pending() -> None:
    cluster = gke(volume=LustreVolume(name="shared-ckpt", filesystem="ckpts"))
    pv = by_kind(cluster.manifests())["PersistentVolume"]
    attrs_ = pv["spec"]["csi"]["volumeAttributes"]
    assert attrs_["filesystem"] == "ckpts"
    assert attrs_["ip"].startswith("<")  # not something that looks like an address
    assert "shared-ckpt" in pv["metadata"]["annotations"][PENDING_ANNOTATION]


def test_unparseable_mount_point_is_a_gcp_error() -> None:
    cluster = gke()
    assert cluster.volume is not None
    cluster.volume._live.mount_point = "10.90.1.4:/lustrefs"
    with pytest.raises(GCPError, match="IP@tcp:/fsname"):
        build_manifests(cluster)


def test_pvc_binds_to_pv_with_matching_capacity() -> None:
    cluster = gke(volume=LustreVolume(name="big", capacity_gib=36_000, throughput_mbps_per_tib=500), namespace="rl")
    found = by_kind(build_manifests(cluster))
    pv, pvc = found["PersistentVolume"], found["PersistentVolumeClaim"]
    assert pv["spec"]["claimRef"] == {"namespace": "rl", "name": pvc["metadata"]["name"]}
    assert pvc["metadata"]["namespace"] == "rl"
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"] == ""
    requested = parse_quantity(pvc["spec"]["resources"]["requests"]["storage"])
    assert requested == parse_quantity(pv["spec"]["capacity"]["storage"]) == 36_000 * 1024**3


# -- secrets -------------------------------------------------------------------------------


def test_secret_values_never_appear_when_redacted() -> None:
    manifests = build_manifests(gke(), secret_values={"HF_TOKEN": PLANTED})
    dumped = json.dumps(manifests) + repr(manifests) + yaml.safe_dump_all(manifests)
    assert PLANTED not in dumped
    secret = by_kind(manifests)["Secret"]
    assert secret["type"] == "Opaque"
    assert secret["stringData"] == {"HF_TOKEN": "<redacted>"}


def test_manifests_shows_every_declared_secret_redacted() -> None:
    secret = by_kind(gke(secrets=("HF_TOKEN", "WANDB_API_KEY", "EXTRA")).manifests())["Secret"]
    assert secret["stringData"] == dict.fromkeys(("HF_TOKEN", "WANDB_API_KEY", "EXTRA"), "<redacted>")


def test_unredacted_secret_serialises_real_value_but_prints_redacted() -> None:
    manifests = build_manifests(gke(), secret_values={"HF_TOKEN": PLANTED}, redact=False)
    secret, rc = by_kind(manifests)["Secret"], by_kind(manifests)["RayCluster"]
    assert json.loads(json.dumps(secret))["stringData"] == {"HF_TOKEN": PLANTED}
    assert PLANTED not in repr(manifests)
    assert PLANTED not in str(manifests)
    assert PLANTED not in json.dumps(rc)
    with pytest.raises(yaml.representer.RepresenterError):
        yaml.safe_dump(secret)


def test_secret_value_for_undeclared_name_is_rejected_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as info:
        build_manifests(gke(), secret_values={"HF_TOKNE": PLANTED})
    assert info.value.field == "secret_values"
    assert "HF_TOKNE" in str(info.value)
    assert PLANTED not in str(info.value)


def test_pods_read_secrets_through_optional_secret_key_refs() -> None:
    cluster = gke()
    found = by_kind(build_manifests(cluster))
    secret_name = found["Secret"]["metadata"]["name"]
    rc = found["RayCluster"]
    for group in (head_of(rc), workers_of(rc)):
        env = {e["name"]: e for e in container(group)["env"]}
        for name in cluster.secrets:
            assert "value" not in env[name]
            assert env[name]["valueFrom"]["secretKeyRef"] == {"name": secret_name, "key": name, "optional": True}


def test_ray_token_auth_hook() -> None:
    cluster = gke(image="rayproject/ray:2.52.0", secrets=("HF_TOKEN", "RAY_AUTH_TOKEN"))
    rc = by_kind(build_manifests(cluster))["RayCluster"]
    for group in (head_of(rc), workers_of(rc)):
        env = {e["name"]: e for e in container(group)["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        # Without the token Ray would come up unauthenticated: the pod must not start.
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is False


def test_ray_token_auth_on_an_old_ray_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"2\.52\.0") as info:
        build_manifests(gke(secrets=("RAY_AUTH_TOKEN",)))  # nemo-rl v0.4.0 ships Ray 2.46.0
    assert info.value.field == "secrets"


# -- RayCluster ---------------------------------------------------------------------------


def test_ray_version_is_the_images_ray() -> None:
    cluster = gke()
    rc = by_kind(build_manifests(cluster))["RayCluster"]
    assert rc["apiVersion"] == "ray.io/v1"
    assert rc["metadata"]["name"] == cluster.name
    assert rc["spec"]["rayVersion"] == ray_version_for_image(cluster.image) == "2.46.0"
    assert container(head_of(rc))["image"] == container(workers_of(rc))["image"] == cluster.image


def test_head_is_not_on_spot_or_gpu_nodes_by_default() -> None:
    rc = by_kind(build_manifests(gke()))["RayCluster"]
    head = head_of(rc)
    spec = head["template"]["spec"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-nodepool": "ray-head-pool"}
    assert "tolerations" not in spec  # cannot land on tainted GPU nodes
    res = container(head)["resources"]
    assert not any("nvidia.com/gpu" in res.get(k, {}) for k in ("limits", "requests"))
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in container(head)["ports"]}
    assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001}
    assert container(head)["name"] == "ray-head"


@pytest.mark.parametrize(
    ("machine", "vcpus", "gib"),
    [("n2-highmem-16", 16, 128), ("e2-standard-4", 4, 16), ("c3-highcpu-8", 8, 16), ("n1-standard-8", 8, 30)],
)
def test_head_requests_fit_its_machine(machine: str, vcpus: int, gib: int) -> None:
    res = container(head_of(by_kind(build_manifests(gke(head_machine_type=machine)))["RayCluster"]))["resources"]
    for kind in ("requests", "limits"):
        assert parse_quantity(res[kind]["cpu"]) < vcpus
        assert parse_quantity(res[kind]["memory"]) < gib * 1024**3
    assert parse_quantity(res["requests"]["cpu"]) <= parse_quantity(res["limits"]["cpu"])
    assert parse_quantity(res["requests"]["memory"]) <= parse_quantity(res["limits"]["memory"])


def test_head_on_gpu_pool_uses_reference_placement() -> None:
    cluster = gke(head_on_gpu_pool=True)
    head = head_of(by_kind(build_manifests(cluster))["RayCluster"])
    spec = head["template"]["spec"]
    assert spec["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-b200"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert "rayStartParams" in head
    # The head shares a GPU node with a worker: together they must fit the machine.
    machine = GPU_MACHINE_TYPES[cluster.machine_type]
    head_req = container(head)["resources"]["requests"]
    assert parse_quantity(head_req["cpu"]) + parse_quantity(machine.worker_cpu) <= machine.vcpus
    assert parse_quantity(head_req["memory"]) + parse_quantity(machine.worker_memory) <= machine.memory_gib * 1024**3


def test_workers_on_the_gpu_nodes_of_the_compute_class() -> None:
    cluster = gke()
    group = workers_of(by_kind(build_manifests(cluster))["RayCluster"])
    assert group["groupName"] == "gpu-workers"
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == cluster.num_nodes == 8
    spec = group["template"]["spec"]
    # Whichever pool (kind, zone) the nodes come from: never one pool's name, nor Spot's label.
    assert spec["nodeSelector"] == {
        "cloud.google.com/compute-class": "ray-a4-gpu-spot-gpus",
        "cloud.google.com/gke-accelerator": "nvidia-b200",
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert {
        "key": "cloud.google.com/compute-class",
        "operator": "Equal",
        "value": "ray-a4-gpu-spot-gpus",
        "effect": "NoSchedule",
    } in spec["tolerations"]
    c = container(group)
    assert c["name"] == "ray-worker"
    machine = GPU_MACHINE_TYPES["a4-highgpu-8g"]
    for kind in ("limits", "requests"):
        assert c["resources"][kind] == {
            "nvidia.com/gpu": "8",
            "cpu": machine.worker_cpu,
            "memory": machine.worker_memory,
        }
    # The Ray node is named after its Kubernetes node: KubeRay's command runs in bash, unquoted.
    assert group["rayStartParams"] == {"node-name": "$RL_LUSTRE_NODE_NAME"}
    assert {"name": "RL_LUSTRE_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in c["env"]


def test_reservation_workers_do_not_ask_for_spot() -> None:
    cluster = gke(spot=False, reservation="a4-reservation", machine_type="a3-highgpu-4g", num_nodes=3)
    group = workers_of(by_kind(build_manifests(cluster))["RayCluster"])
    assert group["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/compute-class": "ray-a4-gpu-spot-gpus",
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
    }
    assert group["replicas"] == 3
    assert container(group)["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_shm_in_memory_and_lustre_at_mount_path() -> None:
    cluster = gke(mount_path="/mnt/lustre")
    found = by_kind(build_manifests(cluster))
    claim = found["PersistentVolumeClaim"]["metadata"]["name"]
    rc = found["RayCluster"]
    for group in (head_of(rc), workers_of(rc)):
        volumes = {v["name"]: v for v in group["template"]["spec"]["volumes"]}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container(group)["volumeMounts"]}
        assert mounts["/dev/shm"]["emptyDir"] == {"medium": "Memory"}
        assert mounts["/mnt/lustre"]["persistentVolumeClaim"] == {"claimName": claim}
        env = {e["name"]: e.get("value") for e in container(group)["env"]}
        assert env["HF_HOME"] == "/mnt/lustre/huggingface_cache"
        assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "eth0"


def test_ray_start_params_present_on_every_group() -> None:
    for cluster in (gke(), gke(head_on_gpu_pool=True)):
        rc = by_kind(build_manifests(cluster))["RayCluster"]
        groups = [head_of(rc), *rc["spec"]["workerGroupSpecs"]]
        assert all(isinstance(g.get("rayStartParams"), dict) for g in groups)


# -- labels, backends, purity --------------------------------------------------------------


def test_every_object_and_pod_carries_ownership_and_user_labels() -> None:
    # (A user label cannot disown what we created: Cluster refuses our label keys.)
    cluster = gke(labels={"team": "post-training"})
    expected = ownership_labels(cluster.name) | {"team": "post-training"}
    manifests = build_manifests(cluster)
    rc = by_kind(manifests)["RayCluster"]
    labelled = [m["metadata"] for m in manifests] + [
        g["template"]["metadata"] for g in (head_of(rc), *rc["spec"]["workerGroupSpecs"])
    ]
    for meta in labelled:
        assert meta["labels"] == expected


@pytest.mark.parametrize("labels", [{"team": "-core"}, {"team": "core_"}, {"team-": "core"}])
def test_labels_kubernetes_rejects_are_config_errors(labels: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        build_manifests(gke(labels=labels))
    assert info.value.field.startswith("labels[")


def test_local_cluster_has_no_manifests(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_manifests(Cluster.local("laptop", volume_dir=tmp_path))
    assert info.value.field == "backend"
    assert isinstance(info.value, ValueError)


def test_manifests_are_plain_json_and_fresh_each_call() -> None:
    cluster = gke()
    first = cluster.manifests()
    assert json.loads(json.dumps(first)) == first
    # The RayCluster (the keeper's objects come after it).
    ray_at = next(i for i, m in enumerate(first) if m["kind"] == "RayCluster")
    first[ray_at]["spec"]["workerGroupSpecs"][0]["replicas"] = 99
    first[0]["metadata"]["labels"]["x"] = "y"
    second = cluster.manifests()
    assert second[ray_at]["kind"] == "RayCluster"
    assert second[ray_at]["spec"]["workerGroupSpecs"][0]["replicas"] == 8
    assert "x" not in second[0]["metadata"]["labels"]
    assert second == attrs.evolve(cluster).manifests()
    # build_manifests has the core objects, in the same order; manifests() adds the start-up
    # ones, and the keeper's after the RayCluster.
    core = build_manifests(cluster)
    assert [m for m in second[: ray_at + 1] if m["kind"] not in ("DaemonSet", "Job")] == core
    assert [m["kind"] for m in second[ray_at + 1 :]] == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
    ]


def test_a_raycluster_the_crd_rejects_is_a_config_error_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rl_lustre.kube import raycluster as module

    build = module._ray_cluster

    def misspelt(cluster: Cluster, labels: dict[str, str]) -> dict[str, Any]:
        rc = build(cluster, labels)
        rc["spec"]["headGroupSpec"]["rayStartparams"] = rc["spec"]["headGroupSpec"].pop("rayStartParams")
        return rc

    monkeypatch.setattr(module, "_ray_cluster", misspelt)
    with pytest.raises(ConfigError) as info:
        gke().manifests()
    assert (info.value.owner, info.value.field, info.value.value) == (
        "RayCluster",
        "spec.headGroupSpec",
        "rayStartparams",
    )
    assert "rayStartParams" in info.value.rule  # the known fields are listed


def test_the_kuberay_schema_ships_with_its_provenance() -> None:
    notice = (rl_lustre_schema.CRD_FILE.parent / "NOTICE").read_text()
    assert "ray-project/kuberay" in notice
    assert "feeaf72facab4881ba2b179248bb67315634e229" in notice
    assert "Apache" in notice
    assert '"description"' not in rl_lustre_schema.CRD_FILE.read_text()
