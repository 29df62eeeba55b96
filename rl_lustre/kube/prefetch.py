"""The model prefetch Job, as a plain dict, and how to read its state.

:func:`prefetch_job` is a ``batch/v1`` Job on the CPU pool that downloads the cluster's
``prefetch_models`` into the volume's Hugging Face cache with the image's own Python and
``huggingface_hub`` (the program is :mod:`rl_lustre.oncluster.prefetch`), ``HF_TOKEN``
from the Secret (``secretKeyRef``), skipping what the cache already holds.

No remote call and no Kubernetes client import here; the driver in
:mod:`rl_lustre.provision.startup` applies, watches and deletes it.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import GKE_NODEPOOL_LABEL
from ..nemo_rl.caches import nemo_rl_cache_env
from ..oncluster import prefetch as prefetch_program
from .labels import deployment_labels
from .persistent_volume import lustre_pod_volume, lustre_volume_mount

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["MODELS_ANNOTATION", "PREFETCH_BACKOFF_LIMIT", "job_state", "models_of", "prefetch_command", "prefetch_job"]

MODELS_ANNOTATION = "rl-lustre/prefetch-models"
# A retried pod resumes the download where the last one stopped.
PREFETCH_BACKOFF_LIMIT = 2


def prefetch_command(python: str = "python") -> list[str]:
    """The container command of the prefetch Job: the prefetch program as ``python -c``.

    Examples:
        >>> cmd = prefetch_command()
        >>> cmd[:2], "def fetch(" in cmd[2]
        (['python', '-c'], True)
    """
    return [python, "-c", inspect.getsource(prefetch_program)]


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
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {
                    "secretKeyRef": {"name": naming.secret_name(cluster), "key": "HF_TOKEN", "optional": True}
                },
            }
        )
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
                    "nodeSelector": {GKE_NODEPOOL_LABEL: naming.cpu_pool_name(cluster)},
                    "containers": [
                        {
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
                            "volumeMounts": [lustre_volume_mount(cluster)],
                        }
                    ],
                    "volumes": [lustre_pod_volume(cluster)],
                },
            },
        },
    }


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
