"""What the Ray head may read of Kubernetes: a service account of its own, allowed to read the
pods and events of its namespace and to get Nodes, and nothing else.

The supervisor on the head reads Kubernetes with its pod's in-cluster credentials
(:mod:`rl_lustre.oncluster.incluster`) for two things:

- a stalled run's diagnostics bundle holds the Kubernetes events of the RayCluster's pods (an
  OOM kill, a failed mount, a node's impending termination: :mod:`rl_lustre.oncluster.kubeevents`);
- before each attempt, the end of the flex-start nodes it may run on, as GKE put it on their
  Nodes (:mod:`rl_lustre.oncluster.nodeends`): nodes a ComputeClass brings mid-run, long after
  ``up()`` read the first ones' ends, included.

A pod's default service account may read nothing, so the head runs as ``<cluster>-ray-head``
(:func:`rl_lustre.naming.head_account_name`), bound to a Role that may ``get`` and ``list``
``pods`` and ``events`` in the cluster's namespace, and to a ClusterRole that may ``get``
``nodes`` (Nodes are cluster-scoped: no Role can grant them). Read only, three resources; not
``list`` of Nodes (the supervisor knows the names of its nodes), nothing of Secrets or of any
other namespace. The ClusterRole and its binding are named after the namespace too
(:func:`rl_lustre.naming.head_nodes_role_name`), carry the deployment's labels like the rest,
and are deleted by ``down()`` only when they carry them. No remote call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import naming
from ..plankeys import (
    HEAD_ACCOUNT_KEY,
    HEAD_BINDING_KEY,
    HEAD_NODES_BINDING_KEY,
    HEAD_NODES_ROLE_KEY,
    HEAD_ROLE_KEY,
)

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["NODE_RULES", "RULES", "head_access_manifests"]

RBAC = "rbac.authorization.k8s.io"
RULES: tuple[Mapping[str, Any], ...] = ({"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list"]},)
# The ClusterRole's: get one Node by name, nothing else.
NODE_RULES: tuple[Mapping[str, Any], ...] = ({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},)


def head_access_manifests(cluster: ClusterSpec, labels: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The ServiceAccount, Role, RoleBinding, ClusterRole and ClusterRoleBinding, by plan key.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> objs = head_access_manifests(c, {})
        >>> [(m["kind"], m["metadata"]["name"]) for m in objs.values()]  # doctest: +NORMALIZE_WHITESPACE
        [('ServiceAccount', 'demo-ray-head'), ('Role', 'demo-ray-head'), ('RoleBinding', 'demo-ray-head'),
         ('ClusterRole', 'demo-ray-head.default'), ('ClusterRoleBinding', 'demo-ray-head.default')]
        >>> objs[HEAD_ROLE_KEY]["rules"]
        [{'apiGroups': [''], 'resources': ['pods', 'events'], 'verbs': ['get', 'list']}]
        >>> objs[HEAD_NODES_ROLE_KEY]["rules"]
        [{'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get']}]
    """
    name, namespace = naming.head_account_name(cluster), cluster.namespace
    cluster_wide = naming.head_nodes_role_name(cluster)
    subjects = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]

    def meta(of: str = name, *, namespaced: bool = True) -> dict[str, Any]:
        return {"name": of, **({"namespace": namespace} if namespaced else {}), "labels": dict(labels)}

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
            "subjects": subjects,
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
        },
        HEAD_NODES_ROLE_KEY: {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": meta(cluster_wide, namespaced=False),
            "rules": [{k: list(v) for k, v in rule.items()} for rule in NODE_RULES],
        },
        HEAD_NODES_BINDING_KEY: {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta(cluster_wide, namespaced=False),
            "subjects": [dict(s) for s in subjects],
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": cluster_wide},
        },
    }
