"""The quota half of the online check: GPU quota per kind of capacity, ``GPUS_ALL_REGIONS``,
Managed Lustre's capacity quota, and the reservations the project sees.

The newer GPU families (:data:`rl_lustre.catalog.GPU_FAMILIES`) count in Compute's
``GPUS_PER_GPU_FAMILY`` quota (on demand) and ``PREEMPTIBLE_GPUS_PER_GPU_FAMILY`` (Spot and
flex-start), by ``gpu_family`` and ``region``, read through the Cloud Quotas API, with
``GPUS_ALL_REGIONS`` on top; other GPU types count in Compute's per-type region quotas. A
reservation lane needs no GPU quota of its own: the reservation is looked up instead.

A quota short for some lanes of the capacity policy but not all is "unknown" (``up()`` moves
on to the next lane); short for every lane, it is a problem. The Cloud Quotas API reports
limits, not usage: GPUs or Lustre capacity already in use count against the limits too,
and every item says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .catalog import (
    GPU_FAMILIES,
    GPU_FAMILY_QUOTA,
    GPU_QUOTA_SERVICE,
    GPUS_ALL_REGIONS_QUOTA,
    PREEMPTIBLE_GPU_FAMILY_QUOTA,
)
from .check_items import CheckItem, Verdict, quota_metric
from .errors import CredentialsError, PermissionDeniedError

if TYPE_CHECKING:
    from .gcp.capacity import Capacity, Reservation
    from .gcp.quotas import CloudQuotas, QuotaInfo
    from .spec import ClusterSpec

__all__ = ["LUSTRE_SERVICE", "lanes", "quota_items"]

LUSTRE_SERVICE = "lustre.googleapis.com"
_USAGE = "Cloud Quotas reports limits, not usage: what already runs counts against it too"
_ENABLE = (
    "enable the Cloud Quotas API (`gcloud services enable cloudquotas.googleapis.com`) and grant "
    "roles/cloudquotas.viewer, or look it up in the console (IAM & Admin → Quotas)"
)
# Which pool of GPU quota each kind of capacity draws on: flex-start VMs consume the preemptible
# quota, as Spot VMs do (Google's Dynamic Workload Scheduler pages, "Quota requirements").
_POOL = {"spot": "preemptible", "flex-start": "preemptible", "on-demand": "on-demand"}


def lanes(cluster: ClusterSpec) -> list[tuple[str, str | None]]:
    """The kinds of capacity the cluster tries, in order, with a reservation lane's reservation.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> lanes(ClusterSpec(name="d", project="my-project", region="us-east1", zone="us-east1-b"))
        [('spot', None)]
    """
    policy = getattr(cluster, "capacity", None)
    if policy:
        return [
            (c.kind, (getattr(c, "reservation", None) or cluster.reservation) if c.kind == "reservation" else None)
            for c in policy
        ]
    if cluster.reservation:
        return [("reservation", cluster.reservation)]
    return [("spot", None)] if cluster.spot else [("on-demand", None)]


def quota_items(
    cluster: ClusterSpec, cap: Capacity, quotas: CloudQuotas, zones: Sequence[str], *, zone_exists: bool = True
) -> list[CheckItem]:
    """Every quota and reservation item of the check, for the candidate ``zones`` (the zonal
    ones only when the home zone exists)."""
    gpus = cluster.num_nodes * (cluster.gpus_per_node or 0)
    region = str(cluster.region)
    tried = lanes(cluster)
    items: list[CheckItem] = []
    if not cluster.accelerator_type or gpus == 0:
        items.append(CheckItem(f"GPU quota in {region}", "ok", "no GPUs asked for"))
    else:
        # Each item gates some lanes; a lane passes when every item gating it does. An item
        # that fails lanes while another lane passes is "unknown": up() moves on.
        pools: dict[str, list[str]] = {}
        for kind, _ in tried:
            if kind in _POOL:
                pools.setdefault(_POOL[kind], []).append(kind)
        outcomes: list[tuple[CheckItem, bool, list[str]]] = []
        for pool, kinds in pools.items():
            item, passes = _gpu_pool_item(cluster, cap, quotas, pool, kinds, gpus)
            # A region's quota: the same for every candidate zone of the lanes (all in the region).
            item = CheckItem(f"{item.what} in {', '.join(zones)}", item.verdict, item.detail, item.fix)
            outcomes.append((item, passes, kinds))
        if pools:
            item, passes = _all_regions_item(cluster, quotas, gpus)
            outcomes.append((item, passes, [k for ks in pools.values() for k in ks]))
        for index, (kind, name) in enumerate(tried):
            if kind == "reservation" and name:
                item = _reservation_item(cluster, cap, name)
                outcomes.append((item, item.verdict != "problem", [f"reservation#{index}"]))
        lane_ids = [kind if kind != "reservation" else f"reservation#{i}" for i, (kind, _) in enumerate(tried)]
        any_lane_passes = any(all(passes for _, passes, gated in outcomes if lane in gated) for lane in lane_ids)
        for item, passes, _ in outcomes:
            if not passes and any_lane_passes:
                item = CheckItem(item.what, "unknown", item.detail + "; up() has other lanes to try", item.fix)
            items.append(item)
    if zone_exists:
        items.append(_visible_reservations(cluster, cap, zones))
        lustre = _lustre_quota_item(cluster, quotas)
        if lustre is not None:
            items.append(lustre)
    return items


def _ask(fetch: Callable[[], QuotaInfo | None]) -> tuple[QuotaInfo | None, str | None]:
    """One Cloud Quotas question; a refusal (API off, no role) is an answer of its own."""
    try:
        return fetch(), None
    except CredentialsError:
        raise
    except PermissionDeniedError as err:
        return None, str(err).splitlines()[0]


def _raise_fix(quota_id: str, value: int, dims: dict[str, str], project: str, service: str = GPU_QUOTA_SERVICE) -> str:
    flags = f" --dimensions={','.join(f'{k}={v}' for k, v in dims.items())}" if dims else ""
    where = f" ({', '.join(f'{k}={v}' for k, v in dims.items())})" if dims else ""
    return (
        f"raise {quota_id}{where} to at least {value}: IAM & Admin → Quotas in the console, or "
        f"`gcloud quotas preferences create --service={service} --project={project} "
        f"--quota-id={quota_id} --preferred-value={value}{flags}`"
    )


def _gpu_pool_item(
    cluster: ClusterSpec, cap: Capacity, quotas: CloudQuotas, pool: str, kinds: list[str], gpus: int
) -> tuple[CheckItem, bool]:
    accelerator, region, project = str(cluster.accelerator_type), str(cluster.region), str(cluster.project)
    lanes_text = ", ".join(kinds)
    family = GPU_FAMILIES.get(accelerator)
    shape = f"{gpus} GPUs ({cluster.num_nodes} nodes × {cluster.gpus_per_node}) for {lanes_text}"
    if family is None:
        return _legacy_item(cluster, cap, pool == "preemptible", shape)
    quota_id = PREEMPTIBLE_GPU_FAMILY_QUOTA if pool == "preemptible" else GPU_FAMILY_QUOTA
    dims = {"region": region, "gpu_family": family}
    what = f"{quota_id} [{family}, {region}] covers {shape}"
    info, refused = _ask(lambda: quotas.quota_info(project, GPU_QUOTA_SERVICE, quota_id))
    if refused:
        return CheckItem(what, "unknown", f"the Cloud Quotas API refused: {refused}", _ENABLE), True
    limit = info.limit(dims) if info else None
    if limit is None:
        return CheckItem(
            what,
            "unknown",
            f"Cloud Quotas lists no {quota_id} for {family} in {region}",
            f"look it up in the console (IAM & Admin → Quotas, {quota_id}, {region}) before up()",
        ), True
    if limit < 0 or limit >= gpus:
        return CheckItem(what, "ok", ("unlimited" if limit < 0 else f"limit {limit}") + f" ({_USAGE})"), True
    return CheckItem(what, "problem", f"limit {limit}", _raise_fix(quota_id, gpus, dims, project)), False


def _legacy_item(cluster: ClusterSpec, cap: Capacity, spot: bool, shape: str) -> tuple[CheckItem, bool]:
    """A GPU type outside the family quotas: Compute's per-type region quota, limit and usage."""
    region = str(cluster.region)
    gpus = cluster.num_nodes * (cluster.gpus_per_node or 0)
    quotas = cap.region_quotas(str(cluster.project), region)
    on_demand = quota_metric(str(cluster.accelerator_type), spot=False)
    metric = quota_metric(str(cluster.accelerator_type), spot=True) if spot else on_demand
    quota = quotas.get(metric)
    if spot and (quota is None or quota.limit == 0) and on_demand in quotas:
        # Without preemptible quota, Spot VMs count against the on-demand quota.
        metric, quota = on_demand, quotas[on_demand]
    what = f"{metric} quota in {region} covers {shape}"
    if quota is None:
        return CheckItem(
            what,
            "unknown",
            f"the region lists no {metric} quota",
            f"look for the GPU type's quota in the console (IAM & Admin → Quotas, region {region}) before up()",
        ), True
    if quota.free >= gpus:
        return CheckItem(what, "ok", f"limit {quota.limit:g}, {quota.usage:g} in use"), True
    return CheckItem(
        what,
        "problem",
        f"limit {quota.limit:g}, {quota.usage:g} in use: {quota.free:g} free",
        f"raise {metric} in {region} to at least {quota.usage + gpus:g} (IAM & Admin → Quotas), "
        + (
            "or add on-demand capacity / a reservation to the policy"
            if spot
            else "or add Spot or flex-start capacity / a reservation to the policy"
        ),
    ), False


def _all_regions_item(cluster: ClusterSpec, quotas: CloudQuotas, gpus: int) -> tuple[CheckItem, bool]:
    project = str(cluster.project)
    what = f"{GPUS_ALL_REGIONS_QUOTA} covers {gpus} GPUs"
    info, refused = _ask(lambda: quotas.quota_info(project, GPU_QUOTA_SERVICE, GPUS_ALL_REGIONS_QUOTA))
    if refused:
        return CheckItem(what, "unknown", f"the Cloud Quotas API refused: {refused}", _ENABLE), True
    limit = info.limit({}) if info else None
    if limit is None:
        return CheckItem(what, "unknown", f"Cloud Quotas lists no {GPUS_ALL_REGIONS_QUOTA}"), True
    if limit < 0 or limit >= gpus:
        return CheckItem(what, "ok", ("unlimited" if limit < 0 else f"limit {limit}") + f" ({_USAGE})"), True
    return CheckItem(what, "problem", f"limit {limit}", _raise_fix(GPUS_ALL_REGIONS_QUOTA, gpus, {}, project)), False


def _split_reservation(project: str, name: str) -> tuple[str, str]:
    """``(owner project, reservation name)`` of ``NAME``, ``NAME/reservationBlocks/B`` or
    ``projects/OTHER/reservations/NAME``."""
    if name.startswith("projects/"):
        parts = name.split("/")
        return parts[1], parts[3] if len(parts) > 3 else parts[-1]
    return project, name.split("/", 1)[0]


def _reservation_item(cluster: ClusterSpec, cap: Capacity, name: str) -> CheckItem:
    project, zone = str(cluster.project), str(cluster.zone)
    owner, short = _split_reservation(project, name)
    what = f"reservation {name} in {zone} holds {cluster.num_nodes} × {cluster.machine_type}"
    try:
        found = cap.reservation(owner, zone, short)
    except CredentialsError:
        raise
    except PermissionDeniedError as err:
        return CheckItem(
            what,
            "unknown",
            f"Compute refused to show it: {str(err).splitlines()[0]}",
            f"ask {owner}'s owner to share it with {project} and grant roles/compute.viewer",
        )
    if found is None:
        return CheckItem(
            what,
            "problem",
            f"there is no reservation {short} in projects/{owner}/zones/{zone}",
            f"`gcloud compute reservations list --project={owner}` lists them; a reservation is zonal",
        )
    if found.machine_type != cluster.machine_type:
        return CheckItem(
            what, "problem", f"it holds {found.machine_type}", "use a reservation of the cluster's machine type"
        )
    if found.free < cluster.num_nodes:
        return CheckItem(
            what,
            "problem",
            f"{found.free} of {found.count} free",
            f"resize it (`gcloud compute reservations update {short} --zone={zone} "
            f"--vm-count={found.in_use + cluster.num_nodes}`) or free VMs that consume it",
        )
    return CheckItem(what, "ok", f"{found.free} of {found.count} free (its quota was counted when it was made)")


def _visible_reservations(cluster: ClusterSpec, cap: Capacity, zones: Sequence[str]) -> CheckItem:
    what = f"reservations of {cluster.machine_type} in {', '.join(zones)}"
    try:
        found: list[Reservation] = [
            r
            for r in cap.reservations(str(cluster.project))
            if r.machine_type == cluster.machine_type and r.zone in zones
        ]
    except CredentialsError:
        raise
    except PermissionDeniedError as err:
        return CheckItem(what, "unknown", f"Compute refused to list them: {str(err).splitlines()[0]}")
    if not found:
        return CheckItem(
            what,
            "ok",
            "none visible in the project (a reservation shared from another project "
            "is named as projects/OTHER/reservations/NAME)",
        )
    listed = "; ".join(
        f"{r.path.rsplit('/', 1)[-1]} in {r.zone}: {r.free} of {r.count} free"
        + (f", shared with {', '.join(r.shared)}" if r.shared else "")
        for r in found
    )
    return CheckItem(
        what,
        "ok",
        listed,
        "to use one: capacity=(Capacity('reservation', reservation='NAME'), ...) or reservation='NAME'",
    )


def _lustre_quota_item(cluster: ClusterSpec, quotas: CloudQuotas) -> CheckItem | None:
    volume = cluster.volume
    if volume is None or volume.existing:
        return None
    project, zone, tier = str(cluster.project), str(cluster.zone), volume.throughput_mbps_per_tib
    what = f"Managed Lustre capacity quota in {zone} ({tier} MB/s per TiB) covers {volume.capacity_gib} GiB"

    def fetch() -> QuotaInfo | None:
        # Found by what it measures (storage, by zone), not by an id of ours.
        for info in quotas.quota_infos(project, LUSTRE_SERVICE):
            if "zone" in info.dimension_names and ("By" in info.unit or "capacity" in info.metric.lower()):
                return info
        return None

    info, refused = _ask(fetch)
    if refused:
        return CheckItem(what, "unknown", f"the Cloud Quotas API refused: {refused}", _ENABLE)
    if info is None:
        return CheckItem(
            what,
            "unknown",
            "Cloud Quotas lists no capacity quota of Managed Lustre by zone",
            "look it up in the console (IAM & Admin → Quotas, service lustre.googleapis.com)",
        )
    dims = {d: (zone if d == "zone" else str(tier)) for d in info.dimension_names if d != "region"}
    limit = info.limit(dims)
    verdict: Verdict
    if limit is None:
        return CheckItem(what, "unknown", f"{info.quota_id} has no limit for {zone}")
    verdict = "ok" if limit < 0 or limit >= volume.capacity_gib else "problem"
    if verdict == "ok":
        return CheckItem(
            what, "ok", f"{info.quota_id}: " + ("unlimited" if limit < 0 else f"limit {limit} GiB") + f" ({_USAGE})"
        )
    return CheckItem(
        what,
        "problem",
        f"{info.quota_id}: limit {limit} GiB",
        _raise_fix(info.quota_id, volume.capacity_gib, dims, project, LUSTRE_SERVICE),
    )
