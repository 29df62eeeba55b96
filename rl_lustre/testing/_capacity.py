"""What zones offer and what regions allow, as the fakes answer it.

Serves, read-only: Compute ``zones.get``, ``machineTypes.get`` and ``acceleratorTypes.get`` (REST),
``regions.get`` with its ``quotas`` (REST), and ``google.cloud.location.Locations/
ListLocations`` on the Lustre gRPC endpoint.

By default Compute has the zones of rl_lustre's list (:data:`DEFAULT_ZONES`;
:meth:`Catalog.add_zone` and :meth:`Catalog.retire_zone` change that), every zone offers every
machine and GPU type, Managed Lustre runs in every zone of the common regions
(:data:`DEFAULT_LUSTRE_ZONES`), and every quota has a generous limit with nothing in use: a
deployment that passes elsewhere passes here. Tests narrow that down with :meth:`Catalog.withdraw`,
:meth:`Catalog.set_quota` and :meth:`Catalog.lustre_zones`.
"""

from __future__ import annotations

import re
from typing import Any

from google.cloud.location import locations_pb2

from .._public import public
from ..catalog import ZONES, known_zones
from ._core import Core, FakeError
from ._filters import compute_filter

__all__ = ["DEFAULT_LUSTRE_ZONES", "DEFAULT_QUOTA", "DEFAULT_ZONES", "Catalog"]

DEFAULT_QUOTA = 4096.0
# Where the fake's Managed Lustre runs unless a test says otherwise: every zone of the
# regions the tests and docs use (the real list is longer and changes; the server decides).
DEFAULT_LUSTRE_ZONES = frozenset(
    zone
    for region in (
        "us-east1",
        "us-east4",
        "us-east5",
        "us-central1",
        "us-west1",
        "us-west4",
        "us-south1",
        "europe-west1",
        "europe-west4",
        "asia-southeast1",
        "asia-northeast1",
    )
    for zone in known_zones(region)
)
# The zones Compute Engine has, unless a test adds or retires some: those of rl_lustre's list.
DEFAULT_ZONES = frozenset(f"{region}-{suffix}" for region, suffixes in ZONES.items() for suffix in suffixes)
# The type a name filter asks for ("name = X", "(name = X)", "name eq X").
_FILTER_NAME = re.compile(r"""name\s*(?:=|eq)\s*["']?([a-z0-9-]+)""")
_GPU_METRICS = (
    "NVIDIA_B200_GPUS",
    "PREEMPTIBLE_NVIDIA_B200_GPUS",
    "NVIDIA_H100_GPUS",
    "PREEMPTIBLE_NVIDIA_H100_GPUS",
    "NVIDIA_H200_GPUS",
    "PREEMPTIBLE_NVIDIA_H200_GPUS",
    "NVIDIA_L4_GPUS",
    "PREEMPTIBLE_NVIDIA_L4_GPUS",
    "CPUS",
    "N2_CPUS",
)


@public("rl_lustre.testing")
class Catalog:
    """The fake's answer to "what can this project get where".

    Examples:
        >>> from rl_lustre.testing import FakeGCP
        >>> with FakeGCP() as gcp:
        ...     gcp.catalog.withdraw("us-east1-b", "a4-highgpu-8g")
        ...     gcp.catalog.set_quota("us-east1", "PREEMPTIBLE_NVIDIA_B200_GPUS", limit=16)
        ...     gcp.catalog.lustre_zones(["us-central1-a"])
    """

    def __init__(self, core: Core) -> None:
        self.core = core
        self._withdrawn: set[tuple[str, str]] = set()
        self._quotas: dict[tuple[str, str], tuple[float, float]] = {}
        self._lustre_zones: set[str] | None = None
        self._zones = set(DEFAULT_ZONES)

    def reset(self) -> None:
        """Back to the generous defaults."""
        with self.core.lock:
            self._withdrawn.clear()
            self._quotas.clear()
            self._lustre_zones = None
            self._zones = set(DEFAULT_ZONES)

    def add_zone(self, zone: str) -> None:
        """Make Compute Engine have ``zone`` (one newer than rl_lustre's list, say)."""
        with self.core.lock:
            self._zones.add(zone)

    def retire_zone(self, zone: str) -> None:
        """Make Compute Engine no longer have ``zone`` (404 on ``zones.get``)."""
        with self.core.lock:
            self._zones.discard(zone)

    def withdraw(self, zone: str, name: str) -> None:
        """Make ``zone`` not offer the machine type or GPU type ``name`` (404 on get)."""
        with self.core.lock:
            self._withdrawn.add((zone, name))

    def set_quota(self, region: str, metric: str, *, limit: float, usage: float = 0.0) -> None:
        """Give ``region`` the quota ``metric`` with this limit and usage (absent: generous)."""
        with self.core.lock:
            self._quotas[(region, metric)] = (float(limit), float(usage))

    def drop_quota(self, region: str, metric: str) -> None:
        """Leave ``metric`` out of the region's quota list, as for a GPU family it has none of."""
        with self.core.lock:
            self._quotas[(region, metric)] = (-1.0, -1.0)

    def lustre_zones(self, zones: list[str] | None) -> None:
        """The zones where Managed Lustre runs (None: every zone asked about)."""
        with self.core.lock:
            self._lustre_zones = None if zones is None else set(zones)

    # -- handlers (under the core's lock) ------------------------------------------------

    def zone_get(self, p: dict[str, str], q: dict[str, str], body: Any) -> dict[str, Any]:
        zone = p["zone"]
        if zone not in self._zones:
            raise FakeError(
                404, f"The resource 'projects/{p['project']}/zones/{zone}' was not found", reason="notFound"
            )
        region = zone.rsplit("-", 1)[0]
        return {
            "kind": "compute#zone",
            "name": zone,
            "status": "UP",
            "region": f"https://www.googleapis.com/compute/v1/projects/{p['project']}/regions/{region}",
            "selfLink": f"projects/{p['project']}/zones/{zone}",
        }

    def machine_type_get(self, p: dict[str, str], q: dict[str, str], body: Any) -> dict[str, Any]:
        return self._zonal("machineTypes", p, {"guestCpus": 224, "isSharedCpu": False})

    def accelerator_type_get(self, p: dict[str, str], q: dict[str, str], body: Any) -> dict[str, Any]:
        return self._zonal("acceleratorTypes", p, {"maximumCardsPerInstance": 8})

    def _zonal(self, kind: str, p: dict[str, str], extra: dict[str, Any]) -> dict[str, Any]:
        zone, name = p["zone"], p["name"]
        if zone not in self._zones:  # as Compute answers for a zone it does not have
            raise FakeError(400, f"Invalid value for field 'zone': '{zone}'. Unknown zone.", reason="invalid")
        if (zone, name) in self._withdrawn:
            raise FakeError(
                404,
                f"The resource 'projects/{p['project']}/zones/{zone}/{kind}/{name}' was not found",
                reason="notFound",
            )
        return {
            "kind": f"compute#{kind[:-1]}",
            "name": name,
            "zone": zone,
            "selfLink": f"projects/{p['project']}/zones/{zone}/{kind}/{name}",
            **extra,
        }

    def region_get(self, p: dict[str, str], q: dict[str, str], body: Any) -> dict[str, Any]:
        region = p["region"]
        metrics = dict.fromkeys(_GPU_METRICS, (DEFAULT_QUOTA, 0.0))
        metrics.update({m: v for (r, m), v in self._quotas.items() if r == region})
        quotas = [{"metric": m, "limit": lim, "usage": use} for m, (lim, use) in metrics.items() if lim >= 0]
        return {
            "kind": "compute#region",
            "name": region,
            "status": "UP",
            "quotas": quotas,
            "selfLink": f"projects/{p['project']}/regions/{region}",
        }

    def list_locations(self, request: locations_pb2.ListLocationsRequest) -> locations_pb2.ListLocationsResponse:
        project = request.name.removeprefix("projects/")
        zones = self._lustre_zones if self._lustre_zones is not None else DEFAULT_LUSTRE_ZONES
        return locations_pb2.ListLocationsResponse(
            locations=[
                locations_pb2.Location(name=f"projects/{project}/locations/{z}", location_id=z) for z in sorted(zones)
            ]
        )

    # -- lists: the zones of a region and what each offers (zone discovery) --------------

    def zone_list(self, p: dict[str, str], q: dict[str, str], body: Any) -> dict[str, Any]:
        wanted = compute_filter(q.get("filter", ""))
        items = [self.zone_get({**p, "zone": z}, q, body) for z in sorted(self._zones)]
        items = [z for z in items if wanted(z)]
        return {
            "kind": "compute#zoneList",
            "id": f"projects/{p['project']}/zones",
            "items": items,
            "selfLink": f"projects/{p['project']}/zones",
        }

    def machine_types_aggregated(self, p: dict[str, str], q: dict[str, str], body: Any) -> dict[str, Any]:
        return self._aggregated("machineTypes", p, q, {"guestCpus": 224, "isSharedCpu": False})

    def accelerator_types_aggregated(self, p: dict[str, str], q: dict[str, str], body: Any) -> dict[str, Any]:
        return self._aggregated("acceleratorTypes", p, q, {"maximumCardsPerInstance": 8})

    def _aggregated(self, kind: str, p: dict[str, str], q: dict[str, str], extra: dict[str, Any]) -> dict[str, Any]:
        # Every zone offers every type the filter names (or the ones rl_lustre knows, without
        # a name filter), unless withdrawn: as generous as the gets.
        from ..catalog import GPU_MACHINE_TYPES, HEAD_MACHINE_TYPE

        wanted = compute_filter(q.get("filter", ""))
        names = (
            {m.name for m in GPU_MACHINE_TYPES.values()} | {HEAD_MACHINE_TYPE}
            if kind == "machineTypes"
            else {m.accelerator for m in GPU_MACHINE_TYPES.values()}
        )
        named = _FILTER_NAME.search(q.get("filter", ""))
        if named:
            names.add(named.group(1))
        items: dict[str, Any] = {}
        for zone in sorted(self._zones):
            found = [
                {
                    "kind": f"compute#{kind[:-1]}",
                    "name": n,
                    "zone": zone,
                    "selfLink": f"projects/{p['project']}/zones/{zone}/{kind}/{n}",
                    **extra,
                }
                for n in sorted(names)
                if (zone, n) not in self._withdrawn
            ]
            found = [r for r in found if wanted(r)]
            items[f"zones/{zone}"] = (
                {kind: found}
                if found
                else {
                    "warning": {
                        "code": "NO_RESULTS_ON_PAGE",
                        "message": f"There are no results for scope 'zones/{zone}' on this page.",
                    }
                }
            )
        return {
            "kind": f"compute#{kind[:-1]}AggregatedList",
            "id": f"projects/{p['project']}/aggregated/{kind}",
            "items": items,
            "selfLink": f"projects/{p['project']}/aggregated/{kind}",
        }
