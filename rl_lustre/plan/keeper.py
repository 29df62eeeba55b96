"""The keeper's plan node: the Deployment outside the Ray head that resubmits the runs a lost head took.

One node (``keeper``) for the keeper's objects (:mod:`rl_lustre.kube.keeper`: ServiceAccount,
Role, RoleBinding, ConfigMap, Deployment), after the RayCluster (so before it on ``down()``,
which stops the keeper before it stops the runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import naming
from ..plankeys import KEEPER_KEY, RAYCLUSTER_KEY
from .graph import PlannedResource

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["keeper_node"]


def keeper_node(cluster: ClusterSpec, created: dict[str, Any]) -> PlannedResource:
    """The keeper's node of a GKE plan.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> node = keeper_node(c, {"action": "create", "labels": {}})
        >>> node.kind, node.name, node.depends_on, node.settings["rbac"]["rules"][0]["verbs"]
        ('apps/v1/Deployment', 'demo-keeper', ('raycluster',), ('get', 'list', 'watch'))
    """
    from ..kube.keeper import LOSS_WINDOW_SECONDS, MAX_LOSSES, POLL_SECONDS, keeper_rules
    from ..recovery.shipping import PACKAGE, shipped_files

    _, files = shipped_files()
    settings: dict[str, Any] = {
        "namespace": cluster.namespace,
        "image": cluster.image,
        "replicas": 1,
        "strategy": "Recreate: never two keepers at once",
        "node_pool": naming.cpu_pool_name(cluster),
        "command": f"python -m {PACKAGE}.keeper",
        "code": {
            "configmap": naming.keeper_code_name(cluster),
            "files": len(files),
            "kib": round(sum(len(c) for c in files.values()) / 1024),
        },
        "volume": {"claim": naming.pvc_name(cluster), "mount_path": cluster.mount_path},
        "rbac": {"service_account": naming.keeper_name(cluster), "rules": keeper_rules()},
        "watches": {"head_service": cluster.head_service, "every_seconds": POLL_SECONDS},
        "gives_up": f"on a run whose head was lost {MAX_LOSSES} times in {LOSS_WINDOW_SECONDS // 60} minutes, "
        "or whose max_restarts is used up",
    }
    return PlannedResource(
        key=KEEPER_KEY,
        kind="apps/v1/Deployment",
        name=naming.keeper_name(cluster),
        depends_on=(RAYCLUSTER_KEY,),
        settings=settings,
        **created,
    )
