"""``VolumeSpec``: the fields and rules of a Managed Lustre instance (``LustreVolume``'s spec)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .. import _validate as v
from ..catalog import LUSTRE_TIERS, LustreTier
from ..errors import NotReadyError
from ._fields import settle

__all__ = [
    "FILESYSTEM_RULE",
    "INSTANCE_ID_RULE",
    "PROJECT_PATTERN",
    "PROJECT_RULE",
    "ZONE_PATTERN",
    "ZONE_RULE",
    "VolumeSpec",
    "VolumeState",
]

# Lustre instance ids follow the usual GCP resource-id rule.
INSTANCE_ID_RULE = "must be 1-63 lowercase letters, digits or hyphens, start with a letter and not end with a hyphen"
FILESYSTEM_RULE = "must be 1-8 letters or digits, starting with a letter (the Lustre fsname)"
PROJECT_RULE = (
    "must be a project ID: 6-30 lowercase letters, digits or hyphens, "
    "starting with a letter and not ending with a hyphen"
)
PROJECT_PATTERN = r"(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]"
ZONE_PATTERN = r"[a-z]+-[a-z]+[0-9]+-[a-z]"
ZONE_RULE = "must be a zone like 'us-east1-b'"


@attrs.define
class VolumeState:
    """What was last learned of the instance (by ``LustreVolume.create``/``refresh`` or by
    provisioning); not part of the spec's identity, shared by the copies a ``Cluster``
    makes of the volume."""

    state: str | None = None
    mount_point: str | None = None
    created_by_us: bool = False

    def learn(self, state: str, mount_point: str | None) -> None:
        self.state = state
        self.mount_point = mount_point or None

    def forget(self) -> None:
        self.state = self.mount_point = None


@v.keyword_errors
@attrs.frozen(kw_only=True)
class VolumeSpec:
    """The frozen, validated fields of a Managed Lustre instance; see
    :class:`rl_lustre.LustreVolume`, which adds the calls to the Lustre API."""

    name: str = attrs.field(validator=v.matches(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?", INSTANCE_ID_RULE))
    # The tier's minimum when left out (derived again when the tier changes).
    _given_capacity_gib: int | None = attrs.field(
        alias="capacity_gib", default=None, eq=False, repr=False, validator=v.integer(min=1, optional=True)
    )
    capacity_gib: int = attrs.field(init=False)
    throughput_mbps_per_tib: int = attrs.field(default=500, validator=v.one_of(sorted(LUSTRE_TIERS)))
    filesystem: str = attrs.field(default="lustrefs", validator=v.matches(r"[A-Za-z][A-Za-z0-9]{0,7}", FILESYSTEM_RULE))
    project: str | None = attrs.field(default=None, validator=v.matches(PROJECT_PATTERN, PROJECT_RULE, optional=True))
    zone: str | None = attrs.field(
        default=None, validator=[v.matches(ZONE_PATTERN, ZONE_RULE, optional=True), v.known_zone]
    )
    network: str | None = attrs.field(
        default=None,
        validator=v.matches(
            r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?", "must be a VPC network name: " + INSTANCE_ID_RULE, optional=True
        ),
    )
    description: str = attrs.field(
        default="", validator=v.matches(r"[^\x00-\x1f]{0,2048}", "must be at most 2048 printable characters")
    )
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=v.string_mapping, validator=v.gcp_labels)
    existing: bool = attrs.field(default=False, validator=v.boolean)
    _live: VolumeState = attrs.field(factory=VolumeState, init=False, repr=False, eq=False, hash=False)
    # Fields a Cluster filled in (see _with_defaults); not part of the spec's identity.
    _filled: frozenset[str] = attrs.field(factory=frozenset, init=False, repr=False, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        tier = self.tier
        capacity = self._given_capacity_gib
        if capacity is None:
            settle(self, "capacity_gib", tier.min_gib)
            return
        if capacity < tier.min_gib:
            v.fail(
                self,
                "capacity_gib",
                capacity,
                f"the {tier.mbps_per_tib} MB/s/TiB tier needs at least {tier.min_gib:,} GiB",
            )
        if capacity > tier.max_gib:
            v.fail(
                self,
                "capacity_gib",
                capacity,
                f"the {tier.mbps_per_tib} MB/s/TiB tier holds at most {tier.max_gib:,} GiB "
                "(Managed Lustre's maximum instance size for it)",
            )
        if not tier.valid(capacity):
            lower, upper = tier.round_down(capacity), tier.round_up(capacity)
            steps = (
                f"steps of {tier.step_gib:,} GiB"
                if tier.threshold_gib >= tier.max_gib
                else f"steps of {tier.step_gib:,} GiB up to {tier.threshold_gib:,} GiB and of "
                f"{tier.large_step_gib:,} GiB above"
            )
            v.fail(
                self,
                "capacity_gib",
                capacity,
                f"the {tier.mbps_per_tib} MB/s/TiB tier grows in {steps} (nearest valid: {lower:,} or {upper:,})",
            )
        settle(self, "capacity_gib", capacity)

    @property
    def tier(self) -> LustreTier:
        """The performance tier this volume uses."""
        return LUSTRE_TIERS[self.throughput_mbps_per_tib]

    @property
    def throughput_mbps(self) -> float:
        """Aggregate throughput in MB/s (tier × capacity)."""
        return self.tier.throughput_mbps(self.capacity_gib)

    @property
    def capacity_bytes(self) -> int:
        return self.capacity_gib * 1024**3

    @property
    def state(self) -> str | None:
        """The instance's state as last seen (``"CREATING"``, ``"ACTIVE"``, ...), or None
        before :meth:`~rl_lustre.LustreVolume.create` or :meth:`~rl_lustre.LustreVolume.refresh`,
        or once it is gone."""
        return self._live.state

    @property
    def mount_point(self) -> str:
        """``IP@tcp:/fsname``, known once the instance is active.

        Raises:
            NotReadyError: the instance has not been created or read yet.
        """
        if self._live.mount_point is None:
            raise NotReadyError(
                f"{type(self).__name__} {self.name!r} has no mount point yet: create() it, or "
                "refresh() it if it already exists"
            )
        return self._live.mount_point

    @property
    def ip(self) -> str:
        """The instance's MGS address, from :attr:`mount_point`."""
        return self.mount_point.split("@", 1)[0]

    def resource_name(self) -> str:
        """``projects/P/locations/Z/instances/NAME``."""
        if self.project is None or self.zone is None:
            v.fail(
                self,
                "project" if self.project is None else "zone",
                None,
                "must be set (directly or by attaching the volume to a Cluster)",
            )
        return f"projects/{self.project}/locations/{self.zone}/instances/{self.name}"

    def _with_defaults(self, **defaults: Any) -> Any:
        """A copy whose unset fields take ``defaults``, remembering which were filled so
        that a ``Cluster`` evolved to another zone or network re-fills them."""
        changes = {k: val for k, val in defaults.items() if getattr(self, k) is None}
        return self._copy({k: val for k, val in changes.items() if val is not None}, self._filled | frozenset(changes))

    def _unfilled(self) -> Any:
        """This volume as the user wrote it, before a ``Cluster`` filled its defaults."""
        if not self._filled - {"name"}:
            return self
        return self._copy(dict.fromkeys(self._filled - {"name"}), self._filled & {"name"})

    def _copy(self, changes: dict[str, Any], filled: frozenset[str]) -> Any:
        """``attrs.evolve(self, **changes)`` that shares this handle's live state."""
        new = attrs.evolve(self, **changes)
        object.__setattr__(new, "_live", self._live)
        object.__setattr__(new, "_filled", filled)
        return new
