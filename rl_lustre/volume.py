"""``LustreVolume``: a Managed Lustre instance, as a validated spec with a live handle.

The fields and their rules are :class:`~rl_lustre.spec.VolumeSpec`'s; this module adds
what talks to the Managed Lustre API (create, refresh, delete, transfers, metrics).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from . import _validate as v
from ._public import public
from .spec.volume import (
    FILESYSTEM_RULE,
    INSTANCE_ID_RULE,
    PROJECT_PATTERN,
    PROJECT_RULE,
    ZONE_PATTERN,
    ZONE_RULE,
    VolumeSpec,
)

if TYPE_CHECKING:
    from .gcp.lustre import LustreInstances, TransferResult
    from .gcp.monitoring import Monitoring
    from .metrics import VolumeMetrics, When

__all__ = [
    "FILESYSTEM_RULE",
    "INSTANCE_ID_RULE",
    "PROJECT_PATTERN",
    "PROJECT_RULE",
    "ZONE_PATTERN",
    "ZONE_RULE",
    "LustreVolume",
]

_log = logging.getLogger("rl_lustre.volume")


@public("rl_lustre")
@v.keyword_errors
@attrs.frozen(kw_only=True)
class LustreVolume(VolumeSpec):
    """A Managed Lustre instance used as the checkpoint and model cache store.

    Capacity defaults to the tier's minimum. The tier is fixed at creation and
    capacity can only grow, so size with :func:`rl_lustre.size_lustre`.

    Examples:
        >>> from rl_lustre import LustreVolume
        >>> vol = LustreVolume(name="rl-demo-lustre", throughput_mbps_per_tib=500)
        >>> vol.capacity_gib, vol.throughput_mbps
        (18000, 8789.0625)

    Args:
        name: the instance id.
        capacity_gib: capacity; a multiple of the tier's step, at least its minimum. Left out,
            the tier's minimum (also after ``attrs.evolve`` to another tier).
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

    # Live methods: they talk to the Managed Lustre API (or the emulator named by
    # RL_LUSTRE_GCP_EMULATOR_HOST) and record what they learn on this handle.

    def _api(self, api: LustreInstances | None) -> LustreInstances:
        if api is not None:
            return api
        from .gcp.lustre import LustreInstances

        return LustreInstances()

    def _learn(self, instance: Any) -> None:
        from .gcp.lustre import State

        self._live.learn(State(instance.state).name, instance.mount_point)

    def create(
        self,
        *,
        deployment: str | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float = 2 * 3600.0,
        api: LustreInstances | None = None,
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

    def refresh(self, *, api: LustreInstances | None = None) -> LustreVolume:
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
            self._live.forget()
            raise NotFoundError(f"Lustre instance {self.resource_name()} does not exist")
        self._learn(found)
        return self

    def exists(self, *, api: LustreInstances | None = None) -> bool:
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

    def delete(
        self, *, deployment: str | None = None, timeout: float = 3600.0, api: LustreInstances | None = None
    ) -> bool:
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
        deleted: bool = self._api(api).delete(self.resource_name(), deployment=deployment or self.name, timeout=timeout)
        self._live.forget()
        self._live.created_by_us = False
        return deleted

    def import_data(
        self, gcs_uri: str, path: str = "/", *, timeout: float = 24 * 3600.0, api: LustreInstances | None = None
    ) -> TransferResult:
        """Copy objects under ``gcs_uri`` (``gs://bucket/prefix``) into the volume at ``path``.

        Example::

            vol.import_data("gs://my-bucket/models/qwen", "/models/qwen")
            # TransferResult(operation='...', objects_copied=..., bytes_copied=..., ...)

        Returns:
            A :class:`rl_lustre.TransferResult` with the copy's counters.

        Raises:
            ConfigError: ``gcs_uri`` is not a ``gs://`` URI or ``path`` is not absolute.
        """
        self._check_transfer(gcs_uri, path)
        return self._api(api).import_data(self.resource_name(), gcs_uri, path, timeout=timeout)

    def export_data(
        self, path: str, gcs_uri: str, *, timeout: float = 24 * 3600.0, api: LustreInstances | None = None
    ) -> TransferResult:
        """Copy ``path`` of the volume (e.g. a checkpoint directory) to ``gcs_uri``.

        Example::

            vol.export_data("/checkpoints/run-1/step_20", "gs://my-bucket/run-1/step_20")
            # TransferResult(operation='...', objects_copied=..., bytes_copied=..., ...)

        Returns:
            A :class:`rl_lustre.TransferResult` with the copy's counters.

        Raises:
            ConfigError: ``gcs_uri`` is not a ``gs://`` URI or ``path`` is not absolute.
        """
        self._check_transfer(gcs_uri, path)
        return self._api(api).export_data(self.resource_name(), path, gcs_uri, timeout=timeout)

    def metrics(
        self,
        start: When | None = None,
        end: When | None = None,
        *,
        step: int = 60,
        monitoring: Monitoring | None = None,
    ) -> VolumeMetrics:
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
