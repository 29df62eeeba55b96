"""The fake Managed Lustre and Cloud Storage hold real bytes: an instance is a directory, an
export copies its files into the bucket with their content (read back over the JSON API),
over time and with counters that grow, one transfer per instance at a time, failing half-way
when told to, and only when the bucket lets Lustre's service agent write."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rl_lustre import LustreVolume
from rl_lustre.catalog import LUSTRE_SERVICE_AGENT
from rl_lustre.errors import GCPError, OperationFailedError
from rl_lustre.gcp.lustre import LustreInstances
from rl_lustre.gcp.storage import BucketObjects
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, project_number

PROJECT, ZONE, NET = "my-project", "us-east1-b", "lab-net"


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP(latency={"lustre.create": 0.02, "lustre.delete": 0.02, "lustre.export_data": 0.02}) as fake:
        fake.seed_network(PROJECT, NET, psa_range="10.90.4.0/22")
        yield fake


@pytest.fixture
def api() -> LustreInstances:
    return LustreInstances(backoff=FAST_BACKOFF, retry=FAST_RETRY)


def volume(api: LustreInstances) -> LustreVolume:
    return LustreVolume(name="lab-lustre", project=PROJECT, zone=ZONE, network=NET).create(api=api)


def test_an_export_copies_the_files_with_their_content(gcp: FakeGCP, api: LustreInstances) -> None:
    vol = volume(api)
    name = vol.resource_name()
    gcp.seed_bucket("results")
    # What a job writes under the mount path is what the instance holds.
    root = gcp.volume_dir(name)
    (root / "ckpt" / "step_2").mkdir(parents=True)
    (root / "ckpt" / "step_2" / "training_info.json").write_text('{"step": 2}')
    gcp.seed_files(name, {"ckpt/step_2/weights.bin": 3_000_000_000})  # sparse: no disk, no memory
    assert gcp.files(name) == {"ckpt/step_2/training_info.json": 11, "ckpt/step_2/weights.bin": 3_000_000_000}

    started = time.monotonic()
    done = api.export_data(name, "/ckpt", "gs://results/run-1/")
    assert time.monotonic() - started < 30
    assert (done.objects_copied, done.bytes_copied, done.objects_failed) == (2, 3_000_000_011, 0)
    storage = BucketObjects()
    assert storage.read_bytes("results", "run-1/step_2/training_info.json") == b'{"step": 2}'
    assert [(o.name, o.size) for o in storage.list("results", "run-1/")] == [
        ("run-1/step_2/training_info.json", 11),
        ("run-1/step_2/weights.bin", 3_000_000_000),
    ]
    assert storage.list_dirs("results", "") == ["run-1/"]
    # Incremental: nothing changed, nothing copied again.
    again = api.export_data(name, "/ckpt", "gs://results/run-1/")
    assert (again.objects_copied, again.objects_skipped) == (0, 2)

    # Deleting the instance deletes its files.
    vol.delete(api=api)
    gcp.settle()
    assert gcp.files(name) == {}
    assert storage.read_bytes("results", "run-1/step_2/training_info.json") == b'{"step": 2}'


def test_a_slow_export_shows_its_progress_and_holds_the_instance(api: LustreInstances) -> None:
    with FakeGCP(latency={"lustre.create": 0.02, "lustre.transfer_per_gb": 0.15}) as gcp:
        gcp.seed_network(PROJECT, NET, psa_range="10.90.4.0/22")
        vol = volume(api)
        name = vol.resource_name()
        gcp.seed_bucket("results")
        gcp.seed_files(name, {f"ckpt/f{i}": 1_000_000_000 for i in range(4)})
        op = api.start_export(name, "/ckpt", "gs://results/r/")
        with pytest.raises(GCPError, match="unable to queue"):
            api.start_export(name, "/ckpt", "gs://results/other/")
        assert [t.operation for t in api.running_transfers(name)] == [op]
        seen = []
        while not (status := api.transfer_status(op)).done:
            seen.append(status.bytes_copied)
            time.sleep(0.02)
        assert status.bytes_copied == 4_000_000_000
        assert not status.error
        # The counters grew while it ran: a client can show bytes, rate and time left.
        assert len({b for b in seen if 0 < b < 4_000_000_000}) >= 2
        assert api.running_transfers(name) == []


def test_a_failed_export_stops_half_way(gcp: FakeGCP, api: LustreInstances) -> None:
    vol = volume(api)
    gcp.seed_bucket("results")
    gcp.seed_files(vol.resource_name(), {f"ckpt/f{i}": b"x" * (i + 1) for i in range(4)})
    gcp.faults.fail_operation("lustre.ExportData", message="transfer interrupted")
    with pytest.raises(OperationFailedError, match="transfer interrupted"):
        api.export_data(vol.resource_name(), "/ckpt", "gs://results/r/")
    assert gcp.bucket_objects("results") == {"r/f0": 1, "r/f1": 2}


def test_the_bucket_must_let_lustre_write(gcp: FakeGCP, api: LustreInstances) -> None:
    vol = volume(api)
    agent = LUSTRE_SERVICE_AGENT.format(number=project_number(PROJECT))
    gcp.seed_bucket("closed", iam={"roles/storage.objectViewer": [f"serviceAccount:{agent}"]})
    gcp.seed_bucket("granted", iam={"roles/storage.objectUser": [f"serviceAccount:{agent}"]})
    gcp.seed_files(vol.resource_name(), {"ckpt/a": b"a"})
    with pytest.raises(GCPError, match="may not write to bucket closed") as info:
        api.export_data(vol.resource_name(), "/ckpt", "gs://closed/r/")
    assert getattr(info.value, "grpc_code", None) == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert gcp.bucket_objects("closed") == {}
    api.export_data(vol.resource_name(), "/ckpt", "gs://granted/r/")
    assert gcp.bucket_objects("granted") == {"r/a": 1}
    assert BucketObjects().policy("granted") == {"roles/storage.objectUser": [f"serviceAccount:{agent}"]}


def test_a_path_in_the_bucket_ends_with_a_slash_on_the_wire(gcp: FakeGCP, api: LustreInstances) -> None:
    from rl_lustre.gcp import _clients

    vol = volume(api)
    with pytest.raises(Exception, match="must end with '/'"):
        _clients.lustre().export_data(
            request={"name": vol.resource_name(), "lustre_path": {"path": "/x"}, "gcs_path": {"uri": "gs://bkt/p"}},
            retry=None,
        )
    # The adapter adds it.
    gcp.seed_bucket("bkt")
    gcp.seed_files(vol.resource_name(), {"x/y": b"y"})
    api.export_data(vol.resource_name(), "/x", "gs://bkt/p")
    assert gcp.bucket_objects("bkt") == {"p/y": 1}


def test_labels_change_through_update_instance(gcp: FakeGCP, api: LustreInstances) -> None:
    vol = volume(api)
    labels = dict(gcp.resources()["lustre.instances"][vol.resource_name()])
    api.set_labels(vol.resource_name(), {**labels, "rl-lustre-results": "not-exported"})
    assert gcp.resources()["lustre.instances"][vol.resource_name()]["rl-lustre-results"] == "not-exported"


def test_an_instance_can_live_in_a_directory_of_your_choice(gcp: FakeGCP, api: LustreInstances, tmp_path: Path) -> None:
    name = f"projects/{PROJECT}/locations/{ZONE}/instances/lab-lustre"
    assert gcp.volume_dir(name, tmp_path / "mnt") == tmp_path / "mnt"
    volume(api)
    (tmp_path / "mnt" / "written-by-a-pod").write_text("hello")
    assert gcp.files(name) == {"written-by-a-pod": 5}
