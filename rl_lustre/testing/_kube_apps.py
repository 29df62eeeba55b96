"""Deployments and ReplicaSets for :class:`~rl_lustre.testing.kube.KubeFake`, as
kube-controller-manager's deployment and replicaset controllers run them (the keeper's
Deployment, :mod:`rl_lustre.kube.keeper`).

A Deployment gets a ReplicaSet per pod template (``<name>-<pod-template-hash>``, the hash in
its labels and its pods'), which keeps ``replicas`` pods (``<rs>-<suffix>``). ``Recreate``
scales the old ReplicaSets to zero and waits for their pods to go before the new one makes
any; ``RollingUpdate`` makes the new one's at once. Statuses as the controllers write them
(``replicas``, ``readyReplicas``, ``availableReplicas``, ``updatedReplicas``, the
``Available`` and ``Progressing`` conditions). The ServiceAccount, ConfigMap, Role and
RoleBinding the keeper also has are stored as sent (nothing runs them here).
"""

from __future__ import annotations

import copy
import hashlib
import json

from ._kube_controller import Controller, condition, pod_ready, same_conditions
from ._kube_kinds import KindInfo, pod_merge_keys, register_kind
from ._kube_store import ApiError, Obj, Store, labels_of, owned_by, owner_reference, random_suffix

__all__ = ["Apps", "admit"]

HASH_LABEL = "pod-template-hash"

for _info in (
    KindInfo("ServiceAccount", "v1", "serviceaccounts", True, ("sa",)),
    KindInfo("ConfigMap", "v1", "configmaps", True, ("cm",)),
    KindInfo("Role", "rbac.authorization.k8s.io/v1", "roles", True),
    KindInfo("RoleBinding", "rbac.authorization.k8s.io/v1", "rolebindings", True),
    KindInfo(
        "Deployment",
        "apps/v1",
        "deployments",
        True,
        ("deploy",),
        status=True,
        merge_keys=pod_merge_keys("spec.template.spec"),
    ),
    KindInfo(
        "ReplicaSet",
        "apps/v1",
        "replicasets",
        True,
        ("rs",),
        status=True,
        merge_keys=pod_merge_keys("spec.template.spec"),
    ),
):
    register_kind(_info)


def admit(obj: Obj) -> None:
    """What the API server fills in or rejects when a Deployment or ReplicaSet is created."""
    spec, name, kind = obj.setdefault("spec", {}), obj["metadata"]["name"], obj["kind"]
    wanted = (spec.get("selector") or {}).get("matchLabels") or {}
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not wanted:
        raise ApiError(422, "Invalid", f'{kind}.apps "{name}" is invalid: spec.selector: Required value')
    if any(labels.get(k) != v for k, v in wanted.items()):
        raise ApiError(
            422,
            "Invalid",
            f'{kind}.apps "{name}" is invalid: spec.template.metadata.labels: Invalid value: '
            "`selector` does not match template `labels`",
        )
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    if kind == "Deployment":
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault(
            "strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
        )
    obj["status"] = {}


def _template_hash(template: Obj) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


class Apps(Controller):
    """The deployment and replicaset controllers."""

    def install(self, store: Store) -> None:
        store.admission.update(dict.fromkeys(("Deployment", "ReplicaSet"), admit))

    def step(self) -> None:
        for deployment in self.store.find("Deployment"):
            if not deployment["metadata"].get("deletionTimestamp"):
                self._deployment(deployment)
        for rs in self.store.find("ReplicaSet"):
            if not rs["metadata"].get("deletionTimestamp"):
                self._replicaset(rs)

    def _owned(self, kind: str, owner: Obj) -> list[Obj]:
        meta = owner["metadata"]
        return [
            o
            for o in self.store.find(kind, meta.get("namespace"), lambda o: owned_by(o, meta["uid"]))
            if not o["metadata"].get("deletionTimestamp")
        ]

    def _deployment(self, d: Obj) -> None:
        meta, spec = d["metadata"], d["spec"]
        ns = meta.get("namespace") or "default"
        template = copy.deepcopy(spec.get("template") or {})
        digest = _template_hash(template)
        sets = self._owned("ReplicaSet", d)
        current = next((rs for rs in sets if labels_of(rs).get(HASH_LABEL) == digest), None)
        old = [rs for rs in sets if rs is not current]
        want = int(spec.get("replicas", 1))
        recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
        for rs in old:
            if int(rs["spec"].get("replicas", 0)):
                self.store.update(
                    "ReplicaSet", ns, rs["metadata"]["name"], lambda o: o["spec"].__setitem__("replicas", 0)
                )
        old_pods = [p for rs in old for p in self._owned("Pod", rs)]
        if current is None and not (recreate and old_pods):
            labels = {**((template.get("metadata") or {}).get("labels") or {}), HASH_LABEL: digest}
            template.setdefault("metadata", {})["labels"] = labels
            name = f"{meta['name']}-{digest}"
            self.store.create(
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "metadata": {
                        "name": name,
                        "namespace": ns,
                        "labels": labels,
                        "ownerReferences": [owner_reference(d)],
                    },
                    "spec": {
                        "replicas": want,
                        "selector": {
                            "matchLabels": {**(spec.get("selector") or {}).get("matchLabels", {}), HASH_LABEL: digest}
                        },
                        "template": template,
                    },
                }
            )
            self.event(
                d,
                "ScalingReplicaSet",
                f"Scaled up replica set {name} from 0 to {want}",
                component="deployment-controller",
            )
        elif current is not None and int(current["spec"].get("replicas", 0)) != want:
            self.store.update(
                "ReplicaSet", ns, current["metadata"]["name"], lambda o: o["spec"].__setitem__("replicas", want)
            )
        pods = [p for rs in sets for p in self._owned("Pod", rs)]
        updated = self._owned("Pod", current) if current is not None else []
        ready = sum(1 for p in pods if pod_ready(p))
        status: Obj = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": len(pods),
            "updatedReplicas": len(updated),
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        if len(pods) - ready:
            status["unavailableReplicas"] = len(pods) - ready
        available = ready >= want
        conditions = [
            condition(
                "Available",
                available,
                "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
            ),
            condition("Progressing", True, "NewReplicaSetAvailable" if available else "ReplicaSetUpdated"),
        ]
        status["conditions"] = same_conditions((d.get("status") or {}).get("conditions") or [], conditions)
        status = {k: v for k, v in status.items() if v != 0 or k == "observedGeneration"}
        if d.get("status") != status:
            self.store.update("Deployment", ns, meta["name"], lambda o: o.__setitem__("status", status))

    def _replicaset(self, rs: Obj) -> None:
        meta, spec = rs["metadata"], rs["spec"]
        ns = meta.get("namespace") or "default"
        pods = [
            p for p in self._owned("Pod", rs) if (p.get("status") or {}).get("phase") not in ("Failed", "Succeeded")
        ]
        for p in self._owned("Pod", rs):
            if (p.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
                self.store.mark_deleted("Pod", ns, p["metadata"]["name"], foreground=False)
        want = int(spec.get("replicas", 0))
        template = spec.get("template") or {}
        for _ in range(want - len(pods)):
            name = f"{meta['name']}-{random_suffix()}"
            pod_spec = copy.deepcopy(template.get("spec") or {})
            pod_spec.setdefault("restartPolicy", "Always")
            self.store.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": ns,
                        "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                        "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                        "ownerReferences": [owner_reference(rs)],
                    },
                    "spec": pod_spec,
                }
            )
            self.event(rs, "SuccessfulCreate", f"Created pod: {name}", component="replicaset-controller")
        for p in sorted(pods, key=lambda p: p["metadata"]["name"])[want:]:
            self.store.mark_deleted("Pod", ns, p["metadata"]["name"], foreground=False)
            self.event(
                rs, "SuccessfulDelete", f"Deleted pod: {p['metadata']['name']}", component="replicaset-controller"
            )
        ready = sum(1 for p in pods if pod_ready(p))
        status = {"replicas": min(len(pods), max(want, len(pods))), "observedGeneration": meta.get("generation", 1)}
        if ready:
            status.update(readyReplicas=ready, availableReplicas=ready)
        if rs.get("status") != status:
            self.store.update("ReplicaSet", ns, meta["name"], lambda o: o.__setitem__("status", status))
