"""The PersistentVolume and PersistentVolumeClaim through which pods mount Managed Lustre.

The volume is statically provisioned for the Managed Lustre CSI driver: its
``volumeHandle`` names the instance, its attributes carry the instance's IP and
filesystem, and it is ``Retain`` so that deleting it (or the claim) never deletes
checkpoints. Before the instance has an address, the IP is :data:`PLACEHOLDER_IP` and the
volume carries :data:`PENDING_ANNOTATION` (the apply path refuses such a volume).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import LUSTRE_CSI_DRIVER
from ..errors import GCPError, NotReadyError

if TYPE_CHECKING:
    from ..spec import ClusterSpec, VolumeSpec

__all__ = [
    "CSI_DRIVER",
    "LUSTRE_POD_VOLUME",
    "PENDING_ANNOTATION",
    "PLACEHOLDER_IP",
    "lustre_pod_volume",
    "lustre_volume_mount",
    "pv_manifest",
    "pvc_manifest",
]

logger = logging.getLogger("rl_lustre.kube.persistent_volume")

CSI_DRIVER = LUSTRE_CSI_DRIVER
# The pods' name for the volume that mounts the claim.
LUSTRE_POD_VOLUME = "lustre-storage"
# Set on the PersistentVolume while the Lustre instance has no address yet; the apply
# path must refuse a PV that carries it (its ip would not mount).
PENDING_ANNOTATION = "rl-lustre/mount-point-pending"
PLACEHOLDER_IP = "<pending>"

# Managed Lustre reports its mount point as IP@tcp:/fsname.
_MOUNT_POINT = re.compile(r"(?P<ip>[0-9A-Za-z.:-]+?)@tcp:/(?P<fs>[A-Za-z][A-Za-z0-9]{0,7})")


def _lustre_address(volume: VolumeSpec) -> tuple[str, str, bool]:
    """``(ip, filesystem, pending)`` for the PersistentVolume."""
    try:
        mount_point = volume.mount_point
    except NotReadyError:
        return PLACEHOLDER_IP, volume.filesystem, True
    m = _MOUNT_POINT.fullmatch(mount_point)
    if m is None:
        raise GCPError(
            f"Lustre instance {volume.name!r} reported mount point {mount_point!r}, "
            "which is not of the form IP@tcp:/fsname"
        )
    # The mount point is what the server says; it wins over the spec's filesystem,
    # which for an existing instance may just be our default.
    return m["ip"], m["fs"], False


def pv_manifest(cluster: ClusterSpec, labels: dict[str, str]) -> dict[str, Any]:
    """The PersistentVolume of ``cluster``'s Lustre volume (``Retain``, bound to its claim)."""
    volume = cluster.volume
    assert volume is not None
    ip, filesystem, pending = _lustre_address(volume)
    metadata: dict[str, Any] = {"name": naming.pv_name(cluster), "labels": dict(labels)}
    if pending:
        logger.debug("PersistentVolume for %s uses a placeholder ip: the instance has no mount point yet", volume.name)
        metadata["annotations"] = {
            PENDING_ANNOTATION: (
                f"Lustre instance {volume.name} has no mount point yet; ip is a placeholder "
                "until the volume is created or refreshed"
            )
        }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": metadata,
        "spec": {
            "storageClassName": "",
            "capacity": {"storage": f"{volume.capacity_gib}Gi"},
            "accessModes": ["ReadWriteMany"],
            # Deleting the PV (or the claim) must never destroy checkpoints.
            "persistentVolumeReclaimPolicy": "Retain",
            "volumeMode": "Filesystem",
            "claimRef": {"namespace": cluster.namespace, "name": naming.pvc_name(cluster)},
            "csi": {
                "driver": CSI_DRIVER,
                "volumeHandle": naming.lustre_volume_handle(volume),
                "volumeAttributes": {"ip": ip, "filesystem": filesystem},
            },
        },
    }


def lustre_pod_volume(cluster: ClusterSpec) -> dict[str, Any]:
    """The pod volume of the Lustre claim (every pod that mounts the volume has it)."""
    return {"name": LUSTRE_POD_VOLUME, "persistentVolumeClaim": {"claimName": naming.pvc_name(cluster)}}


def lustre_volume_mount(cluster: ClusterSpec) -> dict[str, str]:
    """The container's mount of :func:`lustre_pod_volume` at ``cluster.mount_path``."""
    return {"name": LUSTRE_POD_VOLUME, "mountPath": cluster.mount_path}


def pvc_manifest(cluster: ClusterSpec, labels: dict[str, str]) -> dict[str, Any]:
    """The PersistentVolumeClaim the pods mount, bound to :func:`pv_manifest`'s volume."""
    assert cluster.volume is not None
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": naming.pvc_name(cluster), "namespace": cluster.namespace, "labels": dict(labels)},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": naming.pv_name(cluster),
            "resources": {"requests": {"storage": f"{cluster.volume.capacity_gib}Gi"}},
        },
    }
