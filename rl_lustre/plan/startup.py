"""The plan nodes that overlap what the reference workflow does in sequence before step 1.

The reference workflow pulls the multi-GB image on every GPU node only when the
RayCluster's pods start, and NeMo-RL downloads the model only when the job starts. Two
nodes move that work earlier, onto branches of the graph that would otherwise wait::

    cpu-pool, gpu-pool ─ image-prepull  (every GPU node, and the head's CPU node, pulls the image
                                         while Lustre is created; removed once the RayCluster's
                                         workers run. With a preload image the GPU nodes boot
                                         with the image: only the CPU pool pre-pulls)
    pvc, cpu-pool, secret ─ model-prefetch   (the model into $HF_HOME on the volume, on the CPU
                                         pool, while the RayCluster starts)

``up()`` returns when both are done, so a job submitted after it starts on a warm image
and a filled cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import ownership_labels
from ..kube.prepull import prepull_node_count, prepull_pools
from ..nemo_rl.caches import nemo_rl_cache_env
from ..plankeys import (
    CPU_POOL_KEY,
    GPU_POOL_KEY,
    IMAGE_PREPULL_KEY,
    MODEL_PREFETCH_KEY,
    PRELOAD_IMAGE_KEY,
    PVC_KEY,
    SECRET_KEY,
)
from .graph import PlannedResource
from .warmstart import import_keys

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["startup_nodes"]


def startup_nodes(cluster: ClusterSpec) -> list[PlannedResource]:
    """The image pre-pull and model prefetch nodes of a GKE plan (none when switched off).

    Examples:
        >>> import attrs
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> [(n.key, n.kind, n.depends_on) for n in startup_nodes(c)]  # doctest: +NORMALIZE_WHITESPACE
        [('image-prepull', 'apps/v1/DaemonSet', ('cpu-pool',)),
         ('model-prefetch', 'batch/v1/Job', ('pvc', 'cpu-pool', 'secret'))]
        >>> [n.depends_on for n in startup_nodes(attrs.evolve(c, preload_image=False))][0]
        ('cpu-pool', 'gpu-pool')
    """
    created: dict[str, Any] = {"action": "create", "labels": {**ownership_labels(cluster.name), **cluster.labels}}
    nodes = []
    if cluster.prepull_image and prepull_pools(cluster):
        why = (
            {
                "gpu_nodes": f"boot with the image preloaded ({PRELOAD_IMAGE_KEY}): not pre-pulled",
                "cpu_pool": "created with the cluster, it does not wait for the preload image: pre-pulled",
            }
            if cluster.preload_image
            else {}
        )
        nodes.append(
            PlannedResource(
                key=IMAGE_PREPULL_KEY,
                kind="apps/v1/DaemonSet",
                name=naming.prepull_name(cluster),
                depends_on=(CPU_POOL_KEY,) if cluster.preload_image else (CPU_POOL_KEY, GPU_POOL_KEY),
                settings={
                    "namespace": cluster.namespace,
                    "image": cluster.image,
                    "runs_on": prepull_pools(cluster),
                    "nodes": prepull_node_count(cluster),
                    **why,
                    "pod": "the image itself running 'sleep infinity': no GPU, 1m CPU and 8Mi requested",
                    "done_when": "every node of those pools holds the image, and the RayCluster's workers run",
                    "removed": "once the RayCluster's workers run: they hold the image from then on",
                },
                **created,
            )
        )
    if cluster.prefetch_models:
        deps = (PVC_KEY, CPU_POOL_KEY, *((SECRET_KEY,) if cluster.secrets else ()), *import_keys(cluster))
        token = (
            f"HF_TOKEN from Secret {naming.secret_name(cluster)} (secretKeyRef)"
            if "HF_TOKEN" in cluster.secrets
            else "none: public models only (add HF_TOKEN to Cluster.secrets for gated ones)"
        )
        nodes.append(
            PlannedResource(
                key=MODEL_PREFETCH_KEY,
                kind="batch/v1/Job",
                name=naming.prefetch_name(cluster),
                depends_on=deps,
                settings={
                    "namespace": cluster.namespace,
                    "models": list(cluster.prefetch_models),
                    "into": nemo_rl_cache_env(cluster.mount_path)["HF_HOME"],
                    "image": cluster.image,
                    "tool": "the image's python and huggingface_hub (snapshot_download)",
                    "node_pool": naming.cpu_pool_name(cluster),
                    "token": token,
                    "skips": "models a finished prefetch already put in the cache"
                    + (
                        " (or the warm-start import brought); no Job at all when the import brought every model whole"
                        if cluster.warm_start
                        else ""
                    ),
                    "done_when": "the Job is Complete; jobs submitted after up() find the models on the volume",
                },
                **created,
            )
        )
    return nodes
