"""The online check before spending: can this project get this deployment, where it asks?

:func:`check_cluster` asks Google Cloud, read-only, what ``up()`` would otherwise find out
only after Managed Lustre had been creating for many minutes:

- the zone exists (Compute ``zones.get``: the server has the last word over the zone
  list rl_lustre checks offline, :data:`rl_lustre.catalog.ZONES`);
- the zone offers the GPU machine type, its GPU type and the Ray head's machine type
  (Compute ``machineTypes.get`` / ``acceleratorTypes.get``);
- Managed Lustre runs in the zone (Lustre ``ListLocations``), unless the volume exists;
- the region's quota covers the GPUs: for Spot, ``PREEMPTIBLE_<GPU>_GPUS`` (where the
  project has none, Spot VMs count against the on-demand ``<GPU>_GPUS``); on demand,
  ``<GPU>_GPUS``; with a reservation, the reserved capacity was counted when it was made.

``Cluster.up()`` runs it first on GKE and creates nothing when it finds a problem;
``cluster.check()`` and ``rl-lustre check TARGET`` run it on their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

from .catalog import known_zones
from .errors import CapacityError

if TYPE_CHECKING:
    from .gcp.capacity import Capacity
    from .spec import ClusterSpec

__all__ = ["CheckItem", "CheckReport", "check_cluster", "quota_metric"]

logger = logging.getLogger("rl_lustre.check")

Verdict = Literal["ok", "problem", "unknown"]
_MARK = {"ok": "ok", "problem": "PROBLEM", "unknown": "unknown"}

# GPU type → Compute quota metric, where the metric is not the type's name in capitals.
_METRICS = {
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
    "nvidia-h200-141gb": "NVIDIA_H200_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
}


def quota_metric(accelerator: str, *, spot: bool) -> str:
    """The regional Compute quota that GPUs of type ``accelerator`` count against.

    Examples:
        >>> quota_metric("nvidia-b200", spot=True), quota_metric("nvidia-h100-80gb", spot=False)
        ('PREEMPTIBLE_NVIDIA_B200_GPUS', 'NVIDIA_H100_GPUS')
    """
    base = _METRICS.get(accelerator) or accelerator.upper().replace("-", "_").replace("TESLA_", "") + "_GPUS"
    return f"PREEMPTIBLE_{base}" if spot else base


@attrs.frozen
class CheckItem:
    """One question the check asked, and the answer.

    Attributes:
        what: what was checked (``"zone us-east1-b offers a4-highgpu-8g"``).
        verdict: ``"ok"``, ``"problem"`` (``up()`` would fail) or ``"unknown"`` (could not tell).
        detail: what was found.
        fix: what to do about a problem (the quota to raise, another zone, ...).
    """

    what: str
    verdict: Verdict
    detail: str = ""
    fix: str = ""

    def __str__(self) -> str:
        line = f"{_MARK[self.verdict]:<8} {self.what}"
        if self.detail:
            line += f": {self.detail}"
        if self.fix:
            line += f"\n         -> {self.fix}"
        return line


@attrs.frozen
class CheckReport:
    """What :func:`check_cluster` found; ``str()`` is one line per question.

    Examples:
        >>> report = CheckReport("demo", (CheckItem("zone offers x", "ok"),))
        >>> report.ok, str(report).splitlines()[1]
        (True, 'ok       zone offers x')
    """

    cluster: str
    items: tuple[CheckItem, ...]

    @property
    def ok(self) -> bool:
        """No problem found (unknowns do not count against it)."""
        return not self.problems

    @property
    def problems(self) -> list[CheckItem]:
        return [i for i in self.items if i.verdict == "problem"]

    def raise_for_problems(self) -> CheckReport:
        """Raise :class:`~rl_lustre.errors.CapacityError` listing every problem; else return self."""
        if self.problems:
            raise CapacityError(self)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "ok": self.ok,
                "items": [attrs.asdict(i) for i in self.items]}

    def __str__(self) -> str:
        head = f"check of {self.cluster!r}: " + ("ok" if self.ok else f"{len(self.problems)} problem(s)")
        return "\n".join([head, *map(str, self.items)])


def check_cluster(cluster: ClusterSpec, *, capacity: Capacity | None = None) -> CheckReport:
    """Ask Google Cloud, read-only, whether ``cluster`` can be created where it asks.

    Example::

        report = check_cluster(Cluster(name="demo", project="my-project",
                                       region="us-east1", zone="us-east1-b"))
        print(report)      # one line per question; report.ok

    Args:
        cluster: a GKE cluster spec (a local one has nothing to check).
        capacity: the read-only adapter; by default one for this environment.

    Raises:
        GCPError: a question could not be asked (credentials, permissions).
    """
    if cluster.backend == "local":
        return CheckReport(cluster.name, (CheckItem("local backend", "ok", "nothing in Google Cloud to check"),))
    from .gcp.capacity import Capacity

    cap = capacity or Capacity()
    project, zone, region = str(cluster.project), str(cluster.zone), str(cluster.region)
    items: list[CheckItem] = []

    def offered(kind: str, name: str, ask: Callable[[str, str, str], bool]) -> None:
        if ask(project, zone, name):
            items.append(CheckItem(f"zone {zone} offers {kind} {name}", "ok"))
        else:
            items.append(CheckItem(
                f"zone {zone} offers {kind} {name}", "problem", "it does not (404 from Compute)",
                f"choose a zone of {region} (or another region) that offers {name}: "
                f"`gcloud compute {'machine-types' if kind == 'machine type' else 'accelerator-types'} "
                f"list --filter=name={name}` lists them",
            ))

    if cap.zone_exists(project, zone):
        items.append(CheckItem(f"zone {zone} exists", "ok"))
        offered("machine type", cluster.machine_type, cap.offers_machine_type)
        if cluster.accelerator_type:
            offered("GPU type", cluster.accelerator_type, cap.offers_accelerator)
        if not cluster.head_on_gpu_pool:
            offered("machine type", cluster.head_machine_type, cap.offers_machine_type)
        items.append(_lustre_item(cluster, cap))
    else:
        # The server's word wins over rl_lustre's list (and over $RL_LUSTRE_EXTRA_ZONES).
        others = [z for z in known_zones(region) if z != zone]
        items.append(CheckItem(
            f"zone {zone} exists", "problem", "Compute Engine has no such zone (404)",
            f"use a zone of {region}" + (f": {', '.join(others)}" if others else "")
            + f"; `gcloud compute zones list --filter=region:{region}` lists them"))
    items.append(_quota_item(cluster, cap))
    report = CheckReport(cluster.name, tuple(items))
    logger.info("online check of %r: %s", cluster.name, "ok" if report.ok else f"{len(report.problems)} problem(s)")
    return report


def _lustre_item(cluster: ClusterSpec, cap: Capacity) -> CheckItem:
    zone = cluster.zone
    what = f"Managed Lustre runs in {zone}"
    volume = cluster.volume
    if volume is not None and volume.existing:
        return CheckItem(what, "ok", f"uses the existing instance {volume.name}")
    zones = cap.lustre_locations(str(cluster.project))
    if zone in zones:
        return CheckItem(what, "ok")
    nearby = sorted(z for z in zones if z.startswith(f"{cluster.region}-"))
    return CheckItem(
        what, "problem", "it is not among Managed Lustre's locations for this project",
        f"use a zone where it runs ({', '.join(nearby)} in {cluster.region})" if nearby
        else f"use a region where it runs (none in {cluster.region}); `gcloud lustre locations list` lists them",
    )


def _quota_item(cluster: ClusterSpec, cap: Capacity) -> CheckItem:
    gpus = cluster.num_nodes * (cluster.gpus_per_node or 0)
    region = cluster.region
    if not cluster.accelerator_type or gpus == 0:
        return CheckItem(f"GPU quota in {region}", "ok", "no GPUs asked for")
    if cluster.reservation:
        return CheckItem(f"GPU quota in {region}", "ok",
                         f"the reservation {cluster.reservation} holds the capacity (its quota was counted when it was made)")
    quotas = cap.region_quotas(str(cluster.project), str(region))
    on_demand = quota_metric(cluster.accelerator_type, spot=False)
    metric = quota_metric(cluster.accelerator_type, spot=True) if cluster.spot else on_demand
    quota = quotas.get(metric)
    if cluster.spot and (quota is None or quota.limit == 0) and on_demand in quotas:
        # Without preemptible quota, Spot VMs count against the on-demand quota.
        metric, quota = on_demand, quotas[on_demand]
    what = f"{metric} quota in {region} covers {gpus} GPUs ({cluster.num_nodes} nodes × {cluster.gpus_per_node})"
    if quota is None:
        return CheckItem(what, "unknown", f"the region lists no {metric} quota",
                         f"look for the GPU family's quota in the console (IAM & Admin → Quotas, "
                         f"'GPUs per GPU family', region {region}) before up()")
    if quota.free >= gpus:
        return CheckItem(what, "ok", f"limit {quota.limit:g}, {quota.usage:g} in use")
    return CheckItem(
        what, "problem", f"limit {quota.limit:g}, {quota.usage:g} in use: {quota.free:g} free",
        f"raise {metric} in {region} to at least {quota.usage + gpus:g} (IAM & Admin → Quotas), "
        + ("or use on-demand capacity (spot=False) / a reservation" if cluster.spot
           else "or use Spot capacity (spot=True) / a reservation"),
    )
