"""``FakeGCP``: the fake Google APIs, started together and wired to the emulator hooks.

What a test makes exist beforehand (``seed_network``, ``seed_bucket``, ...) comes from
:class:`~rl_lustre.testing._seeding.Seeding`.
"""

from __future__ import annotations

import datetime
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .._public import public
from ..catalog import (
    LABEL_CREATED_BY,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    SHARED_ROLES,
    ownership_labels,
)
from ..gcp import _clients
from ..gcp._ownership import labels_from_description
from ._capacity import Catalog
from ._cloudquotas import QuotasFake
from ._compute_vm import ComputeVmFake, PreloadKnobs
from ._core import Core, Faults, RequestRecord
from ._gke import GkeFake
from ._grpc import GrpcServer
from ._iam import IamFake
from ._lustre import LustreFake
from ._monitoring import MonitoringFake
from ._registry import RegistryFake
from ._reservations import ReservationsFake
from ._rest import RestFake
from ._seeding import Seeding
from ._stock import Stock

if TYPE_CHECKING:
    from google.cloud import monitoring_v3

    from .kube import KubeFake

Request = TypeVar("Request")
Response = TypeVar("Response")

KINDS = (
    "compute.images",
    "compute.disks",
    "compute.instances",
    "compute.networks",
    "compute.subnetworks",
    "compute.globalAddresses",
    "compute.firewalls",
    "servicenetworking.connections",
    "lustre.instances",
    "gke.clusters",
    "gke.nodePools",
    "iam.serviceAccounts",
    "iam.bindings",
)


@public("rl_lustre.testing")
class FakeGCP(Seeding):
    """Stateful fakes of the Google APIs rl_lustre uses, speaking their real protocols.

        One gRPC server on loopback hosts ``google.cloud.lustre.v1.Lustre``,
        ``google.longrunning.Operations``, ``google.container.v1.ClusterManager``,
        ``google.api.cloudquotas.v1.CloudQuotas``, ``google.iam.admin.v1.IAM`` and
        ``google.cloud.resourcemanager.v3.Projects`` (the project IAM policy); one
        HTTP server hosts the Compute Engine and Service Networking calls, another the
        container registries (:mod:`rl_lustre.testing._registry`). Entering the context starts
        them and points ``RL_LUSTRE_GCP_EMULATOR_HOST``, ``RL_LUSTRE_GCP_REST_EMULATOR`` and
        ``RL_LUSTRE_REGISTRY_EMULATOR`` at them (restored on exit), so the real client
    libraries, and everything in rl_lustre, talk to the fakes. For a subprocess, pass
        :attr:`env`.

        Remote changes take ``latency[key] × time_scale`` seconds (keys in
        ``rl_lustre.testing.DEFAULT_LATENCY``: ``"lustre.create"``,
        ``"gke.create_cluster"``, ...). Lustre instances get a mount point like
        ``10.90.1.4@tcp:/lustrefs`` when ACTIVE; GKE clusters an endpoint and a CA.

        Examples:
            >>> from rl_lustre.testing import FakeGCP
            >>> from google.cloud import compute_v1
            >>> from rl_lustre.gcp import _clients
            >>> with FakeGCP(latency={"lustre.create": 0.05}, time_scale=0.5) as gcp:
            ...     net = _clients.compute(compute_v1.NetworksClient).insert_unary(
            ...         project="p", network_resource=compute_v1.Network(name="n", auto_create_subnetworks=False))
            ...     gcp.settle()
            ...     sorted(gcp.resources()["compute.networks"])
            ['projects/p/global/networks/n']

        Args:
            latency: seconds per remote change, by key; unlisted keys keep their small defaults.
            time_scale: multiplies every latency (0 makes changes apply at the next request).
            kube_endpoint: the ``endpoint`` RUNNING clusters report (e.g. a Kubernetes API
                fake's ``127.0.0.1:PORT``); by default a documentation address.
            kube_ca_pem: the PEM CA certificate RUNNING clusters report (base64-encoded in
                ``master_auth.cluster_ca_certificate``, as GKE does); by default a placeholder.
            kube: a started :class:`~rl_lustre.testing.KubeFake` that plays the Kubernetes API of
                the GKE clusters: RUNNING clusters report its endpoint and CA, a RUNNING node
                pool registers its Nodes there (as GKE shapes them: labels, GPU taint, capacity
                and allocatable), and deleting a cluster removes every object in it, as deleting
                a GKE cluster deletes its control plane. One cluster at a time: the fake has a
                single API server. Anything else with ``endpoint``, ``ca_pem`` and the methods
                ``node_pool_ready(pool)``, ``node_pool_deleted(name)`` and
                ``cluster_deleted(name)`` can play that part (the tests' real control plane does);
                with ``preload(pool, images)`` too, it learns what a pool's nodes find on their
                secondary boot disks.
            set_env: set the emulator variables while the context is entered.
    """

    def __init__(
        self,
        *,
        latency: Mapping[str, float] | None = None,
        time_scale: float = 1.0,
        kube_endpoint: str | None = None,
        kube_ca_pem: str | None = None,
        kube: KubeFake | None = None,
        set_env: bool = True,
    ) -> None:
        self._core = Core(latency, time_scale)
        self._core.kube_endpoint = kube_endpoint
        self._core.kube_ca_pem = kube_ca_pem
        if kube is not None:
            if kube_endpoint is not None or kube_ca_pem is not None:
                raise ValueError("pass either kube or kube_endpoint/kube_ca_pem, not both")
            if not kube.ca_pem:
                raise ValueError("start the KubeFake before the FakeGCP that reports it")
            self._core.kube_endpoint, self._core.kube_ca_pem = kube.endpoint, kube.ca_pem.decode()
            self._core.on_cluster_deleted = kube.cluster_deleted

            def pool_ready(pool: Any) -> None:
                # Its nodes boot with what its secondary boot disks hold (a preload image).
                if hasattr(kube, "preload"):
                    kube.preload(pool.name, self._gke.preloaded_images(pool))
                kube.node_pool_ready(pool)

            self._core.on_node_pool_ready = pool_ready
            self._core.on_node_pool_deleted = kube.node_pool_deleted
            if hasattr(kube, "node_pool_updated"):
                self._core.on_node_pool_updated = kube.node_pool_updated
        self._grpc = GrpcServer(self._core)
        self._lustre = LustreFake(self._core)
        self._stock = Stock(self._core)
        self._gke = GkeFake(self._core, self._stock)
        if kube is not None:
            kube.provisioning = self._flex_decider
            kube.autoscaling = self._scale_up_decider
        self._monitoring = MonitoringFake(self._core)
        self._lustre.register(self._grpc)
        self._gke.register(self._grpc)
        self._monitoring.register(self._grpc)
        self._quotas = QuotasFake(self._core)
        self._quotas.register(self._grpc)
        self._iam = IamFake(self._core)
        self._iam.register(self._grpc)
        self._rest = RestFake(self._core)
        self._catalog = Catalog(self._core)
        self._register_catalog()
        self._reservations = ReservationsFake(self._core)
        for verb, path, method, fn in self._reservations.routes():
            self._rest.add_route(verb, path, method, fn)
        self._registry = RegistryFake(self._core)
        self._compute_vm = ComputeVmFake(self._core, self._rest.compute, self._registry.compressed_bytes)
        for verb, path, method, fn in self._compute_vm.routes():
            self._rest.add_route(verb, path, method, fn)
        self._set_env = set_env
        self._saved_env: dict[str, str | None] = {}
        self.grpc_address = ""
        self.rest_url = ""
        self.registry_url = ""

    def add_time_series(
        self,
        metric_type: str,
        points: Sequence[tuple[datetime.datetime, float]],
        *,
        kind: str = "GAUGE",
        resource_type: str = "global",
        resource_labels: Mapping[str, str] | None = None,
        metric_labels: Mapping[str, str] | None = None,
    ) -> None:
        """Store raw points of a Cloud Monitoring series for ``ListTimeSeries`` to serve.

        Examples:
            >>> import datetime as dt
            >>> from rl_lustre.testing import FakeGCP
            >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
            >>> with FakeGCP() as gcp:
            ...     gcp.add_time_series("kubernetes.io/container/accelerator/duty_cycle", [(t, 87.0)],
            ...                         resource_type="k8s_container", resource_labels={"pod_name": "w-0"})

        Args:
            metric_type: the metric (``"lustre.googleapis.com/instance/write_bytes_total"``).
            points: ``(time, value)`` pairs; for a DELTA metric, each value counts since the previous point.
            kind: ``"GAUGE"``, ``"DELTA"`` or ``"CUMULATIVE"``, as the metric's descriptor says.
            resource_type: the monitored resource type (``"k8s_container"``).
            resource_labels: the monitored resource's labels (``project_id`` restricts the project).
            metric_labels: the metric's labels.
        """
        self._monitoring.add(
            metric_type,
            points,
            kind=kind,
            resource_type=resource_type,
            resource_labels=resource_labels or {},
            metric_labels=metric_labels or {},
        )

    @property
    def time_series_requests(self) -> list[monitoring_v3.ListTimeSeriesRequest]:
        """Every ``ListTimeSeriesRequest`` received, as sent (filter, interval, aggregation)."""
        return list(self._monitoring.requests)

    def _register_catalog(self) -> None:
        from google.cloud.location import locations_pb2

        cat, zone = self._catalog, "/compute/v1/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)"
        self._rest.add_route("GET", zone, "compute.zones.get", cat.zone_get)
        self._rest.add_route(
            "GET", zone + "/machineTypes/(?P<name>[^/]+)", "compute.machineTypes.get", cat.machine_type_get
        )
        self._rest.add_route(
            "GET", zone + "/acceleratorTypes/(?P<name>[^/]+)", "compute.acceleratorTypes.get", cat.accelerator_type_get
        )
        self._rest.add_route(
            "GET",
            "/compute/v1/projects/(?P<project>[^/]+)/regions/(?P<region>[^/]+)",
            "compute.regions.get",
            cat.region_get,
        )
        project = "/compute/v1/projects/(?P<project>[^/]+)"
        self._rest.add_route("GET", project + "/zones", "compute.zones.list", cat.zone_list)
        self._rest.add_route(
            "GET",
            project + "/aggregated/machineTypes",
            "compute.machineTypes.aggregatedList",
            cat.machine_types_aggregated,
        )
        self._rest.add_route(
            "GET",
            project + "/aggregated/acceleratorTypes",
            "compute.acceleratorTypes.aggregatedList",
            cat.accelerator_types_aggregated,
        )
        self._grpc.add(
            "google.cloud.location.Locations",
            "ListLocations",
            "lustre.ListLocations",
            cat.list_locations,
            locations_pb2.ListLocationsRequest,
            locations_pb2.ListLocationsResponse,
        )

    @property
    def catalog(self) -> Catalog:
        """What zones offer and regions allow (machine/GPU types, Lustre zones, quotas);
        generous by default, narrowed with ``withdraw``, ``set_quota``, ``lustre_zones``,
        ``retire_zone`` (and ``add_zone`` for one newer than rl_lustre's list)."""
        return self._catalog

    @property
    def stock(self) -> Stock:
        """GPU capacity per kind and zone over time: ``out``, ``back``, ``flex_start``,
        ``reservation`` (see :mod:`rl_lustre.testing._stock`); every kind everywhere by default."""
        return self._stock

    def _flex_decider(self, pool: str, count: int, asked_at: float) -> tuple[str, str, list[Any]]:
        """How a ProvisioningRequest for flex-start ``pool`` is answered (the KubeFake asks)."""
        from ._gke_nodes import pool_nodes

        # Called on the Kubernetes fake's loop, which a GKE change holding the lock may be
        # waiting for (to register a pool's nodes): never block on the lock here. "busy" is no
        # answer about capacity (no stock-out event): the request is asked again next pass.
        if not self._core.lock.acquire(timeout=0.01):
            return "busy", "", []
        try:
            found = [p for c in self._core.clusters.values() for p in c.node_pools if p.name == pool]
            if not found:
                return "failed", f"node pool {pool} not found", []
            zone = found[0].locations[0] if found[0].locations else ""
            state, message = self._stock.flex_decision(zone, asked_at, self._core.now(), pool)
            nodes = pool_nodes(found[0], count=count) if state == "granted" else []
        finally:
            self._core.lock.release()
        return state, message, nodes

    def _scale_up_decider(self, pool: str, count: int, asked_at: float) -> tuple[str, str, list[Any]]:
        """How the cluster autoscaler's scale-up of ``pool`` to ``count`` nodes is answered (the
        KubeFake asks; the nodes are its own to make)."""
        if not self._core.lock.acquire(timeout=0.01):  # as in _flex_decider: never block here
            return "busy", "", []
        try:
            found = [(name, p) for name, c in self._core.clusters.items() for p in c.node_pools if p.name == pool]
            if not found:
                return "failed", f"node pool {pool} not found", []
            cluster, node_pool = found[0]
            zone = node_pool.locations[0] if node_pool.locations else ""
            project = cluster.split("/")[1]
            state, message = self._stock.scale_up(node_pool, project, zone, asked_at, self._core.now(), count)
        finally:
            self._core.lock.release()
        return state, message, []

    @property
    def quotas(self) -> QuotasFake:
        """The Cloud Quotas API's limits (GPUs per family and region, GPUs in all regions,
        Managed Lustre capacity per zone and tier); generous by default, narrowed with
        ``set_limit`` and ``drop``."""
        return self._quotas

    @property
    def iam(self) -> IamFake:
        """Service accounts and the project IAM policy (IAM Admin, Resource Manager):
        ``seed_account``, ``bindings``, ``bind``, ``concurrent_change``, ``users_of``."""
        return self._iam

    @property
    def reservations(self) -> ReservationsFake:
        """Compute Engine reservations (none by default): ``add``."""
        return self._reservations

    @property
    def registry(self) -> RegistryFake:
        """The container registries (every host): ``add``, ``private``, ``remove``; the
        images rl_lustre knows the size of are there from the start."""
        return self._registry

    @property
    def preload(self) -> PreloadKnobs:
        """How the preload builder's simulated VM behaves: ``script_failure``, ``hang``,
        ``unpack_ratio``."""
        return self._compute_vm.knobs

    @property
    def faults(self) -> Faults:
        """Fault injection: ``fail_call``, ``fail_operation``, ``rate_limit``."""
        return self._core.faults

    @property
    def env(self) -> dict[str, str]:
        """The emulator variables pointing at these fakes (for a subprocess's environment)."""
        from ..registry import EMULATOR_ENV

        return {
            _clients.GRPC_EMULATOR_ENV: self.grpc_address,
            _clients.REST_EMULATOR_ENV: self.rest_url,
            EMULATOR_ENV: self.registry_url,
        }

    @property
    def kube_endpoint(self) -> str | None:
        """The endpoint RUNNING clusters report; may be set while running."""
        return self._core.kube_endpoint

    @kube_endpoint.setter
    def kube_endpoint(self, value: str | None) -> None:
        self._core.kube_endpoint = value

    @property
    def kube_ca_pem(self) -> str | None:
        """The PEM CA certificate RUNNING clusters report; may be set while running."""
        return self._core.kube_ca_pem

    @kube_ca_pem.setter
    def kube_ca_pem(self, value: str | None) -> None:
        self._core.kube_ca_pem = value

    def start(self) -> FakeGCP:
        """Start both servers (and set the emulator variables unless ``set_env=False``)."""
        port = self._grpc.start()
        self.grpc_address = f"127.0.0.1:{port}"
        self.rest_url = self._rest.start()
        self.registry_url = self._registry.start()
        if self._set_env:
            for key, value in self.env.items():
                self._saved_env[key] = os.environ.get(key)
                os.environ[key] = value
        return self

    def stop(self) -> None:
        """Stop both servers, restore the environment and drop clients cached for them."""
        for key, old in self._saved_env.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        self._saved_env.clear()
        _clients.clear_cache(self.grpc_address)
        _clients.clear_cache(self.rest_url)
        self._grpc.stop()
        self._rest.stop()
        self._registry.stop()
        self._core.files.cleanup()

    def __enter__(self) -> FakeGCP:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_grpc_method(
        self,
        service: str,
        method: str,
        fn: Callable[[Request], Response],
        request_type: type[Request],
        response_type: type[Response],
        *,
        short: str | None = None,
    ) -> None:
        """Serve one more gRPC method (e.g. a Monitoring fake) on the same server.

        ``fn(request) -> response`` runs under the fake's lock (``request_type`` and
        ``response_type``: the protobuf or proto-plus message classes); raise
        ``rl_lustre.testing.FakeError`` for an error status. ``short`` names it in the
        request log and for faults (by default ``<last part of service>.<method>``).
        """
        self._grpc.add(
            service, method, short or f"{service.rsplit('.', 1)[-1].lower()}.{method}", fn, request_type, response_type
        )

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request received so far, in order, with its time and outcome."""
        with self._core.lock:
            return list(self._core.log)

    def request_counts(self, prefix: str = "") -> Counter[str]:
        """Requests per method (those starting with ``prefix``).

        Examples:
            >>> from rl_lustre.testing import FakeGCP
            >>> with FakeGCP() as gcp:
            ...     gcp.request_counts("lustre.")
            Counter()
        """
        return self._core.counts(prefix)

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every pending remote change has happened."""
        self._core.settle(timeout)

    def resources(self) -> dict[str, dict[str, dict[str, str]]]:
        """What exists: kind → full name → labels (for Compute, those in the description).

        Service Networking connections have no labels of their own; they show the
        labels of the first reserved range that carries any. Service accounts show those
        in their description, project IAM bindings (``projects/P ROLE MEMBER``) those of
        the member's account (kept after it is deleted).
        """
        core = self._core
        with core.lock:
            core.advance()
            out: dict[str, dict[str, dict[str, str]]] = {k: {} for k in KINDS}
            for (p, n), image in core.images.items():
                out["compute.images"][f"projects/{p}/global/images/{n}"] = dict(image.get("labels") or {})
            for (p, z, n), disk in core.disks.items():
                out["compute.disks"][f"projects/{p}/zones/{z}/disks/{n}"] = dict(disk.get("labels") or {})
            for (p, z, n), vm in core.instances.items():
                out["compute.instances"][f"projects/{p}/zones/{z}/instances/{n}"] = dict(vm.get("labels") or {})
            for (p, n), net in core.networks.items():
                out["compute.networks"][f"projects/{p}/global/networks/{n}"] = labels_from_description(
                    net.get("description")
                )
            for (p, r, n), sub in core.subnetworks.items():
                out["compute.subnetworks"][f"projects/{p}/regions/{r}/subnetworks/{n}"] = labels_from_description(
                    sub.get("description")
                )
            for (p, n), addr in core.addresses.items():
                out["compute.globalAddresses"][f"projects/{p}/global/addresses/{n}"] = labels_from_description(
                    addr.get("description")
                )
            for (p, n), fw in core.firewalls.items():
                out["compute.firewalls"][f"projects/{p}/global/firewalls/{n}"] = labels_from_description(
                    fw.get("description")
                )
            for (p, n), conn in core.connections.items():
                labels: dict[str, str] = {}
                for r in conn["reservedPeeringRanges"]:
                    labels = labels or labels_from_description(core.addresses.get((p, r), {}).get("description"))
                out["servicenetworking.connections"][
                    f"projects/{p}/global/networks/{n}/peerings/servicenetworking-googleapis-com"
                ] = labels
            for name, inst in core.lustre.items():
                out["lustre.instances"][name] = dict(inst.labels)
            for name, cluster in core.clusters.items():
                out["gke.clusters"][name] = dict(cluster.resource_labels)
                for pool in cluster.node_pools:
                    out["gke.nodePools"][f"{name}/nodePools/{pool.name}"] = dict(pool.config.resource_labels)
            return {**out, **self._iam.resources()}

    def leaked(self, deployment: str | None = None, *, shared: bool = False) -> list[str]:
        """``"<kind> <name>"`` of every resource carrying our labels (of ``deployment``, if given).

        The caches deployments share (preload images, warm-start buckets) outlive them by
        design and are left out unless ``shared``; a preload builder's VM or disk is a leak
        (of the deployment whose ``up()`` started it).

        Examples:
            >>> from rl_lustre.testing import FakeGCP
            >>> with FakeGCP() as gcp:
            ...     gcp.leaked()
            []
        """
        return sorted(
            f"{kind} {name}"
            for kind, found in self.resources().items()
            for name, labels in found.items()
            if labels.get(LABEL_MANAGED_BY) == MANAGED_BY
            and (shared or labels.get(LABEL_ROLE) not in SHARED_ROLES)
            and (
                deployment is None
                or labels == {**labels, **ownership_labels(deployment)}
                or labels.get(LABEL_CREATED_BY) == deployment
            )
        )
