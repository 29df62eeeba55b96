"""What a deployment costs per hour, in USD, from the dated price table in :mod:`rl_lustre.catalog`.

:meth:`Plan.cost <rl_lustre.plan.Plan.cost>` prices a plan before anything exists;
``rl-lustre ls`` prices what it finds running; :meth:`Run.cost_so_far
<rl_lustre.run.Run.cost_so_far>` multiplies the deployment's rate by the run's hours.
Every price is a list price recorded on ``catalog.PRICES.as_of``; :class:`Prices` (from
:mod:`rl_lustre.prices`) overrides any of them and applies your discounts (committed use,
negotiated, reservations).

Priced: the GPU node pool (Spot, flex-start, reserved or on-demand; :func:`lane_item` prices
each lane of a capacity policy), the CPU pool of the Ray head,
Managed Lustre by tier and GiB, GKE's cluster management fee, and the preload disk image
(its storage, which outlives ``down()``, and the GPU nodes' secondary boot disks), and the
warm-start export's Cloud Storage (``Cluster.warm_start``; also kept after ``down()``) and the
runs' results (``Cluster.results``: per run and month, shown but not in the hourly total). Networking
resources (VPC, subnet, PSA range, firewall rule) and the nodes' service account carry no hourly charge of their own;
traffic, boot disks and logging are not included.

Examples:
    >>> from rl_lustre import Cluster
    >>> cost = Cluster(name="demo", project="my-project", region="us-east1",
    ...                zone="us-east1-b").plan().cost()
    >>> [(i.key, round(i.usd_per_hour, 2)) for i in cost.items]  # doctest: +NORMALIZE_WHITESPACE
    [('gpu-pool', 296.0), ('cpu-pool', 1.05), ('lustre', 7.4), ('gke-cluster', 0.1), ('node-sa', 0.0),
     ('preload-image', 0.02), ('secondary-disks', 0.16)]
    >>> round(cost.total_usd_per_hour, 2)
    304.73
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ._public import public
from .plankeys import (
    CPU_POOL_KEY,
    GKE_CLUSTER_KEY,
    GPU_POOL_KEY,
    LUSTRE_KEY,
    NODE_SA_KEY,
    PRELOAD_IMAGE_KEY,
    RESULTS_EXPORT_KEY,
    WARM_EXPORT_KEY,
)
from .prices import Prices, Provisioning

if TYPE_CHECKING:
    from .plan.graph import Plan
    from .spec import ClusterSpec

__all__ = [
    "Cost",
    "CostItem",
    "Prices",
    "lane_item",
    "plan_cost",
    "preload_image_item",
    "results_item",
    "secondary_disks_item",
    "warm_start_item",
]


@public("rl_lustre")
@attrs.frozen(kw_only=True)
class CostItem:
    """The hourly cost of one resource.

    Attributes:
        key: the plan key (``"gpu-pool"``), or the resource's kind where there is no plan.
        name: the resource's name.
        description: what is priced, in words (``"8 × a4-highgpu-8g, Spot"``).
        quantity: how many units (nodes, GiB, clusters).
        unit: the unit (``"node"``, ``"GiB"``, ``"cluster"``).
        unit_usd_per_hour: USD per unit-hour; None when there is no price for it.
        counted: False for a resource you own and the deployment only uses: shown, not totalled.
        note: why the price is a stand-in or missing.
    """

    key: str
    name: str
    description: str
    quantity: float
    unit: str
    unit_usd_per_hour: float | None
    counted: bool = True
    note: str = ""

    @property
    def usd_per_hour(self) -> float | None:
        """``quantity × unit_usd_per_hour``; None without a price."""
        return None if self.unit_usd_per_hour is None else self.quantity * self.unit_usd_per_hour

    def to_dict(self) -> dict[str, Any]:
        """The item as JSON data."""
        return {
            "key": self.key,
            "name": self.name,
            "description": self.description,
            "quantity": self.quantity,
            "unit": self.unit,
            "unit_usd_per_hour": self.unit_usd_per_hour,
            "usd_per_hour": self.usd_per_hour,
            "counted": self.counted,
            "note": self.note,
        }


def _cost_items(items: Iterable[CostItem]) -> tuple[CostItem, ...]:
    return tuple(items)


def _notes(notes: Iterable[str]) -> tuple[str, ...]:
    return tuple(notes)


@public("rl_lustre")
@attrs.frozen(kw_only=True)
class Cost:
    """USD per hour of a deployment, per resource and in total.

    Examples:
        >>> from rl_lustre import Cluster
        >>> cost = Cluster(name="demo", project="my-project", region="us-east1",
        ...                zone="us-east1-b", spot=False).plan().cost()
        >>> cost.get("gpu-pool").description
        '8 × a4-highgpu-8g, on-demand'
        >>> round(cost.for_hours(24))
        19630

    Attributes:
        items: one per priced resource.
        prices_as_of: the date of the list prices used.
        sources: where each kind of list price was read.
        notes: remarks that apply to the whole estimate.
    """

    items: tuple[CostItem, ...] = attrs.field(converter=_cost_items)
    prices_as_of: str
    sources: Mapping[str, str] = attrs.field(factory=dict)
    notes: tuple[str, ...] = attrs.field(default=(), converter=_notes)

    @property
    def total_usd_per_hour(self) -> float:
        """The sum of the counted items that have a price."""
        return sum(i.usd_per_hour for i in self.items if i.counted and i.usd_per_hour is not None)

    @property
    def complete(self) -> bool:
        """Whether every counted item has a price."""
        return all(i.usd_per_hour is not None for i in self.items if i.counted)

    def get(self, key: str) -> CostItem:
        """The item of the resource ``key``.

        Raises:
            KeyError: no such item; the message lists those there are.
        """
        for item in self.items:
            if item.key == key:
                return item
        raise KeyError(f"no cost item {key!r}; there are {', '.join(i.key for i in self.items) or 'none'}")

    def for_hours(self, hours: float) -> float:
        """USD for ``hours`` of running as it is."""
        return self.total_usd_per_hour * hours

    def to_dict(self) -> dict[str, Any]:
        """The cost as JSON data."""
        return {
            "currency": "USD",
            "total_usd_per_hour": round(self.total_usd_per_hour, 4),
            "complete": self.complete,
            "prices_as_of": self.prices_as_of,
            "items": [i.to_dict() for i in self.items],
            "sources": dict(self.sources),
            "notes": list(self.notes),
        }

    def headline(self) -> str:
        """The total in one line, with the date of the prices.

        Examples:
            >>> from rl_lustre import Cluster
            >>> Cluster(name="demo", project="my-project", region="us-east1",
            ...         zone="us-east1-b").plan().cost().headline()
            '$304.73/hour · list prices of 2025-10-01, before taxes'
        """
        if not self.items:
            return "no cloud resources, $0.00/hour"
        return (
            f"${self.total_usd_per_hour:,.2f}/hour"
            + ("" if self.complete else " (incomplete: some resources have no price)")
            + f" · list prices of {self.prices_as_of}, before taxes"
        )

    def __str__(self) -> str:
        if not self.items:
            return "Cost: no cloud resources, $0.00/hour"
        rows = [
            (
                i.key,
                i.description,
                "-" if i.usd_per_hour is None else f"${i.usd_per_hour:,.2f}/h",
                ("(yours, not counted) " if not i.counted else "") + i.note,
            )
            for i in self.items
        ]
        widths = [max(len(r[c]) for r in rows) for c in range(3)]
        lines = [
            f"Cost: ${self.total_usd_per_hour:,.2f}/hour"
            + ("" if self.complete else " (incomplete: some resources have no price)")
            + f" · list prices of {self.prices_as_of}, before taxes; override with rl_lustre.Prices"
        ]
        lines += [
            "  " + "  ".join([r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2].rjust(widths[2]), r[3]]).rstrip()
            for r in rows
        ]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def node_pool_item(
    key: str, name: str, machine_type: str, nodes: int, provisioning: Provisioning, region: str | None, prices: Prices
) -> CostItem:
    """The cost of a node pool of ``nodes`` VMs.

    Examples:
        >>> node_pool_item("gpu-pool", "p", "a4-highgpu-8g", 2, "Spot", "us-east1", Prices()).usd_per_hour
        74.0
    """
    rate, note = prices.machine_rate(machine_type, provisioning, region)
    return CostItem(
        key=key,
        name=name,
        description=f"{nodes} × {machine_type}, {provisioning}",
        quantity=nodes,
        unit="node",
        unit_usd_per_hour=rate,
        note=note,
    )


def lane_item(
    spec: ClusterSpec, provisioning: Provisioning, *, zone: str | None = None, prices: Prices | None = None
) -> CostItem:
    """What the GPU pool costs per hour on one lane of the capacity policy, for ``plan()`` to
    show beside each attempt; ``provisioning`` as the lane's pool names it
    (``plan.capacity.PROVISIONING[kind]``: ``"Spot"``, ``"flex-start"``, ``"reserved"``,
    ``"on-demand"``).

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b", num_nodes=8)
        >>> [(p, lane_item(c, p).usd_per_hour) for p in ("Spot", "flex-start", "on-demand")]
        [('Spot', 296.0), ('flex-start', 515.52), ('on-demand', 809.2)]
    """
    return node_pool_item(
        GPU_POOL_KEY,
        f"{provisioning} in {zone or spec.zone}",
        spec.machine_type,
        spec.num_nodes,
        provisioning,
        str(spec.region),
        prices or Prices(),
    )


def lustre_item(key: str, name: str, capacity_gib: int, tier: int, prices: Prices, *, counted: bool = True) -> CostItem:
    """The cost of a Managed Lustre instance of ``capacity_gib`` at ``tier`` MB/s per TiB.

    Examples:
        >>> round(lustre_item("lustre", "v", 18000, 500, Prices()).usd_per_hour, 2)
        8.38
    """
    rate, note = prices.lustre_rate(tier)
    return CostItem(
        key=key,
        name=name,
        description=f"Managed Lustre {capacity_gib:,} GiB at {tier} MB/s/TiB",
        quantity=capacity_gib,
        unit="GiB",
        unit_usd_per_hour=rate,
        counted=counted,
        note=note,
    )


def gke_cluster_item(key: str, name: str, prices: Prices) -> CostItem:
    """GKE's cluster management fee for one cluster."""
    return CostItem(
        key=key,
        name=name,
        description="GKE cluster management fee",
        quantity=1,
        unit="cluster",
        unit_usd_per_hour=prices.table.gke_cluster_hour,
    )


def preload_image_item(
    key: str, name: str, size_gib: float, prices: Prices, *, counted: bool = True, note: str = ""
) -> CostItem:
    """The storage of a preload disk image of ``size_gib`` (kept after ``down()``).

    Examples:
        >>> round(preload_image_item("preload-image", "rlp-x", 250, Prices()).usd_per_hour * 730, 2)
        12.5
    """
    t = prices.table
    return CostItem(
        key=key,
        name=name,
        description=f"disk image storage, {size_gib:,.0f} GiB",
        quantity=size_gib,
        unit="GiB",
        unit_usd_per_hour=t.image_gib_month / t.hours_per_month,
        counted=counted,
        note=note,
    )


def secondary_disks_item(key: str, name: str, nodes: int, size_gib: float, disk_type: str, prices: Prices) -> CostItem:
    """The secondary boot disks of ``nodes`` nodes, each of ``size_gib`` (the disk image's size),
    of the nodes' boot disk type; they exist while the nodes do.

    Examples:
        >>> round(secondary_disks_item("secondary-disks", "gpu-pool", 8, 250, "hyperdisk-balanced",
        ...                            Prices()).usd_per_hour, 3)
        0.164
    """
    t = prices.table
    month = t.disk_gib_month.get(disk_type)
    return CostItem(
        key=key,
        name=name,
        description=f"{nodes} × {size_gib:,.0f} GiB {disk_type} secondary boot disks",
        quantity=nodes * size_gib,
        unit="GiB",
        note="" if month is not None else f"no price for {disk_type}",
        unit_usd_per_hour=None if month is None else month / t.hours_per_month,
    )


def _preload_items(plan: Plan, prices: Prices) -> tuple[list[CostItem], list[str]]:
    """The preload image's storage and the GPU nodes' secondary boot disks, and a note."""
    from .catalog import (
        PRELOAD_DATA_DISK_GB,
        PRELOAD_DATA_DISK_TYPE,
        PRELOAD_MACHINE_TYPE,
        boot_disk_type,
    )

    node = plan.get(PRELOAD_IMAGE_KEY)
    t = prices.table
    if node.action == "use":
        return [], [
            f"your preload image {node.name} (storage yours; the GPU nodes' secondary boot disks, of its "
            "size, are not priced offline)"
        ]
    # The image is made from the builder's data disk: its size bounds the storage and each
    # node's secondary boot disk (billed on what is stored: less).
    size = float(PRELOAD_DATA_DISK_GB)
    month = size * t.image_gib_month
    vm = t.machines[PRELOAD_MACHINE_TYPE].on_demand
    build_hours = node.settings["build"]["estimated_minutes"] / 60
    build = build_hours * (vm + size * t.disk_gib_month.get(PRELOAD_DATA_DISK_TYPE, 0.0) / t.hours_per_month)
    items = [
        preload_image_item(
            PRELOAD_IMAGE_KEY,
            node.name,
            size,
            prices,
            note=(f"kept after down(): at most ${month:,.2f}/month until deleted; built once (about ${build:,.2f})"),
        )
    ]
    gpu = plan.get(GPU_POOL_KEY) if GPU_POOL_KEY in plan else None
    if gpu is not None and "preload" in gpu.settings:
        s = gpu.settings
        items.append(
            secondary_disks_item(
                "secondary-disks", gpu.name, s["nodes"], size, boot_disk_type(s["machine_type"]), prices
            )
        )
    return items, [
        f"kept after down(): the preload disk image, at most ${month:,.2f}/month "
        "(down(delete_preload_image=True) or rl-lustre gc --preload-images deletes it)"
    ]


def warm_start_item(key: str, name: str, gigabytes: float, prices: Prices) -> CostItem:
    """The Cloud Storage the warm-start export of ``gigabytes`` occupies (kept after ``down()``).

    Examples:
        >>> item = warm_start_item("warm-export", "gs://b/p/volume/", 290.8, Prices())
        >>> round(item.usd_per_hour * 730, 2)
        5.82
    """
    t = prices.table
    month = gigabytes * t.gcs_gb_month
    return CostItem(
        key=key,
        name=name,
        description=f"Cloud Storage Standard, {gigabytes:,.0f} GB (estimated)",
        quantity=gigabytes,
        unit="GB",
        unit_usd_per_hour=t.gcs_gb_month / t.hours_per_month,
        note=f"kept after down(): ${month:,.2f}/month while the export stays in your bucket; "
        "transfers and operations not included",
    )


def results_item(key: str, name: str, gigabytes_per_run: float, prices: Prices) -> CostItem:
    """The Cloud Storage one run's results occupy (``Cluster.results``): shown per run and per
    month, not in the hourly total (it starts at ``down()`` and lasts as long as you keep them).

    Examples:
        >>> item = results_item("results-export", "gs://b/rl", 2304.0, Prices())
        >>> round(item.usd_per_hour * 730, 2), item.counted
        (46.08, False)
    """
    t = prices.table
    month = gigabytes_per_run * t.gcs_gb_month
    return CostItem(
        key=key,
        name=name,
        description=f"Cloud Storage Standard, {gigabytes_per_run:,.0f} GB per run kept (estimated)",
        quantity=gigabytes_per_run,
        unit="GB",
        unit_usd_per_hour=t.gcs_gb_month / t.hours_per_month,
        counted=False,
        note=f"${month:,.2f}/month per run kept, from down() on (${t.gcs_gb_month:.3f}/GB-month); "
        "transfers and operations not included",
    )


def plan_cost(plan: Plan, prices: Prices | None = None) -> Cost:
    """What ``plan``'s deployment costs per hour once it is up.

    Examples:
        >>> from rl_lustre import Cluster
        >>> plan_cost(Cluster.local("demo", volume_dir="/tmp/v").plan()).total_usd_per_hour
        0
    """
    prices = prices or Prices()
    table = prices.table
    if plan.backend == "local":
        return Cost(items=(), prices_as_of=table.as_of, notes=("a local deployment has no cloud cost",))
    items: list[CostItem] = []
    for key in (GPU_POOL_KEY, CPU_POOL_KEY):
        if key in plan:
            node = plan.get(key)
            s = node.settings
            # A pool that autoscales from 0 (flex-start) is priced at the nodes it runs once granted.
            nodes = s.get("autoscaling", {}).get("total_max_node_count") or s["node_count"]
            items.append(
                node_pool_item(key, node.name, s["machine_type"], nodes, s["provisioning"], plan.region, prices)
            )
    if LUSTRE_KEY in plan:
        node = plan.get(LUSTRE_KEY)
        s = node.settings
        items.append(
            lustre_item(
                LUSTRE_KEY,
                node.name,
                s["capacity_gib"],
                s["per_unit_storage_throughput"],
                prices,
                counted=node.action == "create",
            )
        )
    if GKE_CLUSTER_KEY in plan:
        items.append(gke_cluster_item(GKE_CLUSTER_KEY, plan.get(GKE_CLUSTER_KEY).name, prices))
    if NODE_SA_KEY in plan:
        items.append(
            CostItem(
                key=NODE_SA_KEY,
                name=plan.get(NODE_SA_KEY).name,
                unit="account",
                quantity=1,
                description="IAM service account of the nodes, with its project roles",
                unit_usd_per_hour=0.0,
                note="IAM has no charge",
            )
        )
    notes = [
        "networking (VPC, subnet, PSA range, firewall) has no hourly charge; traffic, boot disks and "
        "logging are not included"
    ]
    if PRELOAD_IMAGE_KEY in plan:
        more, said = _preload_items(plan, prices)
        items += more
        notes += said
    if WARM_EXPORT_KEY in plan:
        node = plan.get(WARM_EXPORT_KEY)
        item = warm_start_item(WARM_EXPORT_KEY, node.name, node.settings["estimated_gb"], prices)
        items.append(item)
        notes.append(
            f"kept after down(): the warm-start export in your bucket, about "
            f"${(item.usd_per_hour or 0) * table.hours_per_month:,.2f}/month"
        )
    if RESULTS_EXPORT_KEY in plan:
        node = plan.get(RESULTS_EXPORT_KEY)
        item = results_item(RESULTS_EXPORT_KEY, node.name, node.settings["estimated_gb_per_run"], prices)
        items.append(item)
        hf = node.settings["hf_copy_gb"]
        items.append(
            CostItem(
                key="model-export",
                name=node.name,
                description=f"Cloud Storage Standard, {hf:,.0f} GB per model exported in Hugging Face format",
                quantity=hf,
                unit="GB",
                unit_usd_per_hour=table.gcs_gb_month / table.hours_per_month,
                counted=False,
                note=f"${hf * table.gcs_gb_month:,.2f}/month per run.export_model(..., format='hf') kept "
                "(and as much on the volume while it is up)",
            )
        )
        notes.append(
            f"kept after down(): each run's results in your bucket, about "
            f"${(item.usd_per_hour or 0) * table.hours_per_month:,.2f}/month per run "
            f"({node.settings['estimated_for']}; not in the hourly total)"
        )
    return Cost(items=items, prices_as_of=table.as_of, sources=table.sources, notes=notes)
