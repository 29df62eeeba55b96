"""``LustreVolume``: a Managed Lustre instance, as a validated spec with a live handle."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from . import _validate as v
from .catalog import LUSTRE_TIERS, LustreTier
from .errors import NotReadyError

if TYPE_CHECKING:
    from .metrics import VolumeMetrics

_log = logging.getLogger("rl_lustre.volume")

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


@v.keyword_errors
@attrs.frozen(kw_only=True)
class LustreVolume:
    """A Managed Lustre instance used as the checkpoint and model cache store.

    Capacity defaults to the tier's minimum. The tier is fixed at creation and
    capacity can only grow, so size with :func:`rl_lustre.sizing.size_lustre`.

    Examples:
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
        if self.capacity_gib > tier.max_gib:
            v.fail(self, "capacity_gib", self.capacity_gib,
                   f"the {tier.mbps_per_tib} MB/s/TiB tier holds at most {tier.max_gib:,} GiB "
                   "(Managed Lustre's maximum instance size for it)")
        if not tier.valid(self.capacity_gib):
            lower, upper = tier.round_down(self.capacity_gib), tier.round_up(self.capacity_gib)
            steps = (f"steps of {tier.step_gib:,} GiB" if tier.threshold_gib >= tier.max_gib else
                     f"steps of {tier.step_gib:,} GiB up to {tier.threshold_gib:,} GiB and of "
                     f"{tier.large_step_gib:,} GiB above")
            v.fail(self, "capacity_gib", self.capacity_gib,
                   f"the {tier.mbps_per_tib} MB/s/TiB tier grows in {steps} "
                   f"(nearest valid: {lower:,} or {upper:,})")

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

    # Live methods: they talk to the Managed Lustre API (or the emulator named by
    # RL_LUSTRE_GCP_EMULATOR_HOST) and record what they learn on this handle.

    @property
    def state(self) -> str | None:
        """The instance's state as last seen (``"CREATING"``, ``"ACTIVE"``, ...), or None
        before :meth:`create` or :meth:`refresh`, or once it is gone."""
        return self._live.state

    def _api(self, api: Any) -> Any:
        if api is not None:
            return api
        from .gcp.lustre import LustreInstances

        return LustreInstances()

    def _learn(self, instance: Any) -> None:
        from .gcp.lustre import State

        self._live.state = State(instance.state).name
        self._live.mount_point = instance.mount_point or None

    def create(
        self,
        *,
        deployment: str | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float = 2 * 3600.0,
        api: Any = None,
    ) -> LustreVolume:
        """Create the instance and wait until it is ACTIVE; then :attr:`mount_point` is known.

        Idempotent: an instance of this name that carries rl_lustre's labels for
        ``deployment`` is adopted. With ``existing=True`` nothing is created: the
        instance must exist, and is read and awaited.

        Examples:
            >>> from rl_lustre import LustreVolume
            >>> from rl_lustre.testing import FakeGCP
            >>> with FakeGCP() as gcp:
            ...     gcp.seed_network("my-project", "my-net")
            ...     vol = LustreVolume(name="demo-lustre", project="my-project", zone="us-east1-b",
            ...                        network="my-net").create()
            ...     vol.state, vol.mount_point
            ('ACTIVE', '10.90.1.4@tcp:/lustrefs')

        Args:
            deployment: the deployment whose labels it carries; by default the volume's name.
            labels: more labels (the volume's own and rl_lustre's are always added).
            timeout: seconds to wait for ACTIVE.
            api: a :class:`rl_lustre.gcp.LustreInstances`; by default one for this environment.

        Raises:
            ConfigError: project, zone or network is not set.
            OwnershipError: a same-named instance exists without our labels.
            NotFoundError: ``existing=True`` and there is no such instance.
            QuotaExceededError: the project has no room for the instance.
            PermissionDeniedError: the credentials may not create Lustre instances.
            OperationFailedError: the create operation failed.
            WaitTimeoutError: the instance did not become ACTIVE in time.
        """
        from .gcp.lustre import instance_request

        lustre = self._api(api)
        if self.existing:
            self._learn(lustre.wait_ready(self.resource_name(), timeout=timeout))
            return self
        request = instance_request(self, deployment=deployment or self.name, labels=labels)
        done = lustre.create(request, deployment=deployment or self.name, timeout=timeout)
        self._learn(done.resource)
        self._live.created_by_us = self._live.created_by_us or not done.adopted
        return self

    def refresh(self, *, api: Any = None) -> LustreVolume:
        """Read the instance's state and mount point from the API.

        Example::

            vol = LustreVolume(name="shared", project="my-project", zone="us-east1-b",
                               existing=True).refresh()
            vol.mount_point
            # '10.90.1.4@tcp:/lustrefs'

        Raises:
            NotFoundError: the instance does not exist.
        """
        from .errors import NotFoundError

        found = self._api(api).get_or_none(self.resource_name())
        if found is None:
            self._live.state = self._live.mount_point = None
            raise NotFoundError(f"Lustre instance {self.resource_name()} does not exist")
        self._learn(found)
        return self

    def exists(self, *, api: Any = None) -> bool:
        """Whether the instance exists (refreshing the state if it does).

        Example::

            LustreVolume(name="shared", project="my-project", zone="us-east1-b").exists()
            # False
        """
        from .errors import NotFoundError

        try:
            self.refresh(api=api)
        except NotFoundError:
            return False
        return True

    def delete(self, *, deployment: str | None = None, timeout: float = 3600.0, api: Any = None) -> bool:
        """Delete the instance and wait until it is gone.

        Only an instance carrying rl_lustre's labels for ``deployment`` is deleted. A
        volume declared ``existing=True`` is yours and is never deleted: this returns
        False without any call.

        Example::

            vol.delete()
            # True

        Returns:
            True if it was deleted; False if it did not exist or is ``existing``.

        Raises:
            OwnershipError: it exists without our labels.
        """
        if self.existing:
            _log.info("not deleting Lustre instance %s: it is existing=True (yours)", self.name)
            return False
        deleted: bool = self._api(api).delete(self.resource_name(), deployment=deployment or self.name,
                                              timeout=timeout)
        self._live.state = self._live.mount_point = None
        self._live.created_by_us = False
        return deleted

    def import_data(
        self, gcs_uri: str, path: str = "/", *, timeout: float = 24 * 3600.0, api: Any = None
    ) -> Any:
        """Copy objects under ``gcs_uri`` (``gs://bucket/prefix``) into the volume at ``path``.

        Example::

            vol.import_data("gs://my-bucket/models/qwen", "/models/qwen")
            # TransferResult(operation='...', objects_copied=..., bytes_copied=..., ...)

        Returns:
            A :class:`rl_lustre.gcp.TransferResult` with the copy's counters.

        Raises:
            ConfigError: ``gcs_uri`` is not a ``gs://`` URI or ``path`` is not absolute.
        """
        self._check_transfer(gcs_uri, path)
        return self._api(api).import_data(self.resource_name(), gcs_uri, path, timeout=timeout)

    def export_data(
        self, path: str, gcs_uri: str, *, timeout: float = 24 * 3600.0, api: Any = None
    ) -> Any:
        """Copy ``path`` of the volume (e.g. a checkpoint directory) to ``gcs_uri``.

        Example::

            vol.export_data("/checkpoints/run-1/step_20", "gs://my-bucket/run-1/step_20")
            # TransferResult(operation='...', objects_copied=..., bytes_copied=..., ...)

        Returns:
            A :class:`rl_lustre.gcp.TransferResult` with the copy's counters.

        Raises:
            ConfigError: ``gcs_uri`` is not a ``gs://`` URI or ``path`` is not absolute.
        """
        self._check_transfer(gcs_uri, path)
        return self._api(api).export_data(self.resource_name(), path, gcs_uri, timeout=timeout)

    def metrics(self, start: Any = None, end: Any = None, *, step: int = 60, monitoring: Any = None) -> VolumeMetrics:
        """The instance's read and write throughput (MB/s) from Cloud Monitoring.

        Example::

            m = volume.metrics()                 # the last hour, one point a minute
            m.write_mbps.max(), m.read_mbps.mean()

        Args:
            start: the window's start (an aware ``datetime`` or seconds since the epoch);
                by default an hour before ``end``.
            end: the window's end; by default now.
            step: seconds per point (at least 60).
            monitoring: a :class:`rl_lustre.gcp.Monitoring`; by default one from the environment.

        Raises:
            ConfigError: the project or zone is unset, or a bad window or step.
            GCPError: Cloud Monitoring refused (e.g. no ``roles/monitoring.viewer``).
        """
        from .metrics import volume_metrics

        return volume_metrics(self, start=start, end=end, step=step, monitoring=monitoring)

    def _check_transfer(self, gcs_uri: str, path: str) -> None:
        import re

        if not isinstance(gcs_uri, str) or not re.fullmatch(r"gs://[a-z0-9][a-z0-9._-]{1,221}[a-z0-9](/.*)?", gcs_uri):
            v.fail(self, "gcs_uri", gcs_uri, "must be a Cloud Storage URI like 'gs://bucket/prefix'")
        if not isinstance(path, str) or not path.startswith("/") or "/../" in f"{path}/":
            v.fail(self, "path", path, "must be an absolute path inside the volume, like '/models'")
        v.no_control(type(self).__name__, "path", path)
        self.resource_name()

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
