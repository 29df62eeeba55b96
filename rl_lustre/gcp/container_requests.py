"""The GKE requests of a deployment, built from its :class:`~rl_lustre.plan.Plan`.

What is created is exactly what ``plan()`` shows: :func:`cluster_request` turns the plan's
``gke-cluster`` node into the ``container_v1.Cluster`` to create (with the CPU pool as its
only pool: GKE needs one pool at creation, and making it the pool we want avoids
creating and then deleting a default pool), :func:`node_pool_request` turns the
``cpu-pool`` and ``gpu-pool`` nodes (:mod:`rl_lustre.plan.nodepools`) into
``container_v1.NodePool`` requests, and :func:`control_plane_endpoints` gives the
cluster's DNS and IP endpoints. :mod:`rl_lustre.gcp.container` sends them.

Examples:
    >>> from rl_lustre import Cluster
    >>> plan = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
    ...                authorized_networks=["203.0.113.7/32"]).plan()
    >>> req = cluster_request(plan)
    >>> req.addons_config.lustre_csi_driver_config.enabled, req.addons_config.ray_operator_config.enabled
    (True, True)
    >>> [b.cidr_block for b in req.master_authorized_networks_config.cidr_blocks]
    ['203.0.113.7/32']
    >>> pool = node_pool_request(plan, "gpu-pool", preload_image="projects/my-project/global/images/rlp-x")
    >>> pool.config.accelerators[0].accelerator_type, pool.config.spot, pool.initial_node_count
    ('nvidia-b200', True, 0)
    >>> pool.config.secondary_boot_disks[0].disk_image, pool.config.gcfs_config.enabled, pool.config.image_type
    ('projects/my-project/global/images/rlp-x', True, 'COS_CONTAINERD')
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from google.cloud import container_v1

from .. import naming
from ..catalog import boot_disk_type, ownership_labels
from ..errors import ConfigError
from ..plankeys import CPU_POOL_KEY, GKE_CLUSTER_KEY

if TYPE_CHECKING:
    from ..plan import Plan, PlannedResource

__all__ = [
    "SCOPES",
    "cluster_path",
    "cluster_request",
    "control_plane_endpoints",
    "maintenance_policy",
    "node_pool_path",
    "node_pool_request",
]

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
# A4, A4X and A3 Ultra machines boot only from Hyperdisk; GKE's default pd-balanced fails.


def _labels(plan: Plan, key: str) -> dict[str, str]:
    return {**plan.get(key).labels, **ownership_labels(plan.cluster_name)}


def cluster_path(plan: Plan) -> str:
    """``projects/P/locations/LOCATION/clusters/NAME`` of the plan's GKE cluster."""
    node = plan.get(GKE_CLUSTER_KEY)
    return naming.container_cluster_path(str(plan.project), node.settings["location"], node.name)


def node_pool_path(plan: Plan, key: str) -> str:
    """The full name of the node pool ``key`` (``"cpu-pool"`` or ``"gpu-pool"``) of the plan."""
    return f"{cluster_path(plan)}/nodePools/{plan.get(key).name}"


def node_pool_request(
    plan: Plan, key: str, *, preload_image: str | None = None, node: PlannedResource | None = None
) -> container_v1.NodePool:
    """The ``NodePool`` for the plan's node pool ``key`` (``"cpu-pool"``, ``"gpu-pool"``, or
    any other GPU pool of the plan).

    Args:
        plan: the plan.
        key: the node pool's key.
        preload_image: the preload disk image's path (``projects/P/global/images/NAME``),
            which a GPU pool's secondary boot disk names once ``up()`` has found or built it.
        node: the pool to build instead of the plan's ``key`` (a capacity lane's pool,
            :func:`rl_lustre.plan.nodepools.gpu_pool`); its labels are ``key``'s.

    Raises:
        ConfigError: the pool boots with the preload image and its path is not given.
    """
    node = node if node is not None else plan.get(key)
    s = node.settings
    config = container_v1.NodeConfig(
        machine_type=s["machine_type"],
        spot=s["spot"],
        oauth_scopes=SCOPES,
        resource_labels=_labels(plan, key),
    )
    if s.get("service_account", "default") != "default":  # "default": GKE's own default, sent as nothing
        config.service_account = s["service_account"]
    if s.get("flex_start"):
        config.flex_start = True
    if s.get("max_run_duration_seconds"):
        config.max_run_duration = datetime.timedelta(seconds=s["max_run_duration_seconds"])
    if boot_disk_type(s["machine_type"]) != "pd-balanced":  # GKE's default
        config.disk_type = boot_disk_type(s["machine_type"])
    if "accelerator" in s:
        acc = s["accelerator"]
        driver = container_v1.GPUDriverInstallationConfig.GPUDriverVersion.__members__[acc["gpu_driver_version"]]
        config.accelerators = [
            container_v1.AcceleratorConfig(
                accelerator_type=acc["type"],
                accelerator_count=acc["count"],
                gpu_driver_installation_config=container_v1.GPUDriverInstallationConfig(gpu_driver_version=driver),
            )
        ]
    if "reservation_affinity" in s:
        ra = s["reservation_affinity"]
        config.reservation_affinity = container_v1.ReservationAffinity(
            consume_reservation_type=container_v1.ReservationAffinity.Type.__members__[ra["consume_reservation_type"]],
            key=ra.get("key", ""),
            values=list(ra.get("values", ())),
        )
    if s.get("labels"):
        config.labels = dict(s["labels"])
    if s.get("taints"):
        config.taints = [
            container_v1.NodeTaint(
                key=t["key"], value=t["value"], effect=container_v1.NodeTaint.Effect.__members__[t["effect"]]
            )
            for t in s["taints"]
        ]
    if s.get("gvnic"):
        config.gvnic = container_v1.VirtualNIC(enabled=True)
    if s.get("ephemeral_storage_local_ssd_count"):
        config.ephemeral_storage_local_ssd_config = container_v1.EphemeralStorageLocalSsdConfig(
            local_ssd_count=s["ephemeral_storage_local_ssd_count"]
        )
    if s.get("preload"):
        _preload(config, s["preload"], preload_image, key)
    management = s.get("management", {"auto_repair": True, "auto_upgrade": True})
    pool = container_v1.NodePool(
        name=node.name,
        initial_node_count=s["node_count"],
        locations=[s["location"]],
        config=config,
        management=container_v1.NodeManagement(
            auto_repair=management["auto_repair"], auto_upgrade=management["auto_upgrade"]
        ),
    )
    if "autoscaling" in s:
        a = s["autoscaling"]
        pool.autoscaling = container_v1.NodePoolAutoscaling(
            enabled=a["enabled"],
            total_min_node_count=a["total_min_node_count"],
            total_max_node_count=a["total_max_node_count"],
            location_policy=container_v1.NodePoolAutoscaling.LocationPolicy.__members__[a["location_policy"]],
        )
    if s.get("queued_provisioning", {}).get("enabled"):
        pool.queued_provisioning = container_v1.NodePool.QueuedProvisioning(enabled=True)
    if "upgrade_settings" in s:
        up = s["upgrade_settings"]
        pool.upgrade_settings = container_v1.NodePool.UpgradeSettings(
            strategy=container_v1.NodePoolUpdateStrategy.__members__[up["strategy"]],
            max_surge=up["max_surge"],
            max_unavailable=up["max_unavailable"],
        )
    if s.get("additional_node_networks"):
        # By name, in NIC order: the first becomes eth1, the next eth2, and so on.
        pool.network_config = container_v1.NodeNetworkConfig(
            additional_node_network_configs=[
                container_v1.AdditionalNodeNetworkConfig(network=n["network"], subnetwork=n["subnetwork"])
                for n in s["additional_node_networks"]
            ]
        )
    return pool


def _preload(config: container_v1.NodeConfig, preload: Mapping[str, Any], path: str | None, key: str) -> None:
    """The secondary boot disk holding the preloaded image, with what GKE requires for it:
    Image streaming on and COS containerd nodes."""
    from ..plan.preload import FROM_PRELOAD_IMAGE

    disks = []
    for disk in preload["secondary_boot_disks"]:
        image = disk["disk_image"]
        if image == FROM_PRELOAD_IMAGE:
            if path is None:
                raise ConfigError(
                    "node_pool_request",
                    "preload_image",
                    None,
                    f"node pool {key!r} boots with the preload image: pass its path "
                    "(projects/P/global/images/NAME), known once up() has found or built it",
                )
            image = path
        disks.append(
            container_v1.SecondaryBootDisk(
                mode=container_v1.SecondaryBootDisk.Mode.__members__[disk["mode"]], disk_image=image
            )
        )
    config.secondary_boot_disks = disks
    config.gcfs_config = container_v1.GcfsConfig(enabled=bool(preload["image_streaming"]))
    config.image_type = preload["image_type"]


def maintenance_policy(
    settings: Mapping[str, Any], now: datetime.datetime | None = None
) -> container_v1.MaintenancePolicy:
    """The cluster's ``MaintenancePolicy``: one exclusion from ``now`` until the cluster
    version's end of support, of the plan's scope.

    Examples:
        >>> import datetime
        >>> from rl_lustre import Cluster
        >>> plan = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b").plan()
        >>> policy = maintenance_policy(plan.get("gke-cluster").settings,
        ...                             datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc))
        >>> window = policy.window.maintenance_exclusions["rl-lustre-no-node-recreation"]
        >>> window.maintenance_exclusion_options.scope.name, window.start_time.isoformat()
        ('NO_MINOR_OR_NODE_UPGRADES', '2026-01-01T00:00:00+00:00')
    """
    ex = settings["maintenance_exclusion"]
    options = container_v1.MaintenanceExclusionOptions
    start = now or datetime.datetime.now(datetime.timezone.utc)
    return container_v1.MaintenancePolicy(
        window=container_v1.MaintenanceWindow(
            maintenance_exclusions={
                ex["name"]: container_v1.TimeWindow(
                    start_time=start,
                    maintenance_exclusion_options=options(
                        scope=options.Scope.__members__[ex["scope"]],
                        end_time_behavior=options.EndTimeBehavior.__members__[ex["end_time_behavior"]],
                    ),
                )
            }
        )
    )


def cluster_request(plan: Plan) -> container_v1.Cluster:
    """The ``Cluster`` to create for the plan, with the CPU pool as its first pool.

    Master authorized networks are always enabled with exactly the plan's blocks (an
    empty list keeps the control plane closed to public addresses; it is never
    silently opened to ``0.0.0.0/0``).
    """
    node = plan.get(GKE_CLUSTER_KEY)
    s = node.settings
    if plan.project is None:
        raise ConfigError("Plan", "project", None, "a GKE plan has a project")
    man = s["master_authorized_networks"]
    addons = s["addons"]
    request = container_v1.Cluster(
        name=node.name,
        description=f"rl_lustre deployment {plan.cluster_name}",
        network=s["network"],
        subnetwork=s["subnetwork"],
        locations=list(s["node_locations"]),
        node_pools=[node_pool_request(plan, CPU_POOL_KEY)],
        resource_labels=_labels(plan, GKE_CLUSTER_KEY),
        ip_allocation_policy=container_v1.IPAllocationPolicy(**dict(s["ip_allocation_policy"])),
        addons_config=container_v1.AddonsConfig(
            lustre_csi_driver_config=container_v1.LustreCsiDriverConfig(**dict(addons["lustre_csi_driver_config"])),
            ray_operator_config=container_v1.RayOperatorConfig(**dict(addons["ray_operator_config"])),
        ),
        master_authorized_networks_config=container_v1.MasterAuthorizedNetworksConfig(
            enabled=man["enabled"],
            cidr_blocks=[
                container_v1.MasterAuthorizedNetworksConfig.CidrBlock(display_name=f"rl-lustre-{i}", cidr_block=b)
                for i, b in enumerate(man["cidr_blocks"])
            ],
            gcp_public_cidrs_access_enabled=False,
        ),
        workload_identity_config=container_v1.WorkloadIdentityConfig(workload_pool=s["workload_identity_pool"]),
        release_channel=container_v1.ReleaseChannel(
            channel=container_v1.ReleaseChannel.Channel.__members__[s["release_channel"]]
        ),
    )
    if "network_config" in s:
        nc = s["network_config"]
        request.network_config = container_v1.NetworkConfig(
            datapath_provider=container_v1.DatapathProvider.__members__[nc["datapath_provider"]],
            enable_multi_networking=nc["enable_multi_networking"],
        )
    if "maintenance_exclusion" in s:
        request.maintenance_policy = maintenance_policy(s)
    return request


def control_plane_endpoints(settings: Mapping[str, Any]) -> container_v1.ControlPlaneEndpointsConfig:
    """The ``ControlPlaneEndpointsConfig`` the plan's ``gke-cluster`` settings ask for:
    the DNS endpoint open to IAM-authorised clients, the IP endpoint limited to the
    authorised networks.

    Examples:
        >>> from rl_lustre import Cluster
        >>> plan = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b").plan()
        >>> cfg = control_plane_endpoints(plan.get("gke-cluster").settings)
        >>> cfg.dns_endpoint_config.allow_external_traffic, cfg.ip_endpoints_config.enable_public_endpoint
        (True, True)
    """
    s = settings["control_plane_endpoints"]
    man = settings["master_authorized_networks"]
    return container_v1.ControlPlaneEndpointsConfig(
        dns_endpoint_config=container_v1.ControlPlaneEndpointsConfig.DNSEndpointConfig(
            allow_external_traffic=s["dns_endpoint"]["allow_external_traffic"]
        ),
        ip_endpoints_config=container_v1.ControlPlaneEndpointsConfig.IPEndpointsConfig(
            enabled=s["ip_endpoint"]["enabled"],
            enable_public_endpoint=s["ip_endpoint"]["public_endpoint"],
            authorized_networks_config=container_v1.MasterAuthorizedNetworksConfig(
                enabled=man["enabled"],
                cidr_blocks=[
                    container_v1.MasterAuthorizedNetworksConfig.CidrBlock(display_name=f"rl-lustre-{i}", cidr_block=b)
                    for i, b in enumerate(man["cidr_blocks"])
                ],
                gcp_public_cidrs_access_enabled=False,
            ),
        ),
    )
