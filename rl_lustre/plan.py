"""The deployment plan: every resource ``up()`` makes or uses, as one dependency graph.

:func:`build_plan` derives the graph from a :class:`~rl_lustre.cluster.Cluster` without
any remote call. The plan is the single description of a deployment: ``str(plan)`` shows
it to people, :meth:`Plan.to_dict` to programs, and the provisioning executor walks the
same nodes (by ``key`` and ``kind``) to create, adopt and delete them, running
independent branches concurrently and tearing down in reverse.

For GKE the graph is::

    network ─ subnet ─┬─ psa-range ─┬─ psa-peering ─────┬─ lustre ─┐
                      │             └─ firewall-lustre ─┘          ├─ pv ─ pvc ─┐
                      └─ gke-cluster ─┬────────────────────────────┘            │
                                      ├─ secret ────────────────────────────────┤
                                      ├─ cpu-pool ──────────────────────────────┼─ raycluster
                                      └─ gpu-pool ──────────────────────────────┘

The Lustre branch never waits for the GKE cluster or its pools: it is the slowest
resource and must start as early as the network allows.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from . import naming
from ._validate import FrozenDict
from .catalog import GPU_MACHINE_TYPES, ownership_labels
from .errors import ConfigError, RLLustreError

if TYPE_CHECKING:
    from .cluster import Cluster

__all__ = ["Plan", "PlanGraphError", "PlannedResource", "build_plan"]

Action = Literal["create", "use"]

# Cluster Toolkit's defaults (examples/gke-a4, gke-managed-lustre): a /18 primary range,
# a /14 for pods and a /20 for services, and a /22 private services access range.
SUBNET_CIDR = "192.168.0.0/18"
PODS_CIDR = "10.4.0.0/14"
SERVICES_CIDR = "10.0.32.0/20"
PODS_RANGE_NAME = "pods"
SERVICES_RANGE_NAME = "services"
PSA_PREFIX_LENGTH = 22
# Service Networking names the VPC peering it creates after the service.
PSA_PEERING_NAME = "servicenetworking-googleapis-com"
LUSTRE_PORT = 988
LUSTRE_CSI_DRIVER = "lustre.csi.storage.gke.io"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
RELEASE_CHANNEL = "REGULAR"


class PlanGraphError(RLLustreError):
    """The plan's graph is malformed (a duplicate key, an unknown dependency, a cycle).

    This is a bug in rl_lustre, not in your configuration.
    """


def _freeze(value: Any, where: str) -> Any:
    """A deep, immutable copy of JSON-shaped data, so that plans stay hashable."""
    if isinstance(value, Mapping):
        out = {}
        for k, item in value.items():
            if not isinstance(k, str):
                raise PlanGraphError(f"{where}: setting keys must be strings, got {k!r}")
            out[k] = _freeze(item, f"{where}.{k}")
        return FrozenDict(out)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item, f"{where}[{i}]") for i, item in enumerate(value))
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise PlanGraphError(f"{where}: {value!r} is not JSON data")


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(item) for k, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


def _str_tuple(keys: Iterable[str]) -> tuple[str, ...]:
    return tuple(keys)


def _resource_tuple(resources: Iterable[PlannedResource]) -> tuple[PlannedResource, ...]:
    return tuple(resources)


@attrs.frozen(kw_only=True)
class PlannedResource:
    """One node of the plan: a resource ``up()`` creates, or one it uses as it is.

    Example:
        >>> from rl_lustre import Cluster
        >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
        ...                zone="us-east1-b").plan()
        >>> lustre = plan.get("lustre")
        >>> lustre.kind, lustre.action, lustre.depends_on
        ('lustre.v1.Instance', 'create', ('psa-peering', 'firewall-lustre'))

    Attributes:
        key: the node's stable id within a plan (``"lustre"``, ``"gpu-pool"``); an
            executor maps it, with ``kind``, to the driver that handles the resource.
        kind: the API type (``"container.v1.NodePool"``, ``"v1/PersistentVolumeClaim"``).
        name: the resource's name in its API.
        settings: the key settings, as JSON data. Secrets appear by name only.
        depends_on: keys of the nodes that must exist first.
        action: ``"create"``: rl_lustre makes it (adopting one that carries its labels)
            and ``down()`` deletes it; ``"use"``: it belongs to you, is read or used as
            it is, and is never modified or deleted.
        labels: ownership labels to put on a created resource (empty for ``"use"``).
            Kinds without labels (Compute firewall rules, the Service Networking
            connection) record ownership where their API allows, or not at all.
    """

    key: str
    kind: str
    name: str
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    depends_on: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    action: Action = "create"
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=FrozenDict)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "settings", _freeze(self.settings, f"{self.key}.settings"))
        if self.action not in ("create", "use"):
            raise PlanGraphError(f"{self.key}: action must be 'create' or 'use', not {self.action!r}")

    def to_dict(self) -> dict[str, Any]:
        """The node as plain JSON data."""
        return {
            "key": self.key,
            "kind": self.kind,
            "name": self.name,
            "action": self.action,
            "depends_on": list(self.depends_on),
            "settings": _thaw(self.settings),
            "labels": dict(self.labels),
        }


def _toposort(resources: tuple[PlannedResource, ...]) -> tuple[PlannedResource, ...]:
    """Validate the graph and order it so that every node follows its dependencies,
    keeping the given order wherever the graph allows (so plans read deterministically)."""
    by_key: dict[str, PlannedResource] = {}
    for r in resources:
        if r.key in by_key:
            raise PlanGraphError(f"duplicate resource key {r.key!r}")
        by_key[r.key] = r
    for r in resources:
        for dep in r.depends_on:
            if dep not in by_key:
                raise PlanGraphError(f"{r.key!r} depends on {dep!r}, which is not in the plan")
            if dep == r.key:
                raise PlanGraphError(f"{r.key!r} depends on itself")
    done: set[str] = set()
    ordered: list[PlannedResource] = []
    while len(ordered) < len(resources):
        ready = next((r for r in resources if r.key not in done and set(r.depends_on) <= done), None)
        if ready is None:
            stuck = sorted(r.key for r in resources if r.key not in done)
            raise PlanGraphError(f"dependency cycle among {', '.join(stuck)}")
        ordered.append(ready)
        done.add(ready.key)
    return tuple(ordered)


@attrs.frozen(kw_only=True)
class Plan:
    """Every resource of a deployment, in dependency order, with no remote call made.

    Example:
        >>> from rl_lustre import Cluster
        >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
        ...                zone="us-east1-b").plan()
        >>> plan.get("gpu-pool").depends_on
        ('gke-cluster',)
        >>> sorted(plan.dependents("gke-cluster"))
        ['cpu-pool', 'gpu-pool', 'pv', 'secret']
        >>> "lustre" in plan.upstream("raycluster"), "gke-cluster" in plan.upstream("lustre")
        (True, False)

    Attributes:
        cluster_name: the deployment's name.
        backend: ``"gke"`` or ``"local"``.
        resources: the nodes; every node comes after the nodes it depends on.
        project: the Google Cloud project (None for a local deployment).
        region: the region (None for a local deployment).
        zone: the zone (None for a local deployment).

    Raises:
        PlanGraphError: on a duplicate key, an unknown dependency or a cycle.
    """

    cluster_name: str
    backend: str
    resources: tuple[PlannedResource, ...] = attrs.field(converter=_resource_tuple)
    project: str | None = None
    region: str | None = None
    zone: str | None = None
    _by_key: Mapping[str, PlannedResource] = attrs.field(init=False, repr=False, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        ordered = _toposort(self.resources)
        object.__setattr__(self, "resources", ordered)
        object.__setattr__(self, "_by_key", FrozenDict({r.key: r for r in ordered}))

    def __iter__(self) -> Iterator[PlannedResource]:
        return iter(self.resources)

    def __len__(self) -> int:
        return len(self.resources)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def keys(self) -> list[str]:
        """The node keys in dependency order."""
        return [r.key for r in self.resources]

    def get(self, key: str) -> PlannedResource:
        """The node with this key.

        Example:
            >>> from rl_lustre import Cluster
            >>> Cluster.local("demo", volume_dir="/tmp/v").plan().get("ray-head").kind
            'local.RayHead'

        Raises:
            KeyError: no such node; the message lists the keys there are.
        """
        try:
            return self._by_key[key]
        except KeyError:
            raise KeyError(f"no resource {key!r} in the plan; it has {', '.join(self._by_key)}") from None

    def dependents(self, key: str) -> tuple[str, ...]:
        """Keys of the nodes that depend directly on ``key``, in plan order.

        Example:
            >>> from rl_lustre import Cluster
            >>> Cluster.local("demo", volume_dir="/tmp/v").plan().dependents("volume-dir")
            ('ray-head',)
        """
        self.get(key)
        return tuple(r.key for r in self.resources if key in r.depends_on)

    def upstream(self, key: str) -> frozenset[str]:
        """Every node ``key`` waits for, directly or through others.

        Example:
            >>> from rl_lustre import Cluster
            >>> sorted(Cluster.local("demo", volume_dir="/tmp/v").plan().upstream("ray-head"))
            ['volume-dir']
        """
        seen: set[str] = set()
        todo = list(self.get(key).depends_on)
        while todo:
            k = todo.pop()
            if k not in seen:
                seen.add(k)
                todo.extend(self._by_key[k].depends_on)
        return frozenset(seen)

    def downstream(self, key: str) -> frozenset[str]:
        """Every node that waits for ``key``, directly or through others; if ``key``
        fails, these cannot be created.

        Example:
            >>> from rl_lustre import Cluster
            >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
            ...                zone="us-east1-b").plan()
            >>> sorted(plan.downstream("lustre"))
            ['pv', 'pvc', 'raycluster']
        """
        self.get(key)
        return frozenset(r.key for r in self.resources if key in self.upstream(r.key))

    def waves(self) -> list[frozenset[str]]:
        """Nodes grouped by depth: each wave needs only nodes of earlier waves, so the
        members of a wave can be created concurrently.

        An executor does better than wave by wave: it starts each node as soon as its
        own dependencies are done. The waves show which branches run side by side.

        Example:
            >>> from rl_lustre import Cluster
            >>> [sorted(w) for w in Cluster.local("demo", volume_dir="/tmp/v").plan().waves()]
            [['volume-dir'], ['ray-head']]
        """
        depth: dict[str, int] = {}
        for r in self.resources:
            depth[r.key] = 1 + max((depth[d] for d in r.depends_on), default=-1)
        return [frozenset(k for k, d in depth.items() if d == level) for level in range(max(depth.values(), default=-1) + 1)]

    def teardown_order(self) -> list[str]:
        """All keys in an order safe for deletion: every node before the nodes it
        depends on. Nodes whose action is ``"use"`` are listed but never deleted.

        Example:
            >>> from rl_lustre import Cluster
            >>> Cluster.local("demo", volume_dir="/tmp/v").plan().teardown_order()
            ['ray-head', 'volume-dir']
        """
        return [r.key for r in reversed(self.resources)]

    def teardown_waves(self) -> list[frozenset[str]]:
        """Nodes grouped for concurrent deletion: each wave's members have no
        dependents left once the earlier waves are deleted.

        Example:
            >>> from rl_lustre import Cluster
            >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
            ...                zone="us-east1-b").plan()
            >>> sorted(plan.teardown_waves()[0])
            ['raycluster']
        """
        height: dict[str, int] = {}
        for r in reversed(self.resources):
            height[r.key] = 1 + max((height[d] for d in self.dependents(r.key)), default=-1)
        return [frozenset(k for k, h in height.items() if h == level) for level in range(max(height.values(), default=-1) + 1)]

    def critical_path(self, durations: Mapping[str, float]) -> tuple[float, list[str]]:
        """The longest chain of dependent nodes, weighted by ``durations``.

        With unlimited concurrency nothing finishes sooner than this chain, so it is
        the lower bound that ``up()``'s wall time is measured against. Keys missing
        from ``durations`` take no time (for instance ``"use"`` nodes).

        Example:
            >>> from rl_lustre import Cluster
            >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
            ...                zone="us-east1-b").plan()
            >>> plan.critical_path({"network": 1, "subnet": 1, "psa-range": 1, "psa-peering": 1,
            ...                     "lustre": 20, "gke-cluster": 8, "gpu-pool": 6})
            (24.0, ['network', 'subnet', 'psa-range', 'psa-peering', 'lustre', 'pv', 'pvc', 'raycluster'])

        Raises:
            ConfigError: a key that is not in the plan, or a negative or non-finite duration.
        """
        for key, seconds in durations.items():
            if key not in self._by_key:
                raise ConfigError("Plan.critical_path", "durations", key,
                                  f"is not a resource of this plan ({', '.join(self._by_key)})")
            if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 <= seconds < math.inf:
                raise ConfigError("Plan.critical_path", f"durations[{key!r}]", seconds,
                                  "must be a finite number of at least 0")
        finish: dict[str, float] = {}
        via: dict[str, str | None] = {}
        for r in self.resources:
            # Plan order makes ties resolve to the earliest-listed dependency.
            prev = max(r.depends_on, key=lambda d: finish[d], default=None)
            finish[r.key] = (finish[prev] if prev else 0.0) + float(durations.get(r.key, 0.0))
            via[r.key] = prev
        if not finish:
            return 0.0, []
        # The last-listed of equal finishes, so that a zero-duration tail stays on the path.
        last: str | None = max(reversed(finish), key=lambda k: finish[k])
        assert last is not None
        total = finish[last]
        path: list[str] = []
        while last is not None:
            path.append(last)
            last = via[last]
        return total, path[::-1]

    def totals(self) -> dict[str, Any]:
        """Headline numbers: resources by action, GPUs, and Lustre capacity and throughput.

        Example:
            >>> from rl_lustre import Cluster
            >>> t = Cluster(name="demo", project="my-project", region="us-east1",
            ...             zone="us-east1-b").plan().totals()
            >>> t["gpus"], t["lustre_capacity_gib"], t["lustre_throughput_mbps"]
            (64, 18000, 8789.0625)
        """
        out: dict[str, Any] = {
            "resources": len(self.resources),
            "create": sum(r.action == "create" for r in self.resources),
            "use": sum(r.action == "use" for r in self.resources),
        }
        if "gpu-pool" in self:
            pool = self.get("gpu-pool").settings
            out["gpu_nodes"] = pool["node_count"]
            out["gpus"] = pool["node_count"] * pool["accelerator"]["count"]
        elif "ray-head" in self:
            head = self.get("ray-head").settings
            out["gpu_nodes"] = head["num_nodes"]
            out["gpus"] = head["num_nodes"] * head["gpus_per_node"]
        if "lustre" in self:
            lustre = self.get("lustre").settings
            out["lustre_capacity_gib"] = lustre["capacity_gib"]
            out["lustre_throughput_mbps"] = lustre["aggregate_throughput_mbps"]
        return out

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON data (``json.dumps(plan.to_dict())`` works).

        Example:
            >>> import json
            >>> from rl_lustre import Cluster
            >>> d = Cluster.local("demo", volume_dir="/tmp/v").plan().to_dict()
            >>> d["backend"], [r["key"] for r in d["resources"]]
            ('local', ['volume-dir', 'ray-head'])
            >>> json.loads(json.dumps(d)) == d
            True
        """
        return {
            "cluster_name": self.cluster_name,
            "backend": self.backend,
            "project": self.project,
            "region": self.region,
            "zone": self.zone,
            "totals": self.totals(),
            "waves": [sorted(w, key=self.keys().index) for w in self.waves()],
            "resources": [r.to_dict() for r in self.resources],
        }

    def __str__(self) -> str:
        return _render(self)


def _fmt(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, str):
        return value or '""'
    return json.dumps(value)


def _pack(items: list[str], width: int) -> list[str]:
    """Join items with ' · ' into lines of at most ``width`` characters where possible."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 3 + len(item) <= width:
            lines[-1] += " · " + item
        else:
            lines.append(item)
    return lines


def _headline(plan: Plan) -> list[str]:
    t = plan.totals()
    if plan.backend == "local":
        head = [f"Plan for deployment {plan.cluster_name!r} on this machine (local backend)"]
    else:
        head = [f"Plan for deployment {plan.cluster_name!r} on GKE · project {plan.project} · "
                f"region {plan.region} · zone {plan.zone}"]
    facts = []
    if "gpu-pool" in plan:
        pool = plan.get("gpu-pool").settings
        facts.append(f"{t['gpus']} GPUs ({pool['node_count']} {pool['provisioning']} {pool['machine_type']} nodes "
                     f"x {pool['accelerator']['count']} {pool['accelerator']['type']})")
    elif "gpus" in t:
        facts.append(f"jobs told {t['gpu_nodes']} node(s) x {t['gpus'] // max(t['gpu_nodes'], 1)} GPU(s)")
    if "lustre" in plan:
        facts.append(f"Lustre {t['lustre_capacity_gib'] / 1024:,.1f} TiB at "
                     f"{t['lustre_throughput_mbps'] / 1000:,.1f} GB/s")
    elif "volume-dir" in plan:
        facts.append(f"volume: directory {plan.get('volume-dir').name}")
    facts.append(f"{t['resources']} resources: {t['create']} to create, {t['use']} to use")
    return [*head, " · ".join(facts)]


def _render(plan: Plan) -> str:
    lines = _headline(plan)
    rows = [("#", "action", "key", "kind", "name", "waits for")]
    rows += [(str(i), r.action, r.key, r.kind, r.name, ", ".join(r.depends_on) or "-")
             for i, r in enumerate(plan.resources, 1)]
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines.append("")
    for i, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if i:
            settings = [f"{k}: {_fmt(v)}" for k, v in plan.resources[i - 1].settings.items()]
            for packed in _pack(settings, 94):
                lines += textwrap.wrap(packed, 100, initial_indent=" " * 6, subsequent_indent=" " * 10,
                                       break_long_words=False, break_on_hyphens=False)
    lines.append("")
    lines.append("Concurrent waves (each node starts once what it waits for is done):")
    order = plan.keys()
    lines += [f"  {n}. {', '.join(sorted(w, key=order.index))}" for n, w in enumerate(plan.waves(), 1)]
    lines.append("Teardown runs in reverse; nodes marked 'use' are never deleted.")
    return "\n".join(lines)


def build_plan(cluster: Cluster) -> Plan:
    """The plan of ``cluster``'s deployment, derived offline from the spec alone.

    Example:
        >>> from rl_lustre import Cluster
        >>> from rl_lustre.plan import build_plan
        >>> plan = build_plan(Cluster(name="demo", project="my-project", region="us-east1",
        ...                           zone="us-east1-b"))
        >>> plan.keys()[:4]
        ['network', 'subnet', 'psa-range', 'psa-peering']
    """
    if cluster.backend == "local":
        return _local_plan(cluster)
    return _gke_plan(cluster)


def _local_plan(cluster: Cluster) -> Plan:
    if cluster.nemo_rl_path is not None:
        driver = f"NeMo-RL from {cluster.nemo_rl_path}"
    else:
        driver = "rehearsal (python -m rl_lustre.rehearsal: rehearses orchestration and storage, does not train)"
    resources = [
        PlannedResource(
            key="volume-dir",
            kind="local.Directory",
            name=cluster.mount_path,
            # Your checkpoints live here: created when missing, never deleted by down().
            action="use",
            settings={"path": cluster.mount_path, "created_if_missing": True},
        ),
        PlannedResource(
            key="ray-head",
            kind="local.RayHead",
            name=cluster.name,
            depends_on=("volume-dir",),
            settings={
                "bind": "127.0.0.1",
                "ports": "free loopback ports, chosen at up()",
                "temp_dir": "a fresh short temporary directory",
                "jobs": driver,
                "num_nodes": cluster.num_nodes,
                "gpus_per_node": cluster.gpus_per_node,
                "secrets": {"names": list(cluster.secrets),
                            "source": "this process's environment at up(), passed to the head"},
            },
            labels=ownership_labels(cluster.name),
        ),
    ]
    return Plan(cluster_name=cluster.name, backend="local", resources=resources)


def _gke_plan(cluster: Cluster) -> Plan:
    assert cluster.volume is not None
    assert cluster.project is not None
    assert cluster.region is not None
    assert cluster.zone is not None
    project, region, zone = cluster.project, cluster.region, cluster.zone
    ours = {**ownership_labels(cluster.name), **cluster.labels}
    own_network = cluster.network is None
    net = naming.network_name(cluster)
    net_path = f"projects/{project}/global/networks/{net}"
    # A user's network is used as it is; GKE then picks its subnet in the region, which
    # in an auto-mode network carries the network's name.
    subnet = naming.subnet_name(cluster) if own_network else net
    vol = cluster.volume
    volume_handle = f"{project}/{zone}/{vol.name}"
    assert vol.capacity_gib is not None
    created: dict[str, Any] = {"action": "create", "labels": ours}
    if own_network:
        net_fields: dict[str, Any] = created
        net_settings: dict[str, Any] = {"auto_create_subnetworks": False, "routing_mode": "REGIONAL"}
        subnet_settings: dict[str, Any] = {
            "region": region,
            "ip_cidr_range": SUBNET_CIDR,
            "secondary_ip_ranges": {PODS_RANGE_NAME: PODS_CIDR, SERVICES_RANGE_NAME: SERVICES_CIDR},
            "private_ip_google_access": True,
        }
        ip_allocation: dict[str, Any] = {
            "use_ip_aliases": True,
            "cluster_secondary_range_name": PODS_RANGE_NAME,
            "services_secondary_range_name": SERVICES_RANGE_NAME,
        }
    else:
        net_fields = {"action": "use"}
        net_settings = {"existing": True}
        subnet_settings = {"region": region, "existing": True}
        # GKE adds these as secondary ranges of the user's subnet.
        ip_allocation = {
            "use_ip_aliases": True,
            "cluster_ipv4_cidr_block": PODS_CIDR,
            "services_ipv4_cidr_block": SERVICES_CIDR,
        }

    # The control plane's DNS endpoint admits any caller with IAM permission on the
    # cluster, from anywhere, so up() and the SDK reach the API without an IP allow-list;
    # the IP endpoint stays behind master authorized networks with only the user's blocks.
    if cluster.authorized_networks:
        blocks = list(cluster.authorized_networks)
        public = ("IP endpoint: the whole internet (public_control_plane=True)"
                  if {"0.0.0.0/0", "::/0"} & set(blocks) else "IP endpoint: only the listed blocks")
    else:
        blocks = []
        public = ("IP endpoint: no client on a public address; rl_lustre uses the DNS endpoint (IAM-gated). "
                  "List blocks in Cluster(authorized_networks=[...]) to open the IP endpoint to them")

    head_pool = naming.gpu_pool_name(cluster) if cluster.head_on_gpu_pool else naming.cpu_pool_name(cluster)
    if cluster.spot:
        provisioning = "Spot"
    elif cluster.reservation is not None:
        provisioning = "reserved"
    else:
        provisioning = "on-demand"
    known = GPU_MACHINE_TYPES.get(cluster.machine_type)
    pool_settings: dict[str, Any] = {
        "machine_type": cluster.machine_type,
        "location": zone,
        "node_count": cluster.num_nodes,
        "accelerator": {
            "type": cluster.accelerator_type,
            "count": cluster.gpus_per_node,
            "gpu_driver_version": "LATEST",
        },
        "provisioning": provisioning,
        "spot": cluster.spot,
        "reservation_affinity": (
            {"consume_reservation_type": "SPECIFIC_RESERVATION",
             "key": "compute.googleapis.com/reservation-name", "values": [cluster.reservation]}
            if cluster.reservation is not None else {"consume_reservation_type": "NO_RESERVATION"}
        ),
        "taints": [GPU_TAINT],
        "gvnic": True,
        "hosts": ["Ray workers", *(["Ray head"] if cluster.head_on_gpu_pool else [])],
    }
    if known is not None:
        pool_settings["vcpus_per_node"] = known.vcpus

    resources: list[PlannedResource] = [
        PlannedResource(key="network", kind="compute.v1.Network", name=net,
                        settings=net_settings, **net_fields),
        PlannedResource(key="subnet", kind="compute.v1.Subnetwork", name=subnet, depends_on=("network",),
                        settings={"network": net, **subnet_settings}, **net_fields),
        # After the subnet: Google picks the PSA block among addresses the VPC does not
        # use yet, so the subnet's ranges must already be there.
        PlannedResource(key="psa-range", kind="compute.v1.GlobalAddress", name=naming.psa_range_name(cluster),
                        depends_on=("subnet",),
                        settings={"network": net, "purpose": "VPC_PEERING", "address_type": "INTERNAL",
                                  "prefix_length": PSA_PREFIX_LENGTH},
                        **created),
        PlannedResource(key="psa-peering", kind="servicenetworking.v1.Connection", name=PSA_PEERING_NAME,
                        depends_on=("psa-range",),
                        settings={"network": net, "service": "servicenetworking.googleapis.com",
                                  "reserved_peering_ranges": [naming.psa_range_name(cluster)]},
                        **created),
        # Its source is the PSA block, known once the range is allocated.
        PlannedResource(key="firewall-lustre", kind="compute.v1.Firewall", name=naming.firewall_name(cluster),
                        depends_on=("psa-range",),
                        settings={"network": net, "direction": "INGRESS",
                                  "allow": [{"protocol": "tcp", "ports": [str(LUSTRE_PORT)]}],
                                  "source_ranges_from": "psa-range"},
                        **created),
        PlannedResource(
            key="lustre", kind="lustre.v1.Instance", name=vol.name,
            depends_on=("psa-peering", "firewall-lustre"),
            settings={
                "location": zone,
                "capacity_gib": vol.capacity_gib,
                "per_unit_storage_throughput": vol.throughput_mbps_per_tib,
                "aggregate_throughput_mbps": vol.throughput_mbps,
                "filesystem": vol.filesystem,
                "network": net_path,
                # The CSI add-on reaches Lustre on 988; the legacy GKE port is off on both sides.
                "gke_support_enabled": False,
                **({"existing": True} if vol.existing else {}),
            },
            **({"action": "use"} if vol.existing else {"action": "create", "labels": {**ours, **vol.labels}}),
        ),
        PlannedResource(
            key="gke-cluster", kind="container.v1.Cluster", name=cluster.name, depends_on=("subnet",),
            settings={
                "region": region,
                "location": region,
                "node_locations": [zone],
                "network": net,
                "subnetwork": subnet,
                "ip_allocation_policy": ip_allocation,
                "addons": {
                    "lustre_csi_driver_config": {"enabled": True, "enable_legacy_lustre_port": False},
                    "ray_operator_config": {"enabled": True},
                },
                "master_authorized_networks": {"enabled": True, "cidr_blocks": blocks, "public_access": public},
                "control_plane_endpoints": {
                    "dns_endpoint": {"allow_external_traffic": True,
                                     "access": "callers with IAM permission on the cluster, from any address"},
                    "ip_endpoint": {"enabled": True, "public_endpoint": True,
                                    "access": "master_authorized_networks only"},
                },
                "workload_identity_pool": f"{project}.svc.id.goog",
                "release_channel": RELEASE_CHANNEL,
                # GKE needs a node pool at creation: the CPU pool is that pool, so no
                # default pool is created and then deleted.
                "initial_node_pool": "cpu-pool (created with the cluster; hosts system pods)",
            },
            **created,
        ),
        PlannedResource(
            key="cpu-pool", kind="container.v1.NodePool", name=naming.cpu_pool_name(cluster),
            depends_on=("gke-cluster",),
            settings={
                "machine_type": cluster.head_machine_type,
                "location": zone,
                "node_count": 1,
                "provisioning": "on-demand",
                "spot": False,
                "hosts": ["system pods", *([] if cluster.head_on_gpu_pool else ["Ray head"])],
                "created_with": "gke-cluster, as its initial node pool",
            },
            **created,
        ),
        PlannedResource(key="gpu-pool", kind="container.v1.NodePool", name=naming.gpu_pool_name(cluster),
                        depends_on=("gke-cluster",), settings=pool_settings, **created),
        # Needs only the API server and the instance's address, not the node pools.
        PlannedResource(
            key="pv", kind="v1/PersistentVolume", name=naming.pv_name(cluster),
            depends_on=("lustre", "gke-cluster"),
            settings={
                "scope": "cluster",
                "csi_driver": LUSTRE_CSI_DRIVER,
                "volume_handle": volume_handle,
                "ip_and_filesystem_from": "the lustre instance's mount point",
                "filesystem": vol.filesystem,
                "capacity": f"{vol.capacity_gib}Gi",
                "access_modes": ["ReadWriteMany"],
            },
            **created,
        ),
        PlannedResource(
            key="pvc", kind="v1/PersistentVolumeClaim", name=naming.pvc_name(cluster), depends_on=("pv",),
            settings={"namespace": cluster.namespace, "volume_name": naming.pv_name(cluster),
                      "storage": f"{vol.capacity_gib}Gi", "access_modes": ["ReadWriteMany"],
                      "storage_class_name": ""},
            **created,
        ),
    ]
    ray_deps = ["pvc", "cpu-pool", "gpu-pool"]
    if cluster.secrets:
        resources.append(PlannedResource(
            key="secret", kind="v1/Secret", name=naming.secret_name(cluster), depends_on=("gke-cluster",),
            settings={"namespace": cluster.namespace, "type": "Opaque", "keys": list(cluster.secrets),
                      "values": "read from this process's environment at up(); never part of the plan"},
            **created,
        ))
        ray_deps.insert(1, "secret")
    resources.append(PlannedResource(
        key="raycluster", kind="ray.io/v1/RayCluster", name=naming.raycluster_name(cluster),
        depends_on=tuple(ray_deps),
        settings={
            "namespace": cluster.namespace,
            "image": cluster.image,
            "ray_version": cluster.ray_version,
            "head": {"node_pool": head_pool, "spot": cluster.spot and cluster.head_on_gpu_pool},
            "workers": {"replicas": cluster.num_nodes, "gpus_per_worker": cluster.gpus_per_node,
                        "node_pool": naming.gpu_pool_name(cluster),
                        "node_selector": {"cloud.google.com/gke-accelerator": cluster.accelerator_type},
                        "tolerations": ["nvidia.com/gpu"]},
            "volume": {"claim": naming.pvc_name(cluster), "mount_path": cluster.mount_path},
            "shm": "memory-backed emptyDir at /dev/shm",
            "head_service": cluster.head_service,
            **({"secrets": {"secret": naming.secret_name(cluster), "env_from_secret_key_ref": list(cluster.secrets)}}
               if cluster.secrets else {}),
        },
        **created,
    ))
    return Plan(cluster_name=cluster.name, backend="gke", resources=resources,
                project=project, region=region, zone=zone)
