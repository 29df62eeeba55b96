"""Zone discovery: which zones of a region offer the GPU machine type, its GPU type and
Managed Lustre, asked of the servers (never read from a list of ours).

Four read-only calls, whatever the number of zones: Compute ``zones.list`` (the region's
zones), ``machineTypes.aggregatedList`` and ``acceleratorTypes.aggregatedList`` filtered by
name (the zones that offer each type), and Managed Lustre's ``ListLocations``.

Example::

    from rl_lustre.gcp.zones import capacity_zones, region_zones
    for offer in region_zones(cluster):        # every zone of cluster.region
        print(offer.zone, offer.usable)
    capacity_zones(cluster)                    # ('us-east1-b', 'us-east1-c'): home zone first
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .capacity import Capacity

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["ZoneOffer", "capacity_zones", "region_zones"]


@attrs.frozen
class ZoneOffer:
    """What one zone offers the cluster.

    Attributes:
        zone: the zone.
        machine_type: it offers the GPU pool's machine type.
        accelerator: it offers the machine type's GPU type (True where the machine has none).
        lustre: Managed Lustre runs there.
    """

    zone: str
    machine_type: bool
    accelerator: bool
    lustre: bool

    @property
    def usable(self) -> bool:
        """A GPU pool can go there: it offers all three."""
        return self.machine_type and self.accelerator and self.lustre

    def missing(self) -> list[str]:
        """What it lacks, in words (``["machine type a4-highgpu-8g"]``)."""
        return [
            what
            for what, ok in (
                ("the machine type", self.machine_type),
                ("the GPU type", self.accelerator),
                ("Managed Lustre", self.lustre),
            )
            if not ok
        ]


def region_zones(spec: ClusterSpec, *, capacity: Capacity | None = None) -> tuple[ZoneOffer, ...]:
    """Every zone of ``spec.region`` (as Compute Engine lists them), with what it offers.

    Raises:
        GCPError: a question could not be asked (credentials, permissions), as the adapters raise.
    """
    cap = capacity or Capacity()
    project, region = str(spec.project), str(spec.region)
    zones = cap.region_zone_names(project, region)
    machines = cap.zones_offering(project, "machine", spec.machine_type)
    gpus = cap.zones_offering(project, "accelerator", spec.accelerator_type) if spec.accelerator_type else None
    lustre = cap.lustre_locations(project)
    return tuple(ZoneOffer(z, z in machines, gpus is None or z in gpus, z in lustre) for z in zones)


def _mode(spec: ClusterSpec) -> object:
    return getattr(spec, "capacity_zones", "zone")


def capacity_zones(spec: ClusterSpec, *, capacity: Capacity | None = None) -> tuple[str, ...]:
    """The zones a GPU pool may be tried in, ``spec.zone`` first (always: it is where the
    volume is, and ``up()`` reports what it lacks), the others in name order.

    ``spec.capacity_zones`` says which: ``"zone"`` (the default) is ``spec.zone`` alone, with
    no remote call; ``"region"`` every usable zone of the region; a tuple those of its zones
    that are usable.
    """
    mode = _mode(spec)
    home = str(spec.zone)
    if mode == "zone":
        return (home,)
    offers = region_zones(spec, capacity=capacity)
    usable = {o.zone for o in offers if o.usable}
    asked = usable if mode == "region" else usable & {str(z) for z in mode}  # type: ignore[attr-defined]
    return (home, *sorted(asked - {home}))
