"""The local backend's plan: a directory as the volume and a Ray head on this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..catalog import ownership_labels
from ..plankeys import RAY_HEAD_KEY, VOLUME_DIR_KEY
from .graph import Plan, PlannedResource
from .results import results_nodes

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["local_plan"]


def local_plan(cluster: ClusterSpec) -> Plan:
    if cluster.nemo_rl_path is not None:
        driver = f"NeMo-RL from {cluster.nemo_rl_path}"
    else:
        driver = "rehearsal (python -m rl_lustre.rehearsal: rehearses orchestration and storage, does not train)"
    resources = [
        PlannedResource(
            key=VOLUME_DIR_KEY,
            kind="local.Directory",
            name=cluster.mount_path,
            # Your checkpoints live here: created when missing, never deleted by down().
            action="use",
            settings={"path": cluster.mount_path, "created_if_missing": True},
        ),
        PlannedResource(
            key=RAY_HEAD_KEY,
            kind="local.RayHead",
            name=cluster.name,
            depends_on=(VOLUME_DIR_KEY,),
            settings={
                "bind": "127.0.0.1",
                "ports": "free loopback ports, chosen at up()",
                "temp_dir": "a fresh short temporary directory",
                "jobs": driver,
                "num_nodes": cluster.num_nodes,
                "gpus_per_node": cluster.gpus_per_node,
                "secrets": {
                    "names": list(cluster.secrets),
                    "source": "this process's environment at up(), passed to the head",
                },
            },
            labels=ownership_labels(cluster.name),
        ),
    ]
    resources += results_nodes(cluster)
    return Plan(cluster_name=cluster.name, backend="local", resources=resources)
