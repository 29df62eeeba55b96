"""What a GKE node of a node pool looks like to the Kubernetes API: labels, taints, capacity
and allocatable.

:func:`gke_node` turns a ``container_v1.NodePool`` (what the GKE API was asked for) into the
``v1`` Node objects GKE registers for it, so that a scheduler — the real one under
``nox -s tests-kube``, or the fake's — weighs our pods' requests against what the node
really offers.

Allocatable follows GKE's documented reservations ("Plan GKE Standard node sizes",
cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes):

- CPU: 6% of the first core, 1% of the next, 0.5% of the next two, 0.25% of every core
  above four;
- memory: 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next
  112, 2% of everything above 128 GiB, plus the kubelet's 100 MiB eviction threshold;
- ephemeral storage: 10% of the filesystem is the eviction threshold; on the boot disk
  GKE also reserves min(50%, 6 GiB + 35%, 100 GiB) of the disk, on local SSDs
  (``ephemeral_storage_local_ssd_config``) 50 GiB for one disk, 75 GiB for two and
  100 GiB for three or more.

So an ``a4-highgpu-8g`` node (224 vCPUs, 3,968 GiB, 8 B200s, 32 x 375 GB local SSD) offers
223.37 CPU, about 3,881.8 GiB and, with its local SSDs backing ephemeral storage, about
9,958 GiB of ephemeral storage; on its 100 GiB boot disk alone, about 43.8 GiB.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from ..catalog import (
    GKE_ACCELERATOR_LABEL,
    GKE_FLEX_START_LABEL,
    GKE_LOCAL_SSD_LABEL,
    GKE_NODEPOOL_LABEL,
    GKE_PROVISIONING_LABEL,
    GKE_SPOT_LABEL,
    GPU_MACHINE_TYPES,
    GPU_RESOURCE,
)

if TYPE_CHECKING:
    from ._kube_node_groups import NodeGroup

__all__ = ["allocatable", "gke_node", "machine_shape", "node_group", "pool_nodes"]

GIB = 2**30
_BOOT_DISK_GIB = 100  # GKE's default boot disk
_EVICTION_MEMORY = 100 * 2**20
_LOCAL_SSD_BYTES = 375 * 10**9
_TAINT_EFFECTS = {1: "NoSchedule", 2: "PreferNoSchedule", 3: "NoExecute"}


def _tiers(total: float, tiers: list[tuple[float, float]], rest: float) -> float:
    """Sum of ``fraction`` of each successive ``size`` of ``total``, then ``rest`` of what remains."""
    reserved, left = 0.0, total
    for size, fraction in tiers:
        part = min(left, size)
        reserved += part * fraction
        left -= part
    return reserved + max(left, 0.0) * rest


def machine_shape(machine_type: str) -> tuple[int, float, int]:
    """``(vCPUs, memory GiB, GPUs)`` of a GPU machine of the catalog or a predefined/custom CPU one.

    Examples:
        >>> machine_shape("a4-highgpu-8g")
        (224, 3968.0, 8)
        >>> machine_shape("n2-standard-16")
        (16, 64.0, 0)
    """
    known = GPU_MACHINE_TYPES.get(machine_type)
    if known is not None:
        return known.vcpus, float(known.memory_gib), known.gpus
    from ..kube.raycluster import _machine_capacity

    shape = _machine_capacity(machine_type)
    if shape is None:
        raise ValueError(f"no shape known for machine type {machine_type!r}")
    return int(shape[0]), float(shape[1]), 0


def allocatable(vcpus: int, memory_gib: float, *, local_ssds: int = 0) -> dict[str, dict[str, str]]:
    """``capacity`` and ``allocatable`` of a GKE node, as the kubelet reports them.

    Examples:
        >>> shape = allocatable(224, 3968, local_ssds=32)
        >>> shape["capacity"]["cpu"], shape["allocatable"]["cpu"]
        ('224', '223370m')
        >>> int(shape["allocatable"]["ephemeral-storage"]) // 2**30
        9958
        >>> allocatable(4, 16)["allocatable"]["cpu"]
        '3920m'
    """
    cpu_reserved = _tiers(vcpus, [(1, 0.06), (1, 0.01), (2, 0.005)], 0.0025)
    memory = memory_gib * GIB
    mem_reserved = _tiers(memory_gib, [(4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06)], 0.02) * GIB
    if local_ssds:
        disk = local_ssds * _LOCAL_SSD_BYTES
        system: float = {1: 50, 2: 75}.get(local_ssds, 100) * GIB
    else:
        disk = _BOOT_DISK_GIB * GIB
        system = min(0.5 * disk, 6 * GIB + 0.35 * disk, 100 * GIB)
    # The filesystem on the boot disk is a little smaller than the disk (GKE's example node:
    # 98,831,908 KiB on a 100 GiB disk); a RAID of local SSDs is close to their sum.
    filesystem = disk if local_ssds else 98831908 * 1024
    ephemeral_allocatable = filesystem - system - 0.1 * filesystem
    return {
        "capacity": {
            "cpu": str(vcpus),
            "memory": f"{int(memory // 1024)}Ki",
            "ephemeral-storage": f"{int(filesystem // 1024)}Ki",
            "pods": "110",
        },
        "allocatable": {
            "cpu": f"{round((vcpus - cpu_reserved) * 1000)}m",
            "memory": f"{int((memory - mem_reserved - _EVICTION_MEMORY) // 1024)}Ki",
            "ephemeral-storage": str(int(ephemeral_allocatable)),
            "pods": "110",
        },
    }


def instance_group_base(cluster: str, pool: str) -> str:
    """The base instance name of ``pool``'s managed instance groups: ``gke-<cluster>-<pool>-<8 hex>``,
    the two names cut (the longer first) so that a node's name -- this, ``-`` and 4 characters
    -- fits in 63. The group is this plus ``-grp`` (see :func:`instance_group_urls`).

    Examples:
        >>> instance_group_base("rl-demo", "gpu-standby")
        'gke-rl-demo-gpu-standby-c5137810'
        >>> len(instance_group_base("c" * 40, "gpu-standby")) + 5
        63
    """
    suffix = hashlib.sha256(f"{cluster}/{pool}".encode()).hexdigest()[:8]
    room = 63 - len("gke---") - len(suffix) - 5
    c, p = cluster, pool
    while len(c) + len(p) > room:
        if len(c) >= len(p):
            c = c[:-1]
        else:
            p = p[:-1]
    return f"gke-{c}-{p}-{suffix}"


def instance_group_urls(project: str, zones: list[str], cluster: str, pool: str) -> list[str]:
    """``NodePool.instance_group_urls``: one managed instance group per zone of the pool."""
    base = instance_group_base(cluster, pool)
    return [
        f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}/instanceGroupManagers/{base}-grp"
        for zone in zones
    ]


def gke_node(pool: Any, *, cluster: str, zone: str, index: int, project: str = "my-project") -> dict[str, Any]:
    """The ``v1`` Node GKE registers for the ``index``-th VM of ``pool`` (a ``container_v1.NodePool``).

    Examples:
        >>> from google.cloud import container_v1
        >>> pool = container_v1.NodePool(name="gpu", config=container_v1.NodeConfig(
        ...     machine_type="a4-highgpu-8g", spot=True,
        ...     accelerators=[container_v1.AcceleratorConfig(accelerator_type="nvidia-b200", accelerator_count=8)],
        ...     taints=[container_v1.NodeTaint(key="nvidia.com/gpu", value="present", effect="NO_SCHEDULE")]))
        >>> node = gke_node(pool, cluster="c", zone="us-east1-b", index=0)
        >>> node["metadata"]["labels"][GKE_SPOT_LABEL], node["status"]["allocatable"]["nvidia.com/gpu"]
        ('true', '8')
        >>> node["spec"]["taints"]
        [{'key': 'nvidia.com/gpu', 'value': 'present', 'effect': 'NoSchedule'}]
    """
    config = pool.config
    machine = config.machine_type or "e2-medium"
    vcpus, memory_gib, _ = machine_shape(machine)
    local_ssds = int(config.ephemeral_storage_local_ssd_config.local_ssd_count or 0)
    shape = allocatable(vcpus, memory_gib, local_ssds=local_ssds)
    name = f"{instance_group_base(cluster, pool.name)}-{index:04x}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": machine,
        "topology.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": zone.rsplit("-", 1)[0],
        GKE_NODEPOOL_LABEL: pool.name,
        "cloud.google.com/machine-family": machine.split("-")[0],
        "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/gke-boot-disk": config.disk_type or "pd-balanced",
        **dict(config.labels),
    }
    if config.spot:
        labels[GKE_SPOT_LABEL] = "true"
        labels[GKE_PROVISIONING_LABEL] = "spot"
    elif config.flex_start:
        labels[GKE_FLEX_START_LABEL] = "true"
        labels[GKE_PROVISIONING_LABEL] = "flex-start"
    else:
        labels[GKE_PROVISIONING_LABEL] = "standard"
    if local_ssds:
        labels[GKE_LOCAL_SSD_LABEL] = "true"
    taints = [{"key": t.key, "value": t.value, "effect": _TAINT_EFFECTS[int(t.effect)]} for t in config.taints]
    for accelerator in config.accelerators:
        labels[GKE_ACCELERATOR_LABEL] = accelerator.accelerator_type
        labels["cloud.google.com/gke-gpu"] = "true"
        for key in ("capacity", "allocatable"):
            shape[key][GPU_RESOURCE] = str(accelerator.accelerator_count)
        # GKE taints every GPU node so that only pods that tolerate it land there.
        if not any(t["key"] == GPU_RESOURCE for t in taints):
            taints.append({"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"})
    spec: dict[str, Any] = {"providerID": f"gce://{project}/{zone}/{name}"}
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        # No conditions: the kubelet reports Ready once the node registers (KubeFake's
        # register_node; on the real plane kwok, which initialises only nodes not yet Ready).
        "status": shape,
    }


def pool_nodes(pool: Any, *, count: int | None = None, start: int = 0) -> list[dict[str, Any]]:
    """The Nodes GKE registers for ``pool`` (a ``container_v1.NodePool`` whose ``self_link``
    or ``name`` places it: ``.../projects/P/locations/L/clusters/C/nodePools/N``), its
    ``initial_node_count`` of them unless ``count`` says otherwise.

    Examples:
        >>> from google.cloud import container_v1
        >>> pool = container_v1.NodePool(name="cpu", initial_node_count=1, locations=["us-east1-b"],
        ...     self_link="https://container.googleapis.com/v1/projects/p/locations/us-east1/clusters/c/nodePools/cpu",
        ...     config=container_v1.NodeConfig(machine_type="n2-standard-16"))
        >>> [(n["metadata"]["labels"]["topology.kubernetes.io/zone"], n["status"]["allocatable"]["cpu"])
        ...  for n in pool_nodes(pool)]
        [('us-east1-b', '15890m')]
    """
    import re

    m = re.search(r"projects/([^/]+)/locations/([^/]+)/clusters/([^/]+)", pool.self_link or "")
    project, location, cluster = (m[1], m[2], m[3]) if m else ("my-project", "us-east1-b", "cluster")
    zone = pool.locations[0] if pool.locations else location
    n = pool.initial_node_count if count is None else count
    return [gke_node(pool, cluster=cluster, zone=zone, index=i, project=project) for i in range(start, start + n)]


def node_group(pool: Any) -> NodeGroup:
    """``pool`` (a ``container_v1.NodePool`` as :func:`pool_nodes` takes it) as the cluster
    autoscaler's node group: its VMs' Nodes, its autoscaling bounds, whether it is queued, how
    long a flex-start node runs (``config.max_run_duration``).

    Examples:
        >>> import datetime
        >>> from google.cloud import container_v1
        >>> pool = container_v1.NodePool(name="gpu-flex-b", locations=["us-east1-b"],
        ...     config=container_v1.NodeConfig(machine_type="n2-standard-16", flex_start=True,
        ...                                    max_run_duration=datetime.timedelta(hours=6)),
        ...     autoscaling=container_v1.NodePoolAutoscaling(enabled=True, total_max_node_count=2))
        >>> group = node_group(pool)
        >>> group.autoscaled, group.maximum, group.lifetime, group.make(3)["metadata"]["name"][-4:]
        (True, 2, 21600.0, '0003')
    """
    from ._kube_node_groups import NodeGroup

    a = pool.autoscaling
    run = pool.config.max_run_duration
    lifetime = run.total_seconds() if run else None
    return NodeGroup(
        name=pool.name,
        zone=pool.locations[0] if pool.locations else "",
        make=lambda index: pool_nodes(pool, count=1, start=index)[0],
        minimum=int(a.total_min_node_count or a.min_node_count) if a.enabled else 0,
        maximum=int(a.total_max_node_count or a.max_node_count) if a.enabled else 0,
        autoscaled=bool(a.enabled),
        queued=bool(pool.queued_provisioning.enabled),
        lifetime=lifetime if lifetime else None,
    )
