"""``Capacity``: one kind of GPU capacity a deployment may use, and the policy's rules.

A cluster's ``capacity`` is an ordered tuple of these: ``up()`` tries each in turn (in
every candidate zone, see ``ClusterSpec.capacity_zones``) until one delivers the GPU
nodes. The kinds, in the order of what they cost:

- ``"reservation"``: capacity held for you (a specific reservation of this project, a
  block of one, or one shared from another project as ``projects/P/reservations/R``);
  paid whether used or not, so tried first when listed.
- ``"spot"``: Spot VMs, the cheapest on-demand-free capacity, preemptible at any time.
- ``"flex-start"``: Dynamic Workload Scheduler flex-start: nodes for at most
  ``max_run_duration`` (7 days), discounted; with ``queued`` (the default) all nodes come
  at once through a ProvisioningRequest, or not at all.
- ``"on-demand"``: list price; never tried unless listed.

Examples:
    >>> Capacity("flex-start").max_run_duration
    604800.0
    >>> Capacity.parse("spot").kind
    'spot'
    >>> Capacity("spot", queued=False)
    Traceback (most recent call last):
    ...
    rl_lustre.errors.ConfigError: Capacity.queued=False: is for kind 'flex-start' only (kind is 'spot')
"""

from __future__ import annotations

from typing import Any

import attrs

from .. import _validate as v
from .._public import public
from ..errors import ConfigError
from ._fields import settle

__all__ = [
    "CAPACITY_KINDS",
    "DEFAULT_WAIT",
    "FLEX_START_MAX_RUN_SECONDS",
    "NO_CAPACITY_OPTIONS",
    "RDMA_ZONE_RULE",
    "RESERVATION_RULE",
    "Capacity",
    "check_capacity",
    "check_capacity_zones",
]

CAPACITY_KINDS = ("reservation", "spot", "flex-start", "on-demand")
# GKE flex-start: a node lives at most 7 days (maxRunDurationSeconds / max_run_duration).
FLEX_START_MAX_RUN_SECONDS = 7 * 24 * 3600.0
_FLEX_START_MIN_RUN_SECONDS = 600.0
# How long a lane may take to deliver its nodes once asked, before the next is tried (seconds).
DEFAULT_WAIT = {"reservation": 900.0, "spot": 900.0, "flex-start": 7200.0, "on-demand": 900.0}
# What up() keeps when no capacity came (ClusterSpec.on_no_capacity).
NO_CAPACITY_OPTIONS = ("storage", "nothing")
RESERVATION_PATTERN = (
    r"(?:projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/reservations/)?"
    r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?(?:/reservationBlocks/[a-z0-9-]+)?"
)
# A RoCE VPC is bound to its zone's network profile (<zone>-vpc-roce): every VM with a NIC on it
# must be in that zone (Google's "RDMA network profiles" page, "Zonal constraint").
RDMA_ZONE_RULE = (
    "a GPU pool with fabric='rdma' cannot move to another zone: its RoCE VPC is on the network "
    "profile '{zone}-vpc-roce', and every VM with a NIC on it must be in {zone}; keep "
    "capacity_zones='zone', or use fabric='tcp' to let the GPU pool move (without GPUDirect-RDMA)"
)
RESERVATION_RULE = (
    "must be a reservation name, '<name>/reservationBlocks/<block>', or a reservation shared "
    "from another project as 'projects/<project>/reservations/<name>'"
)


def _kind(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if value not in CAPACITY_KINDS:
        v.fail(inst, "kind", value, f"must be one of {', '.join(map(repr, CAPACITY_KINDS))}")


def _seconds_or_none(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        v.fail(inst, attr.name, value, "must be a positive number of seconds")


def _to_float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


@public("rl_lustre")
@attrs.frozen(init=False)
class Capacity:
    """One kind of capacity to try (see the module's doc for what each costs and guarantees).

    Args:
        kind: ``"reservation"``, ``"spot"``, ``"flex-start"`` or ``"on-demand"``.
        reservation: kind ``"reservation"`` only: its name, ``"<name>/reservationBlocks/<block>"``
            or, shared from another project, ``"projects/<project>/reservations/<name>"``;
            None takes the cluster's ``reservation``.
        queued: kind ``"flex-start"`` only: queued provisioning (a ProvisioningRequest; every
            node at once). Default True.
        max_run_duration: kind ``"flex-start"`` only: seconds the nodes may live, 600 to
            604800 (7 days, the default).
        wait: seconds this kind may take to deliver the nodes once asked before the next is
            tried; default :data:`DEFAULT_WAIT` of the kind (15 minutes; flex-start 2 hours).
    """

    kind: str = attrs.field(validator=_kind)
    reservation: str | None = attrs.field(
        default=None, validator=v.matches(RESERVATION_PATTERN, RESERVATION_RULE, optional=True)
    )
    queued: bool = attrs.field(default=True, validator=v.boolean)
    max_run_duration: float | None = attrs.field(default=None, converter=_to_float, validator=_seconds_or_none)
    wait: float = attrs.field(default=0.0, converter=_to_float, validator=_seconds_or_none)

    def __init__(
        self,
        kind: str,
        *,
        reservation: str | None = None,
        queued: bool | None = None,
        max_run_duration: float | None = None,
        wait: float | None = None,
    ) -> None:
        flex = kind == "flex-start"
        for name, given in (("queued", queued), ("max_run_duration", max_run_duration)):
            if given is not None and not flex:
                raise ConfigError("Capacity", name, given, f"is for kind 'flex-start' only (kind is {kind!r})")
        if reservation is not None and kind != "reservation":
            raise ConfigError(
                "Capacity", "reservation", reservation, f"is for kind 'reservation' only (kind is {kind!r})"
            )
        if flex and max_run_duration is None:
            max_run_duration = FLEX_START_MAX_RUN_SECONDS
        self.__attrs_init__(
            kind=kind,
            reservation=reservation,
            queued=True if queued is None else queued,
            max_run_duration=max_run_duration,
            wait=DEFAULT_WAIT.get(kind, 900.0) if wait is None else wait,
        )
        if flex:
            assert self.max_run_duration is not None
            if not _FLEX_START_MIN_RUN_SECONDS <= self.max_run_duration <= FLEX_START_MAX_RUN_SECONDS:
                raise ConfigError(
                    "Capacity",
                    "max_run_duration",
                    max_run_duration,
                    f"must be {_FLEX_START_MIN_RUN_SECONDS:g} to {FLEX_START_MAX_RUN_SECONDS:g} seconds "
                    "(GKE flex-start nodes live at most 7 days)",
                )
        else:
            object.__setattr__(self, "queued", False)

    @classmethod
    def parse(cls, value: Capacity | str, *, owner: str = "ClusterSpec", field: str = "capacity") -> Capacity:
        """A ``Capacity`` from itself or a kind's name (``"spot"``)."""
        if isinstance(value, Capacity):
            return value
        if isinstance(value, str) and value in CAPACITY_KINDS:
            return cls(value)
        raise ConfigError(
            owner,
            field,
            value,
            f"each entry must be one of {', '.join(map(repr, CAPACITY_KINDS))} or a rl_lustre.Capacity",
        )

    def with_reservation(self, name: str) -> Capacity:
        """This reservation lane naming ``name`` (the cluster's ``reservation``)."""
        return Capacity("reservation", reservation=name, wait=self.wait)

    @property
    def label(self) -> str:
        """``spot``, ``flex-start (queued, 7d)``, ``reservation projects/p/reservations/r``."""
        if self.kind == "reservation":
            return f"reservation {self.reservation}"
        if self.kind == "flex-start":
            assert self.max_run_duration is not None
            days = self.max_run_duration / 86400
            span = f"{days:g}d" if days >= 1 else f"{self.max_run_duration / 3600:g}h"
            return f"flex-start ({'queued, ' if self.queued else ''}{span})"
        return self.kind

    @property
    def shared(self) -> bool:
        """A reservation shared from another project (named by its path)."""
        return self.reservation is not None and self.reservation.startswith("projects/")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "wait_seconds": self.wait}
        if self.kind == "reservation":
            out["reservation"] = self.reservation
        if self.kind == "flex-start":
            out["queued"] = self.queued
            out["max_run_duration_seconds"] = self.max_run_duration
        return out


def check_capacity(spec: Any) -> None:
    """Settle the capacity policy of a GKE ``ClusterSpec`` whose ``fabric`` is settled: the one
    given, or the one its ``spot`` / ``reservation`` fields say; then ``spot`` (whether the
    first lane is Spot) and :func:`check_capacity_zones`."""
    given, spot, reservation = spec._given_capacity, spec._given_spot, spec.reservation
    if given is None:
        if spot and reservation is not None:
            v.fail(
                spec, "reservation", reservation, "Spot VMs cannot consume a reservation; pass spot=False to use one"
            )
        if reservation is not None:
            policy: tuple[Capacity, ...] = (Capacity("reservation", reservation=reservation),)
        elif spot is False:
            policy = (Capacity("on-demand"),)
        else:
            policy = (Capacity("spot"),)
    else:
        if not isinstance(given, tuple) or not given:
            v.fail(
                spec,
                "capacity",
                given,
                "must be a non-empty list of capacity kinds to try in order, like ('spot', 'flex-start')",
            )
        policy = tuple(Capacity.parse(c, owner=type(spec).__name__) for c in given)
        named = []
        for i, c in enumerate(policy):
            if c.kind == "reservation" and c.reservation is None:
                if reservation is None:
                    v.fail(
                        spec,
                        "capacity",
                        given,
                        f"entry {i} is a reservation without a name: pass Capacity('reservation', "
                        "reservation='NAME') or Cluster(reservation='NAME')",
                    )
                assert reservation is not None
                policy = (*policy[:i], c.with_reservation(reservation), *policy[i + 1 :])
            if policy[i].kind == "reservation":
                named.append(policy[i].reservation)
        labels = [c.label for c in policy]
        if len(set(labels)) != len(labels):
            v.fail(spec, "capacity", given, "each capacity may be listed once")
        kinds = [c.kind for c in policy]
        if spot is True and "spot" not in kinds:
            v.fail(
                spec,
                "spot",
                True,
                f"conflicts with capacity={tuple(kinds)}, which lists no 'spot' "
                "(leave spot out when you give a capacity policy)",
            )
        if spot is False and "spot" in kinds:
            v.fail(spec, "spot", False, f"conflicts with capacity={tuple(kinds)}, which lists 'spot'")
        if reservation is not None and reservation not in named:
            v.fail(
                spec,
                "reservation",
                reservation,
                f"conflicts with capacity={tuple(labels)}: the policy must list this reservation "
                "(add 'reservation' to it) or leave reservation out",
            )
    settle(spec, "capacity", policy)
    settle(spec, "spot", policy[0].kind == "spot")
    check_capacity_zones(spec)


def check_capacity_zones(spec: Any) -> None:
    """Validate ``spec.capacity_zones`` (a GKE ``ClusterSpec`` whose ``fabric`` is settled), offline.

    Examples:
        >>> from rl_lustre import Cluster
        >>> Cluster(name="d", project="my-project", region="us-east1", zone="us-east1-b",
        ...         capacity_zones="region")  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        rl_lustre.errors.ConfigError: Cluster.capacity_zones='region': a GPU pool with fabric='rdma' cannot move to
        another zone: its RoCE VPC is on the network profile 'us-east1-b-vpc-roce', and every VM with a NIC on it must
        be in us-east1-b; keep capacity_zones='zone', or use fabric='tcp' to let the GPU pool move (without
        GPUDirect-RDMA)
    """
    zones = spec.capacity_zones
    rule = (
        "must be 'zone' (the cluster's zone only), 'region' (every zone of the region that offers the "
        "machine type and Managed Lustre, found at up()) or a list of zones of the region"
    )
    if isinstance(zones, str):
        if zones not in ("zone", "region"):
            v.fail(spec, "capacity_zones", zones, rule)
    else:
        if not isinstance(zones, tuple) or not zones or len(set(zones)) != len(zones):
            v.fail(spec, "capacity_zones", zones, rule + ", each once")
        for z in zones:
            if not isinstance(z, str) or z.rsplit("-", 1)[0] != spec.region:
                v.fail(spec, "capacity_zones", z, f"must be a zone of region {spec.region!r} (like '{spec.region}-b')")
        if zones[0] != spec.zone:
            v.fail(
                spec, "capacity_zones", zones, f"must start with the cluster's zone {spec.zone!r} (where the volume is)"
            )
    if spec.fabric == "rdma" and zones not in ("zone", (spec.zone,)):
        v.fail(spec, "capacity_zones", zones, RDMA_ZONE_RULE.format(zone=spec.zone))
