"""Compute images, disks and instances through the real compute_v1 clients, against the
fake: labels and roles, operations, guest attributes, detach, deletion of only ours."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.cloud import compute_v1

from rl_lustre.errors import GCPError, OperationFailedError, OwnershipError
from rl_lustre.gcp.images import Disks, Images, Instances, digest_label
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

KW = {"backoff": FAST_BACKOFF, "retry": FAST_RETRY}
P, Z = "my-project", "us-east1-b"
ZONE = f"projects/{P}/zones/{Z}"
NEMO = "nvcr.io/nvidia/nemo-rl:v0.4.0"
BUILD = {"managed-by": "rl-lustre", "rl-lustre-role": "preload-build"}


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    # The guest takes a moment, so that its "running" state can be seen.
    with FakeGCP(latency={"compute.preload_boot": 0.3}) as fake:
        yield fake


def vm(name: str = "rlp-build-x", *, images: str = NEMO, data_gb: int = 250) -> compute_v1.Instance:
    def disk(boot: bool, **init: object) -> compute_v1.AttachedDisk:
        return compute_v1.AttachedDisk(
            boot=boot,
            auto_delete=True,
            device_name="boot" if boot else "rl-lustre-data",
            initialize_params=compute_v1.AttachedDiskInitializeParams(labels=BUILD, **init),
        )

    return compute_v1.Instance(
        name=name,
        machine_type=f"zones/{Z}/machineTypes/n2-standard-8",
        labels=BUILD,
        disks=[
            disk(True, source_image="projects/debian-cloud/global/images/family/debian-12", disk_size_gb=20),
            disk(False, disk_name=f"{name}-data", disk_size_gb=data_gb, disk_type=f"zones/{Z}/diskTypes/pd-ssd"),
        ],
        metadata=compute_v1.Metadata(
            items=[
                compute_v1.Items(key=k, value=v)
                for k, v in {
                    "startup-script": "#!/bin/bash\n",
                    "enable-guest-attributes": "TRUE",
                    "rl-lustre-images": images,
                    "rl-lustre-layout": "v1",
                }.items()
            ]
        ),
    )


def wait_done(instances: Instances, name: str) -> dict[str, str]:
    from rl_lustre.gcp._wait import wait_for

    return wait_for(
        "the guest",
        lambda: instances.guest_attributes(name, "rl-lustre/") or {},
        done=lambda a: a.get("status") in ("done", "failed"),
        timeout=10,
        backoff=KW["backoff"],
    )


def test_the_build_sequence_leaves_only_a_ready_labelled_image(gcp: FakeGCP) -> None:
    instances, disks, images = Instances(**KW), Disks(**KW), Images(**KW)
    name = f"{ZONE}/instances/rlp-build-x"
    assert instances.get_or_none(name) is None
    created = instances.insert(vm(), parent=ZONE)
    assert created.status in ("PROVISIONING", "RUNNING")
    assert instances.guest_attributes(name, "rl-lustre/") in (None, {"status": "running", "progress": "0.0 of 25.0 GB"})
    assert instances.get_or_none(name).status == "RUNNING"
    attrs = wait_done(instances, name)
    assert attrs["status"] == "done"
    assert int(attrs["unpacked-bytes"]) == int(25e9 * 2.4)
    assert "status=done" in instances.serial_tail(name)
    # Both disks are ours, by role, in every zone.
    assert sorted(d.name for d in disks.list_role(P, "preload-build")) == ["rlp-build-x", "rlp-build-x-data"]
    instances.detach_disk(name, "rl-lustre-data")
    digest = "sha256:" + "ab" * 32
    labels = {
        "managed-by": "rl-lustre",
        "rl-lustre-role": "preload-image",
        "rl-lustre-digest": digest_label(digest),
        "rl-lustre-layout": "v1",
    }
    image = images.insert(
        compute_v1.Image(
            name="rlp-1234-abab", family="rlp-1234", labels=labels, source_disk=f"{ZONE}/disks/rlp-build-x-data"
        ),
        parent=f"projects/{P}/global",
    )
    assert image.status == "READY"
    assert image.disk_size_gb == 250
    assert image.archive_size_bytes == int(25e9 * 2.4)
    assert images.find(P, digest=digest, layout="v1").name == "rlp-1234-abab"
    assert images.find(P, digest=digest, layout="v2") is None
    assert images.find(P, digest="sha256:" + "cd" * 32, layout="v1") is None
    # The instance goes with its auto-delete boot disk; the detached data disk stays until deleted.
    assert instances.delete_ours(name, role="preload-build")
    assert [d.name for d in disks.list_role(P, "preload-build")] == ["rlp-build-x-data"]
    assert disks.delete_ours(f"{ZONE}/disks/rlp-build-x-data", role="preload-build")
    gcp.settle()
    assert gcp.leaked() == []
    assert gcp.leaked(shared=True) == [f"compute.images projects/{P}/global/images/rlp-1234-abab"]


def test_what_is_not_ours_is_never_deleted_and_attached_disks_cannot_be_imaged(gcp: FakeGCP) -> None:
    instances, disks, images = Instances(**KW), Disks(**KW), Images(**KW)
    instances.insert(vm("theirs"), parent=ZONE)
    assert not images.delete_ours(f"projects/{P}/global/images/nope", role="preload-image")
    with pytest.raises(OwnershipError, match="not an rl_lustre preload-image"):  # ours, but another role
        disks.delete_ours(f"{ZONE}/disks/theirs-data", role="preload-image")
    with pytest.raises(GCPError, match="already being used"):
        images.insert(
            compute_v1.Image(name="too-soon", source_disk=f"{ZONE}/disks/theirs-data"), parent=f"projects/{P}/global"
        )
    assert not disks.delete_ours(f"{ZONE}/disks/absent", role="preload-build")
    instances.detach_disk(f"{ZONE}/instances/theirs", "rl-lustre-data")
    images.insert(
        compute_v1.Image(name="by-hand", source_disk=f"{ZONE}/disks/theirs-data"), parent=f"projects/{P}/global"
    )
    with pytest.raises(OwnershipError, match="rl_lustre never deletes it"):
        images.delete_ours(f"projects/{P}/global/images/by-hand", role="preload-image")
    assert images.list_role(P, "preload-image") == []


def test_a_failed_image_operation_leaves_a_failed_image_and_the_guest_reports_errors(gcp: FakeGCP) -> None:
    instances, images = Instances(**KW), Images(**KW)
    gcp.preload.script_failure = "ctr: failed to pull: 503 Service Unavailable"
    instances.insert(vm("a"), parent=ZONE)
    assert wait_done(instances, f"{ZONE}/instances/a") == {
        "status": "failed",
        "progress": "0.0 of 25.0 GB",
        "error": "ctr: failed to pull: 503 Service Unavailable",
    }
    gcp.preload.script_failure = None
    instances.insert(vm("b", data_gb=20), parent=ZONE)
    assert (
        wait_done(instances, f"{ZONE}/instances/b")["error"]
        == f"disk too small: unpacked {int(25e9 * 2.4)} bytes > {20 * 10**9}"
    )
    instances.insert(vm("c", images="nvcr.io/nvidia/nope:1"), parent=ZONE)
    assert "not found" in wait_done(instances, f"{ZONE}/instances/c")["error"]
    instances.detach_disk(f"{ZONE}/instances/a", "rl-lustre-data")
    gcp.faults.fail_operation("compute.images.insert", message="internal error")
    digest = "sha256:" + "ef" * 32
    with pytest.raises(OperationFailedError, match="internal error"):
        images.insert(
            compute_v1.Image(
                name="broken",
                labels={
                    "managed-by": "rl-lustre",
                    "rl-lustre-role": "preload-image",
                    "rl-lustre-digest": digest_label(digest),
                    "rl-lustre-layout": "v1",
                },
                source_disk=f"{ZONE}/disks/a-data",
            ),
            parent=f"projects/{P}/global",
        )
    assert images.find(P, digest=digest, layout="v1").status == "FAILED"
