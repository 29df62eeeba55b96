"""``up()`` / ``down()`` of a GKE deployment end to end, through the real Google client
libraries against the protocol-level fakes of :mod:`rl_lustre.testing` (loopback only).

Most tests switch the Kubernetes part off (``gcp_only=True``, reported as ``skipped``);
one runs it against the Kubernetes API fake.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import grpc
import pytest
from helpers.specs import GKE, PROJECT

from rl_lustre import Cluster, LustreVolume
from rl_lustre._output import enable_output
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.errors import (
    GCPError,
    OperationFailedError,
    OwnershipError,
    ProvisioningError,
    RollbackError,
)
from rl_lustre.gcp import GkeClusters
from rl_lustre.provision.kube_drivers import kube_keys
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

REPO = Path(__file__).resolve().parents[1]
# Where each kind of plan node shows up in FakeGCP.resources().
FAKE_OF_KIND = {
    "compute.v1.Network": "compute.networks",
    "compute.v1.Subnetwork": "compute.subnetworks",
    "compute.v1.GlobalAddress": "compute.globalAddresses",
    "compute.v1.Firewall": "compute.firewalls",
    "servicenetworking.v1.Connection": "servicenetworking.connections",
    "lustre.v1.Instance": "lustre.instances",
    "container.v1.Cluster": "gke.clusters",
    "container.v1.NodePool": "gke.nodePools",
    "iam.v1.ServiceAccount": "iam.serviceAccounts",
}
CREATES = re.compile(r"\.insert$|\.Create|connections\.(create|patch)$")


def spec(**kw: object) -> Cluster:
    # Without the preload image, whose build, reuse and rollback are test_preload.py's (the
    # first test below deploys it too, in the whole graph).
    base: dict[str, object] = {
        **GKE,
        "num_nodes": 2,
        "preload_image": False,
    }
    return Cluster(**{**base, **kw})  # type: ignore[arg-type]


# Where each plan node of the default (fabric="rdma") deployment shows up in FakeGCP.resources().
FAKE_KIND = {r.key: FAKE_OF_KIND[r.kind] for r in spec(preload_image=True).plan() if r.kind in FAKE_OF_KIND}
# What a whole deployment leaves when it is not torn down: those nodes, and the node
# account's role binding (listed as the fake lists it).
LEAKED_KIND = {**FAKE_KIND, "node-sa-role": "iam.bindings"}
# Every plan node on the Kubernetes side (switched off with gcp_only=True): the fabric's
# network objects and installer, PV, PVC, Secret, RayCluster, image pre-pull, model prefetch.
KUBE_KEYS = K8S_KEYS = kube_keys(spec().plan())


def backend(cluster: Cluster, **kw: object) -> GKEBackend:
    return GKEBackend(cluster, gcp_only=True, backoff=FAST_BACKOFF, retry=FAST_RETRY, **kw)  # type: ignore[arg-type]


def remote_name(plan_key: str, cluster: Cluster) -> str:
    plan = cluster.plan()
    node = plan.get(plan_key)
    by_kind = {
        "compute.v1.Network": f"projects/{PROJECT}/global/networks/{node.name}",
        "compute.v1.Subnetwork": f"projects/{PROJECT}/regions/us-east1/subnetworks/{node.name}",
    }
    if node.kind in by_kind:
        return by_kind[node.kind]
    full = {
        "psa-range": f"projects/{PROJECT}/global/addresses/{node.name}",
        "firewall-lustre": f"projects/{PROJECT}/global/firewalls/{node.name}",
        "psa-peering": f"projects/{PROJECT}/global/networks/{plan.get('network').name}/peerings/{node.name}",
        "lustre": f"projects/{PROJECT}/locations/us-east1-b/instances/{node.name}",
        "gke-cluster": f"projects/{PROJECT}/locations/us-east1/clusters/{node.name}",
        "node-sa": f"projects/{PROJECT}/serviceAccounts/{node.name}",
    }
    gke = f"projects/{PROJECT}/locations/us-east1/clusters/{plan.get('gke-cluster').name}"
    return full.get(plan_key) or f"{gke}/nodePools/{node.name}"


def existing(gcp: FakeGCP) -> dict[str, list[str]]:
    gcp.settle()
    return {kind: sorted(found) for kind, found in gcp.resources().items() if found}


def creates(records: list) -> list[str]:
    return [r.method for r in records if CREATES.search(r.method)]


@pytest.fixture
def gcp():
    with FakeGCP() as fake:
        yield fake


def test_up_creates_exactly_the_plans_create_nodes_and_down_from_a_fresh_process_removes_them(gcp: FakeGCP) -> None:
    cluster = spec(authorized_networks=["203.0.113.7/32"], preload_image=True)
    report = backend(cluster).up()

    plan = cluster.plan()
    gcp_nodes = [r.key for r in plan if r.action == "create" and r.key not in K8S_KEYS]
    # The preload image is built once for the project (a cache, shared by deployments).
    assert report.keys("created") == [r.key for r in plan if r.action in ("create", "cache") and r.key not in K8S_KEYS]
    [image] = list(existing(gcp)["compute.images"])
    assert report.get("preload-image").value.name == image.rsplit("/", 1)[1]
    assert report.keys("skipped") == [r.key for r in plan if r.key in K8S_KEYS]
    assert all("gcp_only" in report.get(k).note for k in report.keys("skipped"))
    # What exists remotely is exactly those nodes, each carrying our labels.
    # The node account's one role is there too (tests/test_node_account.py has the rest).
    expected = sorted(
        [f"{FAKE_KIND[k]} {remote_name(k, cluster)}" for k in gcp_nodes]
        + [
            f"iam.bindings projects/{PROJECT} roles/container.defaultNodeServiceAccount "
            f"serviceAccount:{plan.get('node-sa').name}"
        ]
    )
    assert gcp.leaked("demo") == expected
    assert existing(gcp) == {
        "compute.images": [image],
        **{
            kind: sorted(n.split(" ", 1)[1] for n in expected if n.startswith(kind + " "))
            for kind in {e.split()[0] for e in expected}
        },
    }
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+@tcp:/lustrefs", cluster.volume.mount_point)
    assert report.get("cpu-pool").note == "created with the cluster"
    assert gcp.request_counts("gke.CreateNodePool") == {"gke.CreateNodePool": 1}

    # The control plane: DNS endpoint for IAM-authorised callers, IP endpoint behind
    # exactly the authorised networks.
    made = GkeClusters(backoff=FAST_BACKOFF).get_or_none(remote_name("gke-cluster", cluster))
    endpoints = made.control_plane_endpoints_config
    assert endpoints.dns_endpoint_config.allow_external_traffic is True
    ip = endpoints.ip_endpoints_config.authorized_networks_config
    assert ip.enabled
    assert [b.cidr_block for b in ip.cidr_blocks] == ["203.0.113.7/32"]
    assert not ip.gcp_public_cidrs_access_enabled

    # A new process knows nothing but the spec: it finds everything by name and labels.
    before = len(gcp.requests)
    down = backend(spec(authorized_networks=["203.0.113.7/32"], preload_image=True)).down()
    # And the ComputeClass, a Kubernetes object the GPU pools wait for: it goes with the cluster.
    assert sorted(down.keys("deleted")) == sorted([*gcp_nodes, "compute-class"])
    assert "with gke-cluster" in down.get("compute-class").note
    assert down.get("preload-image").outcome == "kept"
    assert existing(gcp) == {"compute.images": [image]}
    # Node pools went with their cluster: no DeleteNodePool was sent.
    assert not [r for r in gcp.requests[before:] if r.method == "gke.DeleteNodePool"]

    again = len(gcp.requests)
    second = backend(cluster).down()
    assert second.keys("absent") == [r.key for r in plan if r.key in gcp_nodes or r.key == "compute-class"]
    assert not [r.method for r in gcp.requests[again:] if "delete" in r.method.lower()]


def test_the_lustre_branch_runs_alongside_the_gke_cluster_and_its_pools() -> None:
    latency = {
        "lustre.create": 1.5,
        "gke.create_cluster": 1.0,
        "gke.create_node_pool": 1.0,
        "compute.create_subnetwork": 0.5,
    }
    with FakeGCP(latency=latency) as gcp:
        # A first up() and down() warm every client's first use (imports such as compute_v1 take
        # seconds on a loaded machine; channels), which would otherwise land inside the branches
        # this test times.
        backend(spec()).up()
        backend(spec()).down()
        seen = len(gcp.requests)
        started = time.monotonic()
        report = backend(spec()).up()
        wall = time.monotonic() - started
        first = {r.method: r.time - report.start for r in reversed(gcp.requests[seen:])}
        lustre, gke, gpu = report.get("lustre"), report.get("gke-cluster"), report.get("gpu-pool")
        # From the fake's request log: Lustre was asked for while the GKE branch was still
        # working, and the cluster and its GPU pool while Lustre was still being created.
        assert first["lustre.CreateInstance"] < gpu.finished
        assert first["gke.CreateCluster"] < first["gke.CreateNodePool"] < lustre.finished
        # Our network: the PSA range is reserved beside the subnet, not after it.
        assert first["compute.globalAddresses.insert"] < report.get("subnet").finished
        # From the records: the two branches overlap for most of Lustre's creation.
        overlap = min(lustre.finished, gpu.finished) - max(lustre.started, gke.started)
        assert overlap > 1.0
        # One after the other would take at least 1.5 + 1.0 + 1.0 s.
        assert wall < 1.5 + 1.0 + 1.0
        backend(spec()).down()


def test_a_second_up_creates_nothing_and_adopts_everything(gcp: FakeGCP) -> None:
    backend(spec()).up()
    before = gcp.leaked("demo")
    count = len(gcp.requests)
    report = backend(spec()).up()
    assert creates(gcp.requests[count:]) == []
    assert set(report.keys("adopted")) == set(FAKE_KIND)
    assert gcp.leaked("demo") == before
    backend(spec()).down()
    assert existing(gcp) == {}


def test_a_rollback_keeps_resources_an_earlier_up_created() -> None:
    # The GPU pool fails late, once everything else has been asked for.
    with FakeGCP(latency={"gke.create_node_pool": 1.0}) as gcp:
        _rollback_keeps_adopted(gcp)


def _rollback_keeps_adopted(gcp: FakeGCP) -> None:
    # The reference graph (fabric="tcp"); the fabric's own rollbacks are tested below.
    gcp.seed_network(PROJECT, "demo-net", subnet="demo-subnet", psa_range=None, deployment="demo")
    gcp.faults.fail_operation("gke.CreateNodePool", message="ZONE_RESOURCE_POOL_EXHAUSTED: no a4-highgpu-8g")
    # on_no_capacity="nothing": the stock-out rolls back everything this up() created.
    with pytest.raises(ProvisioningError) as info:
        backend(spec(fabric="tcp", on_no_capacity="nothing")).up()
    err = info.value
    assert err.step == "gpu-pool"
    assert "us-east1-b" in str(err)  # the stock-out names the zone
    assert [k.split()[0] for k in err.kept] == ["network", "subnet"]
    assert err.report is not None
    assert err.report.keys("adopted") == ["network", "subnet"]
    assert {c.split()[0] for c in err.cleaned} == {
        "psa-range",
        "psa-peering",
        "firewall-lustre",
        "lustre",
        "node-sa",
        "gke-cluster",
        "cpu-pool",
        "gpu-pool",
    }
    assert existing(gcp) == {
        "compute.networks": [remote_name("network", spec())],
        "compute.subnetworks": [remote_name("subnet", spec())],
    }
    # They carry our labels, so down() removes them.
    backend(spec(fabric="tcp")).down()
    assert existing(gcp) == {}


def test_a_same_named_network_without_our_labels_is_refused_and_left_alone(gcp: FakeGCP) -> None:
    gcp.seed_network(PROJECT, "demo-net", subnet="demo-subnet", psa_range=None)
    mine = existing(gcp)
    with pytest.raises(ProvisioningError) as info:
        backend(spec(fabric="tcp")).up()
    assert info.value.step == "network"
    assert isinstance(info.value.cause, OwnershipError)
    assert "demo-net" in str(info.value)
    assert "managed-by=rl-lustre" in str(info.value)
    # Only the node account, which has no dependency, may have been asked for beside the
    # network; it was rolled back.
    assert set(creates(gcp.requests)) <= {"iam.CreateServiceAccount"}
    assert gcp.leaked() == []
    assert existing(gcp) == mine
    # down() does not take it either.
    report = backend(spec(fabric="tcp")).down()
    assert report.get("network").outcome == "not-ours"
    assert existing(gcp) == mine


def _user_lustre(gcp: FakeGCP, name: str, network: str) -> None:
    from google.cloud import lustre_v1

    from rl_lustre.gcp import _clients

    _clients.lustre().create_instance(
        parent=f"projects/{PROJECT}/locations/us-east1-b",
        instance_id=name,
        instance=lustre_v1.Instance(
            capacity_gib=18000,
            per_unit_storage_throughput=500,
            filesystem="userfs",
            network=f"projects/{PROJECT}/global/networks/{network}",
        ),
    )
    gcp.settle()


def test_an_unlabelled_lustre_instance_is_refused_and_everything_this_up_made_is_removed(gcp: FakeGCP) -> None:
    gcp.seed_network(PROJECT, "user-net")
    _user_lustre(gcp, "demo-lustre", "user-net")
    theirs = existing(gcp)
    with pytest.raises(ProvisioningError) as info:
        backend(spec(network="user-net", fabric="tcp")).up()
    err = info.value
    assert err.step == "lustre"
    assert isinstance(err.cause, OwnershipError)
    cleaned = {c.split()[0] for c in err.cleaned}
    # What was requested before Lustre failed depends on timing; the pools go with
    # their cluster whenever they were requested.
    assert {"psa-range", "psa-peering", "firewall-lustre", "node-sa", "gke-cluster"} <= cleaned
    assert cleaned <= {"psa-range", "psa-peering", "firewall-lustre", "node-sa", "gke-cluster", "cpu-pool", "gpu-pool"}
    assert err.left == []
    assert gcp.leaked() == []
    # The user's network, PSA range, connection and instance are exactly as they were.
    assert existing(gcp) == theirs
    conn = gcp.resources()["servicenetworking.connections"]
    assert len(conn) == 1


def test_a_users_network_and_existing_volume_are_used_never_changed(gcp: FakeGCP) -> None:
    gcp.seed_network(PROJECT, "user-net")
    _user_lustre(gcp, "user-lustre", "user-net")
    theirs = existing(gcp)
    cluster = spec(network="user-net", volume=LustreVolume(name="user-lustre", filesystem="userfs", existing=True))
    report = backend(cluster).up()
    assert report.keys("used") == ["network", "subnet", "lustre"]
    assert cluster.volume.mount_point.endswith("@tcp:/userfs")
    # Our PSA range joined the user's connection, next to theirs.
    assert _connection_ranges(gcp, "user-net") == ["user-net-psa", "demo-psa"]

    down = backend(cluster).down()
    assert down.get("network").outcome == down.get("lustre").outcome == "used"
    assert existing(gcp) == theirs
    assert _connection_ranges(gcp, "user-net") == ["user-net-psa"]


def _connection_ranges(gcp: FakeGCP, network: str) -> list[str]:
    from rl_lustre.gcp import PsaConnections

    found = PsaConnections(backoff=FAST_BACKOFF).get_or_none(PROJECT, network)
    return list(found["reservedPeeringRanges"]) if found else []


# Each step's own create call, failed (call) or failed after it was accepted (operation).
STEP_FAULTS = {
    "network": "compute.networks.insert",
    "subnet": "compute.subnetworks.insert",
    "psa-range": "compute.globalAddresses.insert",
    "psa-peering": "servicenetworking.connections.create",
    "firewall-lustre": "compute.firewalls.insert",
    "lustre": "lustre.CreateInstance",
    "gke-cluster": "gke.CreateCluster",
    "gpu-pool": "gke.CreateNodePool",
}
OWN_RESOURCE = {"network": "*/networks/demo-net", "subnet": "*/subnetworks/demo-subnet"}
# The fabric's steps share their create method with the cluster's network and subnet:
# the fault is aimed at the one resource.
FABRIC_STEPS = {
    "gvnic-network": ("compute.networks.insert", "*/networks/demo-gvnic-net"),
    "rdma-network": ("compute.networks.insert", "*/networks/demo-rdma-net"),
    "gvnic-subnet": ("compute.subnetworks.insert", "*/subnetworks/demo-gvnic-sub"),
    **{f"rdma-subnet-{i}": ("compute.subnetworks.insert", f"*/subnetworks/demo-rdma-sub-{i}") for i in range(8)},
}


def test_the_fault_table_covers_every_google_cloud_step_of_the_plan() -> None:
    gcp_steps = {r.key for r in spec().plan() if r.action == "create" and r.key not in K8S_KEYS}
    # cpu-pool has no request of its own: it is created by CreateCluster (see below);
    # node-sa's calls (IAM has no operations) are failed in tests/test_node_account.py.
    assert gcp_steps == {*STEP_FAULTS, *FABRIC_STEPS, "cpu-pool", "node-sa"}


# The fabric's subnets are alike: the first and the last stand for the eight.
@pytest.mark.parametrize("how", ["call", "operation"])
@pytest.mark.parametrize("step", sorted({*STEP_FAULTS, *FABRIC_STEPS} - {f"rdma-subnet-{i}" for i in range(1, 7)}))
def test_a_fault_at_any_step_rolls_back_to_nothing(gcp: FakeGCP, step: str, how: str) -> None:
    method, resource = FABRIC_STEPS.get(step, (STEP_FAULTS.get(step, ""), OWN_RESOURCE.get(step, "*")))
    if how == "call":
        gcp.faults.fail_call(method, grpc.StatusCode.INTERNAL, message=f"boom in {method}", resource=resource)
    else:
        gcp.faults.fail_operation(method, message=f"operation of {method} failed", resource=resource)
    with pytest.raises(ProvisioningError) as info:
        backend(spec()).up()
    err = info.value
    assert isinstance(err, RollbackError)
    assert err.step == step
    assert f"at {step}" in str(err)
    assert isinstance(err.cause, OperationFailedError if how == "operation" else GCPError)
    assert err.left == []
    assert existing(gcp) == {}


def test_a_cpu_pool_that_does_not_come_up_rolls_back_to_nothing(gcp: FakeGCP) -> None:
    # The CPU pool is created by CreateCluster; its own step waits for it, reading it
    # with GetNodePool. Both pools read theirs at the same moment, so either may fail first.
    gcp.faults.fail_call("gke.GetNodePool", grpc.StatusCode.PERMISSION_DENIED, times=1000)
    with pytest.raises(ProvisioningError) as info:
        backend(spec()).up()
    assert info.value.step in ("cpu-pool", "gpu-pool")
    assert info.value.report is not None
    assert info.value.report.get("cpu-pool").outcome == "failed"
    assert info.value.rollback is not None
    assert info.value.rollback.get("gke-cluster").outcome == "deleted"
    assert existing(gcp) == {}


def test_keep_on_failure_keeps_what_was_created_until_down() -> None:
    with FakeGCP(latency={"gke.create_node_pool": 1.0}) as gcp:
        gcp.faults.fail_operation("gke.CreateNodePool", message="GCE_STOCKOUT")
        with pytest.raises(ProvisioningError) as info:
            backend(spec()).up(keep_on_failure=True)
        assert info.value.rollback is None
        assert {k.split()[0] for k in info.value.kept} == set(FAKE_KIND)
        # Not the stocked-out pool GKE left in ERROR: its capacity lane deleted it (nothing of a lane stays).
        assert len(gcp.leaked("demo")) == len(LEAKED_KIND) - 1
        backend(spec()).down()
        assert existing(gcp) == {}


def test_progress_shows_each_resource_with_its_elapsed_time(gcp: FakeGCP, capsys: pytest.CaptureFixture[str]) -> None:
    with enable_output(True):
        backend(spec()).up()
    out = capsys.readouterr().out
    for key in FAKE_KIND:
        assert re.search(rf"\d:\d\d:\d\d up {re.escape(key)} +created ", out), key
    for key in KUBE_KEYS:
        assert re.search(rf"\d:\d\d:\d\d up {re.escape(key)} +skipped \(Kubernetes part switched off", out), key
    backend(spec()).down()


SIGNAL_SCRIPT = textwrap.dedent("""
    import logging, sys
    from rl_lustre import Cluster
    from rl_lustre.backends.gke import GKEBackend
    from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    cluster = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b", num_nodes=2,
                      fabric="tcp", preload_image=False)  # a completed preload image outlives a rollback
    GKEBackend(cluster, gcp_only=True, backoff=FAST_BACKOFF, retry=FAST_RETRY).up()
    print("UP FINISHED", flush=True)
""")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_up_rolls_back_to_nothing(sig: signal.Signals) -> None:
    # Both branches are still being created when the signal arrives. GKE refuses to delete
    # a cluster while a pool is being created, so the rollback waits for the pool (3 s);
    # the Lustre instance is deleted while it is still being created.
    latency = {"lustre.create": 60.0, "gke.create_node_pool": 3.0}
    with FakeGCP(latency=latency) as gcp:
        env = {**os.environ, **gcp.env, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, "-c", SIGNAL_SCRIPT],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not {"lustre.CreateInstance", "gke.CreateNodePool"} <= set(gcp.request_counts()):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "up() never got both branches going"
                time.sleep(0.05)
            assert gcp.leaked("demo")  # mid-up: things exist
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode != 0
        assert "UP FINISHED" not in out
        assert "ProvisioningInterrupted" in err
        assert f"{sig.name} received" in err
        assert "cleaned up:" in err
        first = {r.method: r.time for r in reversed(gcp.requests)}
        assert first["gke.DeleteCluster"] >= first["gke.CreateNodePool"] + 3.0
        # No settle(): the abandoned Lustre creation is 60 s long, and was deleted half-way.
        assert {kind: found for kind, found in gcp.resources().items() if found} == {}


def test_with_the_kubernetes_part_up_applies_the_objects_and_waits_for_the_raycluster() -> None:
    from rl_lustre.testing.kube import KubeFake

    # FakeGCP gives KubeFake its node pools: the ComputeClass's GPU nodes come by the fake autoscaler.
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        # The image pre-pull and model prefetch nodes have their own tests (test_startup.py).
        cluster = spec(secrets=("HF_TOKEN",), prefetch_models=(), prepull_image=False)
        os.environ["HF_TOKEN"] = "hf_test_value_123"
        try:
            b = GKEBackend(cluster, backoff=FAST_BACKOFF, retry=FAST_RETRY)
            report = b.up()
        finally:
            del os.environ["HF_TOKEN"]
        assert report.keys("created") == [r.key for r in cluster.plan() if r.action == "create"]
        kinds = {
            o["kind"]: o
            for o in kube.objects()
            if o["kind"] in ("PersistentVolume", "PersistentVolumeClaim", "Secret", "RayCluster")
        }
        assert set(kinds) == {"PersistentVolume", "PersistentVolumeClaim", "Secret", "RayCluster"}
        for obj in kinds.values():
            assert obj["metadata"]["labels"]["rl-lustre-deployment"] == "demo"
        # The PV points at the instance this up() created.
        ip, _fs = cluster.volume.mount_point.split("@tcp:/")
        assert kinds["PersistentVolume"]["spec"]["csi"]["volumeAttributes"]["ip"] == ip
        # Idempotent with the Kubernetes part too.
        count = len(gcp.requests)
        assert set(b.up().keys("adopted")) == set(cluster.plan().keys())
        assert creates(gcp.requests[count:]) == []
        down = b.down()
        # The keeper goes on its own, first (it stops before the runs: issue 31); the rest with the cluster.
        assert {down.get(k).note for k in kube_keys(cluster.plan()) if k != "keeper"} == {"with gke-cluster"}
        assert down.get("keeper").outcome == "deleted"
        assert existing(gcp) == {}


def test_a_with_block_that_raises_tears_the_deployment_down(gcp: FakeGCP) -> None:
    cluster = spec()
    cluster.use_backend(backend(cluster))
    inside: list[int] = []

    def script() -> None:
        with cluster:
            inside.append(len(gcp.leaked("demo")))
            raise RuntimeError("bug in the training script")

    with pytest.raises(RuntimeError, match="bug in the training script"):
        script()
    assert inside == [len(LEAKED_KIND)]
    assert existing(gcp) == {}


def test_a_kept_cluster_survives_its_with_block_and_says_how_to_remove_it(
    gcp: FakeGCP, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = spec(keep=True)
    cluster.use_backend(backend(cluster))
    with cluster:
        pass
    assert len(gcp.leaked("demo")) == len(LEAKED_KIND)
    assert "rl-lustre-deployment=demo" in caplog.text
    assert ".down()" in caplog.text
    backend(spec()).down()
    assert existing(gcp) == {}
