"""ProvisioningRequests (``autoscaling.x-k8s.io/v1``) and PodTemplates, and the cluster
autoscaler's queued provisioning as :class:`~rl_lustre.testing.kube.KubeFake` simulates it.

A ProvisioningRequest of class ``queued-provisioning.gke.io`` names a PodTemplate (whose
``nodeSelector`` names the flex-start node pool) and a count. Each pass, for every
request not yet ``Provisioned`` or ``Failed``: ``Accepted`` is set, then the *decider*
(``KubeFake.provisioning``, set by ``FakeGCP(kube=...)`` from its capacity model; by
default every request is granted at once) says ``wait``, ``granted`` (with the Nodes to
register: ``Provisioned`` True), ``failed`` (``Failed`` True with the message) or ``busy``
(no answer yet: nothing changes until the next pass), as the
condition types of kubernetes/autoscaler's ``provisioningrequest`` API say. Deleting the
request takes nothing else away (its nodes go with their pool). A granted node of a request
with ``parameters.maxRunDurationSeconds`` (GKE's "Run a large-scale workload with flex-start
with queued provisioning": its nodes live that long) carries the time GKE ends it, as its
flex-start nodes do (:data:`rl_lustre.catalog.GKE_TERMINATION_ANNOTATION`; see
:mod:`rl_lustre.testing._kube_node_groups`).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

from ..catalog import GKE_NODEPOOL_LABEL, GKE_TERMINATION_ANNOTATION
from ._kube_kinds import KindInfo, register_kind
from ._kube_store import Obj, Store, now_rfc3339

__all__ = ["Decider", "ProvisioningRequests"]

register_kind(KindInfo("PodTemplate", "v1", "podtemplates", True))
register_kind(
    KindInfo("ProvisioningRequest", "autoscaling.x-k8s.io/v1", "provisioningrequests", True, status=True, builtin=False)
)

# (pool, count, asked_at) -> ("wait" | "granted" | "failed" | "busy", message, nodes to register)
Decider = Callable[[str, int, float], tuple[str, str, list[Obj]]]


def _granted_at_once(pool: str, count: int, asked_at: float) -> tuple[str, str, list[Obj]]:
    return "granted", "Provisioning Request was successfully provisioned.", []


class ProvisioningRequests:
    """The queued-provisioning side of the cluster autoscaler (see the module's doc)."""

    def __init__(self, store: Store, register: Callable[[Obj], Obj]) -> None:
        self.store = store
        # How a granted Node joins the cluster (Controller.register_node: Ready, with its Events).
        self.register = register
        self.decide: Decider | None = None
        self._asked: dict[str, float] = {}

    def step(self) -> None:
        for pr in self.store.find("ProvisioningRequest"):
            meta = pr["metadata"]
            conds = {c.get("type"): c for c in (pr.get("status") or {}).get("conditions") or []}
            if any(conds.get(t, {}).get("status") == "True" for t in ("Provisioned", "Failed")):
                continue
            key = f"{meta.get('namespace')}/{meta['name']}/{meta.get('uid')}"
            asked = self._asked.setdefault(key, time.monotonic())
            pod_sets = (pr.get("spec") or {}).get("podSets") or [{}]
            ref = (pod_sets[0].get("podTemplateRef") or {}).get("name", "")
            template = self.store.get("PodTemplate", meta.get("namespace"), ref)
            selector = (((template or {}).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
            pool = selector.get(GKE_NODEPOOL_LABEL, "")
            if template is None or not pool:
                self._set(
                    pr,
                    "Failed",
                    "PodTemplateNotFound",
                    f"PodTemplate {ref!r} with a {GKE_NODEPOOL_LABEL} nodeSelector not found",
                )
                continue
            if "Accepted" not in conds:
                self._set(pr, "Accepted", "ProvisioningRequestAccepted", "Provisioning Request was accepted")
            state, message, nodes = (self.decide or _granted_at_once)(pool, int(pod_sets[0].get("count") or 0), asked)
            if state == "busy":  # no answer yet (see _kube_autoscaler): asked again next pass
                continue
            if state == "granted":
                run = ((pr.get("spec") or {}).get("parameters") or {}).get("maxRunDurationSeconds")
                for node in nodes:
                    if self.store.get("Node", None, node["metadata"]["name"]) is None:
                        if run:
                            end = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=float(run))
                            stamp = end.isoformat(timespec="seconds").replace("+00:00", "Z")
                            node["metadata"].setdefault("annotations", {})[GKE_TERMINATION_ANNOTATION] = stamp
                        self.register(node)
                self._set(pr, "Provisioned", "Provisioned", message)
            elif state == "failed":
                self._set(pr, "Failed", "ResizeRequestFailed", message)
            else:
                self._set(pr, "Provisioned", "Waiting", message, status="False")

    def _set(self, pr: Obj, kind: str, reason: str, message: str, *, status: str = "True") -> None:
        def change(o: Obj) -> None:
            st = o.setdefault("status", {})
            conds: list[dict[str, Any]] = [c for c in st.get("conditions") or [] if c.get("type") != kind]
            old = next((c for c in st.get("conditions") or [] if c.get("type") == kind), None)
            stamp = old["lastTransitionTime"] if old and old.get("status") == status else now_rfc3339()
            conds.append(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": stamp,
                    "observedGeneration": o["metadata"].get("generation", 1),
                }
            )
            st["conditions"] = conds

        meta = pr["metadata"]
        self.store.update("ProvisioningRequest", meta.get("namespace"), meta["name"], change)
