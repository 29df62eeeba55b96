"""Facts about Google Cloud and NeMo-RL that validation and defaults rely on.

Kept in one place so that a new machine type, Lustre tier or image is a one-line change.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from types import MappingProxyType

import attrs

from ._public import public
from .oncluster.nodeends import TERMINATION_ANNOTATION


@attrs.frozen
class MachineType:
    """A GPU machine type: its accelerator and what a Ray worker may ask of it."""

    name: str
    accelerator: str
    gpus: int
    vcpus: int
    memory_gib: int
    # What one Ray worker pod requests, leaving room for kubelet and daemonsets.
    worker_cpu: str
    worker_memory: str
    # GPU NICs for GPUDirect-RDMA (RoCE, NIC type MRDMA); 0 = no RDMA fabric.
    rdma_nics: int = 0
    # 375 GB local SSDs that come with the machine and GKE can use as ephemeral storage.
    local_ssds: int = 0

    @property
    def local_ssd_gib(self) -> int:
        """Raw local SSD capacity in GiB (375 GB per disk)."""
        return self.local_ssds * 375 * 10**9 // 2**30


# Sources: cloud.google.com/compute/docs/gpus and the reference workflow's pod requests;
# RDMA NICs from cloud.google.com/vpc/docs/rdma-network-profiles (A3 Ultra, A4: 8 x MRDMA),
# local SSDs from Cluster Toolkit's gke-node-pool disk_definitions.tf (a4-highgpu-8g: 32).
GPU_MACHINE_TYPES: dict[str, MachineType] = {
    m.name: m
    for m in [
        MachineType("a4-highgpu-8g", "nvidia-b200", 8, 224, 3968, "100", "1000Gi", rdma_nics=8, local_ssds=32),
        MachineType("a3-ultragpu-8g", "nvidia-h200-141gb", 8, 224, 2952, "100", "1000Gi", rdma_nics=8, local_ssds=32),
        MachineType("a3-megagpu-8g", "nvidia-h100-mega-80gb", 8, 208, 1872, "100", "1000Gi"),
        MachineType("a3-highgpu-8g", "nvidia-h100-80gb", 8, 208, 1872, "100", "1000Gi"),
        MachineType("a3-highgpu-4g", "nvidia-h100-80gb", 4, 104, 936, "48", "480Gi"),
        MachineType("a3-highgpu-2g", "nvidia-h100-80gb", 2, 52, 468, "24", "240Gi"),
        MachineType("a3-highgpu-1g", "nvidia-h100-80gb", 1, 26, 234, "12", "120Gi"),
        MachineType("a2-ultragpu-8g", "nvidia-a100-80gb", 8, 96, 1360, "80", "1000Gi"),
        MachineType("a2-ultragpu-4g", "nvidia-a100-80gb", 4, 48, 680, "40", "500Gi"),
        MachineType("a2-ultragpu-2g", "nvidia-a100-80gb", 2, 24, 340, "20", "250Gi"),
        MachineType("a2-ultragpu-1g", "nvidia-a100-80gb", 1, 12, 170, "10", "120Gi"),
        MachineType("a2-highgpu-8g", "nvidia-tesla-a100", 8, 96, 680, "80", "500Gi"),
        MachineType("a2-highgpu-4g", "nvidia-tesla-a100", 4, 48, 340, "40", "250Gi"),
        MachineType("a2-highgpu-2g", "nvidia-tesla-a100", 2, 24, 170, "20", "120Gi"),
        MachineType("a2-highgpu-1g", "nvidia-tesla-a100", 1, 12, 85, "10", "60Gi"),
        MachineType("g2-standard-96", "nvidia-l4", 8, 96, 384, "80", "300Gi"),
        MachineType("g2-standard-48", "nvidia-l4", 4, 48, 192, "40", "150Gi"),
        MachineType("g2-standard-24", "nvidia-l4", 2, 24, 96, "20", "72Gi"),
        MachineType("g2-standard-8", "nvidia-l4", 1, 8, 32, "6", "24Gi"),
    ]
}


# GPU quotas as the Cloud Quotas API names them (service compute.googleapis.com): the newer
# families count in GPUS_PER_GPU_FAMILY (metric compute.googleapis.com/gpus_per_gpu_family,
# dimensions region and gpu_family), Spot and flex-start VMs in its preemptible twin
# (flex-start VMs "consume preemptible quota"), and every GPU in GPUS_ALL_REGIONS on top.
# Sources: cloud.google.com/compute/resource-usage (GPU quota), cloud.google.com/compute/docs/
# instances/about-flex-start-vms; the gpu_family values as the Cloud Quotas API lists them.
GPU_QUOTA_SERVICE = "compute.googleapis.com"
GPU_FAMILY_QUOTA = "GPUS-PER-GPU-FAMILY-per-project-region"
PREEMPTIBLE_GPU_FAMILY_QUOTA = "PREEMPTIBLE-GPUS-PER-GPU-FAMILY-per-project-region"
GPUS_ALL_REGIONS_QUOTA = "GPUS-ALL-REGIONS-per-project"
# GPU type -> its gpu_family; the types not listed count in Compute's per-type region quotas
# (NVIDIA_L4_GPUS, NVIDIA_A100_GPUS, ...).
GPU_FAMILIES = MappingProxyType(
    {
        "nvidia-b200": "NVIDIA_B200",
        "nvidia-h200-141gb": "NVIDIA_H200",
        "nvidia-h100-80gb": "NVIDIA_H100",
    }
)


@attrs.frozen
class LustreTier:
    """A Managed Lustre performance tier (``per_unit_storage_throughput``).

    Capacities from ``min_gib`` up to ``threshold_gib`` go in steps of ``step_gib``;
    above it, in multiples of ``large_step_gib``, up to ``max_gib``.
    """

    mbps_per_tib: int
    min_gib: int
    step_gib: int
    max_gib: int
    threshold_gib: int
    large_step_gib: int

    def throughput_mbps(self, capacity_gib: int) -> float:
        """Aggregate throughput in MB/s of an instance of ``capacity_gib``."""
        return self.mbps_per_tib * capacity_gib / 1024

    def valid(self, capacity_gib: int) -> bool:
        """Whether the service accepts ``capacity_gib`` on this tier.

        Examples:
            >>> t = LUSTRE_TIERS[1000]
            >>> t.valid(18_000), t.valid(1_539_000), t.valid(1_584_000), t.valid(10_080_000)
            (True, False, True, False)
        """
        if capacity_gib < self.min_gib or capacity_gib > self.max_gib:
            return False
        step = self.step_gib if capacity_gib <= self.threshold_gib else self.large_step_gib
        return capacity_gib % step == 0

    def round_up(self, capacity_gib: float) -> int | None:
        """The smallest valid capacity of at least ``capacity_gib``; None above the maximum.

        Examples:
            >>> LUSTRE_TIERS[500].round_up(20_000), LUSTRE_TIERS[500].round_up(3.1e6)
            (36000, 3168000)
        """
        need = max(self.min_gib, capacity_gib)
        small = -(-need // self.step_gib) * self.step_gib
        out = small if small <= self.threshold_gib else -(-need // self.large_step_gib) * self.large_step_gib
        return int(out) if out <= self.max_gib else None

    def round_down(self, capacity_gib: float) -> int | None:
        """The largest valid capacity of at most ``capacity_gib``; None below the minimum."""
        if capacity_gib < self.min_gib:
            return None
        top = min(capacity_gib, self.max_gib)
        if top <= self.threshold_gib:
            return int(top // self.step_gib * self.step_gib)
        return int(max(self.threshold_gib, top // self.large_step_gib * self.large_step_gib))


# Source: cloud.google.com/managed-lustre/docs/performance-tiers (min, max, steps and the
# threshold above which the larger step applies).
LUSTRE_TIERS: dict[int, LustreTier] = {
    t.mbps_per_tib: t
    for t in [
        LustreTier(1000, 9_000, 9_000, 10_008_000, 1_530_000, 72_000),
        LustreTier(500, 18_000, 18_000, 20_016_000, 3_060_000, 144_000),
        LustreTier(250, 36_000, 36_000, 40_032_000, 6_120_000, 288_000),
        LustreTier(125, 72_000, 72_000, 12_240_000, 12_240_000, 72_000),
    ]
}

# GPUDirect-RDMA fabric facts (Cluster Toolkit gke-a4 blueprint and its modules).
FABRIC_MTU = 8896
# The Lustre CSI driver reaches Managed Lustre on port 988 from this GKE version on.
LUSTRE_PORT_988_MIN_GKE = "1.33.2-gke.4780000"
# From this GKE version the Lustre CSI driver uses every suitable NIC of a node by default
# (multi-NIC) and wants all standard NICs in one VPC (the addon's disable_multi_nic turns it off).
LUSTRE_MULTI_NIC_MIN_GKE = "1.35.2-gke.1842000"


def rdma_machine_types() -> list[str]:
    """Machine types with RDMA NICs, where ``Cluster.fabric`` defaults to ``"rdma"``.

    Examples:
        >>> rdma_machine_types()
        ['a3-ultragpu-8g', 'a4-highgpu-8g']
    """
    return sorted(m.name for m in GPU_MACHINE_TYPES.values() if m.rdma_nics)


def gke_version_key(version: str) -> tuple[int, ...]:
    """A sortable key for a GKE version (``1.33.2-gke.4780000`` -> ``(1, 33, 2, 4780000)``).

    Examples:
        >>> gke_version_key("1.33.5-gke.1162000") >= gke_version_key(LUSTRE_PORT_988_MIN_GKE)
        True
        >>> gke_version_key("1.33.2-gke.1000") >= gke_version_key(LUSTRE_PORT_988_MIN_GKE)
        False
    """
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:-gke\.(\d+))?", version)
    if m is None:
        raise ValueError(f"{version!r} is not a GKE version like 1.33.2-gke.4780000")
    return tuple(int(g or 0) for g in m.groups())


# Images whose Ray version we know. The RayCluster's rayVersion must equal the image's Ray,
# otherwise KubeRay and the Ray inside disagree (a flaw of the reference workflow).
IMAGE_RAY_VERSIONS: dict[str, str] = {
    "nvcr.io/nvidia/nemo-rl:v0.4.0": "2.46.0",
}
# Compressed size of the images we know, the estimate plan() and cost() use before the
# registry is asked (source: issue 23, ~25 GB of layers: the NGC PyTorch base, NeMo-RL's
# prebuilt Ray virtualenvs, vLLM, Megatron).
IMAGE_COMPRESSED_BYTES: dict[str, int] = {
    "nvcr.io/nvidia/nemo-rl:v0.4.0": 25_000_000_000,
}
_RAY_IMAGE = re.compile(r"^(?:docker\.io/)?rayproject/ray(?:-ml)?:(\d+\.\d+\.\d+)(?:[-.].*)?$")
_NEMO_RL_IMAGE = re.compile(r"(?:^|/)nemo-rl:v?(\d+\.\d+\.\d+)")


def ray_version_for_image(image: str) -> str | None:
    """The Ray version baked into ``image``, or ``None`` when we do not know it."""
    if image in IMAGE_RAY_VERSIONS:
        return IMAGE_RAY_VERSIONS[image]
    m = _RAY_IMAGE.match(image)
    return m.group(1) if m else None


def nemo_rl_version_for_image(image: str) -> str | None:
    """The NeMo-RL version an image tag names (``nemo-rl:v0.4.0`` → ``0.4.0``)."""
    m = _NEMO_RL_IMAGE.search(image)
    return m.group(1) if m else None


# The default on-demand CPU machine for the Ray head (16 vCPU, 128 GiB): it holds the
# NeMo-RL driver, which must survive a Spot preemption of the GPU nodes.
DOCKER_HUB = "registry-1.docker.io"
# Registries that take a Google access token as the password of user oauth2accesstoken.
_GOOGLE_HOSTS = re.compile(r"^(?:[a-z0-9-]+-docker\.pkg\.dev|(?:[a-z]+\.)?gcr\.io)$")


def split_host(reference: str) -> tuple[str, str]:
    """An image reference's registry host and the rest, the way Docker splits them.

    Examples:
        >>> split_host("nvcr.io/nvidia/nemo-rl:v0.4.0"), split_host("rayproject/ray:2.46.0")
        (('nvcr.io', 'nvidia/nemo-rl:v0.4.0'), ('registry-1.docker.io', 'rayproject/ray:2.46.0'))
    """
    first, slash, remainder = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first, remainder
    return DOCKER_HUB, reference


def google_registry(host: str) -> bool:
    """Whether ``host`` is Artifact Registry or Container Registry (Google credentials apply).

    Examples:
        >>> google_registry("us-docker.pkg.dev"), google_registry("gcr.io"), google_registry("nvcr.io")
        (True, True, False)
    """
    return _GOOGLE_HOSTS.match(host) is not None


HEAD_MACHINE_TYPE = "n2-highmem-16"
# The reference workflow's model (its `policy.model_name`).
REFERENCE_MODEL = "Qwen/Qwen2.5-72B-Instruct"
# The Hugging Face cache under the mount path (the reference workflow's HF_HOME=/lustre/huggingface_cache).
HF_HOME_DIR = "huggingface_cache"
# Environment a job always gets: NeMo-RL re-reads the job's runtime env only with this set
# (it starts its own actors), so a job may not set it otherwise.
RESERVED_ENV = MappingProxyType({"RAY_OVERRIDE_JOB_RUNTIME_ENV": "1"})

MANAGED_BY = "rl-lustre"
LABEL_MANAGED_BY = "managed-by"
LABEL_DEPLOYMENT = "rl-lustre-deployment"
# Resources shared by deployments (the preload disk image, the warm-start bucket) and the
# temporary ones that build them carry a role instead of a deployment.
LABEL_ROLE = "rl-lustre-role"
LABEL_DIGEST = "rl-lustre-digest"
LABEL_LAYOUT = "rl-lustre-layout"
LABEL_CREATED_BY = "rl-lustre-created-by"
ROLE_PRELOAD_IMAGE = "preload-image"
ROLE_PRELOAD_BUILD = "preload-build"
ROLE_WARM_START = "warm-start"
SHARED_ROLES = (ROLE_PRELOAD_IMAGE, ROLE_WARM_START)
RESERVED_LABELS = (LABEL_MANAGED_BY, LABEL_DEPLOYMENT, LABEL_ROLE, LABEL_DIGEST, LABEL_LAYOUT, LABEL_CREATED_BY)

# Warm starts from Cloud Storage (Cluster.warm_start, rl_lustre.plan.warmstart): the volume's
# files go to gs://BUCKET/PREFIX/<WARM_DATA_DIR>/<path on the volume>, and the manifest of
# what an export holds (each object with its size) to gs://BUCKET/PREFIX/<WARM_MANIFEST>.
WARM_DATA_DIR = "volume"
WARM_MANIFEST = "rl-lustre-manifest.json"
WARM_FORMAT = "rl-lustre-warm-start/v1"
# Results (Cluster.results, rl_lustre.plan.results): each run under gs://BUCKET/PREFIX/<run id>/,
# its manifest (written once the export is verified) beside its files; the Lustre instance's
# label saying that down() kept it because its runs' results exist nowhere else.
RESULTS_MANIFEST = "rl-lustre-results.json"
RESULTS_FORMAT = "rl-lustre-results/v1"
LABEL_RESULTS = "rl-lustre-results"
RESULTS_NOT_EXPORTED = "not-exported"
# Managed Lustre reads and writes Cloud Storage as its service agent ("Transfer data to and
# from Cloud Storage", cloud.google.com/managed-lustre/docs/transfer-data: it needs
# roles/storage.objectUser on the bucket), named after the project's number as Google's
# service agents are. These bucket roles let a principal create objects.
LUSTRE_SERVICE_AGENT = "service-{number}@gcp-sa-lustre.iam.gserviceaccount.com"
STORAGE_WRITER_ROLES = (
    "roles/storage.objectUser",
    "roles/storage.objectAdmin",
    "roles/storage.objectCreator",
    "roles/storage.admin",
    "roles/storage.legacyBucketWriter",
    "roles/storage.legacyBucketOwner",
)

# The preload disk image: a GKE secondary boot disk (mode CONTAINER_IMAGE_CACHE) holding the
# cluster's image unpacked. GKE supports it from these versions ("Use secondary boot disks to
# preload data or container images", cloud.google.com/kubernetes-engine/docs/how-to/
# data-container-image-preloading), on COS containerd nodes with Image streaming on.
PRELOAD_MIN_GKE = "1.28.3-gke.1067000"
PRELOAD_MIN_GKE_AUTOPILOT = "1.30.1-gke.1329000"
PRELOAD_NODE_IMAGE = "COS_CONTAINERD"
# The layout of the disk (snapshots/<id>/fs, snapshots.metadata, images.metadata), so that a
# change of our build script never reuses an image built the old way.
PRELOAD_LAYOUT = "v1"
# The temporary VM that builds it: Debian 12, the image pulled and unpacked onto a pd-ssd
# data disk (~2.4 x the compressed size unpacked; pd-ssd's write rate grows with its size).
PRELOAD_MACHINE_TYPE = "n2-standard-8"
PRELOAD_BOOT_IMAGE = "projects/debian-cloud/global/images/family/debian-12"
PRELOAD_DATA_DISK_TYPE = "pd-ssd"
PRELOAD_DATA_DISK_GB = 250
PRELOAD_BUILD_TIMEOUT = 3600.0
# The builder VM deletes itself (with its disks) after this long, should up() die.
PRELOAD_MAX_RUN_SECONDS = 7200

# Machine series that boot only from Hyperdisk (GKE's default boot disk is pd-balanced); a
# GKE secondary boot disk is of the node's boot disk type.
_HYPERDISK_ONLY = re.compile(r"^(a4-|a4x-|a3-ultragpu-)")


def boot_disk_type(machine_type: str) -> str:
    """The boot disk type of a GKE node of ``machine_type`` (and of its secondary boot disks).

    Examples:
        >>> boot_disk_type("a4-highgpu-8g"), boot_disk_type("a3-highgpu-8g")
        ('hyperdisk-balanced', 'pd-balanced')
    """
    return "hyperdisk-balanced" if _HYPERDISK_ONLY.match(machine_type) else "pd-balanced"


# Google's Managed Lustre CSI driver (the GKE add-on a PersistentVolume names).
LUSTRE_CSI_DRIVER = "lustre.csi.storage.gke.io"
# The labels GKE puts on every node: its pool, its GPU type, Spot, a local-SSD ephemeral storage.
GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
GKE_LOCAL_SSD_LABEL = "cloud.google.com/gke-ephemeral-storage-local-ssd"
# A node's ComputeClass: the label (and, on node pools made by hand, the NoSchedule taint) that
# makes a pool join the class, and what a pod's nodeSelector names to select it (GKE's "About
# custom ComputeClasses"). GKE's labels of flex-start nodes, and the annotation with the time
# GKE will end a node whose run is bounded (flex-start's max_run_duration), RFC 3339 in UTC:
# the supervisor on the Ray head reads it too, so its home is the on-cluster package (where
# its source is cited: rl_lustre.oncluster.nodeends).
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
GKE_FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
GKE_PROVISIONING_LABEL = "cloud.google.com/gke-provisioning"
GKE_TERMINATION_ANNOTATION = TERMINATION_ANNOTATION
# Ours, on every GPU node: the kind of capacity its pool has (reservation, spot, flex-start,
# on-demand), which is what a node-hour costs.
CAPACITY_KIND_LABEL = "rl-lustre/capacity"
# NVIDIA's device plugin resource, and the key of the taint GKE puts on GPU nodes.
GPU_RESOURCE = "nvidia.com/gpu"
# The Ray head's ports by the names KubeRay gives them (the dashboard serves the Jobs API).
RAY_HEAD_PORTS = MappingProxyType({"gcs-server": 6379, "dashboard": 8265, "client": 10001})
DASHBOARD_PORT = RAY_HEAD_PORTS["dashboard"]


def ownership_labels(deployment: str) -> dict[str, str]:
    """The labels every resource we create carries (GCP and Kubernetes alike)."""
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_DEPLOYMENT: deployment}


@public("rl_lustre")
@attrs.frozen(kw_only=True)
class MachinePrice:
    """What one VM of a machine type costs per hour, in USD.

    Attributes:
        on_demand: the on-demand rate.
        spot: the Spot rate (Spot prices move, at most once a day).
        reserved: the rate of a VM consuming a reservation; None bills it on demand,
            as Google does for reservations without a committed use discount.
        flex_start: the Dynamic Workload Scheduler flex-start rate; None where none is
            recorded (the cost then shows the on-demand rate, and says so).
    """

    on_demand: float
    spot: float
    reserved: float | None = None
    flex_start: float | None = None


@public("rl_lustre")
@attrs.frozen(kw_only=True)
class PriceTable:
    """A dated table of list prices, with where each kind of price was read.

    Attributes:
        as_of: the date the prices were recorded (ISO 8601).
        region: the region the prices were recorded for.
        same_price_regions: regions Google lists at the same price for these machines.
        machines: USD per hour per VM, by machine type.
        lustre_gib_month: USD per GiB-month of Managed Lustre capacity, by tier (MB/s per TiB).
        gke_cluster_hour: GKE's cluster management fee, USD per cluster-hour.
        image_gib_month: USD per GiB-month of a custom disk image's storage.
        gcs_gb_month: USD per GB-month of Cloud Storage Standard storage in a region (the
            warm-start export, ``Cluster.warm_start``).
        disk_gib_month: USD per GiB-month of a disk's provisioned capacity, by disk type.
        hours_per_month: how Google converts monthly prices to hours.
        sources: the page each kind of price was read from.
    """

    as_of: str
    region: str
    same_price_regions: frozenset[str]
    machines: dict[str, MachinePrice]
    lustre_gib_month: dict[int, float]
    gke_cluster_hour: float
    hours_per_month: float
    image_gib_month: float = 0.0
    gcs_gb_month: float = 0.0
    disk_gib_month: dict[str, float] = attrs.field(factory=dict)
    sources: dict[str, str]


# List prices, USD, recorded by hand from Google's pricing pages on the date below and
# rounded; they are approximate, exclude taxes and negotiated discounts, and Spot rates
# move daily. Override them with rl_lustre.Prices (discounts, reservations, your
# own rates) -- and check the pages before budgeting.
PRICES = PriceTable(
    as_of="2025-10-01",
    region="us-central1",
    same_price_regions=frozenset(
        {"us-central1", "us-east1", "us-east4", "us-east5", "us-south1", "us-west1", "us-west4"}
    ),
    machines={
        # flex-start: the "DWS Flex-start" column of Google's accelerator-optimized price list
        # (us-central1), $64.44 per VM-hour, as recorded on FLEX_START_AS_OF (sources["flex_start"]).
        "a4-highgpu-8g": MachinePrice(on_demand=101.15, spot=37.00, flex_start=64.44),
        "a3-ultragpu-8g": MachinePrice(on_demand=84.81, spot=30.70),
        "a3-megagpu-8g": MachinePrice(on_demand=88.25, spot=25.60),
        "a3-highgpu-8g": MachinePrice(on_demand=88.49, spot=21.50),
        "a3-highgpu-4g": MachinePrice(on_demand=44.25, spot=10.75),
        "a3-highgpu-2g": MachinePrice(on_demand=22.12, spot=5.38),
        "a3-highgpu-1g": MachinePrice(on_demand=11.06, spot=2.69),
        "a2-ultragpu-8g": MachinePrice(on_demand=40.22, spot=12.07),
        "a2-ultragpu-4g": MachinePrice(on_demand=20.11, spot=6.03),
        "a2-ultragpu-2g": MachinePrice(on_demand=10.06, spot=3.02),
        "a2-ultragpu-1g": MachinePrice(on_demand=5.03, spot=1.51),
        "a2-highgpu-8g": MachinePrice(on_demand=29.39, spot=8.82),
        "a2-highgpu-4g": MachinePrice(on_demand=14.69, spot=4.41),
        "a2-highgpu-2g": MachinePrice(on_demand=7.35, spot=2.20),
        "a2-highgpu-1g": MachinePrice(on_demand=3.67, spot=1.10),
        "g2-standard-96": MachinePrice(on_demand=8.00, spot=3.20),
        "g2-standard-48": MachinePrice(on_demand=4.00, spot=1.60),
        "g2-standard-24": MachinePrice(on_demand=2.00, spot=0.80),
        "g2-standard-8": MachinePrice(on_demand=0.85, spot=0.34),
        # CPU machines for the Ray head pool.
        "n2-highmem-16": MachinePrice(on_demand=1.05, spot=0.26),
        "n2-highmem-8": MachinePrice(on_demand=0.52, spot=0.13),
        "n2-standard-16": MachinePrice(on_demand=0.78, spot=0.19),
        "n2-standard-8": MachinePrice(on_demand=0.39, spot=0.10),
        "e2-standard-8": MachinePrice(on_demand=0.27, spot=0.08),
    },
    lustre_gib_month={1000: 0.60, 500: 0.34, 250: 0.21, 125: 0.145},
    gke_cluster_hour=0.10,
    hours_per_month=730.0,
    # Not read off the pricing page in the session that added them (its stored copies stop
    # before the tables): image storage as reported ($0.05/GiB-month), Hyperdisk Balanced and
    # pd-balanced capacity as remembered; pd-ssd from the page's own example (200 GB, $34/month).
    # Check them before budgeting.
    image_gib_month=0.05,
    disk_gib_month={"hyperdisk-balanced": 0.06, "pd-balanced": 0.10, "pd-ssd": 0.17},
    # Cloud Storage Standard storage, us-east1 (and us-central1, us-east5, us-west1): $0.020
    # per GB-month, as Google's pricing-examples page computes it ("50 GB Standard storage in
    # the us-east1 region * $0.020 per GB"), read on 2026-12-02 from a stored copy; the
    # pricing table lists other regions higher (us-east4, us-west2-4: $0.023).
    gcs_gb_month=0.020,
    sources={
        "gpu_machines": "https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized",
        "spot": "https://cloud.google.com/spot-vms/pricing",
        "cpu_machines": "https://cloud.google.com/compute/vm-instance-pricing#general-purpose_machine_type_family",
        "lustre": "https://cloud.google.com/products/managed-lustre/pricing",
        "gke": "https://cloud.google.com/kubernetes-engine/pricing#cluster_management_fee_and_free_tier",
        "images_and_disks": "https://cloud.google.com/compute/disks-image-pricing",
        "cloud_storage": "https://cloud.google.com/storage/pricing (Standard storage; read 2026-12-02 on "
        "https://cloud.google.com/storage/pricing-examples)",
        "flex_start": "https://cloud.google.com/products/compute/pricing/accelerator-optimized (DWS Flex-start)",
    },
)
# When the flex-start rates above were recorded: the A4 rate as a public price tracker read
# Google's list on this date (the project's own stored copies of the page stop before the
# table); no other machine's flex-start rate is recorded. Check the page before budgeting.
FLEX_START_AS_OF = "2026-07-28"


# Compute Engine zones by region, as the public list showed them on ZONES_AS_OF
# (cloud.google.com/compute/docs/regions-zones): the offline check of Cluster.zone and
# LustreVolume.zone. The server has the last word: check() and up() ask Compute Engine
# (zones.get), and a zone added since is named in $RL_LUSTRE_EXTRA_ZONES.
ZONES_AS_OF = "2025-10-01"
EXTRA_ZONES_ENV = "RL_LUSTRE_EXTRA_ZONES"
_ABC, _US_CENTRAL1, _BCD = "abc", "abcf", "bcd"
ZONES: Mapping[str, str] = MappingProxyType(
    {
        "africa-south1": _ABC,
        "asia-east1": _ABC,
        "asia-east2": _ABC,
        "asia-northeast1": _ABC,
        "asia-northeast2": _ABC,
        "asia-northeast3": _ABC,
        "asia-south1": _ABC,
        "asia-south2": _ABC,
        "asia-southeast1": _ABC,
        "asia-southeast2": _ABC,
        "australia-southeast1": _ABC,
        "australia-southeast2": _ABC,
        "europe-central2": _ABC,
        "europe-north1": _ABC,
        "europe-north2": _ABC,
        "europe-southwest1": _ABC,
        "europe-west1": _BCD,
        "europe-west2": _ABC,
        "europe-west3": _ABC,
        "europe-west4": _ABC,
        "europe-west6": _ABC,
        "europe-west8": _ABC,
        "europe-west9": _ABC,
        "europe-west10": _ABC,
        "europe-west12": _ABC,
        "me-central1": _ABC,
        "me-central2": _ABC,
        "me-west1": _ABC,
        "northamerica-northeast1": _ABC,
        "northamerica-northeast2": _ABC,
        "northamerica-south1": _ABC,
        "southamerica-east1": _ABC,
        "southamerica-west1": _ABC,
        "us-central1": _US_CENTRAL1,
        "us-east1": _BCD,
        "us-east4": _ABC,
        "us-east5": _ABC,
        "us-south1": _ABC,
        "us-west1": _ABC,
        "us-west2": _ABC,
        "us-west3": _ABC,
        "us-west4": _ABC,
    }
)


def extra_zones() -> set[str]:
    """The zones named in ``$RL_LUSTRE_EXTRA_ZONES`` (comma- or space-separated)."""
    return {z for z in re.split(r"[\s,]+", os.environ.get(EXTRA_ZONES_ENV, "")) if z}


def known_zones(region: str) -> list[str]:
    """The zones of ``region`` rl_lustre knows: its list, and any extra ones named in the environment.

    Examples:
        >>> known_zones("us-east1")
        ['us-east1-b', 'us-east1-c', 'us-east1-d']
    """
    listed = {f"{region}-{suffix}" for suffix in ZONES.get(region, "")}
    return sorted(listed | {z for z in extra_zones() if z.rsplit("-", 1)[0] == region})


def zone_problem(zone: str) -> str | None:
    """Why ``zone`` is not a Compute Engine zone as far as rl_lustre knows, or None.

    Examples:
        >>> zone_problem("us-east1-b") is None
        True
        >>> print(zone_problem("us-east1-a"))  # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
        is not a zone of region us-east1, whose zones are us-east1-b, us-east1-c, us-east1-d (Compute Engine,
        as of 2025-10-01); if Google Cloud has added it since, set RL_LUSTRE_EXTRA_ZONES=us-east1-a ...
    """
    region = zone.rsplit("-", 1)[0]
    known = known_zones(region)
    if zone in known:
        return None
    override = (
        f"if Google Cloud has added it since, set {EXTRA_ZONES_ENV}={zone} (check() and up() "
        "then ask Compute Engine whether it exists before anything is created)"
    )
    if not known:
        nearest = difflib.get_close_matches(region, list(ZONES), n=2)
        hint = f" (did you mean {' or '.join(map(repr, nearest))}?)" if nearest else ""
        return f"is in region {region!r}{hint}, which is not a Compute Engine region as of {ZONES_AS_OF}; {override}"
    return (
        f"is not a zone of region {region}, whose zones are {', '.join(known)} (Compute Engine, as of "
        f"{ZONES_AS_OF}); {override}"
    )
