"""The Kubernetes side of the GPUDirect-RDMA fabric (``Cluster.fabric == "rdma"``).

- :func:`fabric_manifests`: one ``GKENetworkParamSet`` and one ``Network``
  (``networking.gke.io/v1``) per extra node network, and the gIB NCCL plugin installer
  DaemonSet (``kube-system/nccl-rdma-installer``), as the Cluster Toolkit A4 blueprint
  applies them;
- :func:`fabric_worker_pod`: what a Ray worker pod needs to use the fabric: the
  ``networking.gke.io`` interface annotations, the gIB and NVIDIA library mounts, the
  NCCL environment (``NCCL_NET=gIB``, then gIB's own ``set_nccl_env.sh``, sourced by the
  container's command), and an ephemeral-storage request that lands on local SSD;
- the networking objects are checked with :func:`rl_lustre.kube.schema.validate_networking`
  before anything is sent.

Nothing here makes a remote call or imports a Kubernetes client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import GKE_ACCELERATOR_LABEL, GKE_LOCAL_SSD_LABEL, GPU_MACHINE_TYPES
from ..plankeys import (
    GVNIC_NETWORK_KEY,
    GVNIC_SUBNET_KEY,
    NCCL_INSTALLER_KEY,
    RDMA_NETWORK_KEY,
    netparams_key,
    podnet_key,
    rdma_subnet_key,
)
from .schema import NETWORKING_API, validate_networking

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = [
    "GIB_IMAGE",
    "INSTALLER_NAME",
    "INSTALLER_NAMESPACE",
    "NCCL_ENV_SCRIPT",
    "extra_networks",
    "fabric_manifests",
    "fabric_manifests_by_key",
    "fabric_worker_pod",
    "rdma_nics",
    "validate_networking",
    "worker_fabric_summary",
]

INSTALLER_NAME = "nccl-rdma-installer"
INSTALLER_NAMESPACE = "kube-system"
# The gIB version the A4 blueprint pins (kubectl-apply variables: v1.0.2 ... v1.1.0 supported).
GIB_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.0"
PAUSE_IMAGE = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
NCCL_ENV_SCRIPT = "/usr/local/gib/scripts/set_nccl_env.sh"
# KubeRay (>= 1.1) keeps our command and hands its generated `ray start` in this variable.
OVERWRITE_CMD_ANNOTATION = "ray.io/overwrite-container-cmd"
_HOST_GIB, _HOST_NVIDIA = "/home/kubernetes/bin/gib", "/home/kubernetes/bin/nvidia"
# What a worker asks of the node's local SSD (about 10.9 TiB raw on A4): room for Ray's
# temp dir and object spill, /tmp and logs, leaving the rest to the image layers.
WORKER_EPHEMERAL_FRACTION = 0.5


def rdma_nics(cluster: ClusterSpec) -> int:
    """The GPU NICs for RoCE traffic a node of ``cluster``'s machine type has."""
    known = GPU_MACHINE_TYPES.get(cluster.machine_type)
    return known.rdma_nics if known is not None else 0


def extra_networks(cluster: ClusterSpec) -> list[dict[str, Any]]:
    """The extra node networks in NIC order (eth1, eth2, ...): for each, the Kubernetes
    network name, its VPC and subnet (names, and keys in the plan), and the
    GKENetworkParamSet device mode.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> [n["k8s_name"] for n in extra_networks(c)][:3], len(extra_networks(c))
        (['gvnic-1', 'rdma-0', 'rdma-1'], 9)
        >>> extra_networks(c)[1]["network"], extra_networks(c)[1]["subnet"]
        ('demo-rdma-net', 'demo-rdma-sub-0')
        >>> extra_networks(Cluster(name="demo", project="my-project", region="us-east1",
        ...                        zone="us-east1-b", fabric="tcp"))
        []
    """
    if cluster.fabric != "rdma":
        return []
    nets = [
        {
            "k8s_name": "gvnic-1",
            "network_key": GVNIC_NETWORK_KEY,
            "subnet_key": GVNIC_SUBNET_KEY,
            "network": naming.gvnic_network_name(cluster),
            "subnet": naming.gvnic_subnet_name(cluster),
            "device_mode": "NetDevice",
            "nic_type": "GVNIC",
            "interface": "eth1",
        }
    ]
    nets += [
        {
            "k8s_name": f"rdma-{i}",
            "network_key": RDMA_NETWORK_KEY,
            "subnet_key": rdma_subnet_key(i),
            "network": naming.rdma_network_name(cluster),
            "subnet": naming.rdma_subnet_name(cluster, i),
            "device_mode": "RDMA",
            "nic_type": "MRDMA",
            "interface": f"eth{i + 2}",
        }
        for i in range(rdma_nics(cluster))
    ]
    return nets


def fabric_manifests(cluster: ClusterSpec, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """The fabric's Kubernetes objects in apply order (none for ``fabric="tcp"``): the
    GKENetworkParamSets, the Networks, then the installer DaemonSet.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> objs = fabric_manifests(c, {})
        >>> [o["kind"] for o in objs].count("Network"), objs[1]["spec"]
        (9, {'vpc': 'demo-rdma-net', 'vpcSubnet': 'demo-rdma-sub-0', 'deviceMode': 'RDMA'})
    """
    return list(fabric_manifests_by_key(cluster, labels).values())


def fabric_manifests_by_key(cluster: ClusterSpec, labels: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """:func:`fabric_manifests` by plan key, in the same order.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> list(fabric_manifests_by_key(c, {}))[::9]
        ['netparams-gvnic-1', 'podnet-gvnic-1', 'nccl-installer']
    """
    if cluster.fabric != "rdma":
        return {}
    nets = extra_networks(cluster)
    params = {
        netparams_key(n["k8s_name"]): {
            "apiVersion": NETWORKING_API,
            "kind": "GKENetworkParamSet",
            "metadata": {"name": n["k8s_name"], "labels": dict(labels)},
            "spec": {"vpc": n["network"], "vpcSubnet": n["subnet"], "deviceMode": n["device_mode"]},
        }
        for n in nets
    }
    networks = {
        podnet_key(n["k8s_name"]): {
            "apiVersion": NETWORKING_API,
            "kind": "Network",
            "metadata": {"name": n["k8s_name"], "labels": dict(labels)},
            "spec": {
                "type": "Device",
                "parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": n["k8s_name"]},
            },
        }
        for n in nets
    }
    for obj in [*params.values(), *networks.values()]:
        validate_networking(obj)
    return {**params, **networks, NCCL_INSTALLER_KEY: _installer(cluster, labels)}


def _installer(cluster: ClusterSpec, labels: Mapping[str, str]) -> dict[str, Any]:
    nics = rdma_nics(cluster)
    selector = {"k8s-app": INSTALLER_NAME}
    # RDMA NIC interfaces are named gpu<i>rdma0; their asymmetric routes make the kernel
    # log every packet as martian unless told not to.
    martians = "\n".join(f"sysctl -w net.ipv4.conf.gpu{i}rdma0.log_martians=0" for i in range(nics))
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": INSTALLER_NAME, "namespace": INSTALLER_NAMESPACE, "labels": {**labels, **selector}},
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}},
            "template": {
                "metadata": {"labels": {**labels, **selector}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    # Only this deployment's GPU type: the installer has nothing to do elsewhere.
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": GKE_ACCELERATOR_LABEL,
                                                "operator": "In",
                                                "values": [cluster.accelerator_type],
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "tolerations": [{"operator": "Exists"}],
                    "hostNetwork": True,
                    "hostPID": True,
                    "volumes": [
                        {
                            "name": "library-dir-host",
                            "hostPath": {"path": f"{_HOST_NVIDIA}/lib64", "type": "DirectoryOrCreate"},
                        },
                        {"name": "gib", "hostPath": {"path": _HOST_GIB}},
                    ],
                    "initContainers": [
                        {
                            "name": "disable-log-martian",
                            "image": "alpine:3.20",
                            "command": ["/bin/sh", "-c"],
                            "args": [martians],
                            "securityContext": {"privileged": True},
                        },
                        {
                            "name": INSTALLER_NAME,
                            "image": GIB_IMAGE,
                            "resources": {"requests": {"cpu": "150m"}},
                            "securityContext": {"privileged": True},
                            "volumeMounts": [
                                {
                                    "name": "library-dir-host",
                                    "mountPath": "/usr/local/home/kubernetes/bin/nvidia/lib64",
                                },
                                {"name": "gib", "mountPath": "/usr/local/home/kubernetes/bin/gib"},
                            ],
                            "command": ["/bin/sh", "-c"],
                            "args": [
                                "set -ex\n/scripts/container_entry.sh install --install-nccl\n"
                                "cp -r /var/lib/gib/lib64/. /usr/local/home/kubernetes/bin/nvidia/lib64\n"
                                "cp -r /var/lib/gib/. /usr/local/home/kubernetes/bin/gib\n"
                            ],
                        },
                    ],
                    "containers": [{"name": "pause", "image": PAUSE_IMAGE}],
                },
            },
        },
    }


def _ephemeral_request(cluster: ClusterSpec) -> str | None:
    known = GPU_MACHINE_TYPES.get(cluster.machine_type)
    if known is None or not known.local_ssds or cluster.fabric != "rdma":
        return None
    return f"{int(known.local_ssd_gib * WORKER_EPHEMERAL_FRACTION)}Gi"


def worker_fabric_summary(cluster: ClusterSpec) -> dict[str, Any]:
    """What the plan shows about the Ray workers' fabric settings.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> s = worker_fabric_summary(c)
        >>> s["fabric"], s["ephemeral_storage"]
        ('rdma', '5587Gi on local SSD')
    """
    out: dict[str, Any] = {"fabric": cluster.fabric}
    if cluster.fabric == "rdma":
        out["pod_interfaces"] = [
            "eth0: default",
            *(f"{n['interface']}: {n['k8s_name']}" for n in extra_networks(cluster) if n["device_mode"] == "RDMA"),
        ]
        out["nccl"] = f"NCCL_NET=gIB, then {NCCL_ENV_SCRIPT} sourced before ray start"
    ephemeral = _ephemeral_request(cluster)
    if ephemeral is not None:
        out["ephemeral_storage"] = f"{ephemeral} on local SSD"
    return out


def fabric_worker_pod(cluster: ClusterSpec, pod: dict[str, Any]) -> tuple[dict[str, str], bool]:
    """Adapt a Ray worker pod spec (in place) to the fabric; returns the pod annotations
    to add and whether the RayCluster must let KubeRay keep the container's command.

    ``fabric="tcp"`` (the reference workflow's pod) changes nothing.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> pod = {"containers": [{"name": "ray-worker", "env": [], "resources": {"limits": {}, "requests": {}}}]}
        >>> annotations, overwrite = fabric_worker_pod(c, pod)
        >>> annotations["networking.gke.io/default-interface"], overwrite
        ('eth0', True)
        >>> pod["containers"][0]["args"][0].split("; ")[1]
        'source /usr/local/gib/scripts/set_nccl_env.sh'
    """
    container = pod["containers"][0]
    ephemeral = _ephemeral_request(cluster)
    if ephemeral is not None:
        for part in ("requests", "limits"):
            container["resources"].setdefault(part, {})["ephemeral-storage"] = ephemeral
        pod.setdefault("nodeSelector", {})[GKE_LOCAL_SSD_LABEL] = "true"
    if cluster.fabric != "rdma":
        return {}, False
    interfaces = [{"interfaceName": "eth0", "network": "default"}]
    interfaces += [
        {"interfaceName": n["interface"], "network": n["k8s_name"]}
        for n in extra_networks(cluster)
        if n["device_mode"] == "RDMA"
    ]
    annotations = {
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": json.dumps(interfaces),
    }
    pod.setdefault("volumes", []).extend(
        [
            {"name": "gib", "hostPath": {"path": _HOST_GIB}},
            {"name": "nvidia", "hostPath": {"path": _HOST_NVIDIA}},
        ]
    )
    container.setdefault("volumeMounts", []).extend(
        [
            {"name": "gib", "mountPath": "/usr/local/gib"},
            {"name": "nvidia", "mountPath": "/usr/local/nvidia"},
        ]
    )
    env = container.setdefault("env", [])
    env[:] = [e for e in env if e["name"] != "NCCL_SOCKET_IFNAME"]
    env += [
        {"name": "NCCL_NET", "value": "gIB"},
        # Bootstrap and Gloo stay on the pod's default interface; data goes over RDMA.
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
        {"name": "LD_LIBRARY_PATH", "value": "/usr/local/gib/lib64:/usr/local/nvidia/lib64"},
    ]
    # gIB's script sets the rest of NCCL_* for its own version (the blueprint's advice
    # over hard-coding them); KubeRay's generated ray start then inherits them.
    container["command"] = ["/bin/bash", "-lc", "--"]
    container["args"] = [f"ulimit -n 65536; source {NCCL_ENV_SCRIPT}; exec ${{KUBERAY_GEN_RAY_START_CMD}}"]
    return annotations, True
