"""Managed Lustre through the real ``LustreClient`` against the gRPC fake: the adapter
and ``LustreVolume``'s live methods."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from google.api_core.future.polling import DEFAULT_POLLING
from google.cloud import lustre_v1

from rl_lustre import Cluster, LustreVolume
from rl_lustre.errors import ConfigError, NotFoundError, NotReadyError, OwnershipError
from rl_lustre.gcp import _clients
from rl_lustre.gcp.lustre import LustreInstances, instance_request
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

PROJECT, ZONE, NET = "my-project", "us-east1-b", "lab-net"


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP(latency={"lustre.create": 0.05, "lustre.delete": 0.03}) as fake:
        fake.seed_network(PROJECT, NET, psa_range="10.90.4.0/22")
        yield fake


@pytest.fixture
def api() -> LustreInstances:
    return LustreInstances(backoff=FAST_BACKOFF, retry=FAST_RETRY)


def volume(**kw: object) -> LustreVolume:
    args: dict[str, object] = {"name": "lab-lustre", "project": PROJECT, "zone": ZONE, "network": NET}
    args.update(kw)
    return LustreVolume(**args)  # type: ignore[arg-type]


def test_volume_create_refresh_mount_point_delete(gcp: FakeGCP, api: LustreInstances) -> None:
    vol = volume()
    with pytest.raises(NotReadyError):
        _ = vol.mount_point
    assert vol.create(api=api) is vol
    assert vol.state == "ACTIVE"
    # IP@tcp:/fsname, inside the network's PSA range, with the volume's filesystem name.
    assert re.fullmatch(r"10\.90\.[4-7]\.\d+@tcp:/lustrefs", vol.mount_point)
    assert vol.ip == vol.mount_point.split("@")[0]
    labels = gcp.resources()["lustre.instances"][vol.resource_name()]
    assert labels == {"managed-by": "rl-lustre", "rl-lustre-deployment": "lab-lustre"}

    fresh = volume()  # another handle on the same instance learns its state from the API
    assert fresh.exists(api=api)
    assert fresh.refresh(api=api).mount_point == vol.mount_point

    assert vol.delete(api=api) is True
    assert vol.state is None
    assert gcp.resources()["lustre.instances"] == {}
    assert not fresh.exists(api=api)
    with pytest.raises(NotFoundError):
        fresh.refresh(api=api)
    assert vol.delete(api=api) is False  # deleting a missing instance is fine


def test_second_create_adopts_without_a_new_request(gcp: FakeGCP, api: LustreInstances) -> None:
    volume().create(api=api)
    again = LustreInstances(backoff=FAST_BACKOFF).create(
        instance_request(volume(), deployment="lab-lustre"), deployment="lab-lustre"
    )
    assert again.adopted
    assert gcp.request_counts("lustre.")["lustre.CreateInstance"] == 1


def test_request_carries_spec_labels_and_network() -> None:
    vol = volume(
        capacity_gib=36000,
        throughput_mbps_per_tib=250,
        filesystem="ckpt",
        labels={"team": "rl"},
        description="checkpoints",
    )
    req = instance_request(vol, deployment="exp-1", labels={"cost-center": "42"})
    assert (req.name, req.capacity_gib, req.per_unit_storage_throughput, req.filesystem, req.description) == (
        f"projects/{PROJECT}/locations/{ZONE}/instances/lab-lustre",
        36000,
        250,
        "ckpt",
        "checkpoints",
    )
    assert req.network == f"projects/{PROJECT}/global/networks/{NET}"
    assert dict(req.labels) == {
        "cost-center": "42",
        "team": "rl",
        "managed-by": "rl-lustre",
        "rl-lustre-deployment": "exp-1",
    }
    # Ours win: extra labels cannot pretend another owner.
    forged = instance_request(vol, deployment="exp-1", labels={"managed-by": "someone"})
    assert forged.labels["managed-by"] == "rl-lustre"


def test_request_agrees_with_the_plan() -> None:
    cluster = Cluster(name="demo", project=PROJECT, region="us-east1", zone=ZONE, labels={"team": "rl"})
    node = cluster.plan().get("lustre")
    assert cluster.volume is not None
    req = instance_request(cluster.volume, deployment=cluster.name, labels=cluster.labels)
    s = node.settings
    assert req.name.rsplit("/", 1)[-1] == node.name
    assert req.name.split("/")[3] == s["location"]
    assert (
        req.capacity_gib,
        req.per_unit_storage_throughput,
        req.filesystem,
        req.network,
        req.gke_support_enabled,
    ) == (s["capacity_gib"], s["per_unit_storage_throughput"], s["filesystem"], s["network"], s["gke_support_enabled"])
    assert dict(req.labels) == dict(node.labels)


def test_existing_volume_is_read_but_never_created_or_deleted(gcp: FakeGCP, api: LustreInstances) -> None:
    with pytest.raises(NotFoundError):
        volume(existing=True).create(api=api)
    assert gcp.request_counts()["lustre.CreateInstance"] == 0

    volume().create(api=api, deployment="someone-else")
    mine = volume(existing=True)
    assert mine.create(api=api).mount_point.endswith("@tcp:/lustrefs")
    assert mine.delete(api=api) is False
    assert gcp.request_counts()["lustre.DeleteInstance"] == 0
    assert list(gcp.resources()["lustre.instances"]) == [mine.resource_name()]


def _create_by_hand(labels: dict[str, str]) -> None:
    """An instance made outside rl_lustre, through the plain client."""
    client = _clients.lustre()
    op = client.create_instance(
        parent=f"projects/{PROJECT}/locations/{ZONE}",
        instance_id="lab-lustre",
        instance=lustre_v1.Instance(
            capacity_gib=18000,
            per_unit_storage_throughput=500,
            filesystem="theirs",
            network=f"projects/{PROJECT}/global/networks/{NET}",
            labels=labels,
        ),
    )
    op.result(timeout=10, polling=DEFAULT_POLLING.with_delay(initial=0.01, maximum=0.05))


@pytest.mark.parametrize(
    "labels", [{}, {"managed-by": "rl-lustre", "rl-lustre-deployment": "other"}], ids=["unlabelled", "other-deployment"]
)
def test_same_named_instance_that_is_not_ours_is_refused(
    gcp: FakeGCP, api: LustreInstances, labels: dict[str, str]
) -> None:
    _create_by_hand(labels)
    vol = volume()
    with pytest.raises(OwnershipError, match="lab-lustre"):
        vol.create(api=api)
    with pytest.raises(OwnershipError, match="lab-lustre"):
        vol.delete(api=api)
    assert gcp.request_counts()["lustre.DeleteInstance"] == 0
    assert gcp.resources()["lustre.instances"][vol.resource_name()] == labels
    assert not vol._live.created_by_us


def test_bad_input_fails_before_any_request(gcp: FakeGCP, api: LustreInstances) -> None:
    before = len(gcp.requests)
    with pytest.raises(ConfigError, match="network"):
        volume(network=None).create(api=api)
    with pytest.raises(ConfigError, match="zone"):
        LustreVolume(name="x", project=PROJECT, network=NET).create(api=api)
    with pytest.raises(ValueError, match="gs://"):
        volume().import_data("s3://bucket/x", "/data", api=api)
    with pytest.raises(ValueError, match="absolute"):
        volume().export_data("relative/dir", "gs://bucket/x", api=api)
    assert len(gcp.requests) == before


def test_import_and_export_report_the_operation_counters(gcp: FakeGCP, api: LustreInstances) -> None:
    vol = volume().create(api=api)
    gcp.seed_bucket("datasets", {"deepscaler/train.jsonl": 2000, "deepscaler/val.jsonl": 100, "other/x": 1})
    gcp.seed_bucket("backups")
    gcp.seed_files(vol.resource_name(), {"checkpoints/run-1/step_20/model.pt": 5000, "checkpoints/run-2/y": 7})
    imported = vol.import_data("gs://datasets/deepscaler", "/data/deepscaler", api=api)
    exported = vol.export_data("/checkpoints/run-1", "gs://backups/run-1", api=api)
    assert (imported.objects_copied, imported.bytes_copied) == (2, 2100)
    assert (exported.objects_copied, exported.bytes_copied) == (1, 5000)
    assert exported.operation != imported.operation
    assert gcp.files(vol.resource_name())["data/deepscaler/train.jsonl"] == 2000
    assert gcp.bucket_objects("backups") == {"run-1/step_20/model.pt": 5000}
    # Incremental: what is there already is skipped.
    again = vol.import_data("gs://datasets/deepscaler", "/data/deepscaler", api=api)
    assert (again.objects_copied, again.objects_skipped) == (0, 2)
    counts = gcp.request_counts("lustre.")
    assert (counts["lustre.ImportData"], counts["lustre.ExportData"]) == (2, 1)


def test_create_without_private_services_access_is_a_gcp_error(gcp: FakeGCP, api: LustreInstances) -> None:
    from rl_lustre.errors import GCPError

    gcp.seed_network(PROJECT, "bare-net", psa_range=None)
    with pytest.raises(GCPError, match="private services access") as info:
        volume(network="bare-net").create(api=api)
    assert not type(info.value).__module__.startswith("google")


def test_create_while_a_deletion_is_running_waits_and_creates_afresh(gcp: FakeGCP, api: LustreInstances) -> None:
    vol = volume().create(api=api)
    old_uid = api.get_or_none(vol.resource_name()).uid  # type: ignore[union-attr]
    assert api.delete(vol.resource_name(), deployment="lab-lustre", wait=False)
    assert api.get_or_none(vol.resource_name()).state == lustre_v1.Instance.State.DELETING  # type: ignore[union-attr]
    again = api.create(instance_request(volume(), deployment="lab-lustre"), deployment="lab-lustre")
    assert not again.adopted
    assert again.resource.state == lustre_v1.Instance.State.ACTIVE
    assert again.resource.uid != old_uid
