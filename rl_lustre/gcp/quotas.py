"""Quota limits read through the Cloud Quotas API (``google.api.cloudquotas.v1.CloudQuotas``).

Google counts the newer GPU families (B200, H200, H100) in Compute Engine's
``GPUS_PER_GPU_FAMILY`` quota (dimensions ``gpu_family`` and ``region``; its Spot and
flex-start twin ``PREEMPTIBLE_GPUS_PER_GPU_FAMILY``) with ``GPUS_ALL_REGIONS`` on top, and
Compute's own ``regions.get`` does not list them: the Cloud Quotas API is where they are.
Managed Lustre's capacity quotas are there too (service ``lustre.googleapis.com``).

Two calls, read-only (``roles/cloudquotas.viewer``):

- ``GetQuotaInfo``: one quota by id, with its limit per combination of dimensions;
- ``ListQuotaInfos``: every quota of a service.

The API reports limits, not usage.

Example::

    info = CloudQuotas().quota_info("my-project", "compute.googleapis.com",
                                    "GPUS-PER-GPU-FAMILY-per-project-region")
    info.limit({"gpu_family": "NVIDIA_B200", "region": "us-east1"})   # 64, or None
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import NotFoundError
from . import _clients
from ._errors import Api, Call, RetryPolicy, call

__all__ = ["CLOUD_QUOTAS", "CloudQuotas", "QuotaInfo", "QuotaLimit"]

logger = logging.getLogger("rl_lustre.gcp.quotas")

CLOUD_QUOTAS = Api("Cloud Quotas API", "cloudquotas.googleapis.com", "roles/cloudquotas.viewer")


@attrs.frozen
class QuotaLimit:
    """The limit in force for one combination of dimensions.

    Attributes:
        dimensions: the dimensions it is for (``{"gpu_family": "NVIDIA_B200", "region": "us-east1"}``);
            a dimension left out means "every other value".
        value: the limit (-1: unlimited, as the API writes it).
        locations: the regions or zones it applies to (``("global",)`` for a global quota).
    """

    dimensions: Mapping[str, str]
    value: int
    locations: tuple[str, ...] = ()


@attrs.frozen
class QuotaInfo:
    """One quota: its id, metric, display name and limits by dimensions."""

    service: str
    quota_id: str
    metric: str
    display_name: str
    unit: str
    dimension_names: tuple[str, ...]
    limits: tuple[QuotaLimit, ...]
    request_uri: str = ""

    def limit(self, dimensions: Mapping[str, str]) -> int | None:
        """The limit for ``dimensions`` (``{"region": ..., "gpu_family": ...}``), or None.

        The most specific entry wins: one naming every dimension asked for, else one whose
        named dimensions all match (the API lists entries "from more specific to less").
        A ``region`` or ``zone`` asked for also matches an entry whose locations list it.

        Examples:
            >>> info = QuotaInfo("compute.googleapis.com", "Q", "m", "Q", "1", ("region", "gpu_family"), (
            ...     QuotaLimit({"region": "us-east1", "gpu_family": "NVIDIA_B200"}, 64, ("us-east1",)),
            ...     QuotaLimit({"gpu_family": "NVIDIA_B200"}, 8, ("us-central1", "us-east4")),
            ...     QuotaLimit({}, 0, ())))
            >>> info.limit({"region": "us-east1", "gpu_family": "NVIDIA_B200"})
            64
            >>> info.limit({"region": "us-east4", "gpu_family": "NVIDIA_B200"})
            8
            >>> info.limit({"region": "us-east4", "gpu_family": "NVIDIA_H200"})
            0
        """
        best: tuple[int, int] | None = None
        for entry in self.limits:
            if any(dimensions.get(k) != v for k, v in entry.dimensions.items()):
                continue
            for where in ("region", "zone"):
                asked = dimensions.get(where)
                if (
                    asked
                    and where not in entry.dimensions
                    and entry.locations
                    and "global" not in entry.locations
                    and asked not in entry.locations
                ):
                    break
            else:
                score = len(entry.dimensions)
                if best is None or score > best[0]:
                    best = (score, entry.value)
        return None if best is None else best[1]


def _info(message: Any) -> QuotaInfo:
    return QuotaInfo(
        service=message.service,
        quota_id=message.quota_id,
        metric=message.metric,
        display_name=message.quota_display_name or message.quota_id,
        unit=message.metric_unit,
        dimension_names=tuple(message.dimensions),
        limits=tuple(
            QuotaLimit(dict(d.dimensions), int(d.details.value), tuple(d.applicable_locations))
            for d in message.dimensions_infos
        ),
        request_uri=message.service_request_quota_uri,
    )


class CloudQuotas:
    """Read-only quota limits of a project.

    Args:
        client: a ``cloudquotas_v1.CloudQuotasClient``; by default the cached one.
        retry: retries of transient failures.
    """

    def __init__(self, client: Any = None, *, retry: RetryPolicy | None = None) -> None:
        self._client = client
        self._retry = retry

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else _clients.cloud_quotas()

    def quota_info(self, project: str, service: str, quota_id: str) -> QuotaInfo | None:
        """The quota ``quota_id`` of ``service`` for ``project``; None if the service has none such."""
        name = f"projects/{project}/locations/global/services/{service}/quotaInfos/{quota_id}"
        try:
            found = call(
                Call(CLOUD_QUOTAS, "get", f"quota {quota_id} of {service} in projects/{project}"),
                self.client.get_quota_info,
                name=name,
                policy=self._retry,
            )
        except NotFoundError:
            return None
        return _info(found)

    def quota_infos(self, project: str, service: str) -> list[QuotaInfo]:
        """Every quota of ``service`` for ``project``."""
        parent = f"projects/{project}/locations/global/services/{service}"

        def fetch() -> list[Any]:
            return list(self.client.list_quota_infos(parent=parent))

        found = call(
            Call(CLOUD_QUOTAS, "list", f"quotas of {service} in projects/{project}"), fetch, policy=self._retry
        )
        return [_info(m) for m in found]
