"""The Managed Lustre instance as the plan shows it and as the request creates it: one
set of settings, read by the plan's ``lustre`` node (:func:`lustre_instance`) and by
:func:`rl_lustre.gcp.lustre.instance_request` (the driver of that node and
``LustreVolume.create`` send it).

    >>> from rl_lustre.spec import VolumeSpec
    >>> vol = VolumeSpec(name="demo-lustre", project="my-project", zone="us-east1-b", network="demo-net")
    >>> s = instance_settings(vol)
    >>> s["network"], s["capacity_gib"], s["gke_support_enabled"]
    ('projects/my-project/global/networks/demo-net', 18000, False)
    >>> instance_labels(vol, deployment="demo", labels={"team": "rl"})
    {'team': 'rl', 'managed-by': 'rl-lustre', 'rl-lustre-deployment': 'demo'}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import ownership_labels
from ..errors import ConfigError
from ..plankeys import FIREWALL_LUSTRE_KEY, LUSTRE_KEY, PSA_PEERING_KEY
from .graph import PlannedResource

if TYPE_CHECKING:
    from ..spec import ClusterSpec, VolumeSpec

__all__ = ["instance_labels", "instance_settings", "lustre_instance"]


def instance_settings(volume: VolumeSpec) -> dict[str, Any]:
    """What the ``Instance`` request carries for ``volume``, but its name and labels.

    Raises:
        ConfigError: the volume's network is not set.
    """
    if volume.network is None:
        raise ConfigError(
            "LustreVolume",
            "network",
            None,
            "must be set (directly or by attaching the volume to a Cluster) to create it",
        )
    assert volume.project is not None
    return {
        "location": volume.zone,
        "capacity_gib": volume.capacity_gib,
        "per_unit_storage_throughput": volume.throughput_mbps_per_tib,
        "filesystem": volume.filesystem,
        "network": naming.network_path(volume.project, volume.network),
        "description": volume.description,
        # The GKE CSI add-on reaches Lustre on the standard port 988; the legacy port stays off.
        "gke_support_enabled": False,
    }


def instance_labels(volume: VolumeSpec, *, deployment: str, labels: Mapping[str, str] | None = None) -> dict[str, str]:
    """The instance's labels: ``labels`` (the cluster's), the volume's own, then our
    ownership labels, which nothing overrides."""
    return {**(labels or {}), **volume.labels, **ownership_labels(deployment)}


def lustre_instance(cluster: ClusterSpec) -> PlannedResource:
    """The ``lustre`` node: the cluster's volume, created with the deployment's labels, or,
    for ``LustreVolume(existing=True)``, the user's instance, used as it is.

    It waits only for the private services access and the firewall rule, never for the GKE
    cluster: it is the slowest resource and starts as early as the network allows.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> node = lustre_instance(ClusterSpec(name="demo", project="my-project", region="us-east1",
        ...                                    zone="us-east1-b"))
        >>> node.name, node.action, node.depends_on, node.settings["aggregate_throughput_mbps"]
        ('demo-lustre', 'create', ('psa-peering', 'firewall-lustre'), 8789.0625)
    """
    vol = cluster.volume
    assert vol is not None
    return PlannedResource(
        key=LUSTRE_KEY,
        kind="lustre.v1.Instance",
        name=vol.name,
        depends_on=(PSA_PEERING_KEY, FIREWALL_LUSTRE_KEY),
        # What the request sends (instance_settings), and the throughput it amounts to.
        settings={
            **instance_settings(vol),
            "aggregate_throughput_mbps": vol.throughput_mbps,
            **({"existing": True} if vol.existing else {}),
        },
        **(
            {"action": "use"}
            if vol.existing
            else {
                "action": "create",
                "labels": instance_labels(vol, deployment=cluster.name, labels=cluster.labels),
            }
        ),
    )
