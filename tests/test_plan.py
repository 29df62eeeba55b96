"""The deployment plan: offline, complete, correctly wired, and free of secrets."""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers import specs

from rl_lustre import Cluster, LustreVolume
from rl_lustre.catalog import LABEL_DEPLOYMENT, LABEL_MANAGED_BY
from rl_lustre.errors import ConfigError, RLLustreError
from rl_lustre.plan import Plan, PlanGraphError, PlannedResource

# What the RayCluster waits for: its volume, its secret, its pools and the head's two bindings.
RAYCLUSTER_NEEDS = {"pvc", "secret", "cpu-pool", "gpu-pool", "head-role-binding", "head-nodes-role-binding"}

# The reference workflow's graph: one NIC (fabric="tcp"); the GPUDirect-RDMA fabric that
# is the default on A4 adds its own nodes, tested in test_fabric.py.
REFERENCE = {**specs.REFERENCE, "fabric": "tcp"}
HEAVY = ("ray", "kubernetes", "grpc", "google.cloud", "google.api_core", "google.auth", "hydra", "omegaconf", "rich")
LUSTRE_CHAIN = {"psa-range", "psa-peering", "firewall-lustre", "lustre"}
GKE_CHAIN = {"node-sa", "gke-cluster", "cpu-pool", "gpu-pool"}
KINDS = {
    "network": "compute.v1.Network",
    "subnet": "compute.v1.Subnetwork",
    "node-sa": "iam.v1.ServiceAccount",
    "psa-range": "compute.v1.GlobalAddress",
    "preload-image": "compute.v1.Image",
    "psa-peering": "servicenetworking.v1.Connection",
    "firewall-lustre": "compute.v1.Firewall",
    "gke-cluster": "container.v1.Cluster",
    "cpu-pool": "container.v1.NodePool",
    "compute-class": "cloud.google.com/v1/ComputeClass",
    "gpu-pool": "container.v1.NodePool",
    "lustre": "lustre.v1.Instance",
    "pv": "v1/PersistentVolume",
    "pvc": "v1/PersistentVolumeClaim",
    "secret": "v1/Secret",
    "head-account": "v1/ServiceAccount",
    "head-role": "rbac.authorization.k8s.io/v1/Role",
    "head-role-binding": "rbac.authorization.k8s.io/v1/RoleBinding",
    "head-nodes-role": "rbac.authorization.k8s.io/v1/ClusterRole",
    "head-nodes-role-binding": "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
    "raycluster": "ray.io/v1/RayCluster",
    "keeper": "apps/v1/Deployment",
    "image-prepull": "apps/v1/DaemonSet",
    "model-prefetch": "batch/v1/Job",
}


@pytest.fixture
def plan() -> Plan:
    return Cluster(**REFERENCE).plan()


def _no_network(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"network access attempted: {args!r}")


def test_plan_makes_no_remote_call(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("connect", "connect_ex", "sendto"):
        monkeypatch.setattr(socket.socket, name, _no_network)
    monkeypatch.setattr(socket, "getaddrinfo", _no_network)
    monkeypatch.setattr(socket, "create_connection", _no_network)
    for cluster in (Cluster(**REFERENCE), Cluster.local("offline", volume_dir="/tmp/rl-plan-offline")):
        p = cluster.plan()
        assert str(p)
        json.dumps(p.to_dict())


def test_plan_loads_no_client_library_and_opens_no_socket() -> None:
    """In a fresh interpreter, with sockets disabled, plan/str/to_dict import none of the
    libraries that talk to Google Cloud, Kubernetes or Ray."""
    code = f"""
import json, socket, sys
def refuse(*a, **k):
    raise OSError("network access attempted")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.getaddrinfo = socket.create_connection = refuse
import rl_lustre
before = set(sys.modules)
c = rl_lustre.Cluster(**{REFERENCE!r})
p = c.plan()
text = str(p)
blob = json.dumps(p.to_dict())
local = rl_lustre.Cluster.local("x", volume_dir="/tmp/rl-plan-x").plan()
str(local); json.dumps(local.to_dict())
rdma = rl_lustre.Cluster(**{{**{REFERENCE!r}, "fabric": "rdma"}}).plan()
str(rdma); json.dumps(rdma.to_dict())
heavy = {HEAVY!r}
loaded = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))
print(json.dumps({{"loaded": loaded, "keys": p.keys(), "chars": len(text) + len(blob)}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    assert result["loaded"] == []
    assert set(result["keys"]) == set(KINDS)
    assert result["chars"] > 1000


def test_every_resource_the_issue_names_is_planned(plan: Plan) -> None:
    assert {r.key: r.kind for r in plan} == KINDS
    assert len(plan) == len(KINDS)
    assert {r.key: r.action for r in plan if r.action != "create"} == {"preload-image": "cache"}


def test_in_a_users_network_google_picks_the_psa_block_after_the_subnet() -> None:
    import ipaddress

    from rl_lustre.plan.fabric import GVNIC_SUBNET_CIDR, RDMA_RANGE
    from rl_lustre.plan.network import (
        PODS_CIDR,
        PSA_ADDRESS,
        PSA_PREFIX_LENGTH,
        SERVICES_CIDR,
        SUBNET_CIDR,
    )

    theirs = Cluster(**specs.GKE, network="shared-vpc").plan().get("psa-range")
    assert theirs.depends_on == ("subnet",)
    assert "address" not in theirs.settings
    ours = ipaddress.ip_network(f"{PSA_ADDRESS}/{PSA_PREFIX_LENGTH}")
    for used in (SUBNET_CIDR, PODS_CIDR, SERVICES_CIDR, GVNIC_SUBNET_CIDR, RDMA_RANGE):
        assert not ours.overlaps(ipaddress.ip_network(used)), used


def test_resources_follow_their_dependencies(plan: Plan) -> None:
    seen: set[str] = set()
    for r in plan.resources:
        assert set(r.depends_on) <= seen, r.key
        seen.add(r.key)


def test_dependencies_match_the_architecture(plan: Plan) -> None:
    # The network chain comes first; in our own network we pick the PSA block (clear of
    # the subnet's ranges), so the range is reserved beside the subnet, not after it.
    assert plan.get("subnet").depends_on == ("network",)
    assert plan.get("psa-range").depends_on == ("network",)
    assert plan.get("psa-range").settings["address"] == "10.90.0.0"
    assert plan.get("psa-peering").depends_on == ("psa-range",)
    # The firewall's source range is the PSA block.
    assert "psa-range" in plan.get("firewall-lustre").depends_on
    assert plan.get("firewall-lustre").settings["source_ranges_from"] == "psa-range"
    assert set(plan.get("lustre").depends_on) == {"psa-peering", "firewall-lustre"}
    # The cluster's initial pool and every other pool run as the node account, made first.
    assert plan.get("node-sa").depends_on == ()
    assert plan.get("gke-cluster").depends_on == ("subnet", "node-sa")
    assert plan.get("cpu-pool").depends_on == ("gke-cluster", "node-sa")
    # The GPU nodes boot with the preload image, built on a VM in the deployment's subnet;
    # they come by the capacity policy's ComputeClass, applied first.
    assert plan.get("compute-class").depends_on == ("gke-cluster",)
    assert plan.get("gpu-pool").depends_on == ("gke-cluster", "node-sa", "preload-image", "compute-class")
    assert plan.get("preload-image").depends_on == ("subnet",)
    # The PV needs the API server and the instance's address, not the node pools.
    assert set(plan.get("pv").depends_on) == {"lustre", "gke-cluster"}
    assert plan.get("pvc").depends_on == ("pv",)
    assert plan.get("secret").depends_on == ("gke-cluster",)
    assert set(plan.get("raycluster").depends_on) == RAYCLUSTER_NEEDS
    assert plan.get("head-role-binding").depends_on == ("head-account", "head-role")
    # Nodes are cluster-scoped: the head's right to get them is a ClusterRole of its own, bound to its account.
    assert plan.get("head-nodes-role-binding").depends_on == ("head-account", "head-nodes-role")
    assert (
        plan.get("head-nodes-role").name
        == plan.get("head-nodes-role-binding").name
        == "ray-a4-gpu-spot-ray-head.default"
    )
    assert plan.upstream("raycluster") == set(KINDS) - {"raycluster", "keeper", "image-prepull", "model-prefetch"}
    # The keeper comes after the RayCluster, so down() stops it before the runs (issue 31).
    assert plan.get("keeper").depends_on == ("raycluster",)
    # The GPU nodes boot with the image preloaded: only the head's CPU node pre-pulls it.
    assert plan.get("image-prepull").depends_on == ("cpu-pool",)
    assert list(plan.get("image-prepull").settings["runs_on"]) == ["ray-head-pool"]
    off = Cluster(**REFERENCE, preload_image=False).plan()
    assert "preload-image" not in off
    assert off.get("image-prepull").depends_on == ("cpu-pool", "gpu-pool")
    assert off.get("gpu-pool").depends_on == ("gke-cluster", "node-sa", "compute-class")
    assert list(off.get("image-prepull").settings["runs_on"]) == [
        "the GPU nodes of ComputeClass ray-a4-gpu-spot-gpus",
        "ray-head-pool",
    ]
    assert "preload" not in off.get("gpu-pool").settings
    assert plan.get("model-prefetch").depends_on == ("pvc", "cpu-pool", "secret")
    assert sorted(plan.dependents("gke-cluster")) == [
        "compute-class",
        "cpu-pool",
        "gpu-pool",
        "head-account",
        "head-nodes-role",
        "head-role",
        "pv",
        "secret",
    ]
    assert sorted(plan.dependents("node-sa")) == ["cpu-pool", "gke-cluster", "gpu-pool"]


def test_lustre_and_gke_are_parallel_branches(plan: Plan) -> None:
    assert not plan.upstream("lustre") & GKE_CHAIN
    assert not plan.downstream("gke-cluster") & LUSTRE_CHAIN
    for key in GKE_CHAIN:
        assert not plan.upstream(key) & LUSTRE_CHAIN, key
    for key in ("pv", "pvc", "raycluster"):
        assert "lustre" in plan.upstream(key)
    assert not plan.upstream("pv") & {"cpu-pool", "gpu-pool"}


def test_waves_put_the_lustre_and_gke_chains_side_by_side(plan: Plan) -> None:
    waves = plan.waves()
    wave_of = {k: i for i, w in enumerate(waves) for k in w}
    assert set(wave_of) == set(KINDS)
    assert sum(len(w) for w in waves) == len(KINDS)
    # A node is in the first wave after all of its dependencies.
    for r in plan:
        assert wave_of[r.key] == 1 + max((wave_of[d] for d in r.depends_on), default=-1)
    assert wave_of["psa-range"] == wave_of["subnet"]
    assert wave_of["psa-peering"] == wave_of["gke-cluster"]
    assert wave_of["lustre"] == wave_of["compute-class"] == wave_of["cpu-pool"] == wave_of["gpu-pool"] - 1
    assert wave_of["lustre"] < wave_of["pv"] < wave_of["pvc"] < wave_of["raycluster"] == len(waves) - 2
    assert wave_of["keeper"] == len(waves) - 1
    # The start-up work overlaps: the image pull with Lustre's creation (on the head's CPU
    # node here, the GPU nodes booting with the image preloaded), the model download with
    # the RayCluster.
    assert wave_of["image-prepull"] == wave_of["cpu-pool"] + 1 < wave_of["pvc"]
    assert wave_of["model-prefetch"] == wave_of["raycluster"]
    # Without the preload image it waits for the GPU nodes too: a wave after the ComputeClass,
    # which takes seconds, where Lustre takes its twenty minutes.
    off = Cluster(**REFERENCE, preload_image=False).plan()
    wave_off = {k: i for i, w in enumerate(off.waves()) for k in w}
    assert wave_off["image-prepull"] == wave_off["gpu-pool"] + 1 <= wave_off["pvc"]
    assert "lustre" not in off.upstream("image-prepull")


def test_teardown_order_deletes_dependents_first(plan: Plan) -> None:
    order = plan.teardown_order()
    assert sorted(order) == sorted(KINDS)
    pos = {k: i for i, k in enumerate(order)}
    for r in plan:
        for dep in r.depends_on:
            assert pos[r.key] < pos[dep], (r.key, dep)
    assert order[0] == "model-prefetch"
    assert order[-1] == "network"
    waves = plan.teardown_waves()
    wave_of = {k: i for i, w in enumerate(waves) for k in w}
    assert set(wave_of) == set(KINDS)
    for r in plan:
        for dep in r.depends_on:
            assert wave_of[r.key] < wave_of[dep], (r.key, dep)
    # Lustre and the GKE cluster are deleted concurrently; the nodes' account after their pools.
    assert wave_of["lustre"] == wave_of["gke-cluster"]
    assert wave_of["node-sa"] > wave_of["gke-cluster"]


def test_critical_path_with_issue_4_proportions(plan: Plan) -> None:
    durations = {
        "network": 0.5,
        "subnet": 0.5,
        "psa-range": 0.5,
        "psa-peering": 0.5,
        "firewall-lustre": 0.5,
        "lustre": 20,
        "gke-cluster": 8,
        "cpu-pool": 6,
        "gpu-pool": 6,
        "pv": 0.1,
        "pvc": 0.1,
        "secret": 0.1,
        "raycluster": 0.1,
    }
    total, path = plan.critical_path(durations)
    # network → psa-range → psa-peering → lustre → pv → pvc → raycluster (the range is
    # reserved beside the subnet): 3 x 0.5 + 20 + 3 x 0.1; the GKE branch is 1 + 8 + 6 + 0.1.
    assert total == pytest.approx(21.8)
    assert path == ["network", "psa-range", "psa-peering", "lustre", "pv", "pvc", "raycluster", "keeper"]
    assert total < sum(durations.values())
    # Lustre made instant: the GKE cluster and a pool become the bound.
    total, path = plan.critical_path({**durations, "lustre": 0})
    assert total == pytest.approx(0.5 + 0.5 + 8 + 6 + 0.1)
    assert path[:4] == ["network", "subnet", "gke-cluster", "cpu-pool"]
    total, path = plan.critical_path({})
    assert total == 0.0
    assert all(a in plan.get(b).depends_on for a, b in itertools.pairwise(path))


@pytest.mark.parametrize(
    ("durations", "field"),
    [
        ({"nope": 1.0}, "durations"),
        ({"lustre": -1.0}, "durations['lustre']"),
        ({"lustre": float("inf")}, "durations['lustre']"),
        ({"lustre": "20"}, "durations['lustre']"),
    ],
)
def test_critical_path_rejects_bad_durations(plan: Plan, durations: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        plan.critical_path(durations)
    assert info.value.field == field


def test_no_secret_value_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    planted = {"HF_TOKEN": "hf_PLANTEDsecretVALUE0123456789", "WANDB_API_KEY": "wandbPLANTED9876543210"}
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    for cluster in (Cluster(**REFERENCE), Cluster.local("s", volume_dir="/tmp/rl-plan-s")):
        p = cluster.plan()
        texts = [str(p), repr(p), json.dumps(p.to_dict())]
        for value in planted.values():
            for text in texts:
                assert value not in text
                assert value[4:20] not in text
    secret = Cluster(**REFERENCE).plan().get("secret")
    # Listed by name only.
    assert list(secret.settings["keys"]) == ["HF_TOKEN", "WANDB_API_KEY"]


def test_no_secret_node_without_secrets() -> None:
    p = Cluster(**REFERENCE, secrets=()).plan()
    assert "secret" not in p
    assert "secret" not in p.get("raycluster").depends_on


def test_str_is_a_readable_summary(plan: Plan) -> None:
    text = str(plan)
    header = text.splitlines()[:2]
    assert "ray-a4-gpu-spot" in header[0]
    for fact in ("my-project", "us-east1", "us-east1-b"):
        assert fact in header[0]
    vol = Cluster(**REFERENCE).volume
    assert vol is not None
    assert vol.capacity_gib is not None
    tib = vol.capacity_gib / 1024
    gbps = vol.throughput_mbps_per_tib * tib / 1000
    assert f"{8 * 8} GPUs" in header[1]
    assert f"{tib:.1f} TiB" in header[1]
    assert f"{gbps:.1f} GB/s" in header[1]
    for r in plan:
        row = next(line for line in text.splitlines() if f" {r.key} " in line and r.kind in line)
        assert r.action in row
        assert r.name in row
        for dep in r.depends_on:
            assert dep in row
    assert "nvidia.com/gpu" in text
    assert "988" in text


def test_the_cost_is_said_before_the_long_list_and_broken_down_after_it(plan: Plan) -> None:
    lines = str(plan).splitlines()
    total = f"${plan.cost().total_usd_per_hour:,.2f}/hour"
    assert (
        lines[2] == f"Cost: {total} · list prices of {plan.cost().prices_as_of}, before taxes · per resource at the end"
    )
    assert len(lines) > 100  # a reader would otherwise scroll past all of it
    breakdown = next(i for i, line in enumerate(lines) if i > 2 and line.startswith("Cost: "))
    assert lines[breakdown].startswith(f"Cost: {total} · ")
    assert lines[breakdown + 1].split()[0] == "gpu-pool"
    assert str(Cluster.local("free").plan()).splitlines()[2] == "Cost: no cloud resources, $0.00/hour"


def test_to_dict_is_json_and_complete(plan: Plan) -> None:
    d = plan.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert (d["cluster_name"], d["backend"], d["project"], d["region"], d["zone"]) == (
        "ray-a4-gpu-spot",
        "gke",
        "my-project",
        "us-east1",
        "us-east1-b",
    )
    assert [r["key"] for r in d["resources"]] == plan.keys()
    by_key = {r["key"]: r for r in d["resources"]}
    assert by_key["gpu-pool"]["settings"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"},
        {"key": "cloud.google.com/compute-class", "value": "ray-a4-gpu-spot-gpus", "effect": "NO_SCHEDULE"},
    ]
    assert set(by_key["raycluster"]["depends_on"]) == RAYCLUSTER_NEEDS
    assert by_key["head-nodes-role"]["settings"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
    ]
    assert d["totals"]["gpus"] == 64
    assert [set(w) for w in d["waves"]] == [set(w) for w in plan.waves()]


def test_key_settings_of_the_reference_deployment(plan: Plan) -> None:
    net = plan.get("network")
    assert net.name == "ray-a4-gpu-spot-net"
    assert net.settings["auto_create_subnetworks"] is False
    assert plan.get("subnet").settings["region"] == "us-east1"

    gke = plan.get("gke-cluster")
    assert gke.name == "ray-a4-gpu-spot"
    assert gke.settings["addons"]["lustre_csi_driver_config"]["enabled"] is True
    assert gke.settings["addons"]["ray_operator_config"]["enabled"] is True
    assert gke.settings["workload_identity_pool"] == "my-project.svc.id.goog"
    assert gke.settings["node_locations"] == ("us-east1-b",)
    man = gke.settings["master_authorized_networks"]
    # Empty by default, and the plan says what that means instead of opening up.
    assert man["enabled"] is True
    assert list(man["cidr_blocks"]) == []
    assert "no client" in man["public_access"]
    assert "0.0.0.0/0" not in json.dumps(plan.to_dict())
    # The control plane is reached through the IAM-gated DNS endpoint instead.
    endpoints = gke.settings["control_plane_endpoints"]
    assert endpoints["dns_endpoint"]["allow_external_traffic"] is True
    assert "IAM" in endpoints["dns_endpoint"]["access"]
    assert endpoints["ip_endpoint"]["access"] == "master_authorized_networks only"

    cpu = plan.get("cpu-pool").settings
    assert (cpu["machine_type"], cpu["node_count"], cpu["spot"]) == ("n2-highmem-16", 1, False)
    assert "Ray head" in cpu["hosts"]

    gpu = plan.get("gpu-pool").settings
    assert (gpu["machine_type"], gpu["nodes"], gpu["spot"], gpu["gvnic"]) == ("a4-highgpu-8g", 8, True, True)
    # Spot autoscaled from 0: nodes come when the workers ask, and go when they do not.
    assert gpu["node_count"] == 0
    assert dict(gpu["autoscaling"]) == {
        "enabled": True,
        "total_min_node_count": 0,
        "total_max_node_count": 8,
        "location_policy": "ANY",
    }
    assert dict(gpu["accelerator"]) == {"type": "nvidia-b200", "count": 8, "gpu_driver_version": "LATEST"}
    assert gpu["reservation_affinity"]["consume_reservation_type"] == "NO_RESERVATION"

    lustre = plan.get("lustre")
    vol = Cluster(**REFERENCE).volume
    assert vol is not None
    assert vol.capacity_gib is not None
    assert lustre.name == vol.name
    assert lustre.settings["capacity_gib"] == vol.capacity_gib
    assert lustre.settings["per_unit_storage_throughput"] == vol.throughput_mbps_per_tib
    assert lustre.settings["aggregate_throughput_mbps"] == pytest.approx(
        vol.throughput_mbps_per_tib * vol.capacity_gib / 1024
    )
    assert lustre.settings["filesystem"] == vol.filesystem
    assert lustre.settings["network"] == "projects/my-project/global/networks/ray-a4-gpu-spot-net"

    assert plan.get("pv").settings["volume_handle"] == f"my-project/us-east1-b/{vol.name}"
    assert plan.get("pvc").name == "ray-a4-gpu-spot-lustre-pvc"  # per deployment: never shared
    ray = plan.get("raycluster").settings
    assert ray["ray_version"] == "2.46.0"
    assert ray["head"]["node_pool"] == plan.get("cpu-pool").name
    assert ray["workers"]["compute_class"] == plan.get("compute-class").name
    assert ray["workers"]["replicas"] == 8
    assert ray["volume"]["mount_path"] == "/lustre"


def test_ownership_labels_on_created_resources() -> None:
    p = Cluster(**REFERENCE, labels={"team": "rl"}).plan()
    # The preload image is shared by deployments: our labels and its role, nobody's deployment.
    assert dict(p.get("preload-image").labels) == {
        LABEL_MANAGED_BY: "rl-lustre",
        "rl-lustre-role": "preload-image",
        "rl-lustre-layout": "v1",
    }
    for r in p:
        if r.action == "cache":
            continue
        assert r.labels[LABEL_MANAGED_BY] == "rl-lustre", r.key
        assert r.labels[LABEL_DEPLOYMENT] == "ray-a4-gpu-spot", r.key
        assert r.labels["team"] == "rl", r.key


def test_user_network_is_used_not_created() -> None:
    p = Cluster(**REFERENCE, network="corp-vpc").plan()
    for key in ("network", "subnet"):
        assert p.get(key).action == "use"
        assert dict(p.get(key).labels) == {}
    assert p.get("network").name == "corp-vpc"
    assert p.get("gke-cluster").settings["network"] == "corp-vpc"
    assert p.get("lustre").settings["network"] == "projects/my-project/global/networks/corp-vpc"
    assert all(p.get(k).action == "create" for k in set(KINDS) - {"network", "subnet", "preload-image"})
    # Pod and service ranges are then added to the user's subnet by GKE.
    assert p.get("gke-cluster").settings["ip_allocation_policy"]["cluster_ipv4_cidr_block"]
    assert p.totals()["use"] == 2


def test_existing_volume_is_used_not_created() -> None:
    vol = LustreVolume(name="team-ckpt", existing=True, capacity_gib=9000, throughput_mbps_per_tib=1000)
    p = Cluster(**REFERENCE, volume=vol).plan()
    lustre = p.get("lustre")
    assert (lustre.action, lustre.name, dict(lustre.labels)) == ("use", "team-ckpt", {})
    assert p.get("pv").settings["volume_handle"] == "my-project/us-east1-b/team-ckpt"
    assert "lustre" in p.get("pv").depends_on


def test_reservation_and_head_on_gpu_pool() -> None:
    p = Cluster(**REFERENCE, spot=False, reservation="a4-res", head_on_gpu_pool=True, num_nodes=2).plan()
    gpu = p.get("gpu-pool").settings
    assert gpu["spot"] is False
    assert gpu["reservation_affinity"]["consume_reservation_type"] == "SPECIFIC_RESERVATION"
    assert list(gpu["reservation_affinity"]["values"]) == ["a4-res"]
    assert p.get("raycluster").settings["head"]["node_pool"] == "a GPU node of ComputeClass ray-a4-gpu-spot-gpus"
    # A reservation's nodes are paid whether used or not: held, not autoscaled.
    assert gpu["node_count"] == 2
    assert "autoscaling" not in gpu
    assert "Ray head" in gpu["hosts"]
    assert "Ray head" not in p.get("cpu-pool").settings["hosts"]
    assert p.totals()["gpus"] == 16


def test_authorized_networks_are_listed() -> None:
    p = Cluster(**REFERENCE, authorized_networks=["203.0.113.7/32"]).plan()
    man = p.get("gke-cluster").settings["master_authorized_networks"]
    assert list(man["cidr_blocks"]) == ["203.0.113.7/32"]
    opened = Cluster(**REFERENCE, authorized_networks=["0.0.0.0/0"], public_control_plane=True).plan()
    assert "whole internet" in opened.get("gke-cluster").settings["master_authorized_networks"]["public_access"]


def test_plan_follows_evolve() -> None:
    base = Cluster(**REFERENCE)
    smaller = attrs.evolve(base, name="small-run", num_nodes=2)
    p = smaller.plan()
    assert p.cluster_name == "small-run"
    assert p.get("gpu-pool").settings["nodes"] == 2
    assert p.get("lustre").name == "small-run-lustre"
    # Built once per spec: the same object every time, not merely an equal one ...
    assert base.plan() is base.plan()
    assert hash(base.plan()) == hash(base.plan())
    assert base.plan() != p
    # ... which is no tautology: an equal spec of its own builds an equal plan of its own.
    twin = Cluster(**REFERENCE)
    assert twin == base
    assert twin.plan() == base.plan()
    assert twin.plan() is not base.plan()


def test_local_plan() -> None:
    c = Cluster.local("laptop", volume_dir="/tmp/rl-plan-laptop")
    p = c.plan()
    assert p.backend == "local"
    assert p.keys() == ["volume-dir", "ray-head"]
    assert p.get("volume-dir").settings["path"] == c.mount_path == "/tmp/rl-plan-laptop"
    # Never deleted by down(): it holds your checkpoints.
    assert p.get("volume-dir").action == "use"
    assert p.get("ray-head").settings["bind"] == "127.0.0.1"
    assert "rehearsal" in p.get("ray-head").settings["jobs"]
    assert (p.project, p.region, p.zone) == (None, None, None)
    assert not any(r.kind.startswith(("compute.", "container.", "lustre.")) for r in p)
    assert "this machine" in str(p).splitlines()[0]
    real = Cluster.local("laptop", volume_dir="/tmp/rl-plan-laptop", nemo_rl_path="/opt/nemo-rl").plan()
    assert "/opt/nemo-rl" in real.get("ray-head").settings["jobs"]


def test_plan_is_immutable(plan: Plan) -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        plan.cluster_name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.get("gpu-pool").settings["node_count"] = 100  # type: ignore[index]
    with pytest.raises(TypeError):
        plan.get("gpu-pool").settings["accelerator"]["count"] = 1  # type: ignore[index]


def test_get_unknown_key(plan: Plan) -> None:
    with pytest.raises(KeyError, match="lustre"):
        plan.get("nfs")


def _node(key: str, *deps: str) -> PlannedResource:
    return PlannedResource(key=key, kind="test.Thing", name=key, depends_on=deps)


def test_plan_orders_nodes_and_rejects_bad_graphs() -> None:
    p = Plan(cluster_name="t", backend="gke", resources=[_node("c", "b"), _node("a"), _node("b", "a")])
    assert p.keys() == ["a", "b", "c"]
    bad = {
        "duplicate": [_node("a"), _node("a")],
        "unknown dependency": [_node("a", "ghost")],
        "self": [_node("a", "a")],
        "cycle": [_node("a", "c"), _node("b", "a"), _node("c", "b")],
    }
    for why, resources in bad.items():
        with pytest.raises(PlanGraphError):
            Plan(cluster_name="t", backend="gke", resources=resources)
        assert issubclass(PlanGraphError, RLLustreError), why
    with pytest.raises(PlanGraphError):
        PlannedResource(key="x", kind="k", name="x", settings={"bad": object()})
    with pytest.raises(PlanGraphError):
        PlannedResource(key="x", kind="k", name="x", action="delete")  # type: ignore[arg-type]


def _module(blueprint: dict[str, Any], module_id: str) -> dict[str, Any]:
    for group in blueprint["deployment_groups"]:
        for module in group["modules"]:
            if module["id"] == module_id:
                return module
    raise LookupError(module_id)


def test_network_defaults_match_cluster_toolkit(ref: Path, plan: Plan) -> None:
    a4 = json.loads((ref / "cluster-toolkit-gke-a4.json").read_text())
    lustre_bp = json.loads((ref / "cluster-toolkit-gke-managed-lustre.json").read_text())
    net0 = _module(a4, "gke-a4-net-0")["settings"]
    subnet = plan.get("subnet").settings
    assert subnet["ip_cidr_range"] == net0["subnetworks"][0]["subnet_ip"]
    toolkit_ranges = {r["range_name"]: r["ip_cidr_range"] for r in net0["secondary_ranges_list"][0]["ranges"]}
    assert dict(subnet["secondary_ip_ranges"]) == toolkit_ranges
    psa = _module(lustre_bp, "private_service_access")["settings"]
    assert plan.get("psa-range").settings["prefix_length"] == psa["prefix_length"]
    rule = _module(lustre_bp, "lustre_firewall_rule")["settings"]["ingress_rules"][0]
    fw = plan.get("firewall-lustre").settings
    # The blueprint indents "ports" beside "allow", so YAML puts it on the rule.
    toolkit_ports = rule["allow"][0].get("ports", rule.get("ports"))
    assert [(a["protocol"], list(a["ports"])) for a in fw["allow"]] == [(rule["allow"][0]["protocol"], toolkit_ports)]
    gke = _module(lustre_bp, "gke_cluster")["settings"]
    assert gke["enable_managed_lustre_csi"] is True
    assert plan.get("gke-cluster").settings["release_channel"] == gke["release_channel"]


def test_settings_use_real_api_fields_and_enums(ref: Path, plan: Plan) -> None:
    facts = json.loads((ref / "gcp-lustre-container-proto-fields.json").read_text())
    container, lustre = facts["container_v1"], facts["lustre_v1"]

    def fields(api: dict[str, Any], message: str) -> set[str]:
        return {f["name"] for f in api["messages"][message]["fields"]}

    def enum(api: dict[str, Any], name: str) -> set[str]:
        return set(api["enums"][name])

    addons = plan.get("gke-cluster").settings["addons"]
    assert set(addons) <= fields(container, "AddonsConfig")
    assert set(addons["lustre_csi_driver_config"]) <= fields(container, "LustreCsiDriverConfig")
    assert set(addons["ray_operator_config"]) <= fields(container, "RayOperatorConfig")
    gpu = plan.get("gpu-pool").settings
    assert gpu["accelerator"]["gpu_driver_version"] in enum(container, "GPUDriverInstallationConfig.GPUDriverVersion")
    assert gpu["reservation_affinity"]["consume_reservation_type"] in enum(container, "ReservationAffinity.Type")
    assert plan.get("gke-cluster").settings["release_channel"] in enum(container, "ReleaseChannel.Channel")
    assert {"spot", "gvnic", "taints", "accelerators", "reservation_affinity"} <= fields(container, "NodeConfig")
    instance = fields(lustre, "Instance")
    planned = set(plan.get("lustre").settings) - {"location", "aggregate_throughput_mbps"}
    assert planned <= instance
