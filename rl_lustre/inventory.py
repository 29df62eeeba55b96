"""Finding deployments by their labels: what runs in a project, what it costs, what was left behind.

Every resource rl_lustre creates carries ``managed-by=rl-lustre`` and
``rl-lustre-deployment=<name>`` (as labels, or in the description of Compute
networking). :func:`find_deployments` lists them with each API's own list call
(Managed Lustre with a label filter, GKE clusters of every location, Compute resources
with a description filter, the nodes' service accounts by their description) and groups
them by deployment, in every zone.

A deployment is *whole* while its GKE cluster exists; without it, whatever is left
(a Lustre instance, a network after a crash) is *partial*, and :func:`rl_lustre.garbage.collect_garbage`
deletes it. Deletion always goes through the deployment's plan and the provisioning
executor, exactly as ``Cluster.down()`` does, so each resource is deleted in order and
only if it carries the deployment's labels; nothing without them is touched.

Example::

    for d in find_deployments("my-project"):
        print(d.name, d.state, f"${d.cost().total_usd_per_hour:.2f}/h")
"""

from __future__ import annotations

import datetime
import logging
import re
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from . import naming
from .catalog import LABEL_DEPLOYMENT, LABEL_RESULTS, RESULTS_NOT_EXPORTED
from .errors import ConfigError, NotFoundError
from .plankeys import (
    CPU_POOL_KEY,
    FIREWALL_LUSTRE_KEY,
    GKE_CLUSTER_KEY,
    GPU_POOL_KEY,
    LUSTRE_KEY,
    NETWORK_KEY,
    NODE_SA_KEY,
    PSA_RANGE_KEY,
    SUBNET_KEY,
)

if TYPE_CHECKING:
    from .cluster import Cluster
    from .cost import Cost
    from .prices import Prices
    from .provision.context import Apis
    from .provision.records import Report

__all__ = ["Deployment", "FoundResource", "find_deployment", "find_deployments"]

logger = logging.getLogger("rl_lustre.inventory")

# The plan keys the labelled Google Cloud resources stand for, in the plan's order.
KEYS = (
    NETWORK_KEY,
    SUBNET_KEY,
    PSA_RANGE_KEY,
    FIREWALL_LUSTRE_KEY,
    LUSTRE_KEY,
    NODE_SA_KEY,
    GKE_CLUSTER_KEY,
    CPU_POOL_KEY,
    GPU_POOL_KEY,
)
# A placeholder region for a deployment of which only global resources are left: the
# executor is then given only the keys of those resources, so nothing regional is named.
_ANY_REGION = "us-central1"


@attrs.frozen(kw_only=True)
class FoundResource:
    """One resource found by its labels.

    Attributes:
        key: the plan key it stands for (``"lustre"``, ``"gpu-pool"``, ``"network"``...).
        kind: its API type (``"lustre.v1.Instance"``).
        name: its full resource name.
        deployment: the deployment its labels name.
        location: zone, region or ``"global"``.
        state: its state in its API's words (``"ACTIVE"``, ``"RUNNING"``, ``"READY"``).
        created: when it was created (UTC), when the API says.
        details: what it is (machine type and node count, capacity and tier, network).
    """

    key: str
    kind: str
    name: str
    deployment: str
    location: str
    state: str
    created: datetime.datetime | None = None
    details: dict[str, Any] = attrs.field(factory=dict)

    @property
    def short_name(self) -> str:
        """The last part of ``name``."""
        return self.name.rsplit("/", 1)[-1]

    def to_dict(self) -> dict[str, Any]:
        """The resource as JSON data."""
        return {
            "key": self.key,
            "kind": self.kind,
            "name": self.name,
            "location": self.location,
            "state": self.state,
            "created": None if self.created is None else self.created.isoformat(),
            "details": dict(self.details),
        }


@attrs.frozen(kw_only=True)
class Deployment:
    """A deployment as found in a project by its labels.

    Example::

        d = find_deployment("demo", project="my-project")
        d.state, [r.key for r in d.resources]
        # ('RUNNING', ['network', 'subnet', 'psa-range', 'firewall-lustre', 'lustre', 'gke-cluster', ...])

    Attributes:
        name: the deployment's name (its ``rl-lustre-deployment`` label).
        project: the project.
        resources: what was found, in plan order.
    """

    name: str
    project: str
    resources: tuple[FoundResource, ...] = attrs.field(converter=lambda rs: tuple(rs))

    def get(self, key: str) -> FoundResource | None:
        """The resource found for plan key ``key``, or None."""
        return next((r for r in self.resources if r.key == key), None)

    def plan_keys(self) -> list[str]:
        """The plan keys of what was found."""
        return [r.key for r in self.resources]

    @property
    def whole(self) -> bool:
        """Whether its GKE cluster exists (what jobs run on); otherwise it is partial."""
        return self.get(GKE_CLUSTER_KEY) is not None

    @property
    def state(self) -> str:
        """The GKE cluster's status; without one ``"kept: results not exported"`` when
        ``down()`` kept its volume for results that exist nowhere else, else ``"PARTIAL"``."""
        cluster = self.get(GKE_CLUSTER_KEY)
        if cluster is not None:
            return cluster.state
        return "kept: results not exported" if self.kept_for_results else "PARTIAL"

    @property
    def kept_for_results(self) -> bool:
        """Whether ``down()`` kept its volume because its results were not exported."""
        lustre = self.get(LUSTRE_KEY)
        return lustre is not None and lustre.details.get("results") == RESULTS_NOT_EXPORTED

    @property
    def zone(self) -> str | None:
        """The zone of its Lustre instance or node pools."""
        for key in (LUSTRE_KEY, GPU_POOL_KEY, CPU_POOL_KEY):
            found = self.get(key)
            if found is not None and found.location.count("-") == 2:
                return found.location
        return None

    @property
    def region(self) -> str | None:
        """Its region, from any regional or zonal resource."""
        zone = self.zone
        if zone is not None:
            return zone.rsplit("-", 1)[0]
        for key in (GKE_CLUSTER_KEY, SUBNET_KEY):
            found = self.get(key)
            if found is not None:
                return found.location if found.location.count("-") == 1 else found.location.rsplit("-", 1)[0]
        return None

    @property
    def created(self) -> datetime.datetime | None:
        """When its oldest resource was created."""
        times = [r.created for r in self.resources if r.created is not None]
        return min(times) if times else None

    def age_seconds(self, now: float | None = None) -> float | None:
        """Seconds since :attr:`created`."""
        created = self.created
        if created is None:
            return None
        return (now if now is not None else time.time()) - created.timestamp()

    def cost(self, prices: Prices | None = None) -> Cost:
        """What what was found costs per hour (node pools and their secondary boot disks,
        Lustre, the GKE fee; the preload images they boot from are shared: rl-lustre ls
        prices them per month).

        Example::

            find_deployment("demo", project="my-project").cost().total_usd_per_hour
            # 304.55
        """
        from .cost import (
            Cost,
            gke_cluster_item,
            lustre_item,
            node_pool_item,
            secondary_disks_item,
        )
        from .prices import Prices

        prices = prices or Prices()
        items = []
        for r in self.resources:
            d = r.details
            if r.key in (GPU_POOL_KEY, CPU_POOL_KEY):
                items.append(
                    node_pool_item(
                        r.key, r.short_name, d["machine_type"], d["node_count"], d["provisioning"], self.region, prices
                    )
                )
                if d.get("secondary_disk_gb"):
                    items.append(
                        secondary_disks_item(
                            "secondary-disks",
                            r.short_name,
                            d["node_count"],
                            d["secondary_disk_gb"],
                            d["disk_type"],
                            prices,
                        )
                    )
            elif r.key == LUSTRE_KEY:
                items.append(lustre_item(r.key, r.short_name, d["capacity_gib"], d["tier"], prices))
            elif r.key == GKE_CLUSTER_KEY:
                items.append(gke_cluster_item(r.key, r.short_name, prices))
        return Cost(items=items, prices_as_of=prices.table.as_of, sources=prices.table.sources)

    def cluster(self) -> Cluster:
        """A ``Cluster`` spec whose plan names exactly the resources found, for tearing them down.

        Only the names matter: the volume is the Lustre instance found, the network the
        one the resources are on (ours, or yours when only our firewall rule and range
        are on it), the nodes' account yours when the pools run as your own (then ``down()``
        does not touch, or even read, IAM for it).
        """
        from .cluster import Cluster
        from .volume import LustreVolume

        region = self.region or _ANY_REGION
        zone = self.zone or f"{region}-b"
        kwargs: dict[str, Any] = {}
        lustre = self.get(LUSTRE_KEY)
        if lustre is not None:
            kwargs["volume"] = LustreVolume(
                name=lustre.short_name,
                capacity_gib=lustre.details["capacity_gib"],
                throughput_mbps_per_tib=lustre.details["tier"],
            )
        if self.get(NETWORK_KEY) is None:
            on = next((r.details["network"] for r in self.resources if r.details.get("network")), None)
            if on is not None and on != f"{self.name}-net":
                kwargs["network"] = on
        theirs = self._users_node_account()
        if theirs is not None:
            kwargs["node_service_account"] = theirs
        return Cluster(name=self.name, project=self.project, region=region, zone=zone, **kwargs)

    def _users_node_account(self) -> str | None:
        """The user's own account the pools found run as (``Cluster.node_service_account``),
        or None: they run as ours, or as none a spec can name (GKE's ``default``)."""
        from ._validate import SERVICE_ACCOUNT_PATTERN

        if self.get(NODE_SA_KEY) is not None:
            return None
        ours = naming.service_account_email(self.project, naming.node_service_account_id(self.name))
        runs_as = sorted(
            {r.details.get("service_account") or "" for r in self.resources if r.key in (CPU_POOL_KEY, GPU_POOL_KEY)}
            - {"", ours}
        )
        if len(runs_as) == 1 and re.fullmatch(SERVICE_ACCOUNT_PATTERN, runs_as[0]):
            return runs_as[0]
        return None

    def down(
        self,
        *,
        keys: Sequence[str] | None = None,
        apis: Apis | None = None,
        delete_preload_image: bool = False,
        results: str | None = None,
        discard_results: bool = False,
    ) -> Report:
        """Delete the deployment (or only the plan nodes ``keys``) through its plan's executor;
        the preload disk image only with ``delete_preload_image`` (and while no pool uses it).
        The whole deployment's teardown exports its runs to ``results`` first and keeps a
        volume whose results were not exported, unless ``discard_results`` (as ``Cluster.down``).

        Raises:
            TeardownError: something could not be deleted; everything else was.
        """
        import attrs

        from .backends.gke import GKEBackend

        cluster = self.cluster() if results is None else attrs.evolve(self.cluster(), results=results)
        backend = GKEBackend(cluster, apis=apis)
        return backend.down(keys=keys, delete_preload_image=delete_preload_image, discard_results=discard_results)

    def to_dict(self, prices: Prices | None = None) -> dict[str, Any]:
        """The deployment as JSON data, with its cost."""
        age = self.age_seconds()
        return {
            "name": self.name,
            "project": self.project,
            "state": self.state,
            "whole": self.whole,
            "region": self.region,
            "zone": self.zone,
            "created": None if self.created is None else self.created.isoformat(),
            "age_seconds": None if age is None else round(age),
            "usd_per_hour": round(self.cost(prices).total_usd_per_hour, 4),
            "resources": [r.to_dict() for r in self.resources],
        }


def _timestamp(value: Any) -> datetime.datetime | None:
    """A UTC datetime from a protobuf timestamp, an RFC 3339 string, or None."""
    if not value:
        return None
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    try:
        parsed = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def _last(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _compute(apis: Apis, project: str) -> Iterable[FoundResource]:
    from .gcp._ownership import labels_from_description

    kinds = (
        (NETWORK_KEY, "compute.v1.Network", apis.networks),
        (SUBNET_KEY, "compute.v1.Subnetwork", apis.subnetworks),
        (PSA_RANGE_KEY, "compute.v1.GlobalAddress", apis.addresses),
        (FIREWALL_LUSTRE_KEY, "compute.v1.Firewall", apis.firewalls),
    )
    for key, kind, api in kinds:
        for r in api.list_ours(project):
            labels = labels_from_description(r.description)
            regional = api.scope == "regions"
            region = _last(r.region) if regional else "global"
            scope = f"regions/{region}" if regional else "global"
            state = getattr(r, "state", "") or getattr(r, "status", "") or "READY"
            yield FoundResource(
                key=key,
                kind=kind,
                name=f"projects/{project}/{scope}/{api.collection}/{r.name}",
                deployment=labels[LABEL_DEPLOYMENT],
                location=region,
                state=str(state),
                created=_timestamp(r.creation_timestamp),
                details={} if key == NETWORK_KEY else {"network": _last(r.network)},
            )


def _lustre(apis: Apis, project: str) -> Iterable[FoundResource]:
    from google.cloud import lustre_v1

    for i in apis.lustre.list_ours(project):
        zone = i.name.split("/")[3]
        yield FoundResource(
            key=LUSTRE_KEY,
            kind="lustre.v1.Instance",
            name=i.name,
            deployment=i.labels[LABEL_DEPLOYMENT],
            location=zone,
            state=lustre_v1.Instance.State(i.state).name,
            created=_timestamp(i.create_time),
            details={
                "capacity_gib": i.capacity_gib,
                "tier": i.per_unit_storage_throughput,
                "network": _last(i.network),
                "mount_point": i.mount_point,
                "results": i.labels.get(LABEL_RESULTS),
            },
        )


def _accounts(apis: Apis, project: str) -> Iterable[FoundResource]:
    from .gcp._ownership import labels_from_description
    from .gcp.iam import created_of

    # IAM keeps no creation time: ours carry it in their description.
    for a in apis.accounts.list_ours(project):
        yield FoundResource(
            key=NODE_SA_KEY,
            kind="iam.v1.ServiceAccount",
            name=a.name,
            deployment=labels_from_description(a.description)[LABEL_DEPLOYMENT],
            location="global",
            state="DISABLED" if a.disabled else "ACTIVE",
            created=created_of(a),
            details={"email": a.email},
        )


def _provisioning(pool: Any) -> str:
    from .gcp.pool_provisioning import pool_provisioning

    return pool_provisioning(pool)


def _image_sizes(apis: Apis, project: str, clusters: list[Any]) -> dict[str, int]:
    """GB of each disk image a pool of ``clusters`` boots from (its nodes' secondary boot disks)."""
    from .catalog import ROLE_PRELOAD_IMAGE
    from .provision.preload import image_path

    if not any(p.config.secondary_boot_disks for c in clusters for p in c.node_pools):
        return {}
    return {image_path(i): int(i.disk_size_gb or 0) for i in apis.images.list_role(project, ROLE_PRELOAD_IMAGE)}


def _gke(apis: Apis, project: str) -> Iterable[FoundResource]:
    from google.cloud import container_v1

    from .catalog import boot_disk_type

    clusters = apis.clusters.list_ours(project)
    sizes = _image_sizes(apis, project, clusters)
    for c in clusters:
        deployment = c.resource_labels[LABEL_DEPLOYMENT]
        path = naming.container_cluster_path(project, c.location, c.name)
        yield FoundResource(
            key=GKE_CLUSTER_KEY,
            kind="container.v1.Cluster",
            name=path,
            deployment=deployment,
            location=c.location,
            state=container_v1.Cluster.Status(c.status).name,
            created=_timestamp(c.create_time),
            details={"network": c.network},
        )
        for pool in c.node_pools:
            yield FoundResource(
                key=GPU_POOL_KEY if pool.config.accelerators else CPU_POOL_KEY,
                kind="container.v1.NodePool",
                name=f"{path}/nodePools/{pool.name}",
                deployment=deployment,
                location=pool.locations[0] if pool.locations else c.location,
                state=container_v1.NodePool.Status(pool.status).name,
                created=_timestamp(c.create_time),
                details={
                    "machine_type": pool.config.machine_type,
                    # A pool that autoscales (the ComputeClass's, from 0) is priced at the most it
                    # runs, as the plan prices it: its size now is its instance groups', not the pool's.
                    "node_count": (
                        pool.autoscaling.total_max_node_count or pool.autoscaling.max_node_count
                        if pool.autoscaling.enabled
                        else pool.initial_node_count
                    ),
                    "provisioning": _provisioning(pool),
                    "service_account": pool.config.service_account,
                    **(
                        {
                            "secondary_boot_disks": [d.disk_image for d in pool.config.secondary_boot_disks],
                            "secondary_disk_gb": sum(
                                sizes.get(d.disk_image, 0) for d in pool.config.secondary_boot_disks
                            ),
                            "disk_type": pool.config.disk_type or boot_disk_type(pool.config.machine_type),
                        }
                        if pool.config.secondary_boot_disks
                        else {}
                    ),
                },
            )


def find_deployments(project: str, *, apis: Apis | None = None) -> list[Deployment]:
    """Every deployment in ``project`` found by our labels, in every zone, partial ones too.

    Example::

        [(d.name, d.state) for d in find_deployments("my-project")]
        # [('demo', 'RUNNING'), ('crashed', 'PARTIAL')]

    Args:
        project: the Google Cloud project id.
        apis: the adapters; by default those of this environment (the emulators' when set).

    Raises:
        ConfigError: ``project`` is not a project id.
        GCPError: a list call failed.
    """
    from .provision.context import Apis
    from .volume import PROJECT_PATTERN, PROJECT_RULE

    if not isinstance(project, str) or re.fullmatch(PROJECT_PATTERN, project) is None:
        raise ConfigError("rl-lustre", "project", project, PROJECT_RULE)
    apis = apis or Apis.from_env()
    found = [*_compute(apis, project), *_lustre(apis, project), *_accounts(apis, project), *_gke(apis, project)]
    order = {k: i for i, k in enumerate(KEYS)}
    by_name: dict[str, list[FoundResource]] = {}
    for r in found:
        by_name.setdefault(r.deployment, []).append(r)
    return [
        Deployment(
            name=name, project=project, resources=sorted(rs, key=lambda r: (order.get(r.key, len(KEYS)), r.name))
        )
        for name, rs in sorted(by_name.items())
    ]


def find_deployment(name: str, *, project: str, zone: str | None = None, apis: Apis | None = None) -> Deployment:
    """The deployment ``name`` in ``project``, found by its labels.

    Args:
        zone: if given, the deployment must be in it.

    Raises:
        NotFoundError: nothing in ``project`` carries ``rl-lustre-deployment=name`` (in ``zone``).
    """
    for d in find_deployments(project, apis=apis):
        if d.name == name:
            if zone is not None and d.zone not in (None, zone):
                raise NotFoundError(f"deployment {name!r} in project {project} is in zone {d.zone}, not {zone}")
            return d
    raise NotFoundError(f"no resource in project {project} carries the label {LABEL_DEPLOYMENT}={name}")
