"""Stock-outs and capacity quotas as Google Cloud reports them, in one place.

:func:`classify_gcp` turns a code and a message from a GKE operation, a node pool's
status conditions or a managed instance group's errors into a
:class:`~rl_lustre.kube.capacity_signals.Signal` (the same type the Kubernetes side
produces). :mod:`rl_lustre.gcp._errors` uses :data:`STOCKOUT` and :func:`classify_gcp` to
raise :class:`~rl_lustre.errors.StockoutError` for a stock-out.

The texts (sources):

- GKE node-pool operation: "Google Compute Engine: Not all instances running in IGM after
  14.69s. Expected 1, running 0, transitioning 1. Current errors: [GCE_STOCKOUT]: Instance
  '…' creation failed: The zone '…' does not have enough resources available to fulfill
  the request.  Try a different zone, or try again later" (tranquilitybase-io/tb-gcp#589);
  ``NodePool.conditions[].code`` ``GCE_STOCKOUT`` / ``GCE_QUOTA_EXCEEDED`` (container v1
  ``StatusCondition.Code``).
- Compute: ``ZONE_RESOURCE_POOL_EXHAUSTED``, ``ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS``
  with "Consider trying your request in the us-central1-a, us-central1-f zone(s)"
  (kubernetes/k8s.io#9834); the codes cluster-autoscaler's GCE provider counts as out of
  resources (``RESOURCE_POOL_EXHAUSTED``, ``INSUFFICIENT_CAPACITY``, any code containing
  ``QUOTA``) and its reservation messages (``autoscaling_gce_client.go``).
- Quota: "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally." and "Quota
  'PREEMPTIBLE_NVIDIA_B200_GPUS' exceeded. Limit: 0.0 in region us-east1."

Examples:
    >>> s = classify_gcp("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    ...                  "The zone 'projects/p/zones/us-central1-b' does not have enough resources available "
    ...                  "to fulfill the request. Consider trying your request in the us-central1-a, "
    ...                  "us-central1-f zone(s), which currently has capacity", source="instance group")
    >>> s.kind, s.scope, s.zone, s.zones_available
    ('stockout', 'zone', 'us-central1-b', ('us-central1-a', 'us-central1-f'))
    >>> classify_gcp("QUOTA_EXCEEDED", "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally.").scope
    'global'
"""

from __future__ import annotations

import re
import time

from ..kube.capacity_signals import Signal

__all__ = ["QUOTA", "STOCKOUT", "classify_gcp"]

STOCKOUT = re.compile(
    r"ZONE_RESOURCE_POOL_EXHAUSTED|RESOURCE_POOL_EXHAUSTED|GCE_STOCKOUT|STOCKOUT|INSUFFICIENT_CAPACITY|"
    r"insufficientCapacity|does not have enough resources|resource pool exhausted|not enough resources available|"
    r"GCE out of resources",
    re.IGNORECASE,
)
QUOTA = re.compile(r"quota|QUOTA_EXCEEDED", re.IGNORECASE)
_RESERVATION = re.compile(
    r"requires reservation to be in READY state|Specified reservations? .* do(?:es)? not exist|"
    r"Specified reservation .* does not have available resources|No available resources in specified reservations",
    re.IGNORECASE,
)
_ZONE = re.compile(r"zones?[ /']+(?:projects/[^/]+/zones/)?([a-z]+-[a-z]+[0-9]+-[a-z])\b")
_AVAILABLE = re.compile(r"trying your request in the ((?:[a-z]+-[a-z]+[0-9]+-[a-z](?:,\s*)?)+) zone")
_GLOBAL = re.compile(r"GPUS_ALL_REGIONS|GPUS-ALL-REGIONS|\bglobally\b", re.IGNORECASE)


def classify_gcp(
    code: str | None, message: str, *, source: str = "operation", zone: str | None = None, at: float | None = None
) -> Signal | None:
    """The capacity signal in a Google Cloud error code and message, or None for any
    other failure.

    Args:
        code: the error or condition code (may be empty).
        message: its text.
        source: where it was seen, for the report.
        zone: the zone of the resource, when the text does not name it.
        at: when it was seen (default: now).
    """
    text = f"{code or ''} {message}"
    when = time.time() if at is None else at
    named = _ZONE.search(message)
    where = named.group(1) if named else zone
    if _RESERVATION.search(text):
        return Signal("reservation", "lane", source, code or "RESERVATION", message, zone=where, at=when)
    if STOCKOUT.search(text):
        available = _AVAILABLE.search(message)
        zones = tuple(z.strip() for z in available.group(1).split(",") if z.strip()) if available else ()
        return Signal(
            "stockout", "zone", source, code or "STOCKOUT", message, zone=where, zones_available=zones, at=when
        )
    if QUOTA.search(text):
        scope = "global" if _GLOBAL.search(text) else "region"
        return Signal("quota", scope, source, code or "QUOTA_EXCEEDED", message, zone=where, at=when)
    return None
