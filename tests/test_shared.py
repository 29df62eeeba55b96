"""What deployments share, found by role labels: preload images with the node pools that boot
from them, and the leftovers of a killed build, collected once older than a build can take."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.cloud import compute_v1

from rl_lustre import Cluster
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.errors import OwnershipError
from rl_lustre.gcp.images import Images, Instances
from rl_lustre.shared import collect_shared, find_shared
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

P, Z = "my-project", "us-east1-b"
BUILD = {"managed-by": "rl-lustre", "rl-lustre-role": "preload-build"}


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP() as fake:
        yield fake


def killed_build_vm() -> compute_v1.Instance:
    """What an up() killed mid-build leaves: the builder VM with its boot and data disks."""

    def disk(boot: bool, **init: object) -> compute_v1.AttachedDisk:
        return compute_v1.AttachedDisk(
            boot=boot,
            auto_delete=True,
            device_name="boot" if boot else "rl-lustre-data",
            initialize_params=compute_v1.AttachedDiskInitializeParams(labels=BUILD, **init),
        )

    return compute_v1.Instance(
        name="rlp-build-dead",
        machine_type=f"zones/{Z}/machineTypes/n2-standard-8",
        labels=BUILD,
        disks=[
            disk(True, source_image="projects/debian-cloud/global/images/family/debian-12", disk_size_gb=20),
            disk(False, disk_name="rlp-build-dead-data", disk_size_gb=250, disk_type=f"zones/{Z}/diskTypes/pd-ssd"),
        ],
        metadata=compute_v1.Metadata(
            items=[compute_v1.Items(key="rl-lustre-images", value="nvcr.io/nvidia/nemo-rl:v0.4.0")]
        ),
    )


def test_images_are_listed_with_their_users_and_builder_leftovers_collected_when_old(gcp: FakeGCP) -> None:
    cluster = Cluster(name="demo", project=P, region="us-east1", zone=Z, num_nodes=2, fabric="tcp")
    GKEBackend(cluster, gcp_only=True, backoff=FAST_BACKOFF, retry=FAST_RETRY).up()
    Instances(backoff=FAST_BACKOFF, retry=FAST_RETRY).insert(killed_build_vm(), parent=f"projects/{P}/zones/{Z}")
    mine = gcp.seed_image(P, "team-nemo", holds=[cluster.image])  # not ours: no labels

    shared = find_shared(P)
    [image] = shared.images
    assert image.name.startswith(f"projects/{P}/global/images/{cluster.plan().get('preload-image').name}-")
    assert (image.image, image.status, image.used_by) == (cluster.image, "READY", ("demo/gpu-pool",))
    assert image.digest == gcp.registry.digest(cluster.image)
    assert image.disk_gb == 250
    assert image.usd_per_month() == pytest.approx(12.5)
    # The VM, and its boot and data disks.
    assert sorted((b.kind, b.name.rsplit("/", 1)[1]) for b in shared.builders) == [
        ("compute.v1.Disk", "rlp-build-dead"),
        ("compute.v1.Disk", "rlp-build-dead-data"),
        ("compute.v1.Instance", "rlp-build-dead"),
    ]

    # A build may still be under way: young leftovers stay; an image in use is never taken.
    young = collect_shared(P, delete=True, preload_images=True)
    assert (young.builders, young.images, [i.name for i in young.in_use]) == ((), (), [image.name])
    assert len(find_shared(P).builders) == 3
    old = collect_shared(P, delete=True, older_than=0)
    assert len(old.builders) == 3
    assert old.images == ()
    gcp.settle()
    assert find_shared(P).builders == ()

    # Once no pool boots from it, gc --preload-images deletes it; what is not ours stays.
    GKEBackend(cluster, gcp_only=True, backoff=FAST_BACKOFF, retry=FAST_RETRY).down()
    unused = collect_shared(P, preload_images=True)
    assert [i.name for i in unused.images] == [image.name]
    assert not unused.deleted
    collect_shared(P, delete=True, preload_images=True)
    gcp.settle()
    assert sorted(gcp.resources()["compute.images"]) == [mine]
    with pytest.raises(OwnershipError):
        Images(backoff=FAST_BACKOFF).delete_ours(mine, role="preload-image")
