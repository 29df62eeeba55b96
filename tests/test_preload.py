"""The preload disk image as a resource of a deployment, on the fakes: built once at the
first up(), the GPU pool's secondary boot disk, reused by later deployments (no builder),
kept by down() and rollbacks, deleted only when asked and unused; a failed build rolls
the deployment back without leaving a builder; your own image is used and never deleted;
a Spot preemption's replacement node runs the image at once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.cloud import container_v1
from helpers.specs import GKE, PROJECT

from rl_lustre import Cluster
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.errors import GCPError, ProvisioningError
from rl_lustre.gcp import GkeNodePools
from rl_lustre.gcp.images import Images
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

NEMO = "nvcr.io/nvidia/nemo-rl:v0.4.0"


def spec(name: str = "demo", **kw: object) -> Cluster:
    base: dict[str, object] = {
        **GKE,
        "name": name,
        "num_nodes": 2,
        "fabric": "tcp",
    }
    return Cluster(**{**base, **kw})  # type: ignore[arg-type]


def backend(c: Cluster) -> GKEBackend:
    return GKEBackend(c, gcp_only=True, backoff=FAST_BACKOFF, retry=FAST_RETRY)


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP() as fake:
        yield fake


def builds(gcp: FakeGCP) -> int:
    return gcp.request_counts("compute.instances.insert")["compute.instances.insert"]


def images(gcp: FakeGCP) -> list[str]:
    gcp.settle()
    return sorted(gcp.resources()["compute.images"])


def gpu_pool_request(gcp: FakeGCP, deployment: str) -> container_v1.NodePool:
    pool = GkeNodePools(backoff=FAST_BACKOFF).get_or_none(
        f"projects/{PROJECT}/locations/us-east1/clusters/{deployment}/nodePools/gpu-pool"
    )
    assert pool is not None
    return pool


def test_built_once_booted_from_reused_kept_and_deleted_only_when_unused(gcp: FakeGCP) -> None:
    digest = gcp.registry.digest(NEMO)
    first = backend(spec("demo")).up()
    assert first.get("preload-image").outcome == "created"
    assert builds(gcp) == 1
    [image] = images(gcp)
    name = image.rsplit("/", 1)[1]
    assert name == f"{spec().plan().get('preload-image').name}-{digest[7:19]}"
    found = Images(backoff=FAST_BACKOFF).get_or_none(image)
    assert (found.status, found.labels["rl-lustre-digest"]) == ("READY", digest[7:70])
    # The GPU pool boots from it, with what GKE requires for an image cache.
    cfg = gpu_pool_request(gcp, "demo").config
    assert [d.disk_image for d in cfg.secondary_boot_disks] == [image]
    assert (cfg.gcfs_config.enabled, cfg.image_type) == (True, "COS_CONTAINERD")
    # The GPU pool waited for it; the CPU pool (created with the cluster) did not.
    assert first.get("gpu-pool").started >= first.get("preload-image").finished

    # Another deployment of the same image: found by its labels, nothing built.
    second = backend(spec("other")).up()
    assert second.get("preload-image").outcome == "adopted"
    assert builds(gcp) == 1
    assert [d.disk_image for d in gpu_pool_request(gcp, "other").config.secondary_boot_disks] == [image]

    # down() keeps it; asked to delete it, down() still keeps it while "other" boots from it.
    assert backend(spec("demo")).down().get("preload-image").outcome == "kept"
    assert images(gcp) == [image]
    again = backend(spec("demo")).down(delete_preload_image=True)
    assert again.get("preload-image").outcome == "kept"
    assert "other/gpu-pool" in again.get("preload-image").note
    assert images(gcp) == [image]
    last = backend(spec("other")).down(delete_preload_image=True)
    assert last.get("preload-image").outcome == "deleted"
    assert images(gcp) == []
    assert gcp.leaked(shared=True) == []


def test_a_failed_build_fails_up_rolls_back_the_rest_and_leaves_no_builder(gcp: FakeGCP) -> None:
    gcp.preload.script_failure = "ctr: failed to pull and unpack image: 503 Service Unavailable"
    with pytest.raises(ProvisioningError) as err:
        backend(spec()).up()
    assert err.value.step == "preload-image"
    assert "503 Service Unavailable" in str(err.value)
    gcp.settle()
    assert gcp.leaked(shared=True) == []
    assert gcp.request_counts("gke.CreateNodePool")["gke.CreateNodePool"] == 0


def test_a_rollback_keeps_a_completed_preload_image_and_says_so(gcp: FakeGCP) -> None:
    gcp.faults.fail_operation("gke.CreateNodePool", message="ZONE_RESOURCE_POOL_EXHAUSTED: no a4-highgpu-8g")
    with pytest.raises(ProvisioningError) as err:
        backend(spec(on_no_capacity="nothing")).up()
    assert err.value.step == "gpu-pool"
    [image] = images(gcp)
    assert any(image.rsplit("/", 1)[1] in kept for kept in err.value.kept)
    assert gcp.leaked() == []  # everything else went; the image is the next up()'s
    assert backend(spec()).up().get("preload-image").outcome == "adopted"
    assert builds(gcp) == 1


def test_your_own_image_is_used_as_it_is_and_never_deleted(gcp: FakeGCP) -> None:
    c = spec(preload_image="projects/my-project/global/images/team-nemo")
    with pytest.raises(ProvisioningError, match="no such disk image"):
        backend(c).up()
    gcp.seed_image(PROJECT, "team-nemo", holds=[NEMO])  # built with their own pipeline
    report = backend(c).up()
    assert report.get("preload-image").outcome == "used"
    assert builds(gcp) == 0
    assert [d.disk_image for d in gpu_pool_request(gcp, "demo").config.secondary_boot_disks] == [
        f"projects/{PROJECT}/global/images/team-nemo"
    ]
    backend(c).down(delete_preload_image=True)
    assert f"projects/{PROJECT}/global/images/team-nemo" in images(gcp)


def test_off_there_is_no_image_and_the_gpu_pool_boots_plainly(gcp: FakeGCP) -> None:
    report = backend(spec(preload_image=False)).up()
    assert "preload-image" not in report.records
    assert builds(gcp) == 0
    assert not gpu_pool_request(gcp, "demo").config.secondary_boot_disks


def test_the_gke_fake_holds_an_image_cache_to_googles_requirements(gcp: FakeGCP) -> None:
    from rl_lustre.gcp.container_requests import node_pool_request

    backend(spec(preload_image=False)).up()
    pools = GkeNodePools(backoff=FAST_BACKOFF, retry=FAST_RETRY)
    cluster = f"projects/{PROJECT}/locations/us-east1/clusters/demo"
    plan = spec().plan()
    request = node_pool_request(plan, "gpu-pool", preload_image=f"projects/{PROJECT}/global/images/nope")
    request.name = "extra"
    request.config.gcfs_config.enabled = False
    with pytest.raises(GCPError, match="requires Image streaming"):
        pools.create(request, cluster=cluster, deployment="demo")
    request.config.gcfs_config.enabled = True
    request.config.image_type = "UBUNTU_CONTAINERD"
    with pytest.raises(GCPError, match="COS_CONTAINERD"):
        pools.create(request, cluster=cluster, deployment="demo")
    request.config.image_type = "COS_CONTAINERD"
    with pytest.raises(GCPError, match=r"Secondary boot disk image .*nope not found"):
        pools.create(request, cluster=cluster, deployment="demo")
