"""The preload disk image as a plan node, and what every GPU pool's nodes get from it.

``preload-image`` (``compute.v1.Image``) is the disk image holding ``Cluster.image``
unpacked, attached to each GPU node as a GKE secondary boot disk (``CONTAINER_IMAGE_CACHE``):
the node starts with the image already on it, instead of pulling ~25 GB after it boots.

- ``Cluster(preload_image=True)`` (the default): action ``"cache"``. ``up()`` resolves the
  image's digest at the registry, finds our READY image of that digest by its labels, or
  builds it once on a temporary VM (:mod:`rl_lustre.gcp.preload`). Deployments of the same
  digest share it; ``down()`` keeps it.
- ``Cluster(preload_image="projects/P/global/images/NAME")``: action ``"use"``, your image,
  never built or deleted.
- ``Cluster(preload_image=False)``: no node; the pre-pull DaemonSet pulls the image on
  each node instead (:mod:`rl_lustre.plan.startup`).

Examples:
    >>> from rl_lustre import Cluster
    >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
    >>> node = c.plan().get("preload-image")
    >>> node.action, node.name, node.depends_on
    ('cache', 'rlp-cf48404da8', ('subnet',))
    >>> c.plan().get("gpu-pool").settings["preload"]["image_type"]
    'COS_CONTAINERD'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import (
    IMAGE_COMPRESSED_BYTES,
    LABEL_DIGEST,
    LABEL_LAYOUT,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    PRELOAD_BOOT_IMAGE,
    PRELOAD_BUILD_TIMEOUT,
    PRELOAD_DATA_DISK_GB,
    PRELOAD_DATA_DISK_TYPE,
    PRELOAD_LAYOUT,
    PRELOAD_MACHINE_TYPE,
    PRELOAD_MAX_RUN_SECONDS,
    PRELOAD_MIN_GKE,
    PRELOAD_NODE_IMAGE,
    ROLE_PRELOAD_IMAGE,
)
from ..plankeys import PRELOAD_IMAGE_KEY, SUBNET_KEY
from .graph import PlannedResource

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["FROM_PRELOAD_IMAGE", "UNPACK_RATIO", "gpu_node_preload", "preload_keys", "preload_nodes"]

# The GPU pools' settings name the disk image by this placeholder: its name is known once
# up() has the digest (the driver passes the real path to the request builder).
FROM_PRELOAD_IMAGE = f"from {PRELOAD_IMAGE_KEY}"
# Unpacked bytes per compressed byte of an NGC image (an estimate, until the build says).
UNPACK_RATIO = 2.4
# What the build takes (minutes; benchmarks/startup.py states the parts and their sources).
BUILD_MINUTES_ESTIMATE = 16


def _digest_source(cluster: ClusterSpec) -> str:
    """The image's pinned digest, or where ``up()`` reads it (the registry is an adapter:
    the plan, offline, only says so)."""
    digest = cluster.image.partition("@")[2]
    if digest:
        return digest
    return f"resolved at up(): the registry's manifest of {cluster.image} (HEAD /v2/<repository>/manifests/<tag>)"


def preload_nodes(cluster: ClusterSpec) -> list[PlannedResource]:
    """The ``preload-image`` node (none with ``preload_image=False``)."""
    if not cluster.preload_image:
        return []
    if isinstance(cluster.preload_image, str):
        return [
            PlannedResource(
                key=PRELOAD_IMAGE_KEY,
                kind="compute.v1.Image",
                name=cluster.preload_image,
                action="use",
                settings={
                    "image": cluster.image,
                    "disk_image": cluster.preload_image,
                    "yours": "used as it is: never built or deleted; it must hold the image in GKE's "
                    "CONTAINER_IMAGE_CACHE layout",
                    "iam": "in another project, the node service account and the GKE service agent need "
                    "roles/compute.imageUser there",
                },
            )
        ]
    compressed = IMAGE_COMPRESSED_BYTES.get(cluster.image.partition("@")[0])
    estimated_gb = (
        PRELOAD_DATA_DISK_GB if compressed is None else max(10, round(compressed * UNPACK_RATIO / 1e9 * 1.2 / 10) * 10)
    )
    digest = _digest_source(cluster)
    known = digest.startswith("sha256:")
    return [
        PlannedResource(
            key=PRELOAD_IMAGE_KEY,
            kind="compute.v1.Image",
            name=naming.preload_family(cluster.image),
            action="cache",
            depends_on=(SUBNET_KEY,),
            # Shared by deployments: only our labels, never a deployment's (nor Cluster.labels).
            labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_ROLE: ROLE_PRELOAD_IMAGE, LABEL_LAYOUT: PRELOAD_LAYOUT},
            settings={
                "image": cluster.image,
                "digest": digest,
                "image_name": (
                    naming.preload_image_name(cluster.image, digest)
                    if known
                    else f"{naming.preload_family(cluster.image)}-<first 12 hex of the digest>"
                ),
                "found_by": {
                    "labels": {
                        LABEL_MANAGED_BY: MANAGED_BY,
                        LABEL_ROLE: ROLE_PRELOAD_IMAGE,
                        LABEL_DIGEST: digest.removeprefix("sha256:")[:63] if known else "<digest>",
                        LABEL_LAYOUT: PRELOAD_LAYOUT,
                    },
                    "status": "READY",
                },
                "build": {
                    "when": "no READY image of this digest exists in the project (once per image and project)",
                    "zone": cluster.zone,
                    "machine_type": PRELOAD_MACHINE_TYPE,
                    "boot_image": PRELOAD_BOOT_IMAGE,
                    "data_disk": {"type": PRELOAD_DATA_DISK_TYPE, "size_gb": PRELOAD_DATA_DISK_GB},
                    "signal": "guest attribute rl-lustre/status",
                    "timeout_s": int(PRELOAD_BUILD_TIMEOUT),
                    "self_delete": f"maxRunDuration {PRELOAD_MAX_RUN_SECONDS} s, instanceTerminationAction DELETE",
                    "temporary": ["instance rlp-build-<digest12>", "disk rlp-build-<digest12>-data"],
                    "estimated_minutes": BUILD_MINUTES_ESTIMATE,
                },
                "layout": "snapshots/<id>/fs + snapshots.metadata + images.metadata (CONTAINER_IMAGE_CACHE)",
                "storage_locations": [cluster.region],
                "estimated_gib": estimated_gb,
                "kept": "after down(): reused by the next deployment of this image; delete with "
                "down(delete_preload_image=True) or rl-lustre gc --preload-images",
            },
        )
    ]


def preload_keys(cluster: ClusterSpec) -> tuple[str, ...]:
    """``("preload-image",)`` when the plan has that node, for the GPU pools to wait for."""
    return (PRELOAD_IMAGE_KEY,) if cluster.preload_image else ()


def gpu_node_preload(cluster: ClusterSpec) -> dict[str, Any] | None:
    """What a GPU node needs to boot with the preload image (None without preloading):
    the secondary boot disk, Image streaming (GKE requires it for ``CONTAINER_IMAGE_CACHE``)
    and COS with containerd, from GKE ``PRELOAD_MIN_GKE``."""
    if not cluster.preload_image:
        return None
    disk = cluster.preload_image if isinstance(cluster.preload_image, str) else FROM_PRELOAD_IMAGE
    return {
        "secondary_boot_disks": [{"disk_image": disk, "mode": "CONTAINER_IMAGE_CACHE"}],
        "image_streaming": True,
        "image_type": PRELOAD_NODE_IMAGE,
        "min_gke_version": PRELOAD_MIN_GKE,
    }
