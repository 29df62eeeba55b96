"""The online check before spending: can this project get this deployment, where it asks?

:func:`check_cluster` asks Google Cloud, read-only, what ``up()`` would otherwise find out
only after Managed Lustre had been creating for many minutes:

- the zone exists (Compute ``zones.get``: the server has the last word over the zone
  list rl_lustre checks offline, :data:`rl_lustre.catalog.ZONES`);
- the zone offers the GPU machine type, its GPU type and the Ray head's machine type
  (Compute ``machineTypes.get`` / ``acceleratorTypes.get``);
- Managed Lustre runs in the zone (Lustre ``ListLocations``), unless the volume exists;
- with ``capacity_zones="region"`` (or a tuple), every zone of the region and what it
  offers (:mod:`rl_lustre.gcp.zones`): the candidate zones of the capacity policy;
- the GPU quota for each kind of capacity the policy tries, from the Cloud Quotas API
  (:mod:`rl_lustre.check_quotas`): ``GPUS_PER_GPU_FAMILY`` (on demand) or
  ``PREEMPTIBLE_GPUS_PER_GPU_FAMILY`` (Spot, flex-start) in the region, and
  ``GPUS_ALL_REGIONS``; GPU types outside those families against Compute's per-type region
  quotas (``PREEMPTIBLE_<GPU>_GPUS``, where the project has none Spot VMs count against
  ``<GPU>_GPUS``); a reservation holds its own capacity (counted when it was made) and is
  looked up instead;
- Managed Lustre's capacity quota in the zone for the volume's tier (Cloud Quotas);
- the reservations the project sees for the machine type, each with its free VMs;
- the buckets of ``results`` and ``warm_start``: each exists, and Managed Lustre's service
  agent may write to it (the bucket's IAM policy, or a role on the project), as its exports need.

``Cluster.up()`` runs it first on GKE and creates nothing when it finds a problem;
``cluster.check()`` and ``rl-lustre check TARGET`` run it on their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .catalog import known_zones
from .check_items import CheckItem, CheckReport, Verdict, quota_metric

if TYPE_CHECKING:
    from .gcp.capacity import Capacity
    from .gcp.quotas import CloudQuotas
    from .spec import ClusterSpec

__all__ = ["CheckItem", "CheckReport", "Verdict", "check_cluster", "quota_metric"]

logger = logging.getLogger("rl_lustre.check")


def check_cluster(
    cluster: ClusterSpec, *, capacity: Capacity | None = None, quotas: CloudQuotas | None = None
) -> CheckReport:
    """Ask Google Cloud, read-only, whether ``cluster`` can be created where it asks.

    Example::

        report = check_cluster(Cluster(name="demo", project="my-project",
                                       region="us-east1", zone="us-east1-b"))
        print(report)      # one line per question; report.ok

    Args:
        cluster: a GKE cluster spec (a local one has nothing to check).
        capacity: the read-only Compute/Lustre adapter; by default one for this environment.
        quotas: the read-only Cloud Quotas adapter; by default one for this environment.

    Raises:
        GCPError: a question could not be asked (credentials, permissions).
    """
    if cluster.backend == "local":
        return CheckReport(cluster.name, (CheckItem("local backend", "ok", "nothing in Google Cloud to check"),))
    from .check_quotas import quota_items
    from .gcp.capacity import Capacity
    from .gcp.quotas import CloudQuotas

    cap = capacity or Capacity()
    project, zone, region = str(cluster.project), str(cluster.zone), str(cluster.region)
    items: list[CheckItem] = []

    def offered(kind: str, name: str, ask: Callable[[str, str, str], bool]) -> None:
        if ask(project, zone, name):
            items.append(CheckItem(f"zone {zone} offers {kind} {name}", "ok"))
        else:
            items.append(
                CheckItem(
                    f"zone {zone} offers {kind} {name}",
                    "problem",
                    "it does not (404 from Compute)",
                    f"choose a zone of {region} (or another region) that offers {name}: "
                    f"`gcloud compute {'machine-types' if kind == 'machine type' else 'accelerator-types'} "
                    f"list --filter=name={name}` lists them",
                )
            )

    zones: tuple[str, ...] = (zone,)
    exists = cap.zone_exists(project, zone)
    if exists:
        items.append(CheckItem(f"zone {zone} exists", "ok"))
        offered("machine type", cluster.machine_type, cap.offers_machine_type)
        if cluster.accelerator_type:
            offered("GPU type", cluster.accelerator_type, cap.offers_accelerator)
        if not cluster.head_on_gpu_pool:
            offered("machine type", cluster.head_machine_type, cap.offers_machine_type)
        items.append(_lustre_item(cluster, cap))
        if getattr(cluster, "capacity_zones", "zone") != "zone":
            zone_item, zones = _candidate_zones(cluster, cap)
            items.append(zone_item)
    else:
        # The server's word wins over rl_lustre's list (and over $RL_LUSTRE_EXTRA_ZONES).
        others = [z for z in known_zones(region) if z != zone]
        items.append(
            CheckItem(
                f"zone {zone} exists",
                "problem",
                "Compute Engine has no such zone (404)",
                f"use a zone of {region}"
                + (f": {', '.join(others)}" if others else "")
                + f"; `gcloud compute zones list --filter=region:{region}` lists them",
            )
        )
    items.extend(quota_items(cluster, cap, quotas or CloudQuotas(), zones, zone_exists=exists))
    items.extend(bucket_items(cluster))
    report = CheckReport(cluster.name, tuple(items))
    logger.info("online check of %r: %s", cluster.name, "ok" if report.ok else f"{len(report.problems)} problem(s)")
    return report


# Project roles that carry storage.objects.create on every bucket of the project.
_PROJECT_WRITERS = ("roles/owner", "roles/editor")


def bucket_items(cluster: ClusterSpec) -> list[CheckItem]:
    """Whether the buckets the cluster exports to (``results``, ``warm_start``) exist and let
    Managed Lustre's service agent write (``roles/storage.objectUser`` on the bucket, or a
    role that writes objects, on the bucket or the project)."""
    from .catalog import LUSTRE_SERVICE_AGENT, STORAGE_WRITER_ROLES
    from .errors import GCPError, NotFoundError
    from .gcp.compute import Projects
    from .gcp.iam import ProjectIam
    from .gcp.storage import BucketObjects

    buckets: dict[str, str] = {}
    for field in ("results", "warm_start"):
        value = getattr(cluster, field, None)
        if value:
            buckets.setdefault(value.removeprefix("gs://").split("/", 1)[0], f"{field}={value!r}")
    if not buckets:
        return []
    project, storage = str(cluster.project), BucketObjects()
    agent = LUSTRE_SERVICE_AGENT.format(number=Projects().number(project))
    member = f"serviceAccount:{agent}"
    grant = (
        f"gcloud storage buckets add-iam-policy-binding gs://{{bucket}} --member={member} "
        "--role=roles/storage.objectUser"
    )
    items = []
    for bucket, why in buckets.items():
        what = f"bucket gs://{bucket} ({why}) exists"
        try:
            storage.check_bucket(bucket)
        except NotFoundError:
            items.append(
                CheckItem(
                    what,
                    "problem",
                    "Cloud Storage has no such bucket (or this caller may not see it)",
                    f"create it in {cluster.region}: gcloud storage buckets create gs://{bucket} "
                    f"--location={cluster.region} (rl_lustre never creates or deletes it)",
                )
            )
            continue
        items.append(CheckItem(what, "ok"))
        what = f"Managed Lustre's service agent may write to gs://{bucket}"
        try:
            policy = storage.policy(bucket)
        except GCPError as exc:
            items.append(
                CheckItem(what, "unknown", f"its IAM policy could not be read ({exc})", grant.format(bucket=bucket))
            )
            continue
        writers = {"allUsers", "allAuthenticatedUsers", member}
        on_bucket = sorted(r for r, members in policy.items() if r in STORAGE_WRITER_ROLES and writers & set(members))
        try:
            on_project = [
                r for r in ProjectIam().roles_of(project, member) if r in (*STORAGE_WRITER_ROLES, *_PROJECT_WRITERS)
            ]
        except GCPError:
            on_project = []
        if on_bucket or on_project:
            held = ", ".join([*(f"{r} on the bucket" for r in on_bucket), *(f"{r} on the project" for r in on_project)])
            items.append(CheckItem(what, "ok", f"{agent} holds {held}"))
            continue
        items.append(
            CheckItem(
                what,
                "problem",
                f"{agent} holds no role that writes objects there: its exports at down() would fail "
                "(and the volume would be kept)",
                grant.format(bucket=bucket),
            )
        )
    return items


def _candidate_zones(cluster: ClusterSpec, cap: Capacity) -> tuple[CheckItem, tuple[str, ...]]:
    """The zones of the region the policy may move the GPU pool to, with what the others lack."""
    from .gcp.zones import capacity_zones, region_zones

    offers = region_zones(cluster, capacity=cap)
    zones = capacity_zones(cluster, capacity=cap)
    lacking = [f"{o.zone} lacks {' and '.join(o.missing())}" for o in offers if not o.usable and o.zone != cluster.zone]
    what = (
        f"zones of {cluster.region} offering {cluster.machine_type}"
        + (f", {cluster.accelerator_type}" if cluster.accelerator_type else "")
        + " and Managed Lustre"
    )
    detail = f"candidates {', '.join(zones)}" + (f"; {'; '.join(lacking)}" if lacking else "")
    return CheckItem(what, "ok", detail), zones


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
        what,
        "problem",
        "it is not among Managed Lustre's locations for this project",
        f"use a zone where it runs ({', '.join(nearby)} in {cluster.region})"
        if nearby
        else f"use a region where it runs (none in {cluster.region}); `gcloud lustre locations list` lists them",
    )
