"""What says that GPU capacity is not coming: the signals, and how Kubernetes shows them.

``up()`` reads these signals from this machine, from the Kubernetes events and
ProvisioningRequests of the deployment (:mod:`rl_lustre.provision.scaleup`,
:mod:`rl_lustre.provision.capacity`); no code on the cluster reads them. The Google
Cloud side (operation errors, node-pool conditions, instance-group errors) is classified
in :mod:`rl_lustre.gcp.stockouts` into the same :class:`Signal`.

A :class:`Signal` has a *kind* and a *scope*:

==============  ===================================================================
kind            meaning
==============  ===================================================================
``stockout``    the zone has no VMs of this kind now (waiting may help)
``quota``       a quota stops it (waiting does not help; the scope says which quota)
``reservation`` the reservation is missing, not READY or full
``backoff``     the autoscaler is backing off after a failed scale-up (the stock-out goes on)
``revoked``     capacity granted to a ProvisioningRequest was taken back
``expired``     a ProvisioningRequest's booking ran out before its pods were scheduled
``misconfigured`` no scale-up can help (node selector, pool size): a bug, not capacity
==============  ===================================================================

Scope: ``zone``, ``region``, ``global`` (every region) or ``lane`` (this pool only).

Sources of the texts: the cluster autoscaler's pod events as GKE emits them
(``TriggeredScaleUp``, ``FailedScaleUp`` "... failed: GCE out of resources",
``NotTriggerScaleUp`` "... in backoff after failed scale-up"), and the
ProvisioningRequest conditions of ``autoscaling.x-k8s.io/v1`` (kubernetes/autoscaler
``cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go``:
``Accepted``, ``Provisioned``, ``Failed``, ``BookingExpired``, ``CapacityRevoked``).

Examples:
    >>> s = classify_event("FailedScaleUp", "Node scale up in zones us-east1-b associated with this pod "
    ...                    "failed: GCE out of resources. Pod is at risk of not being scheduled.")
    >>> s.kind, s.scope, s.zone
    ('stockout', 'zone', 'us-east1-b')
    >>> classify_event("Scheduled", "Successfully assigned default/p to n") is None
    True
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "KINDS",
    "PR_ACCEPTED",
    "PR_BOOKING_EXPIRED",
    "PR_CAPACITY_REVOKED",
    "PR_FAILED",
    "PR_PROVISIONED",
    "SCOPES",
    "Signal",
    "classify_event",
    "provisioning_request_state",
]

KINDS = ("stockout", "quota", "reservation", "backoff", "revoked", "expired", "misconfigured")
SCOPES = ("zone", "region", "global", "lane")
# ProvisioningRequest condition types (autoscaling.x-k8s.io/v1).
PR_ACCEPTED = "Accepted"
PR_PROVISIONED = "Provisioned"
PR_FAILED = "Failed"
PR_BOOKING_EXPIRED = "BookingExpired"
PR_CAPACITY_REVOKED = "CapacityRevoked"

_ZONES_IN = re.compile(r"scale up in zones? ([a-z]+-[a-z]+[0-9]+-[a-z](?:\s*,\s*[a-z]+-[a-z]+[0-9]+-[a-z])*)")
_OUT_OF_RESOURCES = re.compile(
    r"out of resources|resource pool exhausted|stockout|does not have enough resources", re.IGNORECASE
)
_QUOTA = re.compile(r"quota", re.IGNORECASE)
_BACKOFF = re.compile(r"in backoff after failed scale-up", re.IGNORECASE)
_HOPELESS = re.compile(
    r"max node group size reached|didn't match Pod's node affinity/selector|"
    r"not ready for scale-up|Insufficient nvidia\.com/gpu",
    re.IGNORECASE,
)


@dataclasses.dataclass(frozen=True)
class Signal:
    """One observation that capacity is not coming.

    Attributes:
        kind: one of :data:`KINDS`.
        scope: one of :data:`SCOPES`.
        source: where it was seen (``"node-pool operation"``, ``"pod event"``,
            ``"ProvisioningRequest demo-flex-b-1"``, ``"instance group"``).
        code: the machine-readable code or reason (``"ZONE_RESOURCE_POOL_EXHAUSTED"``,
            ``"FailedScaleUp"``).
        message: the text as Google or Kubernetes gave it.
        zone: the zone it names, if any.
        zones_available: zones Google says have capacity (``zonesAvailable``), best first.
        at: when it was first seen (seconds since the epoch).
    """

    kind: str
    scope: str
    source: str
    code: str
    message: str
    zone: str | None = None
    zones_available: tuple[str, ...] = ()
    at: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Signal.kind={self.kind!r}: must be one of {', '.join(KINDS)}")
        if self.scope not in SCOPES:
            raise ValueError(f"Signal.scope={self.scope!r}: must be one of {', '.join(SCOPES)}")

    @property
    def waiting_helps(self) -> bool:
        """Whether waiting out the lane's ``wait`` can help (a stock-out), or the next
        lane should be tried at once (quota, reservation, revoked, misconfigured)."""
        return self.kind in ("stockout", "backoff", "expired")

    def short(self, limit: int = 160) -> str:
        """``source: code "message"`` in one line, the message cut to ``limit`` characters.

        Examples:
            >>> Signal("stockout", "zone", "pod event", "FailedScaleUp", "GCE out of resources").short()
            'pod event: FailedScaleUp "GCE out of resources"'
        """
        text = " ".join(self.message.split())
        if len(text) > limit:
            text = text[: limit - 1] + "…"
        return f'{self.source}: {self.code} "{text}"'

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"zones_available": list(self.zones_available)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signal:
        fields = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in fields}
        kw["zones_available"] = tuple(kw.get("zones_available") or ())
        return cls(**kw)


def classify_event(reason: str, message: str, *, source: str = "pod event", at: float | None = None) -> Signal | None:
    """The signal in a Kubernetes event of the cluster autoscaler on a pending pod, or None.

    Examples:
        >>> classify_event("FailedScaleUp", "Node scale up in zones us-east1-b associated with this pod "
        ...                "failed: GCE quota exceeded. Pod is at risk of not being scheduled.").kind
        'quota'
        >>> classify_event("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 in backoff after failed scale-up").kind
        'backoff'
        >>> classify_event("NotTriggerScaleUp", "pod didn't trigger scale-up: 2 node(s) didn't match Pod's "
        ...                "node affinity/selector").kind
        'misconfigured'
    """
    when = time.time() if at is None else at
    zones = _ZONES_IN.search(message)
    zone = zones.group(1).split(",")[0].strip() if zones else None
    if reason == "FailedScaleUp":
        if _QUOTA.search(message):
            return Signal("quota", "region", source, reason, message, zone=zone, at=when)
        if _OUT_OF_RESOURCES.search(message):
            return Signal("stockout", "zone", source, reason, message, zone=zone, at=when)
        # Another failed scale-up (IP space, an internal error): the lane cannot grow now.
        return Signal("stockout", "lane", source, reason, message, zone=zone, at=when)
    if reason == "NotTriggerScaleUp":
        if _BACKOFF.search(message):
            return Signal("backoff", "lane", source, reason, message, zone=zone, at=when)
        if _HOPELESS.search(message):
            return Signal("misconfigured", "lane", source, reason, message, zone=zone, at=when)
    return None


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conds: Iterable[Mapping[str, Any]] = (obj.get("status") or {}).get("conditions") or []
    return {str(c.get("type")): c for c in conds}


def provisioning_request_state(obj: Mapping[str, Any], *, at: float | None = None) -> tuple[str, Signal | None, str]:
    """``(state, signal, message)`` of a ProvisioningRequest.

    ``state`` is ``"pending"`` (no condition yet), ``"accepted"`` (queued; ``message``
    is what the autoscaler says, often an ETA), ``"provisioned"`` (capacity booked for
    its pods), or ``"failed"``, ``"revoked"``, ``"expired"`` with the signal that says why.

    Examples:
        >>> pr = {"metadata": {"name": "demo-flex-b-1"}, "status": {"conditions": [
        ...     {"type": "Accepted", "status": "True"},
        ...     {"type": "Failed", "status": "True", "reason": "ResizeRequestFailed", "message": "out of stock"}]}}
        >>> state, signal, _ = provisioning_request_state(pr)
        >>> state, signal.kind, signal.source
        ('failed', 'stockout', 'ProvisioningRequest demo-flex-b-1')
    """
    when = time.time() if at is None else at
    name = (obj.get("metadata") or {}).get("name", "?")
    source = f"ProvisioningRequest {name}"
    conds = _conditions(obj)

    def true(kind: str) -> Mapping[str, Any] | None:
        c = conds.get(kind)
        return c if c is not None and str(c.get("status")) == "True" else None

    for kind, state, signal_kind in (
        (PR_CAPACITY_REVOKED, "revoked", "revoked"),
        (PR_FAILED, "failed", "stockout"),
        (PR_BOOKING_EXPIRED, "expired", "expired"),
    ):
        c = true(kind)
        if c is not None:
            message = str(c.get("message") or c.get("reason") or kind)
            code = str(c.get("reason") or kind)
            signal_kind = "quota" if kind == PR_FAILED and _QUOTA.search(message) else signal_kind
            return state, Signal(signal_kind, "lane", source, code, message, at=when), message
    if true(PR_PROVISIONED):
        return "provisioned", None, str(conds[PR_PROVISIONED].get("message") or "")
    if true(PR_ACCEPTED):
        waiting = conds.get(PR_PROVISIONED) or conds[PR_ACCEPTED]
        return "accepted", None, str(waiting.get("message") or "")
    return "pending", None, ""
