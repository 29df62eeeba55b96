"""The GPUDirect-RDMA fabric (``Cluster.fabric``): spec rules, plan, requests, manifests,
and ``up()`` / ``down()`` on the protocol fakes.

The fault-at-each-step rollbacks of the fabric's Google Cloud steps are part of
``test_provision_gke.test_a_fault_at_any_step_rolls_back_to_nothing``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.cloud import compute_v1, container_v1
from helpers.specs import GKE, PROJECT

from rl_lustre import Cluster
from rl_lustre.errors import ConfigError, GCPError, ProvisioningError
from rl_lustre.gcp import GkeClusters, GkeNodePools, Networks
from rl_lustre.gcp.compute import network_request
from rl_lustre.gcp.container_requests import cluster_request, node_pool_request
from rl_lustre.kube.schema import validate_networking
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

# The Ray head reads its pods' events (a Role) and its flex-start nodes' ends (a ClusterRole).
HEAD_ACCESS_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
KEEPER_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment")  # applied after the RayCluster
FABRIC_KINDS = ("networking.gke.io/v1/GKENetworkParamSet", "networking.gke.io/v1/Network", "apps/v1/DaemonSet")


def spec(**kw: object) -> Cluster:
    # Without the start-up nodes (image pre-pull, model prefetch): their tests are elsewhere.
    base: dict[str, object] = {
        **GKE,
        "num_nodes": 2,
        "prefetch_models": (),
        "prepull_image": False,
        "preload_image": False,
    }
    return Cluster(**{**base, **kw})  # type: ignore[arg-type]


def backend(cluster: Cluster, **kw: object):
    from rl_lustre.backends.gke import GKEBackend

    return GKEBackend(cluster, backoff=FAST_BACKOFF, retry=FAST_RETRY, **kw)  # type: ignore[arg-type]


def test_fabric_defaults_to_rdma_only_where_the_machine_has_rdma_nics() -> None:
    assert spec().fabric == "rdma"
    assert spec(machine_type="a3-ultragpu-8g").fabric == "rdma"
    assert spec(machine_type="a3-megagpu-8g").fabric == "tcp"
    assert Cluster.local("demo", volume_dir="/tmp/rl-fabric").fabric == "tcp"
    with pytest.raises(ConfigError) as info:
        spec(machine_type="a3-megagpu-8g", fabric="rdma")
    assert isinstance(info.value, ValueError)
    assert "Cluster.fabric='rdma'" in str(info.value)
    assert "a3-megagpu-8g" in str(info.value)
    with pytest.raises(ConfigError, match=r"Cluster\.fabric='infiniband'"):
        spec(fabric="infiniband")
    with pytest.raises(ConfigError, match="maintenance_exclusion"):
        spec(maintenance_exclusion="NO_UPGRADES")


def ray_cluster(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (rc,) = [o for o in objs if o["kind"] == "RayCluster"]
    return rc


def test_tcp_plans_none_of_the_fabric() -> None:
    tcp, rdma = spec(fabric="tcp").plan(), spec().plan()
    added = set(rdma.keys()) - set(tcp.keys())
    assert len(added) == 11 + 18 + 1  # 2 VPCs + 9 subnets, 9 + 9 network objects, the installer
    assert not {r.kind for r in tcp} & set(FABRIC_KINDS)
    assert "network_config" not in tcp.get("gke-cluster").settings
    assert "additional_node_networks" not in tcp.get("gpu-pool").settings
    assert node_pool_request(tcp, "gpu-pool").network_config.additional_node_network_configs == []
    assert [m["kind"] for m in spec(fabric="tcp").manifests()] == [
        "ComputeClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "Secret",
        *HEAD_ACCESS_KINDS,
        "RayCluster",
        *KEEPER_KINDS,
    ]


def test_the_plan_shows_the_fabric_and_keeps_it_off_the_lustre_branch() -> None:
    plan = spec().plan()
    assert plan.get("gpu-pool").depends_on == (
        "gke-cluster",
        "node-sa",
        "gvnic-subnet",
        *(f"rdma-subnet-{i}" for i in range(8)),
        "compute-class",
    )
    fabric = {r.key for r in plan if r.key.startswith(("gvnic-", "rdma-", "netparams-", "podnet-", "nccl-"))}
    assert not fabric & plan.upstream("lustre")
    assert plan.upstream("raycluster") >= {"nccl-installer", *(f"podnet-rdma-{i}" for i in range(8))}
    roce = plan.get("rdma-network").settings
    assert roce["mtu"] == 8896
    assert roce["network_profile"].endswith("/networkProfiles/us-east1-b-vpc-roce")
    assert plan.get("network").settings["mtu"] == 8896
    text = str(plan)
    for needle in (
        "ADVANCED_DATAPATH",
        "NO_MINOR_OR_NODE_UPGRADES",
        "1.33.2-gke.4780000",
        "demo-rdma-sub-7",
        "ephemeral_storage_local_ssd_count: 32",
        "max_surge: 0",
        "nccl-rdma-installer",
    ):
        assert needle in text
    json.dumps(plan.to_dict())


def test_requests_carry_the_fabric() -> None:
    plan = spec().plan()
    req = cluster_request(plan)
    assert req.network_config.datapath_provider == container_v1.DatapathProvider.ADVANCED_DATAPATH
    assert req.network_config.enable_multi_networking
    ((_name, window),) = req.maintenance_policy.window.maintenance_exclusions.items()
    assert window.maintenance_exclusion_options.scope.name == "NO_MINOR_OR_NODE_UPGRADES"
    assert window.maintenance_exclusion_options.end_time_behavior.name == "UNTIL_END_OF_SUPPORT"
    pool = node_pool_request(plan, "gpu-pool")
    extra = [(n.network, n.subnetwork) for n in pool.network_config.additional_node_network_configs]
    assert extra[0] == ("demo-gvnic-net", "demo-gvnic-sub")
    assert extra[1:] == [("demo-rdma-net", f"demo-rdma-sub-{i}") for i in range(8)]
    assert pool.config.ephemeral_storage_local_ssd_config.local_ssd_count == 32
    assert (pool.upgrade_settings.max_surge, pool.upgrade_settings.max_unavailable) == (0, 1)
    assert network_request(plan, "rdma-network").mtu == 8896
    assert spec(maintenance_exclusion=None).plan().get("gke-cluster").settings.get("maintenance_exclusion") is None


def test_worker_pods_use_the_fabric() -> None:
    objs = spec().manifests()
    rc = ray_cluster(objs)
    assert rc["metadata"]["annotations"] == {"ray.io/overwrite-container-cmd": "true"}
    worker = rc["spec"]["workerGroupSpecs"][0]["template"]
    ifaces = json.loads(worker["metadata"]["annotations"]["networking.gke.io/interfaces"])
    assert ifaces[0] == {"interfaceName": "eth0", "network": "default"}
    assert [i["network"] for i in ifaces[1:]] == [f"rdma-{i}" for i in range(8)]
    container = worker["spec"]["containers"][0]
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/usr/local/gib", "/usr/local/nvidia"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NCCL_NET"] == "gIB"
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "source /usr/local/gib/scripts/set_nccl_env.sh" in container["args"][0]
    # KubeRay's command, then the Ray node's name: the Kubernetes node's (expanded by the shell;
    # a value inside KUBERAY_GEN_RAY_START_CMD would not be).
    assert container["args"][0].endswith("exec ${KUBERAY_GEN_RAY_START_CMD} --node-name=$RL_LUSTRE_NODE_NAME")
    assert {"name": "RL_LUSTRE_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container[
        "env"
    ]
    assert "node-name" not in rc["spec"]["workerGroupSpecs"][0]["rayStartParams"]
    assert container["resources"]["requests"]["ephemeral-storage"].endswith("Gi")
    assert worker["spec"]["nodeSelector"]["cloud.google.com/gke-ephemeral-storage-local-ssd"] == "true"
    head = rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["args"] == ["ulimit -n 65536; exec ${KUBERAY_GEN_RAY_START_CMD}"]


@pytest.mark.parametrize("fabric", ["rdma", "tcp"])
def test_the_gke_fakes_gpu_nodes_match_the_worker_pods_node_selector(fabric: str) -> None:
    # GKE labels a node whose ephemeral storage is on local SSDs; the fake must too, or the
    # workers would land on no registered node (and nothing pre-pulled would help them).
    from rl_lustre.catalog import GKE_LOCAL_SSD_LABEL
    from rl_lustre.testing._gke import node_labels

    c = spec(fabric=fabric)
    request = node_pool_request(c.plan(), "gpu-pool")
    labels = {
        **node_labels(request),
        **request.config.labels,  # the pool's own node labels: the ComputeClass's among them
        "cloud.google.com/gke-nodepool": c.plan().get("gpu-pool").name,
    }
    worker = ray_cluster(c.manifests())["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["nodeSelector"].items() <= labels.items()
    assert (GKE_LOCAL_SSD_LABEL in labels) == (fabric == "rdma")


def test_networking_objects_are_checked_against_the_vendored_schemas() -> None:
    objs = [o for o in spec().manifests() if o["apiVersion"] == "networking.gke.io/v1"]
    assert len(objs) == 18
    for obj in objs:
        validate_networking(obj)
    bad = json.loads(json.dumps(objs[-1]))
    bad["spec"]["parametersRef"]["kind"] = "Network"
    with pytest.raises(ConfigError, match=r"Network\.spec\.parametersRef\.kind"):
        validate_networking(bad)
    extra = json.loads(json.dumps(objs[0]))
    extra["spec"]["mtu"] = 8896
    with pytest.raises(ConfigError, match="Additional properties"):
        validate_networking(extra)


def test_the_fakes_reject_malformed_fabric_requests_loudly(gcp: FakeGCP) -> None:
    from rl_lustre.gcp import _clients

    nets = _clients.compute(compute_v1.NetworksClient)
    with pytest.raises(Exception, match="mtu"):
        nets.insert_unary(
            project=PROJECT, network_resource=compute_v1.Network(name="jumbo", auto_create_subnetworks=False, mtu=9000)
        )
    with pytest.raises(Exception, match="networkProfile"):
        nets.insert_unary(
            project=PROJECT,
            network_resource=compute_v1.Network(
                name="roce", auto_create_subnetworks=False, network_profile="projects/other/global/networkProfiles/x"
            ),
        )
    plan = spec().plan()
    bad = cluster_request(plan)
    bad.network_config.datapath_provider = container_v1.DatapathProvider.LEGACY_DATAPATH
    gcp.seed_network(PROJECT, "demo-net", subnet="demo-subnet", psa_range=None, deployment="demo")
    gcp.iam.seed_account(PROJECT, "rl-demo-nodes")  # as node-sa would have made it
    with pytest.raises(GCPError, match="Dataplane V2"):
        GkeClusters(backoff=FAST_BACKOFF).create(
            bad, parent=f"projects/{PROJECT}/locations/us-east1", deployment="demo"
        )
    # A pool on networks that do not exist.
    ok = cluster_request(spec(fabric="tcp").plan())
    ok.network_config = container_v1.NetworkConfig(
        datapath_provider=container_v1.DatapathProvider.ADVANCED_DATAPATH, enable_multi_networking=True
    )
    GkeClusters(backoff=FAST_BACKOFF).create(ok, parent=f"projects/{PROJECT}/locations/us-east1", deployment="demo")
    with pytest.raises(GCPError, match="does not exist"):
        GkeNodePools(backoff=FAST_BACKOFF).create(
            node_pool_request(plan, "gpu-pool"),
            cluster=f"projects/{PROJECT}/locations/us-east1/clusters/demo",
            deployment="demo",
        )
    assert gcp.requests[-1].outcome != "ok"


def test_up_creates_the_fabric_everywhere_and_down_removes_it_in_dependency_order() -> None:
    from rl_lustre.testing.kube import KubeFake, schema_validator

    # FakeGCP gives KubeFake its node pools: the ComputeClass's GPU nodes come by the fake autoscaler.
    with KubeFake(validate=schema_validator()) as kube, FakeGCP(kube=kube) as gcp:
        cluster = spec(secrets=())
        b = backend(cluster)
        report = b.up()
        assert report.keys("created") == [r.key for r in cluster.plan() if r.action == "create"]
        kinds = [f"{o['apiVersion']}/{o['kind']}" for o in kube.objects()]
        assert kinds.count("networking.gke.io/v1/GKENetworkParamSet") == 9
        assert kinds.count("networking.gke.io/v1/Network") == 9
        assert kinds.count("apps/v1/DaemonSet") == 1
        for obj in kube.objects():
            if f"{obj['apiVersion']}/{obj['kind']}" in FABRIC_KINDS:
                assert obj["metadata"]["labels"]["rl-lustre-deployment"] == "demo"
        assert kube.rejected == []
        nets = {n.split("/")[-1] for n in gcp.resources()["compute.networks"]}
        assert nets == {"demo-net", "demo-gvnic-net", "demo-rdma-net"}
        assert (
            Networks(backoff=FAST_BACKOFF).get_or_none(f"projects/{PROJECT}/global/networks/demo-rdma-net").mtu == 8896
        )
        assert len(gcp.resources()["compute.subnetworks"]) == 10

        before = len(gcp.requests)
        down = b.down()
        assert {k: r.outcome for k, r in down.records.items() if r.outcome != "deleted"} == {}
        gcp.settle()
        assert {k: v for k, v in gcp.resources().items() if v} == {}
        # Dependency order: the extra subnets only once the cluster (and its GPU pool) is
        # gone, each VPC after its subnets.
        done = {}
        for i, r in enumerate(gcp.requests[before:]):
            if r.method.endswith((".delete", "Delete" + "Cluster")):
                done.setdefault(r.target.rsplit("/", 1)[-1], i)
        assert done["demo"] < min(done[f"demo-rdma-sub-{i}"] for i in range(8))
        assert max(done[f"demo-rdma-sub-{i}"] for i in range(8)) < done["demo-rdma-net"]
        assert done["demo-gvnic-sub"] < done["demo-gvnic-net"]


def test_a_control_plane_too_old_for_lustre_on_port_988_is_refused_and_rolled_back(monkeypatch) -> None:
    from rl_lustre.testing import _gke

    monkeypatch.setattr(_gke, "VERSION", "1.33.2-gke.1000")
    with FakeGCP() as gcp:
        with pytest.raises(ProvisioningError) as info:
            backend(spec(fabric="tcp"), gcp_only=True).up()
        assert info.value.step == "gke-cluster"
        assert "1.33.2-gke.4780000" in str(info.value)
        gcp.settle()
        assert {k: v for k, v in gcp.resources().items() if v} == {}


@pytest.fixture
def gcp():
    with FakeGCP() as fake:
        yield fake


def test_a_subnet_a_gpu_pool_uses_cannot_be_deleted_under_it(gcp: FakeGCP) -> None:
    b = backend(spec(), gcp_only=True)
    b.up()
    from rl_lustre.gcp import Subnetworks

    with pytest.raises(GCPError, match="already being used by"):
        Subnetworks(backoff=FAST_BACKOFF).delete(
            f"projects/{PROJECT}/regions/us-east1/subnetworks/demo-rdma-sub-0", deployment="demo"
        )
    b.down()
    gcp.settle()
    assert {k: v for k, v in gcp.resources().items() if v} == {}
