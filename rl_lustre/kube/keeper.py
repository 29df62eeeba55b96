"""The keeper's Kubernetes objects: a small Deployment beside the RayCluster, outside its head.

The keeper (:mod:`rl_lustre.oncluster.keeper`) resubmits the runs a lost Ray head took with it.
It must not share the head's fate, so it is a Deployment of its own (``<name>-keeper``, one
replica, ``Recreate``: never two at once) on the on-demand CPU pool, created after the
RayCluster and deleted before it:

- the code: the on-cluster package, whole, in a ConfigMap (``<name>-keeper-code``, well under
  Kubernetes' 1 MiB), mounted read-only as ``/opt/rl-lustre/rl_lustre_oncluster`` and run with
  the cluster's image (its Python and Ray) as ``python -m rl_lustre_oncluster.keeper``; a
  change of the package rolls the pod (its hash is a template annotation);
- the volume: the Lustre claim at the cluster's mount path (the runs' records are there);
- the least RBAC it needs: a ServiceAccount whose Role may ``get``, ``list`` and ``watch``
  pods and events in the namespace, nothing else, so that it can tell why a head went
  (``OOMKilled``, ``Evicted``, ...); its token is mounted into the keeper's pod only (the
  ServiceAccount itself does not automount). Ray's token, in token mode, from the Secret.

:func:`teardown_job` is the Job ``down()`` runs once the keeper is gone and before the
RayCluster goes: it marks the runs in flight stopped by teardown
(:mod:`rl_lustre.oncluster.teardown`), with the same code and volume.

No remote call and no Kubernetes client import here; :mod:`rl_lustre.provision.keeper`
applies, waits for and deletes them.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import DASHBOARD_PORT, GKE_NODEPOOL_LABEL
from ..errors import ConfigError
from ..plankeys import KEEPER_KEY
from ..recovery.shipping import PACKAGE, shipped_files
from .labels import deployment_labels
from .persistent_volume import lustre_pod_volume, lustre_volume_mount

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = [
    "CODE_DIR",
    "CONFIGMAP_LIMIT",
    "KEEPER_COMPONENT",
    "keeper_args",
    "keeper_manifests",
    "keeper_rules",
    "teardown_job",
]

# Where the package is mounted in the keeper's pod (on its PYTHONPATH).
CODE_DIR = "/opt/rl-lustre"
# Kubernetes refuses a ConfigMap over 1 MiB (data and keys together).
CONFIGMAP_LIMIT = 1024 * 1024
KEEPER_COMPONENT = KEEPER_KEY
_COMPONENT_LABEL = "rl-lustre-component"
_CODE_VOLUME = "keeper-code"
# How often the keeper looks at the head (seconds), and the losses that end its resubmissions.
POLL_SECONDS = 2.0
MAX_LOSSES, LOSS_WINDOW_SECONDS = 3, 1800


def keeper_rules() -> list[dict[str, Any]]:
    """The keeper's Role: read pods and events in its namespace, nothing more.

    Examples:
        >>> [(r["resources"], r["verbs"]) for r in keeper_rules()]
        [(['pods', 'events'], ['get', 'list', 'watch'])]
    """
    return [{"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list", "watch"]}]


def keeper_args(cluster: ClusterSpec) -> list[str]:
    """The keeper's command line (after ``python -m rl_lustre_oncluster.keeper``).

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> keeper_args(c)[:6]
        ['--cluster', 'demo', '--mount', '/lustre', '--dashboard', 'http://demo-head-svc.default.svc:8265']
    """
    dashboard = f"http://{naming.head_service_name(cluster)}.{cluster.namespace}.svc:{DASHBOARD_PORT}"
    return [
        "--cluster", cluster.name,
        "--mount", cluster.mount_path,
        "--dashboard", dashboard,
        "--raycluster", naming.raycluster_name(cluster),
        "--namespace", cluster.namespace,
        "--poll", f"{POLL_SECONDS:g}",
        "--max-losses", str(MAX_LOSSES),
        "--loss-window", f"{LOSS_WINDOW_SECONDS:g}",
    ]  # fmt: skip


def _code(cluster: ClusterSpec, labels: dict[str, str]) -> tuple[dict[str, Any], list[dict[str, str]], str]:
    """The ConfigMap of the package, its items (key -> path) and the content's hash."""
    _, files = shipped_files()
    data = {}
    items = []
    for path, content in files.items():
        key = path.replace("/", "__")
        try:
            data[key] = content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                "Cluster", KEEPER_KEY, path, f"the on-cluster package ships text only ({exc})"
            ) from exc  # pragma: no cover
        items.append({"key": key, "path": path})
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_LIMIT:
        raise ConfigError(
            "Cluster",
            KEEPER_KEY,
            f"{size} bytes",
            f"the on-cluster package must fit a ConfigMap ({CONFIGMAP_LIMIT} bytes)",
        )  # pragma: no cover
    digest = hashlib.sha256("".join(f"{k}\0{v}\0" for k, v in sorted(data.items())).encode()).hexdigest()[:16]
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": naming.keeper_code_name(cluster), "namespace": cluster.namespace, "labels": dict(labels)},
        "data": data,
    }
    return configmap, items, digest


def _pod(cluster: ClusterSpec, command: list[str], items: list[dict[str, str]], *, account: bool) -> dict[str, Any]:
    from .raycluster import RAY_AUTH_TOKEN

    env: list[dict[str, Any]] = [
        {"name": "PYTHONPATH", "value": CODE_DIR},
        # The package is mounted read-only: no bytecode to write next to it.
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
    ]
    if RAY_AUTH_TOKEN in cluster.secrets:
        env.append(
            {
                "name": RAY_AUTH_TOKEN,
                "valueFrom": {"secretKeyRef": {"name": naming.secret_name(cluster), "key": RAY_AUTH_TOKEN}},
            }
        )
    pod: dict[str, Any] = {
        "nodeSelector": {GKE_NODEPOOL_LABEL: naming.cpu_pool_name(cluster)},
        "automountServiceAccountToken": account,
        "containers": [
            {
                "name": KEEPER_COMPONENT,
                "image": cluster.image,
                "imagePullPolicy": "IfNotPresent",
                "command": command,
                "env": env,
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
                "volumeMounts": [
                    lustre_volume_mount(cluster),
                    {"name": _CODE_VOLUME, "mountPath": f"{CODE_DIR}/{PACKAGE}", "readOnly": True},
                ],
            }
        ],
        "volumes": [
            lustre_pod_volume(cluster),
            {"name": _CODE_VOLUME, "configMap": {"name": naming.keeper_code_name(cluster), "items": items}},
        ],
    }
    if account:
        pod["serviceAccountName"] = naming.keeper_name(cluster)
    return pod


def keeper_manifests(cluster: ClusterSpec) -> list[dict[str, Any]]:
    """The keeper's objects, in apply order: ServiceAccount, Role, RoleBinding, ConfigMap, Deployment.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> [(m["kind"], m["metadata"]["name"]) for m in keeper_manifests(c)]  # doctest: +NORMALIZE_WHITESPACE
        [('ServiceAccount', 'demo-keeper'), ('Role', 'demo-keeper'), ('RoleBinding', 'demo-keeper'),
         ('ConfigMap', 'demo-keeper-code'), ('Deployment', 'demo-keeper')]
    """
    labels = deployment_labels(cluster)
    name, ns = naming.keeper_name(cluster), cluster.namespace
    meta = {"name": name, "namespace": ns, "labels": dict(labels)}
    configmap, items, digest = _code(cluster, labels)
    selector = {_COMPONENT_LABEL: KEEPER_COMPONENT, **{k: v for k, v in labels.items() if k != "managed-by"}}
    command = ["python", "-m", f"{PACKAGE}.keeper", *keeper_args(cluster)]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta), "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta), "rules": keeper_rules()},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        },
        configmap,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": dict(meta),
            "spec": {
                "replicas": 1,
                # Never two keepers at once: the old pod goes before the new one starts.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": {**labels, **selector}, "annotations": {"rl-lustre/code": digest}},
                    "spec": _pod(cluster, command, items, account=True),
                },
            },
        },
    ]


def teardown_job(cluster: ClusterSpec) -> dict[str, Any]:
    """The Job that marks the cluster's runs in flight stopped by teardown (``down()``, once the
    keeper is gone and before the RayCluster goes). It needs no Kubernetes API: no token.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> teardown_job(c)["spec"]["template"]["spec"]["containers"][0]["command"]
        ['python', '-m', 'rl_lustre_oncluster.teardown', '--cluster', 'demo', '--mount', '/lustre']
    """
    labels = deployment_labels(cluster)
    _, items, _ = _code(cluster, labels)
    command = ["python", "-m", f"{PACKAGE}.teardown", "--cluster", cluster.name, "--mount", cluster.mount_path]
    pod = _pod(cluster, command, items, account=False)
    pod["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": naming.teardown_job_name(cluster), "namespace": cluster.namespace, "labels": dict(labels)},
        "spec": {"backoffLimit": 2, "template": {"metadata": {"labels": dict(labels)}, "spec": pod}},
    }
