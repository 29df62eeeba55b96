"""``LustreVolume``: a Managed Lustre instance, as a validated spec with a live handle."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from . import _validate as v
from .catalog import LUSTRE_TIERS, LustreTier
from .errors import NotReadyError

# Lustre instance ids follow the usual GCP resource-id rule.
INSTANCE_ID_RULE = (
    "must be 1-63 lowercase letters, digits or hyphens, start with a letter and not end with a hyphen"
)
FILESYSTEM_RULE = "must be 1-8 letters or digits, starting with a letter (the Lustre fsname)"
PROJECT_RULE = (
    "must be a project ID: 6-30 lowercase letters, digits or hyphens, "
    "starting with a letter and not ending with a hyphen"
)
PROJECT_PATTERN = r"(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]"
ZONE_PATTERN = r"[a-z]+-[a-z]+[0-9]+-[a-z]"
ZONE_RULE = "must be a zone like 'us-east1-b'"


@attrs.define
class _VolumeState:
    """What we learned from the Lustre API; not part of the spec's identity."""

    state: str | None = None
    mount_point: str | None = None
    created_by_us: bool = False


@attrs.frozen(kw_only=True)
class LustreVolume:
    """A Managed Lustre instance used as the checkpoint and model cache store.

    Capacity defaults to the tier's minimum. The tier is fixed at creation and
    capacity can only grow, so size with :func:`rl_lustre.sizing.size_lustre`.

    Example:
        >>> from rl_lustre import LustreVolume
        >>> vol = LustreVolume(name="rl-demo-lustre", throughput_mbps_per_tib=500)
        >>> vol.capacity_gib, vol.throughput_mbps
        (18000, 8789.0625)

    Args:
        name: the instance id.
        capacity_gib: capacity; a multiple of the tier's step, at least its minimum.
        throughput_mbps_per_tib: the performance tier: 125, 250, 500 or 1000 MB/s per TiB.
        filesystem: the Lustre filesystem name (at most 8 characters).
        project: the project; filled from the ``Cluster`` it is attached to.
        zone: the zone; filled from the ``Cluster`` it is attached to.
        network: the VPC network name; filled from the ``Cluster``.
        description: free text stored on the instance.
        labels: extra labels; rl_lustre adds its ownership labels itself.
        existing: True for an instance you created yourself. rl_lustre then reads it
            but never creates or deletes it.
    """

    name: str = attrs.field(validator=v.matches(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?", INSTANCE_ID_RULE))
    capacity_gib: int | None = attrs.field(default=None, validator=v.integer(min=1, optional=True))
    throughput_mbps_per_tib: int = attrs.field(default=500, validator=v.one_of(sorted(LUSTRE_TIERS)))
    filesystem: str = attrs.field(default="lustrefs", validator=v.matches(r"[A-Za-z][A-Za-z0-9]{0,7}", FILESYSTEM_RULE))
    project: str | None = attrs.field(default=None, validator=v.matches(PROJECT_PATTERN, PROJECT_RULE, optional=True))
    zone: str | None = attrs.field(default=None, validator=v.matches(ZONE_PATTERN, ZONE_RULE, optional=True))
    network: str | None = attrs.field(
        default=None,
        validator=v.matches(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?", "must be a VPC network name: " + INSTANCE_ID_RULE, optional=True),
    )
    description: str = attrs.field(default="", validator=v.matches(r"[^\x00-\x1f]{0,2048}", "must be at most 2048 printable characters"))
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=v.to_frozen_mapping, validator=v.gcp_labels)
    existing: bool = attrs.field(default=False, validator=v.boolean)
    _live: _VolumeState = attrs.field(factory=_VolumeState, init=False, repr=False, eq=False, hash=False)
    _filled: frozenset[str] = attrs.field(factory=frozenset, init=False, repr=False, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        tier = self.tier
        if self.capacity_gib is None:
            object.__setattr__(self, "capacity_gib", tier.min_gib)
            return
        if self.capacity_gib < tier.min_gib:
            v.fail(self, "capacity_gib", self.capacity_gib,
                   f"the {tier.mbps_per_tib} MB/s/TiB tier needs at least {tier.min_gib:,} GiB")
        if self.capacity_gib % tier.step_gib:
            lower = self.capacity_gib - self.capacity_gib % tier.step_gib
            v.fail(self, "capacity_gib", self.capacity_gib,
                   f"the {tier.mbps_per_tib} MB/s/TiB tier grows in steps of {tier.step_gib:,} GiB "
                   f"(nearest valid: {max(lower, tier.min_gib):,} or {lower + tier.step_gib:,})")

    @property
    def tier(self) -> LustreTier:
        """The performance tier this volume uses."""
        return LUSTRE_TIERS[self.throughput_mbps_per_tib]

    @property
    def throughput_mbps(self) -> float:
        """Aggregate throughput in MB/s (tier × capacity)."""
        assert self.capacity_gib is not None
        return self.tier.throughput_mbps(self.capacity_gib)

    @property
    def capacity_bytes(self) -> int:
        assert self.capacity_gib is not None
        return self.capacity_gib * 1024**3

    @property
    def mount_point(self) -> str:
        """``IP@tcp:/fsname``, known once the instance is active.

        Raises:
            NotReadyError: the instance has not been created or read yet.
        """
        if self._live.mount_point is None:
            raise NotReadyError(
                f"LustreVolume {self.name!r} has no mount point yet: create() it, or "
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
            v.fail(self, "project" if self.project is None else "zone", None,
                   "must be set (directly or by attaching the volume to a Cluster)")
        return f"projects/{self.project}/locations/{self.zone}/instances/{self.name}"

    def _with_defaults(self, **defaults: Any) -> LustreVolume:
        """A copy whose unset fields take ``defaults``, remembering which were filled so
        that a ``Cluster`` evolved to another zone or network re-fills them."""
        changes = {k: val for k, val in defaults.items() if getattr(self, k) is None}
        new = attrs.evolve(self, **{k: val for k, val in changes.items() if val is not None})
        object.__setattr__(new, "_live", self._live)
        object.__setattr__(new, "_filled", self._filled | frozenset(changes))
        return new

    def _unfilled(self) -> LustreVolume:
        """This volume as the user wrote it, before a ``Cluster`` filled its defaults."""
        if not self._filled - {"name"}:
            return self
        unset: dict[str, Any] = dict.fromkeys(self._filled - {"name"})
        new = attrs.evolve(self, **unset)
        object.__setattr__(new, "_live", self._live)
        object.__setattr__(new, "_filled", self._filled & {"name"})
        return new
