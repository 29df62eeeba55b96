"""GKE clusters and node pools through the real ``ClusterManagerClient`` against the fake."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import grpc
import pytest
from google.cloud import container_v1
from helpers.polling import giving_up_after
from helpers.specs import GKE, PROJECT

from rl_lustre import Cluster
from rl_lustre.errors import (
    ConfigError,
    OperationFailedError,
    OwnershipError,
    QuotaExceededError,
    WaitTimeoutError,
)
from rl_lustre.gcp import _clients
from rl_lustre.gcp.container import GkeClusters, GkeNodePools, parent_of
from rl_lustre.gcp.container_requests import (
    cluster_path,
    cluster_request,
    node_pool_path,
    node_pool_request,
)
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

# The reference graph (one NIC); the fabric's requests are tested in test_fabric.py.
BASE = Cluster(
    **GKE,
    authorized_networks=["203.0.113.7/32", "198.51.100.0/24"],
    labels={"team": "rl"},
    fabric="tcp",
)
PLAN = BASE.plan()
# The preload image's path, which up() learns once it has found or built the image.
IMAGE = f"projects/{PROJECT}/global/images/rlp-0123456789-abcdefabcdef"


def gpu_pool(plan: Any = PLAN) -> container_v1.NodePool:
    return node_pool_request(plan, "gpu-pool", preload_image=IMAGE)


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP(latency={"gke.create_cluster": 0.05, "gke.create_node_pool": 0.04}) as fake:
        # The plan's own network and subnet, as the compute branch would have made them.
        fake.seed_network(PROJECT, "demo-net", subnet="demo-subnet", deployment="demo")
        # The preload image the GPU pool's secondary boot disk names, as up() would have built it.
        fake.seed_image(PROJECT, IMAGE.rsplit("/", 1)[1])
        # The nodes' account, as the node-sa step would have made it before the cluster.
        fake.iam.seed_account(PROJECT, "rl-demo-nodes")
        yield fake


def clusters() -> GkeClusters:
    return GkeClusters(backoff=FAST_BACKOFF, retry=FAST_RETRY)


def pools() -> GkeNodePools:
    return GkeNodePools(backoff=FAST_BACKOFF, retry=FAST_RETRY)


def test_cluster_request_settings() -> None:
    req = cluster_request(PLAN)
    addons = req.addons_config
    assert addons.lustre_csi_driver_config.enabled
    assert not addons.lustre_csi_driver_config.enable_legacy_lustre_port
    assert addons.ray_operator_config.enabled
    # Multi-NIC off on the RDMA fabric (eth1 is on a second gVNIC VPC without a route to
    # Lustre); the driver's default (on) where the node has one standard NIC.
    rdma = cluster_request(attrs.evolve(BASE, fabric="rdma").plan())
    assert rdma.addons_config.lustre_csi_driver_config.disable_multi_nic
    tcp = cluster_request(attrs.evolve(BASE, fabric="tcp").plan())
    assert not tcp.addons_config.lustre_csi_driver_config.disable_multi_nic
    man = req.master_authorized_networks_config
    assert man.enabled
    assert not man.gcp_public_cidrs_access_enabled
    assert [b.cidr_block for b in man.cidr_blocks] == ["203.0.113.7/32", "198.51.100.0/24"]
    assert req.workload_identity_config.workload_pool == f"{PROJECT}.svc.id.goog"
    policy = req.ip_allocation_policy
    assert (policy.use_ip_aliases, policy.cluster_secondary_range_name, policy.services_secondary_range_name) == (
        True,
        "pods",
        "services",
    )
    assert (req.network, req.subnetwork, list(req.locations)) == ("demo-net", "demo-subnet", ["us-east1-b"])
    assert dict(req.resource_labels) == {"team": "rl", "managed-by": "rl-lustre", "rl-lustre-deployment": "demo"}
    # The head's on-demand CPU pool is the cluster's only initial pool: no default pool.
    assert [p.name for p in req.node_pools] == ["ray-head-pool"]
    head = req.node_pools[0]
    assert (head.config.machine_type, head.config.spot, head.initial_node_count) == ("n2-highmem-16", False, 1)
    assert not head.config.accelerators
    assert not head.config.taints


def test_control_plane_is_never_silently_public() -> None:
    closed = cluster_request(attrs.evolve(BASE, authorized_networks=()).plan()).master_authorized_networks_config
    assert closed.enabled
    assert list(closed.cidr_blocks) == []
    assert not closed.gcp_public_cidrs_access_enabled
    opened = attrs.evolve(BASE, authorized_networks=["0.0.0.0/0"], public_control_plane=True)
    man = cluster_request(opened.plan()).master_authorized_networks_config
    assert man.enabled
    assert [b.cidr_block for b in man.cidr_blocks] == ["0.0.0.0/0"]


def cfg_labels(pool: container_v1.NodePool) -> dict[str, str]:
    return dict(pool.config.labels)


def test_gpu_pool_request() -> None:
    pool = gpu_pool()
    cfg = pool.config
    assert (pool.name, pool.initial_node_count, list(pool.locations)) == ("gpu-pool", 0, ["us-east1-b"])
    # A pool of the ComputeClass: empty until the cluster autoscaler brings nodes, at most num_nodes.
    scaling = pool.autoscaling
    assert (scaling.enabled, scaling.total_min_node_count, scaling.total_max_node_count) == (True, 0, 8)
    assert cfg_labels(pool) == {"cloud.google.com/compute-class": "demo-gpus", "rl-lustre/capacity": "spot"}
    assert (cfg.machine_type, cfg.spot, cfg.gvnic.enabled) == ("a4-highgpu-8g", True, True)
    [acc] = cfg.accelerators
    assert (acc.accelerator_type, acc.accelerator_count) == ("nvidia-b200", 8)
    latest = container_v1.GPUDriverInstallationConfig.GPUDriverVersion.LATEST
    assert acc.gpu_driver_installation_config.gpu_driver_version == latest
    no_schedule = container_v1.NodeTaint.Effect.NO_SCHEDULE
    assert [(t.key, t.value, t.effect) for t in cfg.taints] == [
        ("nvidia.com/gpu", "present", no_schedule),
        ("cloud.google.com/compute-class", "demo-gpus", no_schedule),  # only pods of the class land there
    ]
    assert cfg.disk_type == "hyperdisk-balanced"  # A4 boots only from Hyperdisk
    assert cfg.resource_labels["rl-lustre-deployment"] == "demo"

    # The nodes boot with the image preloaded: GKE wants Image streaming and COS containerd for it.
    [disk] = cfg.secondary_boot_disks
    assert (disk.disk_image, disk.mode) == (IMAGE, container_v1.SecondaryBootDisk.Mode.CONTAINER_IMAGE_CACHE)
    assert (cfg.gcfs_config.enabled, cfg.image_type) == (True, "COS_CONTAINERD")
    with pytest.raises(ConfigError, match="boots with the preload image"):
        node_pool_request(PLAN, "gpu-pool")
    theirs = node_pool_request(
        attrs.evolve(BASE, preload_image="projects/team-images/global/images/nemo").plan(), "gpu-pool"
    ).config
    assert theirs.secondary_boot_disks[0].disk_image == "projects/team-images/global/images/nemo"
    off = node_pool_request(attrs.evolve(BASE, preload_image=False).plan(), "gpu-pool").config
    assert (list(off.secondary_boot_disks), off.gcfs_config.enabled, off.image_type) == ([], False, "")
    assert not node_pool_request(PLAN, "cpu-pool").config.secondary_boot_disks

    reserved = gpu_pool(attrs.evolve(BASE, spot=False, reservation="a4-res").plan()).config
    assert not reserved.spot
    ra = reserved.reservation_affinity
    assert ra.consume_reservation_type == container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION
    assert (ra.key, list(ra.values)) == ("compute.googleapis.com/reservation-name", ["a4-res"])

    a3 = gpu_pool(attrs.evolve(BASE, machine_type="a3-highgpu-8g", accelerator_type=None).plan()).config
    assert a3.accelerators[0].accelerator_type == "nvidia-h100-80gb"
    assert a3.disk_type == ""


def _set_fields(message: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(message type, field name) for every field set in a proto-plus message, recursively."""
    pb = type(message).pb(message)

    def walk(msg: Any) -> Iterator[tuple[str, str]]:
        for field, value in msg.ListFields():
            yield msg.DESCRIPTOR.full_name, field.name
            if field.message_type is not None and not field.message_type.GetOptions().map_entry:
                for item in value if field.is_repeated else [value]:
                    yield from walk(item)

    yield from walk(pb)


def test_field_names_exist_in_the_reference_api(ref: Path) -> None:
    messages = json.loads((ref / "gcp-lustre-container-proto-fields.json").read_text())["container_v1"]["messages"]
    known = {m["full_name"]: {f["name"].rstrip("_") for f in m["fields"]} for m in messages.values()}
    checked = 0
    for message in (cluster_request(PLAN), gpu_pool()):
        for type_name, field in _set_fields(message):
            if type_name in known:
                assert field in known[type_name], f"{type_name}.{field} is not in the reference API"
                checked += 1
    assert checked >= 25


def test_create_cluster_reports_endpoint_and_ca(gcp: FakeGCP) -> None:
    gcp.kube_endpoint = "127.0.0.1:6443"
    gcp.kube_ca_pem = "-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n"
    done = clusters().create(cluster_request(PLAN), parent=parent_of(cluster_path(PLAN)), deployment="demo")
    assert not done.adopted
    assert done.name == cluster_path(PLAN) == "projects/my-project/locations/us-east1/clusters/demo"
    c = done.resource
    assert c.status == container_v1.Cluster.Status.RUNNING
    assert c.endpoint == "127.0.0.1:6443"
    assert base64.b64decode(c.master_auth.cluster_ca_certificate).decode() == gcp.kube_ca_pem
    # The head pool came with the cluster: its plan node adopts it, with no request to create it.
    head = pools().create(node_pool_request(PLAN, "cpu-pool"), cluster=done.name, deployment="demo")
    assert head.adopted
    assert head.name == node_pool_path(PLAN, "cpu-pool")
    assert gcp.request_counts()["gke.CreateNodePool"] == 0


def test_node_pool_create_adopt_delete_then_cluster_delete(gcp: FakeGCP) -> None:
    name = (
        clusters()
        .create(cluster_request(PLAN), parent="projects/my-project/locations/us-east1", deployment="demo")
        .name
    )
    gpu = pools().create(gpu_pool(), cluster=name, deployment="demo")
    assert not gpu.adopted
    assert gpu.resource.status == container_v1.NodePool.Status.RUNNING
    assert pools().create(gpu_pool(), cluster=name, deployment="demo").adopted
    assert gcp.request_counts()["gke.CreateNodePool"] == 1
    assert sorted(gcp.resources()["gke.nodePools"]) == [f"{name}/nodePools/gpu-pool", f"{name}/nodePools/ray-head-pool"]

    assert pools().delete(gpu.name, deployment="demo") is True
    assert pools().get_or_none(gpu.name) is None
    assert pools().delete(gpu.name, deployment="demo") is False
    assert clusters().delete(name, deployment="demo") is True
    assert clusters().delete(name, deployment="demo") is False
    assert gcp.resources()["gke.clusters"] == {}
    assert gcp.resources()["gke.nodePools"] == {}


def test_node_pool_waits_for_a_busy_cluster(gcp: FakeGCP) -> None:
    name = (
        clusters()
        .create(cluster_request(PLAN), parent="projects/my-project/locations/us-east1", deployment="demo", wait=False)
        .name
    )
    # GKE refuses pool creation while the cluster provisions; the adapter keeps trying
    # for the busy timeout, not just the few attempts other transient errors get.
    patient = GkeNodePools(backoff=FAST_BACKOFF, retry=attrs.evolve(giving_up_after(2), busy_timeout=5))
    done = patient.create(gpu_pool(), cluster=name, deployment="demo")
    assert done.resource.status == container_v1.NodePool.Status.RUNNING
    outcomes = [r.outcome for r in gcp.requests if r.method == "gke.CreateNodePool"]
    assert len(outcomes) > 2
    assert outcomes[0] == "FAILED_PRECONDITION"
    assert outcomes[-1] == "ok"


def test_unlabelled_cluster_of_the_same_name_is_refused(gcp: FakeGCP) -> None:
    theirs = container_v1.Cluster(name="demo", network="demo-net", subnetwork="demo-subnet", initial_node_count=1)
    _clients.cluster_manager().create_cluster(parent="projects/my-project/locations/us-east1", cluster=theirs)
    with pytest.raises(OwnershipError, match=r"GKE cluster .*demo"):
        clusters().create(cluster_request(PLAN), parent="projects/my-project/locations/us-east1", deployment="demo")
    with pytest.raises(OwnershipError):
        clusters().delete(cluster_path(PLAN), deployment="demo")
    assert gcp.request_counts()["gke.DeleteCluster"] == 0
    assert cluster_path(PLAN) in gcp.resources()["gke.clusters"]


def test_failed_cluster_creation_is_an_operation_error_and_stays_deletable(gcp: FakeGCP) -> None:
    gcp.faults.fail_operation("gke.CreateCluster", message="Internal error creating the control plane")
    with pytest.raises(OperationFailedError, match="control plane") as info:
        clusters().create(cluster_request(PLAN), parent="projects/my-project/locations/us-east1", deployment="demo")
    assert "create" in str(info.value)
    assert cluster_path(PLAN) in str(info.value)
    # GKE leaves the cluster in ERROR; it is ours, so a rollback can delete it.
    gke = [x for x in gcp.leaked("demo") if x.startswith("gke.")]
    assert gke == [f"gke.clusters {cluster_path(PLAN)}", f"gke.nodePools {node_pool_path(PLAN, 'cpu-pool')}"]
    assert clusters().delete(cluster_path(PLAN), deployment="demo")
    assert [x for x in gcp.leaked("demo") if x.startswith("gke.")] == []


def test_spot_stockout_names_zone_and_what_to_try(gcp: FakeGCP) -> None:
    name = (
        clusters()
        .create(cluster_request(PLAN), parent="projects/my-project/locations/us-east1", deployment="demo")
        .name
    )
    gcp.faults.fail_operation(
        "gke.CreateNodePool",
        code=grpc.StatusCode.RESOURCE_EXHAUSTED,
        message="ZONE_RESOURCE_POOL_EXHAUSTED: The zone 'projects/my-project/zones/us-east1-b' does not have "
        "enough resources available to fulfill the request.",
    )
    with pytest.raises(QuotaExceededError) as info:
        pools().create(gpu_pool(), cluster=name, deployment="demo")
    text = str(info.value)
    assert "us-east1-b" in text
    assert "gpu-pool" in text
    assert "another zone" in text
    assert "spot=False" in text
    assert "reservation" in text


def test_wait_timeout_carries_the_last_operation_state() -> None:
    with FakeGCP(latency={"gke.create_cluster": 5.0}) as gcp:
        gcp.seed_network(PROJECT, "demo-net", subnet="demo-subnet", deployment="demo")
        gcp.iam.seed_account(PROJECT, "rl-demo-nodes")
        with pytest.raises(WaitTimeoutError) as info:
            clusters().create(
                cluster_request(PLAN), parent="projects/my-project/locations/us-east1", deployment="demo", timeout=0.2
            )
        assert info.value.last_state == "RUNNING"
        assert isinstance(info.value, TimeoutError)
        assert "demo" in info.value.what


def test_both_pools_run_as_the_given_node_service_account_or_the_deployments_own() -> None:
    from rl_lustre.errors import ConfigError
    from rl_lustre.gcp.container_requests import node_pool_request

    email = "rl-nodes@my-project.iam.gserviceaccount.com"
    mine = attrs.evolve(BASE, node_service_account=email).plan()
    for key in ("cpu-pool", "gpu-pool"):
        assert mine.get(key).settings["service_account"] == email
        config = node_pool_request(mine, key, preload_image="projects/p/global/images/i").config
        assert config.service_account == email
        assert list(config.oauth_scopes) == ["https://www.googleapis.com/auth/cloud-platform"]
    assert cluster_request(mine).node_pools[0].config.service_account == email
    # By default: the deployment's own account (node-sa), with GKE's minimal node role, and the plan says so.
    ours = "rl-demo-nodes@my-project.iam.gserviceaccount.com"
    assert PLAN.get("gpu-pool").settings["service_account"] == ours
    assert "roles/container.defaultNodeServiceAccount" in PLAN.get("gpu-pool").settings["service_account_note"]
    assert cluster_request(PLAN).node_pools[0].config.service_account == ours
    # A domain-scoped project's (example.com:my-project) account is one too.
    scoped = "rl-nodes@my-project.example.com.iam.gserviceaccount.com"
    assert attrs.evolve(BASE, node_service_account=scoped).node_service_account == scoped
    for bad in (
        "rl-nodes",
        "RL@my-project.iam.gserviceaccount.com",
        "a@b.iam.gserviceaccount.com",
        "rl-nodes@my-project.iam.gserviceaccount.com\n",
        "rl-nodes@my-project..iam.gserviceaccount.com",
        "rl-nodes@my-project.-x.iam.gserviceaccount.com",
    ):
        with pytest.raises(ConfigError, match=r"node_service_account.*must be a service account e-mail"):
            attrs.evolve(BASE, node_service_account=bad)


def test_ray_logs_and_metrics_leave_the_head_and_the_fake_holds_the_request_to_gkes_rules(gcp: FakeGCP) -> None:
    """Issue 31, point 5: the Ray add-on's logging and monitoring are on, in plan() and in the
    request; the fake refuses them without the add-on, Cloud Logging or Managed Prometheus."""
    from rl_lustre.errors import GCPError

    plan_ray = PLAN.get("gke-cluster").settings["addons"]["ray_operator_config"]
    assert plan_ray == {
        "enabled": True,
        "ray_cluster_logging_config": {"enabled": True},
        "ray_cluster_monitoring_config": {"enabled": True},
    }
    assert "ray_cluster_logging_config: {enabled: true}" in str(PLAN)
    done = clusters().create(cluster_request(PLAN), parent=parent_of(cluster_path(PLAN)), deployment="demo")
    ray = done.resource.addons_config.ray_operator_config
    assert ray.ray_cluster_logging_config.enabled
    assert ray.ray_cluster_monitoring_config.enabled

    refusals = {
        "need the Ray operator add-on": lambda r: setattr(r.addons_config.ray_operator_config, "enabled", False),
        "needs Cloud Logging": lambda r: setattr(r, "logging_service", "none"),
        "needs Managed Service for Prometheus": lambda r: setattr(
            r.monitoring_config, "managed_prometheus_config", container_v1.ManagedPrometheusConfig(enabled=False)
        ),
    }
    for i, (words, spoil) in enumerate(refusals.items()):
        request = cluster_request(PLAN)
        request.name = f"demo-{i}"
        spoil(request)
        with pytest.raises(GCPError, match=words):
            clusters().create(request, parent=parent_of(cluster_path(PLAN)), deployment="demo")
