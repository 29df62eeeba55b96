"""The fake Cloud Quotas API (``google.api.cloudquotas.v1.CloudQuotas``): ``GetQuotaInfo`` and
``ListQuotaInfos``, read-only, on the fakes' gRPC server.

It knows Compute Engine's GPU quotas as Google names them (``GPUS-PER-GPU-FAMILY-per-project-region``
and ``PREEMPTIBLE-GPUS-PER-GPU-FAMILY-per-project-region``, dimensions ``region`` and ``gpu_family``;
``GPUS-ALL-REGIONS-per-project``, global) and a Managed Lustre capacity quota per zone and
performance tier. The Lustre quota's id here is the fake's own (``LUSTRE-CAPACITY-per-zone-per-tier``):
rl_lustre finds that quota by what it measures (storage, by zone), not by its id.

By default every limit is generous (:data:`DEFAULT_GPUS`, :data:`DEFAULT_LUSTRE_GIB`); tests
narrow them with :meth:`QuotasFake.set_limit` and remove a quota with :meth:`QuotasFake.drop`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import grpc
from google.cloud import cloudquotas_v1

from ..catalog import (
    GPU_FAMILY_QUOTA,
    GPU_QUOTA_SERVICE,
    GPUS_ALL_REGIONS_QUOTA,
    PREEMPTIBLE_GPU_FAMILY_QUOTA,
)
from ._core import Core, FakeError
from ._grpc import GrpcServer

__all__ = ["DEFAULT_GPUS", "DEFAULT_LUSTRE_GIB", "LUSTRE_CAPACITY_QUOTA", "QuotasFake"]

SERVICE = "google.api.cloudquotas.v1.CloudQuotas"
LUSTRE_SERVICE = "lustre.googleapis.com"
LUSTRE_CAPACITY_QUOTA = "LUSTRE-CAPACITY-per-zone-per-tier"
DEFAULT_GPUS = 4096
DEFAULT_LUSTRE_GIB = 10_000_000
_NAME = re.compile(r"projects/([^/]+)/locations/global/services/([^/]+)/quotaInfos/([^/]+)")
_PARENT = re.compile(r"projects/([^/]+)/locations/global/services/([^/]+)")

# quota id -> (service, metric, display name, unit, dimensions)
_QUOTAS: dict[str, tuple[str, str, str, str, tuple[str, ...]]] = {
    GPU_FAMILY_QUOTA: (
        GPU_QUOTA_SERVICE,
        "compute.googleapis.com/gpus_per_gpu_family",
        "GPUs per GPU family per project per region",
        "1",
        ("region", "gpu_family"),
    ),
    PREEMPTIBLE_GPU_FAMILY_QUOTA: (
        GPU_QUOTA_SERVICE,
        "compute.googleapis.com/preemptible_gpus_per_gpu_family",
        "Preemptible GPUs per GPU family per project per region",
        "1",
        ("region", "gpu_family"),
    ),
    GPUS_ALL_REGIONS_QUOTA: (
        GPU_QUOTA_SERVICE,
        "compute.googleapis.com/gpus_all_regions",
        "GPUs (all regions) per project",
        "1",
        (),
    ),
    LUSTRE_CAPACITY_QUOTA: (
        LUSTRE_SERVICE,
        "lustre.googleapis.com/capacity",
        "Managed Lustre capacity per zone per performance tier",
        "GiBy",
        ("zone", "throughput"),
    ),
}
_DEFAULTS = {
    GPU_FAMILY_QUOTA: DEFAULT_GPUS,
    PREEMPTIBLE_GPU_FAMILY_QUOTA: DEFAULT_GPUS,
    GPUS_ALL_REGIONS_QUOTA: DEFAULT_GPUS,
    LUSTRE_CAPACITY_QUOTA: DEFAULT_LUSTRE_GIB,
}


class QuotasFake:
    """Quota limits as the Cloud Quotas API reports them.

    Examples:
        >>> from rl_lustre.testing import FakeGCP
        >>> with FakeGCP() as gcp:
        ...     gcp.quotas.set_limit("GPUS-PER-GPU-FAMILY-per-project-region", 16,
        ...                          region="us-east1", gpu_family="NVIDIA_B200")
        ...     gcp.quotas.set_limit("GPUS-ALL-REGIONS-per-project", 8)
    """

    def __init__(self, core: Core) -> None:
        self.core = core
        self._limits: dict[str, dict[tuple[tuple[str, str], ...], int]] = {}
        self._dropped: set[str] = set()

    def reset(self) -> None:
        """Back to the generous defaults."""
        with self.core.lock:
            self._limits.clear()
            self._dropped.clear()

    def set_limit(self, quota_id: str, value: int, **dimensions: str) -> None:
        """Give ``quota_id`` the limit ``value`` for ``dimensions`` (none: its default entry)."""
        if quota_id not in _QUOTAS:
            raise ValueError(f"the fake knows the quotas {sorted(_QUOTAS)}, not {quota_id!r}")
        unknown = set(dimensions) - set(_QUOTAS[quota_id][4])
        if unknown:
            raise ValueError(f"{quota_id} has the dimensions {_QUOTAS[quota_id][4]}, not {sorted(unknown)}")
        with self.core.lock:
            self._limits.setdefault(quota_id, {})[tuple(sorted(dimensions.items()))] = int(value)

    def drop(self, quota_id: str) -> None:
        """Make the service have no quota ``quota_id`` (NOT_FOUND; left out of the list)."""
        with self.core.lock:
            self._dropped.add(quota_id)

    def register(self, server: GrpcServer) -> None:
        server.add(
            SERVICE,
            "GetQuotaInfo",
            "cloudquotas.GetQuotaInfo",
            self.get_quota_info,
            cloudquotas_v1.GetQuotaInfoRequest,
            cloudquotas_v1.QuotaInfo,
        )
        server.add(
            SERVICE,
            "ListQuotaInfos",
            "cloudquotas.ListQuotaInfos",
            self.list_quota_infos,
            cloudquotas_v1.ListQuotaInfosRequest,
            cloudquotas_v1.ListQuotaInfosResponse,
        )

    # -- handlers (under the core's lock) ------------------------------------------------

    def _info(self, project: str, quota_id: str) -> cloudquotas_v1.QuotaInfo:
        service, metric, display, unit, dims = _QUOTAS[quota_id]
        entries: list[cloudquotas_v1.DimensionsInfo] = []
        given = self._limits.get(quota_id, {})
        # The most specific entries first, as the API orders them; the default entry last.
        for key, value in sorted(given.items(), key=lambda kv: -len(kv[0])):
            if not key:
                continue
            named: Mapping[str, str] = dict(key)
            where = named.get("region") or named.get("zone")
            entries.append(
                cloudquotas_v1.DimensionsInfo(
                    dimensions=dict(named),
                    details=cloudquotas_v1.QuotaDetails(value=value),
                    applicable_locations=[where] if where else [],
                )
            )
        default = given.get((), _DEFAULTS[quota_id])
        entries.append(
            cloudquotas_v1.DimensionsInfo(
                dimensions={},
                details=cloudquotas_v1.QuotaDetails(value=default),
                applicable_locations=["global"] if not dims else [],
            )
        )
        return cloudquotas_v1.QuotaInfo(
            name=f"projects/{project}/locations/global/services/{service}/quotaInfos/{quota_id}",
            quota_id=quota_id,
            metric=metric,
            service=service,
            is_precise=True,
            container_type=cloudquotas_v1.QuotaInfo.ContainerType.PROJECT,
            dimensions=list(dims),
            metric_display_name=display,
            quota_display_name=display,
            metric_unit=unit,
            dimensions_infos=entries,
            service_request_quota_uri="https://console.cloud.google.com/iam-admin/quotas",
        )

    def get_quota_info(self, request: cloudquotas_v1.GetQuotaInfoRequest) -> cloudquotas_v1.QuotaInfo:
        m = _NAME.fullmatch(request.name)
        if m is None:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"name {request.name!r} must be projects/P/locations/global/services/S/quotaInfos/ID",
            )
        project, service, quota_id = m.groups()
        known = _QUOTAS.get(quota_id)
        if known is None or known[0] != service or quota_id in self._dropped:
            raise FakeError(grpc.StatusCode.NOT_FOUND, f"QuotaInfo {request.name} not found")
        return self._info(project, quota_id)

    def list_quota_infos(self, request: cloudquotas_v1.ListQuotaInfosRequest) -> cloudquotas_v1.ListQuotaInfosResponse:
        m = _PARENT.fullmatch(request.parent)
        if m is None:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"parent {request.parent!r} must be projects/P/locations/global/services/S",
            )
        project, service = m.groups()
        return cloudquotas_v1.ListQuotaInfosResponse(
            quota_infos=[
                self._info(project, q) for q, known in _QUOTAS.items() if known[0] == service and q not in self._dropped
            ]
        )
