"""Compute Engine reservations, as the fakes list them: ``reservations.get`` and
``reservations.aggregatedList`` (REST), read-only.

A test makes one exist with :meth:`ReservationsFake.add` (zone, machine type, count, in use,
and the projects it is shared with); by default there are none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._core import Core, FakeError
from ._filters import compute_filter

__all__ = ["ReservationsFake"]


class ReservationsFake:
    """Specific reservations of VMs by zone.

    Examples:
        >>> from rl_lustre.testing import FakeGCP
        >>> with FakeGCP() as gcp:
        ...     gcp.reservations.add("my-project", "us-east1-b", "a4-res", "a4-highgpu-8g", count=8, in_use=2)
    """

    def __init__(self, core: Core) -> None:
        self.core = core
        self._items: dict[tuple[str, str, str], dict[str, Any]] = {}

    def reset(self) -> None:
        with self.core.lock:
            self._items.clear()

    def add(
        self,
        project: str,
        zone: str,
        name: str,
        machine_type: str,
        *,
        count: int,
        in_use: int = 0,
        shared_with: Sequence[str] = (),
        specific_required: bool = True,
    ) -> None:
        """Make the reservation ``name`` of ``count`` VMs of ``machine_type`` exist in ``zone``."""
        share = (
            {"shareType": "SPECIFIC_PROJECTS", "projectMap": {p: {"projectId": p} for p in shared_with}}
            if shared_with
            else {"shareType": "LOCAL"}
        )
        with self.core.lock:
            self._items[(project, zone, name)] = {
                "kind": "compute#reservation",
                "id": str(self.core.next_id()),
                "name": name,
                "zone": zone,
                "status": "READY",
                "specificReservationRequired": specific_required,
                "shareSettings": share,
                "specificReservation": {
                    "count": str(count),
                    "inUseCount": str(in_use),
                    "instanceProperties": {"machineType": machine_type},
                },
                "selfLink": f"projects/{project}/zones/{zone}/reservations/{name}",
            }

    def routes(self) -> list[tuple[str, str, str, Any]]:
        p = "/compute/v1/projects/(?P<project>[^/]+)"
        return [
            ("GET", p + "/zones/(?P<zone>[^/]+)/reservations/(?P<name>[^/]+)", "compute.reservations.get", self.get),
            ("GET", p + "/aggregated/reservations", "compute.reservations.aggregatedList", self.aggregated_list),
        ]

    def get(self, p: dict[str, str], q: dict[str, str], body: Any) -> dict[str, Any]:
        found = self._items.get((p["project"], p["zone"], p["name"]))
        if found is None:
            raise FakeError(
                404,
                f"The resource 'projects/{p['project']}/zones/{p['zone']}/reservations/{p['name']}' was not found",
                reason="notFound",
            )
        return dict(found)

    def aggregated_list(self, p: dict[str, str], q: dict[str, str], body: Any) -> dict[str, Any]:
        wanted = compute_filter(q.get("filter", ""))
        items: dict[str, Any] = {}
        for (project, zone, _), res in sorted(self._items.items()):
            if project == p["project"] and wanted(res):
                items.setdefault(f"zones/{zone}", {"reservations": []})["reservations"].append(dict(res))
        return {
            "kind": "compute#reservationAggregatedList",
            "id": f"projects/{p['project']}/aggregated/reservations",
            "items": items,
            "selfLink": f"projects/{p['project']}/aggregated/reservations",
        }
