"""The ``ray.io/v1`` RayCluster of a GKE deployment, as KubeRay's CRD accepts it.

One head group and one worker group (``gpu-workers``, ``num_nodes`` replicas fixed):

- the head runs on the on-demand CPU pool, so a Spot preemption cannot kill the job
  driver (``Cluster.head_on_gpu_pool=True`` restores the reference placement), with
  ``num-cpus``/``num-gpus`` 0 and resources sized from its machine;
- workers run on the GPU nodes of the deployment's ComputeClass (its label and the
  accelerator's; the class's and the GPU taint tolerated), whichever pool GKE's cluster
  autoscaler brought them from, their CPU and memory pinned from the machine catalogue;
- every pod mounts the Lustre claim at ``mount_path`` and a memory-backed ``/dev/shm``;
  secrets reach the pods through ``secretKeyRef``, never the job's runtime env;
  ``rayVersion`` is the Ray inside the image. Naming :data:`RAY_AUTH_TOKEN` among the
  cluster's secrets turns Ray token auth on (Ray 2.52.0 or newer);
- every container may ``ptrace`` (``SYS_PTRACE``): py-spy takes a stalled run's stacks.

:func:`raycluster_manifest` checks the result against KubeRay's CRD schema
(:mod:`rl_lustre.kube.schema`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import (
    GKE_ACCELERATOR_LABEL,
    GKE_NODEPOOL_LABEL,
    GPU_MACHINE_TYPES,
    GPU_RESOURCE,
    HF_HOME_DIR,
    RAY_HEAD_PORTS,
)
from ..errors import ConfigError
from .persistent_volume import lustre_pod_volume, lustre_volume_mount
from .pod_templates import stamp_templates
from .schema import validate_raycluster

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["RAY_AUTH_TOKEN", "raycluster_manifest"]

# Ray token auth (RAY_AUTH_MODE=token) exists from Ray 2.52.0. Naming this key in
# Cluster.secrets turns it on; the token then comes from the Secret like any other.
RAY_AUTH_TOKEN = "RAY_AUTH_TOKEN"
_RAY_TOKEN_AUTH_SINCE = (2, 52, 0)

_SHM_VOLUME = "dshm"


# py-spy reads another process's memory (ptrace): the diagnostics bundle of a stalled run takes
# every process's Python stack that way, through Ray's dashboard agent (oncluster/evidence.py).
# Kubernetes drops SYS_PTRACE from containers by default; KubeRay's own guide adds it back.
def _ptrace() -> dict[str, Any]:
    return {"capabilities": {"add": ["SYS_PTRACE"]}}


# GiB of memory per vCPU of Compute Engine's predefined shapes; n1 is the odd one out.
_MEM_PER_VCPU = {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0}
_N1_MEM_PER_VCPU = {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9}
_PREDEFINED = re.compile(r"(?P<family>[a-z][a-z0-9]*)-(?P<shape>standard|highmem|highcpu)-(?P<vcpus>\d+)")
_CUSTOM = re.compile(r"[a-z][a-z0-9]*-custom-(?P<vcpus>\d+)-(?P<mib>\d+)(?:-ext)?")
# The reference workflow's head: requests 8 CPU / 64Gi, limits 32 CPU / 1000Gi. These are
# the ceilings; smaller machines get proportionally less.
_HEAD_REQUEST_CAP = (8, 64)
_HEAD_LIMIT_CAP = (32, 1000)

# The worker pod's Kubernetes node name (downward API), and the flag naming its Ray node so.
NODE_NAME_ENV = "RL_LUSTRE_NODE_NAME"
NODE_NAME_FLAG = f"--node-name=${NODE_NAME_ENV}"


def raycluster_manifest(cluster: ClusterSpec, labels: dict[str, str]) -> dict[str, Any]:
    """The RayCluster of ``cluster``, its objects labelled ``labels``, checked against the CRD.

    Raises:
        ConfigError: Ray token auth asked of an image whose Ray predates it, or a
            RayCluster that KubeRay's CRD schema rejects.
    """
    _check_ray_auth(cluster)
    ray_cluster = _ray_cluster(cluster, labels)
    validate_raycluster(ray_cluster)
    return ray_cluster


def _check_ray_auth(cluster: ClusterSpec) -> None:
    if RAY_AUTH_TOKEN not in cluster.secrets:
        return
    assert cluster.ray_version is not None
    if tuple(int(p) for p in cluster.ray_version.split(".")) < _RAY_TOKEN_AUTH_SINCE:
        raise ConfigError(
            "Cluster",
            "secrets",
            RAY_AUTH_TOKEN,
            f"Ray token auth needs Ray 2.52.0 or newer; image {cluster.image!r} has Ray "
            f"{cluster.ray_version}, which would ignore the token and run unauthenticated",
        )


def _env(cluster: ClusterSpec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": f"{cluster.mount_path}/{HF_HOME_DIR}"},
        {"name": "GLOO_SOCKET_IFNAME", "value": "eth0"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
        # The dashboard's stack traces (py-spy), which a stalled run's bundle takes: on by
        # default up to Ray 2.5x, off from then on unless this is set.
        {"name": "RAY_DASHBOARD_ENABLE_PROFILING", "value": "1"},
    ]
    if RAY_AUTH_TOKEN in cluster.secrets:
        env.append({"name": "RAY_AUTH_MODE", "value": "token"})
    for name in cluster.secrets:
        env.append(
            {
                "name": name,
                "valueFrom": {
                    "secretKeyRef": {
                        "name": naming.secret_name(cluster),
                        "key": name,
                        # A missing WANDB key must not keep pods from starting; a missing
                        # Ray token must, or Ray would come up without it.
                        "optional": name != RAY_AUTH_TOKEN,
                    }
                },
            }
        )
    return env


def _gpu_node_selector(cluster: ClusterSpec) -> dict[str, str]:
    """The GPU nodes of the deployment's ComputeClass, whichever pool (kind, zone) they are in."""
    from .computeclass import pod_selector

    assert cluster.accelerator_type is not None
    return {**pod_selector(cluster), GKE_ACCELERATOR_LABEL: cluster.accelerator_type}


def _gpu_tolerations(cluster: ClusterSpec) -> list[dict[str, str]]:
    from .computeclass import pod_tolerations

    return pod_tolerations(cluster)


def _machine_capacity(machine_type: str) -> tuple[float, float] | None:
    """``(vCPUs, GiB)`` of a predefined or custom Compute Engine CPU machine type."""
    if m := _PREDEFINED.fullmatch(machine_type):
        ratios = _N1_MEM_PER_VCPU if m["family"] == "n1" else _MEM_PER_VCPU
        vcpus = int(m["vcpus"])
        return vcpus, vcpus * ratios[m["shape"]]
    if m := _CUSTOM.fullmatch(machine_type):
        return int(m["vcpus"]), int(m["mib"]) / 1024
    return None


def _head_capacity(cluster: ClusterSpec) -> tuple[float, float] | None:
    """What the head may use on its node: the CPU machine, or on the GPU pool what the
    worker sharing the node leaves."""
    if not cluster.head_on_gpu_pool:
        return _machine_capacity(cluster.head_machine_type)
    known = GPU_MACHINE_TYPES.get(cluster.machine_type)
    if known is None:
        return None
    return known.vcpus - float(known.worker_cpu), known.memory_gib - float(known.worker_memory.removesuffix("Gi"))


def _head_resources(cluster: ClusterSpec) -> dict[str, dict[str, str]]:
    capacity = _head_capacity(cluster)
    if capacity is None:
        # A machine we cannot size: a request that fits anything, and no limits that
        # could exceed the node.
        return {"requests": {"cpu": "1", "memory": "4Gi"}}
    cpu, mem = capacity
    # Requests half the node (the reference's 8 CPU / 64Gi on n2-highmem-16); limits
    # leave a vCPU and a fifth of the memory to kubelet and daemonsets.
    return {
        "requests": {
            "cpu": str(max(1, min(_HEAD_REQUEST_CAP[0], int(cpu // 2)))),
            "memory": f"{max(1, min(_HEAD_REQUEST_CAP[1], int(mem // 2)))}Gi",
        },
        "limits": {
            "cpu": str(max(1, min(_HEAD_LIMIT_CAP[0], int(cpu - 1)))),
            "memory": f"{max(1, min(_HEAD_LIMIT_CAP[1], int(mem * 0.8)))}Gi",
        },
    }


def _worker_resources(cluster: ClusterSpec) -> dict[str, dict[str, str]]:
    amounts = {GPU_RESOURCE: str(cluster.gpus_per_node)}
    known = GPU_MACHINE_TYPES.get(cluster.machine_type)
    if known is not None:
        amounts |= {"cpu": known.worker_cpu, "memory": known.worker_memory}
    # Without a catalogue entry only the GPUs are pinned; Ray sizes CPU and memory from the node.
    return {"limits": dict(amounts), "requests": dict(amounts)}


def _volumes(cluster: ClusterSpec) -> list[dict[str, Any]]:
    return [
        lustre_pod_volume(cluster),
        # Ray's object store and NCCL need a /dev/shm far larger than the runtime's 64 MiB.
        {"name": _SHM_VOLUME, "emptyDir": {"medium": "Memory"}},
    ]


def _volume_mounts(cluster: ClusterSpec) -> list[dict[str, str]]:
    return [
        lustre_volume_mount(cluster),
        {"name": _SHM_VOLUME, "mountPath": "/dev/shm"},
    ]


def _head_group(cluster: ClusterSpec, labels: dict[str, str]) -> dict[str, Any]:
    pod: dict[str, Any] = {}
    if cluster.head_on_gpu_pool:
        pod["nodeSelector"] = _gpu_node_selector(cluster)
        pod["tolerations"] = _gpu_tolerations(cluster)
    else:
        pod["nodeSelector"] = {GKE_NODEPOOL_LABEL: naming.cpu_pool_name(cluster)}
    pod["containers"] = [
        {
            "name": "ray-head",
            "image": cluster.image,
            "ports": [{"containerPort": port, "name": name} for name, port in RAY_HEAD_PORTS.items()],
            "env": _env(cluster),
            "resources": _head_resources(cluster),
            "volumeMounts": _volume_mounts(cluster),
            "securityContext": _ptrace(),
        }
    ]
    pod["volumes"] = _volumes(cluster)
    # Reads the pods' events for a stalled run's diagnostics (kube.head_access).
    pod["serviceAccountName"] = naming.head_account_name(cluster)
    return {
        "rayStartParams": {
            "dashboard-host": "0.0.0.0",
            # The head hosts the job driver only; Ray must not place tasks or GPU
            # work on it.
            "num-cpus": "0",
            "num-gpus": "0",
        },
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
    }


def _worker_group(cluster: ClusterSpec, labels: dict[str, str]) -> tuple[dict[str, Any], bool]:
    from ..nemo_rl.caches import vllm_seed_links
    from .fabric import fabric_worker_pod

    pod: dict[str, Any] = {
        "nodeSelector": _gpu_node_selector(cluster),
        "tolerations": _gpu_tolerations(cluster),
        "containers": [
            {
                "name": "ray-worker",
                "image": cluster.image,
                "env": _env(cluster),
                "resources": _worker_resources(cluster),
                "volumeMounts": _volume_mounts(cluster),
                "securityContext": _ptrace(),
                # vLLM's per-worker compile caches onto the volume (see nemo_rl.caches).
                "lifecycle": {
                    "postStart": {
                        "exec": {
                            "command": [
                                "/bin/sh",
                                "-c",
                                vllm_seed_links(cluster.mount_path, cluster.num_nodes, cluster.gpus_per_node or 0),
                            ]
                        }
                    }
                },
            }
        ],
        "volumes": _volumes(cluster),
    }
    container = pod["containers"][0]
    # Ray names the node after its Kubernetes node, so that the goodput ledger can tell
    # which node a raylet ran on once the pod is gone (Ray's default name is the pod IP).
    container["env"] = [
        *container["env"],
        {"name": NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    annotations, keep_command = fabric_worker_pod(cluster, pod)
    start_params: dict[str, str] = {}
    if keep_command:
        # The container's own command runs KubeRay's; a flag after it is expanded by its shell.
        container["args"] = [f"{container['args'][0]} {NODE_NAME_FLAG}"]
    else:
        # KubeRay's generated command runs in bash unquoted: the variable is expanded there.
        start_params["node-name"] = f"${NODE_NAME_ENV}"
    metadata: dict[str, Any] = {"labels": dict(labels)}
    if annotations:
        metadata["annotations"] = annotations
    group = {
        "groupName": "gpu-workers",
        "replicas": cluster.num_nodes,
        "minReplicas": cluster.num_nodes,
        "maxReplicas": cluster.num_nodes,
        "rayStartParams": start_params,
        "template": {"metadata": metadata, "spec": pod},
    }
    return group, keep_command


def _ray_cluster(cluster: ClusterSpec, labels: dict[str, str]) -> dict[str, Any]:
    from .fabric import OVERWRITE_CMD_ANNOTATION

    head = _head_group(cluster, labels)
    workers, keep_command = _worker_group(cluster, labels)
    metadata: dict[str, Any] = {
        "name": naming.raycluster_name(cluster),
        "namespace": cluster.namespace,
        "labels": dict(labels),
    }
    if keep_command:
        # KubeRay then runs each container's own command; the head's does what KubeRay's would.
        metadata["annotations"] = {OVERWRITE_CMD_ANNOTATION: "true"}
        head_container = head["template"]["spec"]["containers"][0]
        head_container["command"] = ["/bin/bash", "-lc", "--"]
        head_container["args"] = ["ulimit -n 65536; exec ${KUBERAY_GEN_RAY_START_CMD}"]
    # Each pod template carries a hash of itself: KubeRay does not replace pods when a
    # template changes, up() does (kube.rollout).
    return stamp_templates(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": metadata,
            "spec": {
                "rayVersion": cluster.ray_version,
                "headGroupSpec": head,
                "workerGroupSpecs": [workers],
            },
        }
    )
