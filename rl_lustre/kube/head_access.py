"""What the Ray head may read of Kubernetes: a service account of its own, allowed to read the
pods and events of its namespace, and nothing else.

A stalled run's diagnostics bundle holds the Kubernetes events of the RayCluster's pods (an
OOM kill, a failed mount, a node's impending termination), read by the supervisor on the head
with its pod's in-cluster credentials (:mod:`rl_lustre.oncluster.kubeevents`). A pod's default
service account may read nothing, so the head runs as ``<cluster>-ray-head``
(:func:`rl_lustre.naming.head_account_name`), bound to a Role that may ``get`` and ``list``
``pods`` and ``events`` in the cluster's namespace: read only, in one namespace, two resources.
No remote call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import naming
from ..plankeys import HEAD_ACCOUNT_KEY, HEAD_BINDING_KEY, HEAD_ROLE_KEY

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["RULES", "head_access_manifests"]

RBAC = "rbac.authorization.k8s.io"
RULES: tuple[Mapping[str, Any], ...] = ({"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list"]},)


def head_access_manifests(cluster: ClusterSpec, labels: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The ServiceAccount, Role and RoleBinding, by plan key.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> objs = head_access_manifests(c, {})
        >>> [(m["kind"], m["metadata"]["name"]) for m in objs.values()]
        [('ServiceAccount', 'demo-ray-head'), ('Role', 'demo-ray-head'), ('RoleBinding', 'demo-ray-head')]
        >>> objs[HEAD_ROLE_KEY]["rules"]
        [{'apiGroups': [''], 'resources': ['pods', 'events'], 'verbs': ['get', 'list']}]
    """
    name, namespace = naming.head_account_name(cluster), cluster.namespace

    def meta() -> dict[str, Any]:
        return {"name": name, "namespace": namespace, "labels": dict(labels)}

    return {
        HEAD_ACCOUNT_KEY: {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta()},
        HEAD_ROLE_KEY: {
            "apiVersion": f"{RBAC}/v1",
            "kind": "Role",
            "metadata": meta(),
            "rules": [{k: list(v) for k, v in rule.items()} for rule in RULES],
        },
        HEAD_BINDING_KEY: {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": meta(),
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
        },
    }
