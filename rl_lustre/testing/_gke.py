"""The fake ``google.container.v1.ClusterManager`` service (GKE), with GKE's own ``Operation``."""

# proto-plus ships no type information: mypy takes its enum members for plain ints.
# mypy: disable-error-code="assignment"

from __future__ import annotations

import base64
import datetime
import re
from typing import Any

import grpc
from google.cloud import container_v1

from ..catalog import GKE_ACCELERATOR_LABEL, GKE_LOCAL_SSD_LABEL, GKE_SPOT_LABEL, GPU_MACHINE_TYPES
from ._core import Core, FakeError
from ._gke_nodes import instance_group_urls
from ._grpc import GrpcServer
from ._stock import Stock

SERVICE = "google.container.v1.ClusterManager"
_PARENT = re.compile(r"projects/([^/]+)/locations/([^/]+)")
_CLUSTER = re.compile(r"projects/([^/]+)/locations/([^/]+)/clusters/([^/]+)")
_POOL = re.compile(_CLUSTER.pattern + r"/nodePools/([^/]+)")
_CLUSTER_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?")
_ZONE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")
_DISK_IMAGE = re.compile(r"projects/([^/]+)/global/images/([^/]+)")
VERSION = "1.33.5-gke.1162000"
PLACEHOLDER_CA = (
    "-----BEGIN CERTIFICATE-----\n"
    "cmxfbHVzdHJlLnRlc3Rpbmc6IGEgcGxhY2Vob2xkZXIsIG5vdCBhIGNlcnRpZmljYXRl\n"
    "-----END CERTIFICATE-----\n"
)
ClusterStatus = container_v1.Cluster.Status
PoolStatus = container_v1.NodePool.Status
OpStatus = container_v1.Operation.Status
OpType = container_v1.Operation.Type


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def node_labels(pool: container_v1.NodePool) -> dict[str, str]:
    """The labels GKE puts on a node of ``pool`` (besides its pool name and hostname)."""
    labels = {
        "cloud.google.com/machine-family": pool.config.machine_type.split("-")[0],
        "node.kubernetes.io/instance-type": pool.config.machine_type,
    }
    if pool.config.accelerators:
        labels[GKE_ACCELERATOR_LABEL] = pool.config.accelerators[0].accelerator_type
    if pool.config.spot:
        labels[GKE_SPOT_LABEL] = "true"
    if pool.config.ephemeral_storage_local_ssd_config.local_ssd_count > 0:
        # GKE labels nodes whose ephemeral storage is on local SSDs so.
        labels[GKE_LOCAL_SSD_LABEL] = "true"
    return labels


def _region(location: str) -> str:
    return location.rsplit("-", 1)[0] if _ZONE.fullmatch(location) else location


class GkeFake:
    """GKE clusters and node pools: PROVISIONING → RUNNING → STOPPING → gone, or ERROR."""

    def __init__(self, core: Core, stock: Stock | None = None) -> None:
        self.core = core
        self.stock = stock if stock is not None else Stock(core)
        self.ops: dict[str, container_v1.Operation] = {}

    def register(self, server: GrpcServer) -> None:
        t = container_v1
        for method, fn, req, resp in [
            ("CreateCluster", self.create_cluster, t.CreateClusterRequest, t.Operation),
            ("GetCluster", self.get_cluster, t.GetClusterRequest, t.Cluster),
            ("ListClusters", self.list_clusters, t.ListClustersRequest, t.ListClustersResponse),
            ("DeleteCluster", self.delete_cluster, t.DeleteClusterRequest, t.Operation),
            ("CreateNodePool", self.create_node_pool, t.CreateNodePoolRequest, t.Operation),
            ("GetNodePool", self.get_node_pool, t.GetNodePoolRequest, t.NodePool),
            ("ListNodePools", self.list_node_pools, t.ListNodePoolsRequest, t.ListNodePoolsResponse),
            ("DeleteNodePool", self.delete_node_pool, t.DeleteNodePoolRequest, t.Operation),
            ("GetOperation", self.get_operation, t.GetOperationRequest, t.Operation),
            ("ListOperations", self.list_operations, t.ListOperationsRequest, t.ListOperationsResponse),
        ]:
            server.add(SERVICE, method, f"gke.{method}", fn, req, resp)
        from ._gke_updates import register_updates

        register_updates(self, server, SERVICE)

    def _start_op(self, location_path: str, op_type: Any, target: str) -> container_v1.Operation:
        m = _PARENT.fullmatch(location_path)
        assert m is not None
        short = f"operation-{self.core.next_id()}"
        op = container_v1.Operation(
            name=short,
            zone=m[2],
            location=m[2],
            operation_type=op_type,
            status=OpStatus.RUNNING,
            self_link=f"https://container.googleapis.com/v1/{location_path}/operations/{short}",
            target_link=f"https://container.googleapis.com/v1/{target}",
            start_time=_now(),
        )
        self.ops[f"{location_path}/operations/{short}"] = op
        return op

    @staticmethod
    def _finish(op: container_v1.Operation, error: FakeError | None = None) -> None:
        if error is not None:
            op.error = {"code": error.grpc_code.value[0], "message": error.message}
            op.status_message = error.message
        op.status = OpStatus.DONE
        op.end_time = _now()

    def _cluster(self, name: str) -> container_v1.Cluster:
        found = self.core.clusters.get(name)
        if found is None:
            raise FakeError(grpc.StatusCode.NOT_FOUND, f"Not found: {name}.")
        return found

    def _check_network(self, project: str, location: str, cluster: container_v1.Cluster) -> None:
        network = cluster.network or "default"
        if (project, network) not in self.core.networks:
            raise FakeError(
                grpc.StatusCode.FAILED_PRECONDITION, f"Network {network!r} does not exist in project {project}."
            )
        if not cluster.subnetwork:
            return
        subnet = self.core.subnetworks.get((project, _region(location), cluster.subnetwork))
        if subnet is None:
            raise FakeError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Subnetwork {cluster.subnetwork!r} does not exist in region {_region(location)}.",
            )
        ranges = {r["rangeName"] for r in subnet.get("secondaryIpRanges", [])}
        policy = cluster.ip_allocation_policy
        for wanted in (policy.cluster_secondary_range_name, policy.services_secondary_range_name):
            if wanted and wanted not in ranges:
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Subnetwork {cluster.subnetwork!r} has no secondary range {wanted!r}.",
                )

    def _check_ray_observability(self, spec: container_v1.Cluster) -> None:
        """Ray's logs and metrics (the Ray add-on's logging and monitoring) need the add-on, Cloud
        Logging and Managed Prometheus on the cluster."""
        ray = spec.addons_config.ray_operator_config
        logging_on, monitoring_on = ray.ray_cluster_logging_config.enabled, ray.ray_cluster_monitoring_config.enabled
        if (logging_on or monitoring_on) and not ray.enabled:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "Ray cluster logging and monitoring need the Ray operator add-on (ray_operator_config.enabled).",
            )
        if logging_on and spec.logging_service == "none":
            raise FakeError(
                grpc.StatusCode.FAILED_PRECONDITION, "Ray cluster logging needs Cloud Logging (logging_service none)."
            )
        prometheus = spec.monitoring_config.managed_prometheus_config
        if monitoring_on and "managed_prometheus_config" in spec.monitoring_config and not prometheus.enabled:
            raise FakeError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "Ray cluster monitoring needs Managed Service for Prometheus (managed_prometheus_config.enabled).",
            )

    def _check_cluster_fabric(self, spec: container_v1.Cluster) -> None:
        nc = spec.network_config
        if nc.enable_multi_networking and nc.datapath_provider != container_v1.DatapathProvider.ADVANCED_DATAPATH:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "Multi-networking requires GKE Dataplane V2 (datapath_provider=ADVANCED_DATAPATH).",
            )
        options = container_v1.MaintenanceExclusionOptions
        for name, window in spec.maintenance_policy.window.maintenance_exclusions.items():
            opts = window.maintenance_exclusion_options
            if not name or "start_time" not in window:
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT, f"Maintenance exclusion {name!r} needs a name and a start_time."
                )
            until_eos = opts.end_time_behavior == options.EndTimeBehavior.UNTIL_END_OF_SUPPORT
            if until_eos == ("end_time" in window):
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Maintenance exclusion {name!r} needs exactly one of end_time and "
                    "end_time_behavior=UNTIL_END_OF_SUPPORT.",
                )
            if until_eos and opts.scope == options.Scope.NO_UPGRADES:
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "A NO_UPGRADES exclusion cannot last until the end of support (30 days at most).",
                )

    def _check_pool_fabric(
        self, project: str, location: str, cluster: container_v1.Cluster, pool: container_v1.NodePool
    ) -> None:
        known = GPU_MACHINE_TYPES.get(pool.config.machine_type)
        ssds = pool.config.ephemeral_storage_local_ssd_config.local_ssd_count
        if ssds and (known is None or ssds != known.local_ssds):
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Machine type {pool.config.machine_type} cannot have {ssds} local SSDs.",
            )
        up = pool.upgrade_settings
        if (
            up.max_surge == 0
            and up.max_unavailable == 0
            and "strategy" in up
            and up.strategy == container_v1.NodePoolUpdateStrategy.SURGE
        ):
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, "max_surge and max_unavailable cannot both be 0.")
        extras = pool.network_config.additional_node_network_configs
        if not extras:
            return
        if not cluster.network_config.enable_multi_networking:
            raise FakeError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "additional_node_network_configs needs a cluster with multi-networking enabled.",
            )
        region = _region(location)
        seen = set()
        rdma = 0
        for extra in extras:
            net = self.core.networks.get((project, extra.network))
            subnet = self.core.subnetworks.get((project, region, extra.subnetwork))
            if net is None or subnet is None or not subnet["network"].endswith(f"/networks/{extra.network}"):
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Additional network {extra.network}/{extra.subnetwork} does not exist in {region}.",
                )
            if extra.network == (cluster.network or "default") or extra.subnetwork in seen:
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Additional network {extra.network}/{extra.subnetwork} is the cluster's or repeated.",
                )
            seen.add(extra.subnetwork)
            if "networkProfile" in net:
                rdma += 1
                if not net["networkProfile"].endswith(f"/{pool.locations[0] if pool.locations else ''}-vpc-roce"):
                    raise FakeError(
                        grpc.StatusCode.INVALID_ARGUMENT, f"RDMA network {extra.network} is not in the pool's zone."
                    )
        if rdma and (known is None or rdma != known.rdma_nics):
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Machine type {pool.config.machine_type} has {known.rdma_nics if known else 0} RDMA NICs; "
                f"{rdma} RDMA networks were given.",
            )

    def _check_pool(self, pool: container_v1.NodePool) -> None:
        account = pool.config.service_account
        if account.endswith(".iam.gserviceaccount.com") and account not in self.core.service_accounts:
            # GKE checks that the caller may act as the nodes' account, which must exist.
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Node pool {pool.name!r}: service account {account!r} does not exist, or the caller "
                "lacks iam.serviceAccounts.actAs on it.",
            )
        # An autoscaled pool (flex-start) may start at 0 nodes.
        if pool.initial_node_count < (0 if pool.autoscaling.enabled else 1) or not pool.config.machine_type:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Node pool {pool.name!r} needs a machine type and initial_node_count > 0.",
            )
        no_reservation = container_v1.ReservationAffinity.Type.NO_RESERVATION
        # GKE's documented requirements of a flex-start pool.
        if pool.config.flex_start and (
            pool.config.spot
            or not pool.autoscaling.enabled
            or pool.management.auto_repair
            or pool.config.reservation_affinity.consume_reservation_type != no_reservation
        ):
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Node pool {pool.name!r}: flex-start needs autoscaling, no Spot, auto-repair off "
                "and reservation affinity NO_RESERVATION.",
            )
        known = GPU_MACHINE_TYPES.get(pool.config.machine_type)
        if known is not None:
            acc = pool.config.accelerators
            if not acc or acc[0].accelerator_type != known.accelerator or acc[0].accelerator_count != known.gpus:
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Machine type {known.name} needs accelerator {known.gpus} x {known.accelerator}.",
                )
        affinity = pool.config.reservation_affinity.consume_reservation_type
        if pool.config.spot and affinity == container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, "Spot VMs cannot consume a specific reservation.")
        # GKE's stated requirements for a container image cache on a secondary boot disk.
        for i, disk in enumerate(pool.config.secondary_boot_disks):
            if disk.mode != container_v1.SecondaryBootDisk.Mode.CONTAINER_IMAGE_CACHE:
                continue
            where = f"node_pool.config.secondary_boot_disks[{i}]"
            if not pool.config.gcfs_config.enabled:
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{where}: mode CONTAINER_IMAGE_CACHE requires Image streaming "
                    "(node_pool.config.gcfs_config.enabled).",
                )
            if pool.config.image_type != "COS_CONTAINERD":
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{where}: mode CONTAINER_IMAGE_CACHE requires node_pool.config.image_type "
                    f"COS_CONTAINERD, not {pool.config.image_type or 'the default'!r}.",
                )
            if not _DISK_IMAGE.fullmatch(disk.disk_image):
                raise FakeError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{where}.disk_image: {disk.disk_image!r} is not projects/P/global/images/NAME.",
                )

    def _secondary_disk_problem(self, pool: container_v1.NodePool) -> str | None:
        """Why GKE cannot create the pool's secondary boot disks (the image is missing or not READY)."""
        for disk in pool.config.secondary_boot_disks:
            m = _DISK_IMAGE.fullmatch(disk.disk_image)
            image = self.core.images.get((m[1], m[2])) if m else None
            if image is None or image.get("status") != "READY":
                state = "not found" if image is None else f"{image.get('status')}, not READY"
                return f"Secondary boot disk image {disk.disk_image} {state}."
        return None

    def preloaded_images(self, pool: container_v1.NodePool) -> list[str]:
        """The container images a node of ``pool`` finds on its secondary boot disks, by tag."""
        refs: list[str] = []
        for disk in pool.config.secondary_boot_disks:
            m = _DISK_IMAGE.fullmatch(disk.disk_image)
            held = self.core.contents.get(f"projects/{m[1]}/global/images/{m[2]}", {}) if m else {}
            refs += [str(r).partition("@")[0] for r in held.get("images", [])]
        return refs

    def create_cluster(self, request: container_v1.CreateClusterRequest) -> container_v1.Operation:
        parent = request.parent
        m = _PARENT.fullmatch(parent)
        if m is None:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"parent {parent!r} is not projects/P/locations/L")
        spec = request.cluster
        if not _CLUSTER_NAME.fullmatch(spec.name):
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid cluster name {spec.name!r}.")
        if not spec.node_pools and spec.initial_node_count < 1:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, "Cluster.initial_node_count must be greater than zero.")
        for pool in spec.node_pools:
            self._check_pool(pool)
        name = f"{parent}/clusters/{spec.name}"
        if name in self.core.clusters:
            raise FakeError(grpc.StatusCode.ALREADY_EXISTS, f"Already exists: {name}.")
        self._check_network(m[1], m[2], spec)
        self._check_cluster_fabric(spec)
        self._check_ray_observability(spec)
        for pool in spec.node_pools:
            self._check_pool_fabric(m[1], m[2], spec, pool)
        cluster = container_v1.Cluster(spec)
        cluster.status = ClusterStatus.PROVISIONING
        cluster.location = m[2]
        cluster.zone = m[2]
        cluster.self_link = f"https://container.googleapis.com/v1/{name}"
        cluster.create_time = _now()
        cluster.current_master_version = VERSION
        cluster.id = f"{self.core.next_id():032x}"
        for pool in cluster.node_pools:
            pool.status = PoolStatus.PROVISIONING
            pool.version = VERSION
            pool.self_link = f"https://container.googleapis.com/v1/{name}/nodePools/{pool.name}"
            pool.instance_group_urls = instance_group_urls(
                m[1], list(pool.locations or cluster.locations or [m[2]]), name.rsplit("/", 1)[-1], pool.name
            )
        self.core.clusters[name] = cluster
        op = self._start_op(parent, OpType.CREATE_CLUSTER, name)
        fault = self.core.operation_fault("gke.CreateCluster")
        number = self.core.next_id()

        def finish() -> None:
            if self.core.clusters.get(name) is not cluster or cluster.status != ClusterStatus.PROVISIONING:
                self._finish(op, FakeError(grpc.StatusCode.ABORTED, f"cluster {name} was deleted"))
                return
            if fault is not None:
                cluster.status = ClusterStatus.ERROR
                cluster.status_message = fault.message
                self._finish(op, fault)
                return
            cluster.status = ClusterStatus.RUNNING
            cluster.endpoint = f"203.0.113.{number % 250 + 1}"
            cluster.current_node_count = sum(p.initial_node_count for p in cluster.node_pools)
            for pool in cluster.node_pools:
                pool.status = PoolStatus.RUNNING
                if self.core.on_node_pool_ready is not None:
                    self.core.on_node_pool_ready(pool)
            self._finish(op)

        self.core.schedule(self.core.delay("gke.create_cluster"), finish)
        return op

    def get_cluster(self, request: container_v1.GetClusterRequest) -> container_v1.Cluster:
        cluster = self._cluster(request.name)
        if cluster.status == ClusterStatus.PROVISIONING:
            return cluster
        view = container_v1.Cluster(cluster)
        if cluster.status == ClusterStatus.RUNNING:
            # Read now, so that a Kubernetes API fake started later can still be plugged in.
            if self.core.kube_endpoint:
                view.endpoint = self.core.kube_endpoint
            pem = self.core.kube_ca_pem or PLACEHOLDER_CA
            view.master_auth = container_v1.MasterAuth(cluster_ca_certificate=base64.b64encode(pem.encode()).decode())
        return view

    def list_clusters(self, request: container_v1.ListClustersRequest) -> container_v1.ListClustersResponse:
        m = _PARENT.fullmatch(request.parent)
        if m is None:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT, f"parent {request.parent!r} is not projects/P/locations/L"
            )
        prefix = f"projects/{m[1]}/locations/" + ("" if m[2] == "-" else f"{m[2]}/")
        return container_v1.ListClustersResponse(
            clusters=[
                self.get_cluster(container_v1.GetClusterRequest(name=n))
                for n in sorted(self.core.clusters)
                if n.startswith(prefix)
            ]
        )

    def delete_cluster(self, request: container_v1.DeleteClusterRequest) -> container_v1.Operation:
        name = request.name
        cluster = self._cluster(name)
        if cluster.status == ClusterStatus.STOPPING:
            raise FakeError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Cluster {cluster.name} is running incompatible operation: it is being deleted.",
            )
        cluster.status = ClusterStatus.STOPPING
        for pool in cluster.node_pools:
            pool.status = PoolStatus.STOPPING
        op = self._start_op(name.rsplit("/clusters/", 1)[0], OpType.DELETE_CLUSTER, name)
        fault = self.core.operation_fault("gke.DeleteCluster")

        def finish() -> None:
            if fault is not None:
                cluster.status = ClusterStatus.ERROR
                cluster.status_message = fault.message
                self._finish(op, fault)
                return
            if self.core.clusters.get(name) is cluster:
                del self.core.clusters[name]
                for gone in cluster.node_pools:
                    self.stock.node_pool_deleted(gone.name)
                if self.core.on_cluster_deleted is not None:
                    self.core.on_cluster_deleted(name)
            self._finish(op)

        self.core.schedule(self.core.delay("gke.delete_cluster"), finish)
        return op

    def _pool(self, name: str) -> tuple[container_v1.Cluster, container_v1.NodePool]:
        m = _POOL.fullmatch(name)
        if m is None:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"name {name!r} is not .../clusters/C/nodePools/P")
        cluster = self._cluster(name.rsplit("/nodePools/", 1)[0])
        for pool in cluster.node_pools:
            if pool.name == m[4]:
                return cluster, pool
        raise FakeError(grpc.StatusCode.NOT_FOUND, f"Not found: {name}.")

    def create_node_pool(self, request: container_v1.CreateNodePoolRequest) -> container_v1.Operation:
        cluster_name = request.parent
        m = _CLUSTER.fullmatch(cluster_name)
        if m is None:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"parent {cluster_name!r} is not .../clusters/C")
        cluster = self._cluster(cluster_name)
        spec = request.node_pool
        if any(p.name == spec.name for p in cluster.node_pools):
            raise FakeError(grpc.StatusCode.ALREADY_EXISTS, f"Already exists: {cluster_name}/nodePools/{spec.name}.")
        if cluster.status != ClusterStatus.RUNNING:
            raise FakeError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Cluster is running incompatible operation (status "
                f"{ClusterStatus(cluster.status).name}). Please wait and try again once it is done.",
            )
        self._check_pool(spec)
        self._check_pool_fabric(m[1], m[2], cluster, spec)
        cluster.node_pools.append(container_v1.NodePool(spec))
        pool = cluster.node_pools[-1]
        pool.status = PoolStatus.PROVISIONING
        pool.version = VERSION
        name = f"{cluster_name}/nodePools/{spec.name}"
        pool.self_link = f"https://container.googleapis.com/v1/{name}"
        pool.instance_group_urls = instance_group_urls(
            m[1], list(pool.locations or cluster.locations or [m[2]]), cluster_name.rsplit("/", 1)[-1], pool.name
        )
        op = self._start_op(f"projects/{m[1]}/locations/{m[2]}", OpType.CREATE_NODE_POOL, name)
        fault = self.core.operation_fault("gke.CreateNodePool")
        due = self.core.now() + self.core.delay("gke.create_node_pool")
        zone = spec.locations[0] if spec.locations else (cluster.locations[0] if cluster.locations else m[2])

        def finish() -> None:
            try:
                _, current = self._pool(name)
            except FakeError:
                current = None
            if current is None or current.status != PoolStatus.PROVISIONING:
                self._finish(op, FakeError(grpc.StatusCode.ABORTED, f"node pool {name} was deleted"))
                return
            problem = self._secondary_disk_problem(current)
            failure = fault
            if failure is None and problem is None:
                stockout = self.stock.node_pool_problem(current, m[1], zone, due, spec.name)
                if stockout is not None:
                    failure = FakeError(grpc.StatusCode.RESOURCE_EXHAUSTED, stockout)
            error = (
                failure
                if failure is not None or problem is None
                else FakeError(grpc.StatusCode.FAILED_PRECONDITION, problem)
            )
            if error is not None:
                current.status = PoolStatus.ERROR
                current.status_message = error.message
                self._finish(op, error)
                return
            current.status = PoolStatus.RUNNING
            if self.core.on_node_pool_ready is not None:
                self.core.on_node_pool_ready(current)
            self._finish(op)

        self.core.schedule(self.core.delay("gke.create_node_pool"), finish)
        return op

    def get_node_pool(self, request: container_v1.GetNodePoolRequest) -> container_v1.NodePool:
        return self._pool(request.name)[1]

    def list_node_pools(self, request: container_v1.ListNodePoolsRequest) -> container_v1.ListNodePoolsResponse:
        return container_v1.ListNodePoolsResponse(node_pools=list(self._cluster(request.parent).node_pools))

    def delete_node_pool(self, request: container_v1.DeleteNodePoolRequest) -> container_v1.Operation:
        name = request.name
        cluster, pool = self._pool(name)
        if pool.status == PoolStatus.STOPPING:
            raise FakeError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Cluster is running incompatible operation: node pool {pool.name} is being deleted.",
            )
        pool.status = PoolStatus.STOPPING
        m = _POOL.fullmatch(name)
        assert m is not None
        op = self._start_op(f"projects/{m[1]}/locations/{m[2]}", OpType.DELETE_NODE_POOL, name)
        fault = self.core.operation_fault("gke.DeleteNodePool")

        def finish() -> None:
            if fault is not None:
                pool.status = PoolStatus.ERROR
                pool.status_message = fault.message
                self._finish(op, fault)
                return
            kept = [p for p in cluster.node_pools if p.name != pool.name]
            del cluster.node_pools[:]
            cluster.node_pools.extend(kept)
            self.stock.node_pool_deleted(pool.name)
            if self.core.on_node_pool_deleted is not None:
                self.core.on_node_pool_deleted(pool.name)
            self._finish(op)

        self.core.schedule(self.core.delay("gke.delete_node_pool"), finish)
        return op

    def get_operation(self, request: container_v1.GetOperationRequest) -> container_v1.Operation:
        op = self.ops.get(request.name)
        if op is None:
            raise FakeError(grpc.StatusCode.NOT_FOUND, f"Not found: {request.name}.")
        return op

    def list_operations(self, request: container_v1.ListOperationsRequest) -> container_v1.ListOperationsResponse:
        prefix = request.parent.rstrip("/") + "/operations/"
        return container_v1.ListOperationsResponse(
            operations=[op for name, op in sorted(self.ops.items()) if name.startswith(prefix)]
        )
