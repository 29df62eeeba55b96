"""The plan graph: resources as nodes, their dependencies, and what can run side by side.

:class:`Plan` is built from :class:`PlannedResource` nodes by the per-backend builders
(:mod:`rl_lustre.plan.gke`, :mod:`rl_lustre.plan.local`); it validates the graph and
answers the executor's and the reader's questions about it.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from .._public import public
from .._validate import FrozenDict
from ..errors import ConfigError, RLLustreError
from ..plankeys import GPU_POOL_KEY, LUSTRE_KEY, RAY_HEAD_KEY, VOLUME_DIR_KEY

if TYPE_CHECKING:
    from ..cost import Cost
    from ..prices import Prices

__all__ = ["ACTIONS", "Action", "Plan", "PlanGraphError", "PlannedResource"]

Action = Literal["create", "use", "cache"]
ACTIONS = ("create", "use", "cache")


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


@public("rl_lustre")
@attrs.frozen(kw_only=True)
class PlannedResource:
    """One node of the plan: a resource ``up()`` creates, or one it uses as it is.

    Examples:
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
            it is, and is never modified or deleted; ``"cache"``: rl_lustre makes it when
            missing and every later deployment reuses it (the preload disk image): kept by
            ``down()`` and by a rollback, deleted only when asked.
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
        if self.action not in ACTIONS:
            raise PlanGraphError(f"{self.key}: action must be one of {', '.join(ACTIONS)}, not {self.action!r}")

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


@public("rl_lustre")
@attrs.frozen(kw_only=True)
class Plan:
    """Every resource of a deployment, in dependency order, with no remote call made.

    Examples:
        >>> from rl_lustre import Cluster
        >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
        ...                zone="us-east1-b", fabric="tcp").plan()
        >>> plan.get("gpu-pool").depends_on
        ('gke-cluster', 'node-sa', 'preload-image', 'compute-class')
        >>> sorted(plan.dependents("gke-cluster"))
        ['compute-class', 'cpu-pool', 'gpu-pool', 'head-account', 'head-nodes-role', 'head-role', 'pv', 'secret']
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

        Examples:
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

        Examples:
            >>> from rl_lustre import Cluster
            >>> Cluster.local("demo", volume_dir="/tmp/v").plan().dependents("volume-dir")
            ('ray-head',)
        """
        self.get(key)
        return tuple(r.key for r in self.resources if key in r.depends_on)

    def upstream(self, key: str) -> frozenset[str]:
        """Every node ``key`` waits for, directly or through others.

        Examples:
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

        Examples:
            >>> from rl_lustre import Cluster
            >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
            ...                zone="us-east1-b").plan()
            >>> sorted(plan.downstream("lustre"))
            ['keeper', 'model-prefetch', 'pv', 'pvc', 'raycluster']
        """
        self.get(key)
        return frozenset(r.key for r in self.resources if key in self.upstream(r.key))

    def graph(self) -> str:
        """The dependency graph drawn as text, computed from the nodes: each node under the
        dependency it waits for longest, ``+ a, b`` for the others it waits for, families
        such as ``rdma-subnet-0..7`` folded into one line (:mod:`rl_lustre.plan.drawing`).

        Examples:
            >>> from rl_lustre import Cluster
            >>> print(Cluster.local("demo", volume_dir="/tmp/v").plan().graph())
            volume-dir [use]
            └─ ray-head
        """
        from .drawing import draw

        return draw(self)

    def waves(self) -> list[frozenset[str]]:
        """Nodes grouped by depth: each wave needs only nodes of earlier waves, so the
        members of a wave can be created concurrently.

        An executor does better than wave by wave: it starts each node as soon as its
        own dependencies are done. The waves show which branches run side by side.

        Examples:
            >>> from rl_lustre import Cluster
            >>> [sorted(w) for w in Cluster.local("demo", volume_dir="/tmp/v").plan().waves()]
            [['volume-dir'], ['ray-head']]
        """
        depth: dict[str, int] = {}
        for r in self.resources:
            depth[r.key] = 1 + max((depth[d] for d in r.depends_on), default=-1)
        return [
            frozenset(k for k, d in depth.items() if d == level) for level in range(max(depth.values(), default=-1) + 1)
        ]

    def teardown_order(self) -> list[str]:
        """All keys in an order safe for deletion: every node before the nodes it
        depends on. Nodes whose action is ``"use"`` are listed but never deleted.

        Examples:
            >>> from rl_lustre import Cluster
            >>> Cluster.local("demo", volume_dir="/tmp/v").plan().teardown_order()
            ['ray-head', 'volume-dir']
        """
        return [r.key for r in reversed(self.resources)]

    def teardown_waves(self) -> list[frozenset[str]]:
        """Nodes grouped for concurrent deletion: each wave's members have no
        dependents left once the earlier waves are deleted.

        Examples:
            >>> from rl_lustre import Cluster
            >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
            ...                zone="us-east1-b", fabric="tcp").plan()
            >>> sorted(plan.teardown_waves()[0])
            ['image-prepull', 'keeper', 'model-prefetch']
        """
        height: dict[str, int] = {}
        for r in reversed(self.resources):
            height[r.key] = 1 + max((height[d] for d in self.dependents(r.key)), default=-1)
        return [
            frozenset(k for k, h in height.items() if h == level)
            for level in range(max(height.values(), default=-1) + 1)
        ]

    def critical_path(self, durations: Mapping[str, float]) -> tuple[float, list[str]]:
        """The longest chain of dependent nodes, weighted by ``durations``.

        With unlimited concurrency nothing finishes sooner than this chain, so it is
        the lower bound that ``up()``'s wall time is measured against. Keys missing
        from ``durations`` take no time (for instance ``"use"`` nodes).

        Examples:
            >>> from rl_lustre import Cluster
            >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
            ...                zone="us-east1-b").plan()
            >>> plan.critical_path({"network": 1, "subnet": 1, "psa-range": 1, "psa-peering": 1,
            ...                     "lustre": 20, "gke-cluster": 8, "gpu-pool": 6})
            (23.0, ['network', 'psa-range', 'psa-peering', 'lustre', 'pv', 'pvc', 'model-prefetch'])

        Raises:
            ConfigError: a key that is not in the plan, or a negative or non-finite duration.
        """
        for key, seconds in durations.items():
            if key not in self._by_key:
                raise ConfigError(
                    "Plan.critical_path",
                    "durations",
                    key,
                    f"is not a resource of this plan ({', '.join(self._by_key)})",
                )
            if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 <= seconds < math.inf:
                raise ConfigError(
                    "Plan.critical_path", f"durations[{key!r}]", seconds, "must be a finite number of at least 0"
                )
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

        Examples:
            >>> from rl_lustre import Cluster
            >>> t = Cluster(name="demo", project="my-project", region="us-east1",
            ...             zone="us-east1-b").plan().totals()
            >>> t["gpus"], t["lustre_capacity_gib"], t["lustre_throughput_mbps"]
            (64, 9000, 8789.0625)
        """
        out: dict[str, Any] = {
            "resources": len(self.resources),
            "create": sum(r.action == "create" for r in self.resources),
            "use": sum(r.action == "use" for r in self.resources),
            "cache": sum(r.action == "cache" for r in self.resources),
        }
        if GPU_POOL_KEY in self:
            pool = self.get(GPU_POOL_KEY).settings
            out["gpu_nodes"] = pool["nodes"]
            out["gpus"] = pool["nodes"] * pool["accelerator"]["count"]
        elif RAY_HEAD_KEY in self:
            head = self.get(RAY_HEAD_KEY).settings
            out["gpu_nodes"] = head["num_nodes"]
            out["gpus"] = head["num_nodes"] * head["gpus_per_node"]
        if LUSTRE_KEY in self:
            lustre = self.get(LUSTRE_KEY).settings
            out["lustre_capacity_gib"] = lustre["capacity_gib"]
            out["lustre_throughput_mbps"] = lustre["aggregate_throughput_mbps"]
        return out

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON data (``json.dumps(plan.to_dict())`` works).

        Examples:
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
            "cost": self.cost().to_dict(),
        }

    def cost(self, prices: Prices | None = None) -> Cost:
        """USD per hour of the deployment once it is up, per resource and in total.

        From the dated list prices in :mod:`rl_lustre.catalog`; ``prices`` overrides
        rates and applies discounts (see :class:`rl_lustre.Prices`).

        Examples:
            >>> from rl_lustre import Cluster
            >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
            ...                zone="us-east1-b").plan()
            >>> round(plan.cost().get("gpu-pool").usd_per_hour, 2)
            296.0
        """
        from .._validate import need
        from ..cost import plan_cost
        from ..prices import Prices

        need("Plan.cost", "prices", prices, Prices, "a rl_lustre.Prices", optional=True)
        return plan_cost(self, prices)

    def __str__(self) -> str:
        cost = self.cost()
        return _render(self, cost) + "\n\n" + str(cost)


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


def _headline(plan: Plan, cost: Cost) -> list[str]:
    t = plan.totals()
    if plan.backend == "local":
        head = [f"Plan for deployment {plan.cluster_name!r} on this machine (local backend)"]
    else:
        head = [
            f"Plan for deployment {plan.cluster_name!r} on GKE · project {plan.project} · "
            f"region {plan.region} · zone {plan.zone}"
        ]
    facts = []
    if GPU_POOL_KEY in plan:
        pool = plan.get(GPU_POOL_KEY).settings
        facts.append(
            f"{t['gpus']} GPUs ({pool['nodes']} {pool['provisioning']} {pool['machine_type']} nodes "
            f"x {pool['accelerator']['count']} {pool['accelerator']['type']})"
        )
    elif "gpus" in t:
        facts.append(f"jobs told {t['gpu_nodes']} node(s) x {t['gpus'] // max(t['gpu_nodes'], 1)} GPU(s)")
    if LUSTRE_KEY in plan:
        facts.append(
            f"Lustre {t['lustre_capacity_gib'] / 1024:,.1f} TiB at {t['lustre_throughput_mbps'] / 1000:,.1f} GB/s"
        )
    elif VOLUME_DIR_KEY in plan:
        facts.append(f"volume: directory {plan.get(VOLUME_DIR_KEY).name}")
    cached = f", {t['cache']} cached (kept after down)" if t["cache"] else ""
    facts.append(f"{t['resources']} resources: {t['create']} to create, {t['use']} to use{cached}")
    priced = " · per resource at the end" if cost.items else ""
    return [*head, " · ".join(facts), f"Cost: {cost.headline()}{priced}"]


def _render(plan: Plan, cost: Cost) -> str:
    lines = _headline(plan, cost)
    rows = [("#", "action", "key", "kind", "name", "waits for")]
    rows += [
        (str(i), r.action, r.key, r.kind, r.name, ", ".join(r.depends_on) or "-")
        for i, r in enumerate(plan.resources, 1)
    ]
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines.append("")
    for i, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if i:
            settings = [f"{k}: {_fmt(v)}" for k, v in plan.resources[i - 1].settings.items()]
            for packed in _pack(settings, 94):
                lines += textwrap.wrap(
                    packed,
                    100,
                    initial_indent=" " * 6,
                    subsequent_indent=" " * 10,
                    break_long_words=False,
                    break_on_hyphens=False,
                )
    lines.append("")
    lines.append("Concurrent waves (each node starts once what it waits for is done):")
    order = plan.keys()
    lines += [f"  {n}. {', '.join(sorted(w, key=order.index))}" for n, w in enumerate(plan.waves(), 1)]
    lines.append("Teardown runs in reverse; nodes marked 'use' are never deleted.")
    return "\n".join(lines)
