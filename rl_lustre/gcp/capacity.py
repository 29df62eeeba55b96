"""Read-only questions to Google Cloud before anything is created: what a zone offers and
what a region's quotas allow.

- Compute ``zones.get``: does the zone exist (the server's word over rl_lustre's list)?
- Compute ``machineTypes.get`` and ``acceleratorTypes.get`` in the zone (the
  ``google-cloud-compute`` client): does the zone offer the machine and GPU type?
- Managed Lustre's ``ListLocations`` (the ``google-cloud-lustre`` client's location
  mixin): does Managed Lustre run in the zone?
- Compute ``zones.list`` (a region's zones), ``machineTypes.aggregatedList`` and
  ``acceleratorTypes.aggregatedList`` filtered by name (the zones offering a type), and
  ``reservations.aggregatedList`` / ``reservations.get`` (the reservations the project sees);
- Compute ``regions.get``, read as plain JSON: the region's quotas, ``metric`` →
  ``limit`` and ``usage``. Plain JSON because the client library's ``Quota.Metric`` enum
  predates the newer GPU families (no ``NVIDIA_B200_GPUS``); it would drop those entries.

Nothing here changes anything; the viewer roles suffice.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from ..errors import NotFoundError
from . import _clients
from ._errors import Api, Call, RetryPolicy, call

__all__ = ["COMPUTE_URL", "Capacity", "Quota", "Reservation"]

logger = logging.getLogger("rl_lustre.gcp.capacity")

COMPUTE_URL = "https://compute.googleapis.com"
COMPUTE_VIEW = Api("Compute Engine API", "compute.googleapis.com", "roles/compute.viewer")
LUSTRE_VIEW = Api("Managed Lustre API", "lustre.googleapis.com", "roles/lustre.viewer")


@attrs.frozen
class Quota:
    """One regional quota: its metric, limit and current usage."""

    metric: str
    limit: float
    usage: float

    @property
    def free(self) -> float:
        """``limit - usage``, never below 0."""
        return max(0.0, self.limit - self.usage)


@attrs.frozen
class Reservation:
    """A specific reservation of VMs the project can see.

    Attributes:
        path: ``projects/P/zones/Z/reservations/NAME``.
        zone: its zone.
        machine_type: the machine type it holds.
        count: VMs reserved.
        in_use: VMs consuming it now.
        specific_required: only VMs that name it may consume it.
        shared: the projects it is shared with (``()``: local to its project).
    """

    path: str
    zone: str
    machine_type: str
    count: int
    in_use: int
    specific_required: bool = True
    shared: tuple[str, ...] = ()

    @property
    def free(self) -> int:
        return max(0, self.count - self.in_use)


def _reservation(project: str, res: Any) -> Reservation:
    zone = str(res.zone).rsplit("/", 1)[-1]
    specific = res.specific_reservation
    share = res.share_settings
    return Reservation(
        path=f"projects/{project}/zones/{zone}/reservations/{res.name}",
        zone=zone,
        machine_type=str(specific.instance_properties.machine_type).rsplit("/", 1)[-1],
        count=int(specific.count),
        in_use=int(specific.in_use_count),
        specific_required=bool(res.specific_reservation_required),
        shared=tuple(sorted(share.project_map.keys())) if share else (),
    )


class Capacity:
    """What a project can get in a zone and a region, asked read-only.

    Example::

        cap = Capacity()
        cap.offers_machine_type("my-project", "us-east1-b", "a4-highgpu-8g")   # True
        cap.region_quotas("my-project", "us-east1")["PREEMPTIBLE_NVIDIA_B200_GPUS"].free

    Args:
        retry: retries of transient errors; by default the adapters' policy.
    """

    def __init__(self, *, retry: RetryPolicy | None = None) -> None:
        self._retry = retry

    def zone_exists(self, project: str, zone: str) -> bool:
        """Whether Compute Engine has the zone ``zone`` (``zones.get``; 404 means no)."""
        return self._exists("ZonesClient", f"zone {zone}", project=project, zone=zone)

    def offers_machine_type(self, project: str, zone: str, machine_type: str) -> bool:
        """Whether ``zone`` offers ``machine_type`` (``machineTypes.get``; 404 means no)."""
        return self._exists(
            "MachineTypesClient",
            f"machine type {machine_type} in {zone}",
            project=project,
            zone=zone,
            machine_type=machine_type,
        )

    def offers_accelerator(self, project: str, zone: str, accelerator: str) -> bool:
        """Whether ``zone`` offers the GPU type ``accelerator`` (``acceleratorTypes.get``)."""
        return self._exists(
            "AcceleratorTypesClient",
            f"accelerator type {accelerator} in {zone}",
            project=project,
            zone=zone,
            accelerator_type=accelerator,
        )

    def _exists(self, client_name: str, what: str, **request: str) -> bool:
        """One Compute ``get``: True when it answers, False on 404."""
        from google.cloud import compute_v1

        client = _clients.compute(getattr(compute_v1, client_name))
        try:
            call(Call(COMPUTE_VIEW, "get", what), client.get, policy=self._retry, **request)
        except NotFoundError:
            return False
        return True

    def lustre_locations(self, project: str) -> set[str]:
        """The locations (zones) where Managed Lustre runs for ``project``."""
        from google.cloud.location import locations_pb2

        client = _clients.lustre()
        request = locations_pb2.ListLocationsRequest(name=f"projects/{project}")
        found = call(
            Call(LUSTRE_VIEW, "list", f"Managed Lustre locations of {project}"),
            client.list_locations,
            request=request,
            policy=self._retry,
        )
        return {loc.location_id for loc in found.locations}

    def region_quotas(self, project: str, region: str) -> dict[str, Quota]:
        """The quotas of ``region`` by metric name (``regions.get``)."""
        session, base = _clients.http_session("compute-json", COMPUTE_URL)

        def get() -> dict[str, Any]:
            response = session.get(f"{base}/compute/v1/projects/{project}/regions/{region}", timeout=60)
            response.raise_for_status()
            return dict(response.json())

        body = call(Call(COMPUTE_VIEW, "get", f"region {region} of {project}"), get, policy=self._retry)
        return {
            q["metric"]: Quota(q["metric"], float(q.get("limit", 0)), float(q.get("usage", 0)))
            for q in body.get("quotas", [])
            if "metric" in q
        }

    def region_zone_names(self, project: str, region: str) -> list[str]:
        """The zones Compute Engine has in ``region`` (``zones.list``), in name order."""
        from google.cloud import compute_v1

        client = _clients.compute(compute_v1.ZonesClient)

        def fetch() -> list[str]:
            return sorted(
                z.name for z in client.list(request={"project": project, "filter": f'region eq ".*/regions/{region}"'})
            )

        return call(Call(COMPUTE_VIEW, "list", f"zones of {region} in projects/{project}"), fetch, policy=self._retry)

    def zones_offering(self, project: str, kind: str, name: str) -> set[str]:
        """The zones offering the machine type (``kind="machine"``) or GPU type (``"accelerator"``)
        ``name``, from one ``aggregatedList`` filtered by name."""
        from google.cloud import compute_v1

        client_cls: type[Any] = (
            compute_v1.MachineTypesClient if kind == "machine" else compute_v1.AcceleratorTypesClient
        )
        field = "machine_types" if kind == "machine" else "accelerator_types"
        client = _clients.compute(client_cls)

        def fetch() -> set[str]:
            found: set[str] = set()
            for scope, scoped in client.aggregated_list(request={"project": project, "filter": f"name eq {name}"}):
                if any(t.name == name for t in getattr(scoped, field)):
                    found.add(scope.removeprefix("zones/"))
            return found

        what = f"zones offering {'machine type' if kind == 'machine' else 'GPU type'} {name} in projects/{project}"
        return call(Call(COMPUTE_VIEW, "list", what), fetch, policy=self._retry)

    def reservations(self, project: str) -> list[Reservation]:
        """The reservations of ``project``, every zone (``reservations.aggregatedList``)."""
        from google.cloud import compute_v1

        client = _clients.compute(compute_v1.ReservationsClient)

        def fetch() -> list[Reservation]:
            return [
                _reservation(project, r)
                for _, scoped in client.aggregated_list(request={"project": project})
                for r in scoped.reservations
            ]

        return call(Call(COMPUTE_VIEW, "list", f"reservations of projects/{project}"), fetch, policy=self._retry)

    def reservation(self, project: str, zone: str, name: str) -> Reservation | None:
        """The reservation ``name`` of ``project`` in ``zone`` (another project's, if shared); None if absent."""
        from google.cloud import compute_v1

        client = _clients.compute(compute_v1.ReservationsClient)
        try:
            res = call(
                Call(COMPUTE_VIEW, "get", f"reservation projects/{project}/zones/{zone}/reservations/{name}"),
                client.get,
                policy=self._retry,
                project=project,
                zone=zone,
                reservation=name,
            )
        except NotFoundError:
            return None
        return _reservation(project, res)
