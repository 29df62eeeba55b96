"""The Kubernetes objects that shorten the time to the first training step, as plain dicts,
and how to read their progress.

- :func:`prepull_daemonset`: an ``apps/v1`` DaemonSet on the GPU pool (and the CPU pool,
  where the Ray head and the prefetch Job need the same image) whose only container is
  the job image doing nothing (``sleep infinity``, a few MiB, no GPU): each node pulls the
  multi-GB image as soon as the GPU pool exists, while Lustre is still being created. Its
  pod on a node is Ready once the image is there. It is removed once the RayCluster's
  workers run (they hold the image from then on).
- :func:`prefetch_job`: a ``batch/v1`` Job on the CPU pool that downloads the cluster's
  ``prefetch_models`` into the volume's Hugging Face cache with the image's own Python and
  ``huggingface_hub`` (:mod:`rl_lustre.kube.prefetch`), ``HF_TOKEN`` from the Secret
  (``secretKeyRef``), skipping what the cache already holds.

No remote call and no Kubernetes client import here; the drivers in
:mod:`rl_lustre.provision.startup` apply, watch and delete them.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import naming
from ..nemo_rl.caches import nemo_rl_cache_env
from . import prefetch
from .manifests import deployment_labels

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = [
    "MODELS_ANNOTATION",
    "daemonset_progress",
    "job_state",
    "models_of",
    "pod_problem",
    "prefetch_command",
    "prefetch_job",
    "prepull_daemonset",
    "prepull_node_count",
    "prepull_pools",
]

MODELS_ANNOTATION = "rl-lustre/prefetch-models"
_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
_PREPULL_LABEL = "rl-lustre/prepull"
_LUSTRE_VOLUME = "lustre-storage"
# A retried pod resumes the download where the last one stopped.
PREFETCH_BACKOFF_LIMIT = 2
# Waiting reasons that no amount of waiting fixes.
_HOPELESS = ("InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError")
_MISSING_IMAGE = ("not found", "manifest unknown", "repository does not exist")


def prefetch_command(python: str = "python") -> list[str]:
    """The container command of the prefetch Job: the prefetch program as ``python -c``.

    Examples:
        >>> cmd = prefetch_command()
        >>> cmd[:2], "def fetch(" in cmd[2]
        (['python', '-c'], True)
    """
    return [python, "-c", inspect.getsource(prefetch)]


def prepull_daemonset(cluster: ClusterSpec) -> dict[str, Any]:
    """The image pre-pull DaemonSet for ``cluster``'s GPU and CPU pools.

    Examples:
        >>> from rl_lustre import Cluster
        >>> ds = prepull_daemonset(Cluster(name="demo", project="my-project", region="us-east1",
        ...                                zone="us-east1-b"))
        >>> pod = ds["spec"]["template"]["spec"]
        >>> pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        [{'matchExpressions': [{'key': 'cloud.google.com/gke-nodepool', 'operator': 'In', 'values': ['gpu-pool', 'ray-head-pool']}]}]
        >>> pod["containers"][0]["image"]
        'nvcr.io/nvidia/nemo-rl:v0.4.0'
    """
    labels = deployment_labels(cluster)
    name = naming.prepull_name(cluster)
    selector = {_PREPULL_LABEL: name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "template": {
                "metadata": {"labels": {**labels, **selector}},
                "spec": {
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{
                            "key": _NODEPOOL_LABEL, "operator": "In",
                            "values": prepull_pools(cluster)}]}]}}},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "pull",
                        "image": cluster.image,
                        "imagePullPolicy": "IfNotPresent",
                        # Holds the image on the node; asks for no GPU and almost nothing else.
                        "command": ["sleep", "infinity"],
                        "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"memory": "64Mi"}},
                    }],
                },
            },
        },
    }


def prepull_pools(cluster: ClusterSpec) -> list[str]:
    """The node pools whose nodes pre-pull the image: the GPU pool, and the CPU pool when
    the Ray head runs there."""
    pools = [naming.gpu_pool_name(cluster)]
    if not cluster.head_on_gpu_pool:
        pools.append(naming.cpu_pool_name(cluster))
    return pools


def prepull_node_count(cluster: ClusterSpec) -> int:
    """How many nodes the pre-pull covers once the pools are up (the CPU pool has one node)."""
    return cluster.num_nodes + (0 if cluster.head_on_gpu_pool else 1)


def prefetch_job(cluster: ClusterSpec) -> dict[str, Any]:
    """The model prefetch Job for ``cluster`` (its ``prefetch_models``).

    Examples:
        >>> from rl_lustre import Cluster
        >>> job = prefetch_job(Cluster(name="demo", project="my-project", region="us-east1",
        ...                            zone="us-east1-b"))
        >>> c = job["spec"]["template"]["spec"]["containers"][0]
        >>> c["args"], [e["valueFrom"]["secretKeyRef"]["key"] for e in c["env"] if "valueFrom" in e]
        (['Qwen/Qwen2.5-72B-Instruct'], ['HF_TOKEN'])
    """
    labels = deployment_labels(cluster)
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": nemo_rl_cache_env(cluster.mount_path)["HF_HOME"]},
        # The image's huggingface_hub draws tqdm bars; the program prints its own progress lines.
        {"name": "HF_HUB_DISABLE_PROGRESS_BARS", "value": "1"},
    ]
    if "HF_TOKEN" in cluster.secrets:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": naming.secret_name(cluster), "key": "HF_TOKEN", "optional": True}}})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": naming.prefetch_name(cluster),
            "namespace": cluster.namespace,
            "labels": dict(labels),
            "annotations": {MODELS_ANNOTATION: json.dumps(list(cluster.prefetch_models))},
        },
        "spec": {
            "backoffLimit": PREFETCH_BACKOFF_LIMIT,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {_NODEPOOL_LABEL: naming.cpu_pool_name(cluster)},
                    "containers": [{
                        "name": "prefetch",
                        "image": cluster.image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": prefetch_command(),
                        "args": list(cluster.prefetch_models),
                        "env": env,
                        # A failed pod's last log lines become its termination message.
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        # Eight download threads wait on the network: a small request fits beside the head.
                        "resources": {"requests": {"cpu": "1", "memory": "4Gi"}},
                        "volumeMounts": [{"name": _LUSTRE_VOLUME, "mountPath": cluster.mount_path}],
                    }],
                    "volumes": [{"name": _LUSTRE_VOLUME,
                                 "persistentVolumeClaim": {"claimName": naming.pvc_name(cluster)}}],
                },
            },
        },
    }


def pod_problem(pod: Mapping[str, Any]) -> tuple[str, bool] | None:
    """``(why, hopeless)`` when a pod cannot run or has failed, from its status.

    ``hopeless`` is True when waiting cannot help (an image that does not exist, a
    container that cannot be configured, a container that exited non-zero).

    Examples:
        >>> pod_problem({"metadata": {"name": "p"}, "status": {"phase": "Failed", "containerStatuses": [
        ...     {"name": "prefetch", "state": {"terminated": {"exitCode": 1, "reason": "Error",
        ...                                                    "message": "401 Unauthorized"}}}]}})
        ('pod p: container prefetch exited 1 (Error): 401 Unauthorized', True)
    """
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        state = c.get("state") or {}
        done = state.get("terminated")
        if done and done.get("exitCode", 0) != 0:
            message = " ".join(str(done.get("message") or "").split())
            return (f"pod {name}: container {c.get('name')} exited {done.get('exitCode')} "
                    f"({done.get('reason') or 'Error'})" + (f": {message[-500:]}" if message else ""), True)
        waiting = state.get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            message = str(waiting.get("message") or "")
            hopeless = waiting["reason"] in _HOPELESS or (
                waiting["reason"] in ("ErrImagePull", "ImagePullBackOff") and any(m in message for m in _MISSING_IMAGE))
            return f"pod {name}: {waiting['reason']}" + (f": {message}" if message else ""), hopeless
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"pod {name}: {cond.get('reason', 'Unschedulable')}: {cond.get('message', '')}", False
    return None


def daemonset_progress(ds: Mapping[str, Any] | None, nodes: int) -> tuple[int, int]:
    """``(nodes that hold the image, nodes it should be on)`` from a DaemonSet's status.

    Examples:
        >>> daemonset_progress({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
        ...     "desiredNumberScheduled": 8, "numberReady": 5}}, 8)
        (5, 8)
    """
    if ds is None:
        return 0, nodes
    status = ds.get("status") or {}
    generation = (ds.get("metadata") or {}).get("generation")
    if generation is not None and int(status.get("observedGeneration") or 0) < int(generation):
        return 0, nodes
    return int(status.get("numberReady") or 0), max(int(status.get("desiredNumberScheduled") or 0), nodes)


def job_state(job: Mapping[str, Any] | None) -> str:
    """``"complete"``, ``"failed"``, ``"running"`` or ``"absent"``, from a Job's conditions.

    Examples:
        >>> job_state({"status": {"conditions": [{"type": "Complete", "status": "True"}]}})
        'complete'
    """
    if job is None:
        return "absent"
    conditions = {c.get("type"): c.get("status") for c in (job.get("status") or {}).get("conditions") or []}
    if conditions.get("Complete") == "True":
        return "complete"
    if conditions.get("Failed") == "True":
        return "failed"
    return "running"


def models_of(job: Mapping[str, Any] | None) -> Sequence[str] | None:
    """The models an existing prefetch Job was made for (None when it carries no record)."""
    raw = (((job or {}).get("metadata") or {}).get("annotations") or {}).get(MODELS_ANNOTATION)
    try:
        models = json.loads(raw) if raw else None
    except ValueError:
        return None
    return models if isinstance(models, list) else None
