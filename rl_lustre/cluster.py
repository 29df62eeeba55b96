"""``Cluster``: a GKE (or local) deployment that runs NeMo-RL jobs on KubeRay."""

from __future__ import annotations

import atexit
import functools
import logging
import os
import posixpath
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from . import _validate as v
from .catalog import (
    GPU_MACHINE_TYPES,
    HEAD_MACHINE_TYPE,
    REFERENCE_MODEL,
    nemo_rl_version_for_image,
    ray_version_for_image,
    rdma_machine_types,
)
from .errors import ConfigError
from .volume import PROJECT_PATTERN, PROJECT_RULE, ZONE_PATTERN, ZONE_RULE, LustreVolume

if TYPE_CHECKING:
    from types import TracebackType

    from .backends import Backend
    from .check import CheckReport
    from .job import GRPOJob
    from .metrics import ClusterMetrics
    from .plan import Plan
    from .run import Run

CLUSTER_NAME_RULE = (
    "must be 1-40 lowercase letters, digits or hyphens, start with a letter and not end with "
    "a hyphen (GKE cluster name rule)"
)
_SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/run",
                "/sbin", "/sys", "/usr", "/var", "/opt/nemo-rl")
DEFAULT_SECRETS = ("HF_TOKEN", "WANDB_API_KEY")
# GKE's maintenance exclusion scopes (MaintenanceExclusionOptions.Scope). NO_UPGRADES
# lasts at most 30 days and must end at a fixed time, so it is not offered here.
MAINTENANCE_EXCLUSIONS = ("NO_MINOR_OR_NODE_UPGRADES", "NO_MINOR_UPGRADES")

logger = logging.getLogger("rl_lustre.cluster")


def _default_local_root() -> Path:
    import os

    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "rl_lustre"


def _check_secret_names(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    from ._secrets import secret_shape

    v.names(inst, attr, value)
    for name in value:
        what = secret_shape(name)
        if what is not None:
            v.fail(inst, attr.name, name,
                   f"looks like {what}: secrets= takes the NAMES of environment variables that hold "
                   "secrets, like ('HF_TOKEN', 'WANDB_API_KEY'); set the value in the environment "
                   "(export HF_TOKEN=...) and list only its name here")
    v.env_name(inst, attr, value)


_HF_REPO_ID = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
HF_REPO_ID_RULE = ("must be a Hugging Face model id like 'Qwen/Qwen2.5-72B-Instruct' (letters, digits, '_', '.', "
                   "'-', at most one '/', no '--' or '..')")


def _hf_repo_ids(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, tuple):
        v.fail(inst, attr.name, value, "must be a list of Hugging Face model ids")
    for repo in value:
        if not isinstance(repo, str) or not _HF_REPO_ID.fullmatch(repo) or "--" in repo or ".." in repo:
            v.fail(inst, attr.name, repo, HF_REPO_ID_RULE)
    if len(set(value)) != len(value):
        v.fail(inst, attr.name, value, "model ids must be unique")


@functools.lru_cache(maxsize=1)
def _default_sizing() -> tuple[int, int]:
    from .job import GRPOJob
    from .sizing import size_lustre

    fields = attrs.fields(GRPOJob)
    sizing = size_lustre(fields.model.default, checkpoints_kept=fields.keep_top_k.default or 2)
    return sizing.capacity_gib, sizing.throughput_mbps_per_tib


def default_volume(name: str) -> LustreVolume:
    """The volume a ``Cluster`` gets when given none: what :func:`~rl_lustre.size_lustre`
    picks for the default job (``GRPOJob()``'s model and ``keep_top_k``, a checkpoint
    written in 300 s).

    Examples:
        >>> v = default_volume("rl-demo-lustre")
        >>> v.capacity_gib, v.throughput_mbps_per_tib
        (9000, 1000)
    """
    capacity, tier = _default_sizing()
    return LustreVolume(name=name, capacity_gib=capacity, throughput_mbps_per_tib=tier)


@attrs.define
class _ClusterState:
    """Live state of a deployment (backend handle); not part of the spec's identity."""

    backend: Any = None


@v.keyword_errors
@attrs.frozen(kw_only=True)
class Cluster:
    """A GKE cluster with a Spot GPU pool, Managed Lustre and a KubeRay RayCluster.

    Defaults reproduce the reference workflow: 8 Spot ``a4-highgpu-8g`` nodes with
    8 ``nvidia-b200`` each, image ``nvcr.io/nvidia/nemo-rl:v0.4.0``, Lustre at ``/lustre``.
    Unlike it, the Ray head runs on a small on-demand CPU pool so that a Spot
    preemption cannot kill the job driver.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="ray-a4-gpu-spot", project="my-project",
        ...             region="us-east1", zone="us-east1-b")
        >>> c.num_nodes, c.gpus_per_node, c.accelerator_type, c.volume.name
        (8, 8, 'nvidia-b200', 'ray-a4-gpu-spot-lustre')

    Args:
        name: the deployment name; also the GKE cluster and RayCluster name.
        project: the Google Cloud project id.
        region: the region (``us-east1``).
        zone: the zone of the node pools and the Lustre instance (``us-east1-b``).
        volume: the Lustre volume; by default ``<name>-lustre`` sized by :func:`~rl_lustre.size_lustre`
            for the default job (9,000 GiB at 1000 MB/s/TiB for Qwen2.5-72B); pass one sized for
            your jobs (``size_lustre(model).volume(name)``) when they differ.
        machine_type: GPU node machine type.
        accelerator_type: GPU type; derived from ``machine_type`` when omitted.
        gpus_per_node: GPUs per node; derived from ``machine_type`` when omitted.
        num_nodes: GPU nodes, one Ray worker each.
        spot: use Spot VMs for the GPU pool.
        reservation: a reservation name to consume (not with ``spot``).
        head_machine_type: on-demand CPU machine type for the Ray head.
        head_on_gpu_pool: put the head on the GPU pool, as the reference workflow does
            (a Spot preemption then kills the driver).
        image: the container image of head and workers.
        ray_version: the Ray inside ``image``; derived for known images.
        mount_path: where Lustre is mounted in the pods.
        namespace: the Kubernetes namespace.
        network: an existing VPC network to use as-is; by default ``<name>-net`` is created.
        authorized_networks: CIDR blocks allowed to reach the control plane.
        public_control_plane: must be True to allow ``0.0.0.0/0``.
        secrets: names of environment variables copied into a Kubernetes Secret and
            exposed to the pods (never to the job's runtime env).
        fabric: ``"rdma"``: the GPUs talk over GPUDirect-RDMA (a gVNIC VPC and a RoCE VPC
            with one subnet per GPU NIC, multi-networking, the gIB NCCL plugin), as the
            Cluster Toolkit A4 blueprint builds it; ``"tcp"``: one gVNIC, as the reference
            workflow. Defaults to ``"rdma"`` on machine types with RDMA NICs
            (``a4-highgpu-8g``, ``a3-ultragpu-8g``), ``"tcp"`` otherwise.
        maintenance_exclusion: the scope of the GKE maintenance exclusion set at creation,
            from then until the cluster version's end of support: ``"NO_MINOR_OR_NODE_UPGRADES"``
            (default: GKE never upgrades, so never recreates, the nodes under a run;
            control-plane patches still apply), ``"NO_MINOR_UPGRADES"`` (node patch
            upgrades allowed), or None (GKE's normal auto-upgrades).
        labels: extra labels for every resource.
        prefetch_models: Hugging Face model ids that ``up()`` downloads into the volume's
            Hugging Face cache (a Kubernetes Job on the CPU pool, while the RayCluster
            starts), so that jobs on them start without a download; a model already in
            the cache is not fetched again. ``()`` turns the prefetch off.
        prepull_image: pull ``image`` onto every GPU node as soon as the GPU pool exists
            (a DaemonSet, removed once the RayCluster's workers run), while Lustre is
            still being created.
        keep: leave everything running at the end of a ``with`` block.
    """

    name: str = attrs.field(validator=v.matches(r"[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?", CLUSTER_NAME_RULE))
    project: str | None = attrs.field(default=None, validator=v.matches(PROJECT_PATTERN, PROJECT_RULE, optional=True))
    region: str | None = attrs.field(
        default=None,
        validator=v.matches(r"[a-z]+-[a-z]+[0-9]+", "must be a region like 'us-east1'", optional=True),
    )
    zone: str | None = attrs.field(default=None, validator=v.matches(ZONE_PATTERN, ZONE_RULE, optional=True))
    volume: LustreVolume | None = attrs.field(default=None)
    machine_type: str = attrs.field(
        default="a4-highgpu-8g",
        validator=v.matches(r"[a-z][a-z0-9]*-[a-z0-9-]+|local", "must be a Compute Engine machine type like 'a4-highgpu-8g'"),
    )
    accelerator_type: str | None = attrs.field(
        default=None,
        validator=v.matches(r"nvidia-[a-z0-9-]+", "must be a GKE accelerator like 'nvidia-b200'", optional=True),
    )
    gpus_per_node: int | None = attrs.field(default=None, validator=v.integer(min=0, max=16, optional=True))
    num_nodes: int = attrs.field(default=8, validator=v.integer(min=1, max=1000))
    spot: bool = attrs.field(default=True, validator=v.boolean)
    reservation: str | None = attrs.field(
        default=None,
        validator=v.matches(
            r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?(?:/reservationBlocks/[a-z0-9-]+)?",
            "must be a reservation name (optionally '<name>/reservationBlocks/<block>')",
            optional=True,
        ),
    )
    head_machine_type: str = attrs.field(
        default=HEAD_MACHINE_TYPE,
        validator=v.matches(r"[a-z][a-z0-9]*-[a-z0-9-]+", "must be a Compute Engine machine type like 'n2-highmem-16'"),
    )
    head_on_gpu_pool: bool = attrs.field(default=False, validator=v.boolean)
    image: str = attrs.field(
        default="nvcr.io/nvidia/nemo-rl:v0.4.0",
        validator=v.matches(r"[a-z0-9][a-z0-9._/:@-]*[A-Za-z0-9._-]", "must be a container image reference without spaces"),
    )
    ray_version: str | None = attrs.field(
        default=None, validator=v.matches(r"\d+\.\d+\.\d+", "must be a Ray version like '2.46.0'", optional=True)
    )
    mount_path: str = attrs.field(default="/lustre")
    namespace: str = attrs.field(
        default="default",
        validator=v.matches(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", "must be a DNS-1123 label (Kubernetes namespace rule)"),
    )
    network: str | None = attrs.field(
        default=None,
        validator=v.matches(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?", "must be a VPC network name", optional=True),
    )
    authorized_networks: tuple[str, ...] = attrs.field(default=(), converter=v.to_tuple, validator=v.cidr)
    public_control_plane: bool = attrs.field(default=False, validator=v.boolean)
    secrets: tuple[str, ...] = attrs.field(default=DEFAULT_SECRETS, converter=v.to_tuple, validator=_check_secret_names)
    fabric: Literal["rdma", "tcp"] | None = attrs.field(
        default=None, validator=v.one_of(["rdma", "tcp"], optional=True))
    maintenance_exclusion: str | None = attrs.field(
        default=MAINTENANCE_EXCLUSIONS[0], validator=v.one_of(MAINTENANCE_EXCLUSIONS, optional=True))
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=v.to_frozen_mapping, validator=v.gcp_labels)
    prefetch_models: tuple[str, ...] = attrs.field(default=(REFERENCE_MODEL,), converter=v.to_tuple,
                                                   validator=_hf_repo_ids)
    prepull_image: bool = attrs.field(default=True, validator=v.boolean)
    keep: bool = attrs.field(default=False, validator=v.boolean)
    backend: Literal["gke", "local"] = attrs.field(default="gke", validator=v.one_of(["gke", "local"]))
    nemo_rl_path: str | None = attrs.field(
        default=None, validator=v.matches(r"[^\x00-\x1f\x7f]+", "must be a path without control characters", optional=True)
    )
    rehearsal_scale: float = attrs.field(default=1e-5, validator=v.number(gt=0, le=1))
    rehearsal_step_seconds: float = attrs.field(default=0.5, validator=v.number(ge=0, le=3600))
    worker_nodes: int = attrs.field(default=0, validator=v.integer(min=0, max=16))
    _live: _ClusterState = attrs.field(factory=_ClusterState, init=False, repr=False, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        if self.backend == "gke":
            self._check_gke()
        else:
            self._check_local()
        if len(set(self.secrets)) != len(self.secrets):
            v.fail(self, "secrets", self.secrets, "names must be unique")

    def _check_gke(self) -> None:
        missing = [f for f in ("project", "region", "zone") if getattr(self, f) is None]
        if missing:
            v.fail(self, ", ".join(missing), None,
                   f"{'are' if len(missing) > 1 else 'is'} required for a GKE cluster "
                   "(use Cluster.local() for this machine)")
        assert self.zone is not None
        assert self.region is not None
        if self.zone.rsplit("-", 1)[0] != self.region:
            v.fail(self, "zone", self.zone, f"must be a zone of region {self.region!r} (like '{self.region}-b')")
        self._check_mount_path(gke=True)
        if self.worker_nodes:
            v.fail(self, "worker_nodes", self.worker_nodes,
                   "is for Cluster.local(); a GKE cluster's worker nodes are its num_nodes GPU nodes")

        known = GPU_MACHINE_TYPES.get(self.machine_type)
        if known is None:
            for field in ("accelerator_type", "gpus_per_node"):
                if getattr(self, field) is None:
                    v.fail(self, field, None,
                           f"must be given for machine type {self.machine_type!r}, which rl_lustre does not know "
                           f"(known: {', '.join(sorted(GPU_MACHINE_TYPES))})")
        else:
            if self.accelerator_type is None:
                object.__setattr__(self, "accelerator_type", known.accelerator)
            elif self.accelerator_type != known.accelerator:
                v.fail(self, "accelerator_type", self.accelerator_type,
                       f"{self.machine_type} carries {known.accelerator!r}")
            if self.gpus_per_node is None:
                object.__setattr__(self, "gpus_per_node", known.gpus)
            elif self.gpus_per_node != known.gpus:
                v.fail(self, "gpus_per_node", self.gpus_per_node,
                       f"{self.machine_type} has exactly {known.gpus} GPU(s) per node")
        if self.gpus_per_node == 0:
            v.fail(self, "gpus_per_node", 0, "a GPU node pool needs at least 1 GPU per node")
        self._check_fabric(known.rdma_nics if known is not None else 0)
        if self.spot and self.reservation is not None:
            v.fail(self, "reservation", self.reservation,
                   "Spot VMs cannot consume a reservation; pass spot=False to use one")
        if self.head_machine_type in GPU_MACHINE_TYPES:
            v.fail(self, "head_machine_type", self.head_machine_type,
                   "the head pool is a CPU pool; use head_on_gpu_pool=True to put the head on GPU nodes")
        everyone = v.whole_internet(self.authorized_networks)
        if everyone is not None and not self.public_control_plane:
            v.fail(self, "authorized_networks", everyone,
                   "opens the control plane to the whole internet; pass public_control_plane=True if you mean it")
        self._check_image()

        vol = self.volume
        if vol is not None and not isinstance(vol, LustreVolume):
            v.fail(self, "volume", vol, "must be a LustreVolume")
        if vol is None or "name" in vol._filled:
            # The default volume follows the cluster (also through attrs.evolve).
            vol = default_volume(f"{self.name}-lustre")
            object.__setattr__(vol, "_filled", frozenset({"name"}))
        else:
            vol = vol._unfilled()
        for field in ("project", "zone"):
            theirs = getattr(vol, field)
            if theirs is not None and theirs != getattr(self, field):
                v.fail(self, "volume", f"{vol.name} ({field}={theirs})",
                       f"the volume must be in the cluster's {field} {getattr(self, field)!r}")
        net = self.network_name
        if vol.network is not None and vol.network != net:
            v.fail(self, "volume", f"{vol.name} (network={vol.network})", f"the volume must be on the cluster's network {net!r}")
        object.__setattr__(self, "volume", vol._with_defaults(project=self.project, zone=self.zone, network=net))

    def _check_fabric(self, rdma_nics: int) -> None:
        if self.fabric is None:
            object.__setattr__(self, "fabric", "rdma" if rdma_nics else "tcp")
        elif self.fabric == "rdma" and not rdma_nics:
            v.fail(self, "fabric", "rdma",
                   f"machine type {self.machine_type!r} has no RDMA NICs; GPUDirect-RDMA needs one of "
                   f"{', '.join(rdma_machine_types())} (use fabric='tcp')")

    def _check_local(self) -> None:
        self._check_fabric(0)
        if self.volume is not None:
            v.fail(self, "volume", self.volume, "a local cluster uses a directory, not a LustreVolume")
        self._check_mount_path(gke=False)
        if self.gpus_per_node is None:
            object.__setattr__(self, "gpus_per_node", 1)
        if self.nemo_rl_path is not None and not Path(self.nemo_rl_path).is_absolute():
            v.fail(self, "nemo_rl_path", self.nemo_rl_path, "must be an absolute path to a NeMo-RL checkout")
        if self.worker_nodes and self.num_nodes > self.worker_nodes:
            v.fail(self, "num_nodes", self.num_nodes,
                   f"must be at most worker_nodes={self.worker_nodes}: each node of a job is one worker raylet")

    def _check_mount_path(self, *, gke: bool) -> None:
        p = self.mount_path
        if not isinstance(p, str) or not p.startswith("/"):
            v.fail(self, "mount_path", p, "must be an absolute path")
        if posixpath.normpath(p) != p or p == "/":
            v.fail(self, "mount_path", p, "must be a normalised path other than '/' (no trailing '/', '..' or '//')")
        if any(c.isspace() for c in p) or ":" in p or v.control_char(p) is not None:
            v.fail(self, "mount_path", p, "must not contain whitespace, control characters or ':'")
        if gke and any(p == d or p.startswith(d + "/") for d in _SYSTEM_DIRS):
            v.fail(self, "mount_path", p, f"must not be inside a system directory ({', '.join(_SYSTEM_DIRS)})")

    def _check_image(self) -> None:
        known = ray_version_for_image(self.image)
        if self.ray_version is None:
            if known is None:
                v.fail(self, "ray_version", None,
                       f"must be given: rl_lustre does not know which Ray image {self.image!r} contains, and "
                       "KubeRay's rayVersion must match it")
            object.__setattr__(self, "ray_version", known)
        elif known is not None and known != self.ray_version:
            v.fail(self, "ray_version", self.ray_version,
                   f"image {self.image!r} contains Ray {known}; rayVersion must match the image")

    @classmethod
    def local(
        cls,
        name: str = "local",
        *,
        volume_dir: str | Path | None = None,
        nemo_rl_path: str | Path | None = None,
        num_nodes: int = 1,
        gpus_per_node: int = 1,
        secrets: tuple[str, ...] = DEFAULT_SECRETS,
        keep: bool = False,
        rehearsal_scale: float = 1e-5,
        rehearsal_step_seconds: float = 0.5,
        worker_nodes: int = 0,
        **kwargs: Any,
    ) -> Cluster:
        """A deployment on this machine: a real local Ray head and a directory as the volume.

        Jobs run the real NeMo-RL entrypoint when ``nemo_rl_path`` points at a NeMo-RL
        checkout, otherwise the rehearsal driver (``python -m rl_lustre.rehearsal``),
        which rehearses orchestration and checkpoint storage but does not train.

        Examples:
            >>> from rl_lustre import Cluster
            >>> c = Cluster.local("demo", volume_dir="/tmp/rl-demo-volume")
            >>> c.backend, c.mount_path
            ('local', '/tmp/rl-demo-volume')

        Args:
            name: the deployment name.
            volume_dir: the directory that plays the volume; by default
                ``$XDG_DATA_HOME/rl_lustre/<name>/volume``.
            nemo_rl_path: a NeMo-RL checkout to run real jobs with.
            num_nodes: nodes the jobs are told they have (``cluster.num_nodes``).
            gpus_per_node: GPUs per node the jobs are told they have.
            secrets: environment variables handed to jobs through the head's environment.
            keep: leave the head running at the end of a ``with`` block.
            rehearsal_scale: rehearsal checkpoints are this fraction of the real size.
            rehearsal_step_seconds: how long a rehearsed training step takes.
            worker_nodes: real Ray worker nodes to start next to the head: each a raylet of
                its own on 127.0.0.1 (what ``ray start --address=...`` starts) declaring
                ``gpus_per_node`` GPUs, so that
                jobs place per-node work on them as NeMo-RL does, and
                :func:`rl_lustre.testing.preempt` can take them away as a Spot preemption
                does. 0 (the default) runs the head alone.
        """
        owner = "Cluster.local"
        v.need(owner, "name", name, str, "a deployment name (str)")
        v.need(owner, "volume_dir", volume_dir, (str, os.PathLike), "a directory path (str or Path)", optional=True)
        v.need(owner, "nemo_rl_path", nemo_rl_path, (str, os.PathLike), "a NeMo-RL checkout path (str or Path)",
               optional=True)
        if volume_dir is None:
            volume_dir = _default_local_root() / name / "volume"
        raw = os.fspath(volume_dir)
        if not isinstance(raw, str) or not raw.strip():
            raise ConfigError(owner, "volume_dir", raw, "must be a directory path, not empty (the default is "
                   f"{_default_local_root() / '<name>' / 'volume'})")
        if v.control_char(raw) is not None:
            v.no_control(owner, "volume_dir", raw)
        # expanduser() leaves a path without a leading "~" as it is.
        mount = posixpath.normpath(str(Path(raw).expanduser().absolute()))
        if mount == "/" or any(ch.isspace() for ch in mount) or ":" in mount:
            raise ConfigError(owner, "volume_dir", raw,
                              "must be a directory other than '/', without whitespace or ':' in its path")
        return cls(
            name=name,
            backend="local",
            mount_path=mount,
            num_nodes=num_nodes,
            gpus_per_node=gpus_per_node,
            machine_type="local",
            accelerator_type=None,
            spot=False,
            nemo_rl_path=None if nemo_rl_path is None else str(nemo_rl_path),
            secrets=secrets,
            keep=keep,
            rehearsal_scale=rehearsal_scale,
            rehearsal_step_seconds=rehearsal_step_seconds,
            worker_nodes=worker_nodes,
            **kwargs,
        )

    @property
    def network_name(self) -> str:
        """The VPC network: the user's, or ``<name>-net`` which we create."""
        return self.network if self.network is not None else f"{self.name}-net"

    @property
    def total_gpus(self) -> int:
        assert self.gpus_per_node is not None
        return self.num_nodes * self.gpus_per_node

    @property
    def nemo_rl_version(self) -> str | None:
        """The NeMo-RL version the image carries, when its tag says so."""
        return nemo_rl_version_for_image(self.image)

    @property
    def head_service(self) -> str:
        """The Kubernetes service KubeRay creates for the head (``<name>-head-svc``)."""
        return f"{self.name}-head-svc"

    def plan(self) -> Plan:
        """Every resource :meth:`up` would create, with its settings and dependencies.

        Makes no remote call.

        Examples:
            >>> from rl_lustre import Cluster
            >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
            ...                zone="us-east1-b").plan()
            >>> [r.key for r in plan.resources][:3]
            ['network', 'subnet', 'psa-range']
        """
        from .plan import build_plan

        return build_plan(self)

    def manifests(self) -> list[dict[str, Any]]:
        """The Kubernetes objects this deployment applies, as plain dicts.

        With ``fabric="rdma"``, first a GKENetworkParamSet and a Network per extra node
        network and the gIB NCCL installer DaemonSet; then the PersistentVolume,
        PersistentVolumeClaim, Secret (values redacted) and the ``ray.io/v1`` RayCluster.
        Before the volume exists its IP is a placeholder.

        Examples:
            >>> from attrs import evolve
            >>> from rl_lustre import Cluster
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> [m["kind"] for m in c.manifests()][-5:]
            ['DaemonSet', 'PersistentVolume', 'PersistentVolumeClaim', 'Secret', 'RayCluster']
            >>> [m["kind"] for m in evolve(c, fabric="tcp").manifests()]
            ['PersistentVolume', 'PersistentVolumeClaim', 'Secret', 'RayCluster']
        """
        from .kube.manifests import build_manifests

        return build_manifests(self)

    def up(self, *, keep_on_failure: bool = False, check: bool = True) -> Cluster:
        """Create the deployment (or adopt the one already running) and wait until it takes jobs.

        Idempotent. Locally: the volume directory and a Ray head on 127.0.0.1. On GKE it
        first runs :meth:`check` (read-only) and creates nothing when the zone does not
        offer what the cluster asks for or the region's GPU quota falls short; then, if
        a step fails (or the process gets SIGINT/SIGTERM), everything this call created is
        deleted again unless ``keep_on_failure``.

        A GKE deployment brought up this way stays up until :meth:`down` — also after
        this process ends, so that another process can ``attach`` to its jobs; use
        ``with cluster:`` for one that tears itself down. A local head is a child of
        this machine's session: unless ``keep``, it is stopped when the interpreter exits.

        Examples:
            >>> cluster = Cluster.local("demo").up()  # doctest: +SKIP
            >>> cluster.down()  # doctest: +SKIP

        Args:
            keep_on_failure: leave what was created in place when ``up()`` fails, to debug it.
            check: run :meth:`check` first (GKE); ``False`` skips it.

        Returns:
            The cluster itself, for chaining.

        Raises:
            CapacityError: the check found a problem; nothing was created.
            RollbackError: provisioning failed; says what failed and what was cleaned up.
        """
        v.need("Cluster.up", "keep_on_failure", keep_on_failure, bool, "True or False")
        v.need("Cluster.up", "check", check, bool, "True or False")
        self._up(keep_on_failure=keep_on_failure, check=check)
        if self.backend != "local":
            logger.info("cluster %r is up and stays up until down(). %s", self.name, self._backend().cleanup_hint())
        return self

    def _up(self, *, keep_on_failure: bool = False, check: bool = True) -> None:
        self._backend().up(keep_on_failure=keep_on_failure, check=check)
        if self.backend == "local" and not self.keep:
            atexit.register(self._down_at_exit)

    def check(self) -> CheckReport:
        """Ask Google Cloud, read-only, whether this deployment can be created where it asks.

        Confirms that the zone offers the GPU machine type, its GPU type and the head's
        machine type, that Managed Lustre runs in the zone, and that the region's GPU quota
        (Spot: ``PREEMPTIBLE_<GPU>_GPUS``, else ``<GPU>_GPUS``) covers every node; each
        problem names its fix (the quota to raise, zones that work). ``up()`` runs it first.
        Also on the command line: ``rl-lustre check path/to/script.py:cluster``.

        Examples:
            >>> report = Cluster(name="demo", project="my-project", region="us-east1",
            ...                  zone="us-east1-b").check()  # doctest: +SKIP
            >>> print(report)  # doctest: +SKIP
            check of 'demo': ok
            ok       zone us-east1-b offers machine type a4-highgpu-8g
            ...

        Returns:
            A :class:`~rl_lustre.check.CheckReport` (``report.ok``, ``report.problems``).

        Raises:
            GCPError: a question could not be asked (credentials, permissions).
        """
        from .check import check_cluster

        return check_cluster(self)

    def down(self) -> None:
        """Tear down what :meth:`up` created; what you own is never deleted. A no-op when nothing runs.

        On GKE that includes the Lustre instance ``up()`` created, and the checkpoints on
        it: use ``LustreVolume(existing=True)`` for a volume that outlives the cluster, or
        ``volume.export_data()`` first. Locally the volume directory is kept.

        Examples:
            >>> Cluster.local("demo").down()  # doctest: +SKIP
        """
        atexit.unregister(self._down_at_exit)
        self._backend().down()

    def __enter__(self) -> Cluster:
        self._up()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        from . import _output

        if exc_type is None or (isinstance(exc, SystemExit) and not exc.code):
            why = "finished"
        elif issubclass(exc_type, KeyboardInterrupt):
            why = "was interrupted"
        else:
            why = f"raised {exc_type.__name__}"
        backend = self._backend()
        if self.keep:
            message = f"cluster {self.name!r}: the with block {why}; keep=True leaves it running. {backend.cleanup_hint()}"
            logger.warning("%s", message)
            _output.echo(message, style="yellow")
            return
        message = f"cluster {self.name!r}: the with block {why}; tearing down the {backend.describe()}"
        logger.info("%s", message)
        _output.echo(message)
        self.down()

    def submit(self, job: GRPOJob, *, fresh: bool = False) -> Run:
        """Submit ``job``; returns its run handle. The cluster must be up.

        Checks the job offline first (see :meth:`GRPOJob.preflight`). Submitting a job
        that is still running attaches to it rather than starting a second copy;
        submitting it again after it ended starts a new attempt, which NeMo-RL resumes
        from the newest checkpoint. When that checkpoint already reaches
        ``max_num_steps`` the run has nothing left to do and ends SUCCEEDED at once:
        that is reported with a :class:`~rl_lustre.errors.NothingToDoWarning` (at submit
        where the volume is readable from here, as on the local backend; otherwise when
        :meth:`Run.wait` sees the run end without a step) and in the run's ``repr``.

        Examples:
            >>> with Cluster.local("demo") as cluster:  # doctest: +SKIP
            ...     run = cluster.submit(GRPOJob(name="tiny", recipe="grpo_math_1B", max_num_steps=4))
            ...     run.wait()
            ...     again = cluster.submit(GRPOJob(name="tiny", recipe="grpo_math_1B", max_num_steps=4),
            ...                            fresh=True)   # trains from step 0 again

        Args:
            job: the job.
            fresh: start over: the job's command first moves its checkpoint directory
                aside (``<dir>.before-fresh-<UTC time>``; nothing is deleted), so NeMo-RL
                does not resume.

        Raises:
            ConfigError: the job is invalid for this cluster or would carry a secret.
            NotReadyError: the cluster is not up.
            RayError: the Jobs API refused the job.
        """
        from .job import GRPOJob

        v.need("Cluster.submit", "job", job, GRPOJob, "a GRPOJob")
        return self._backend().submit(job, fresh=fresh)

    def attach(self, job_id: str) -> Run:
        """The run handle of a job already submitted to this cluster, by its id.

        Works from another process too, while the deployment runs.

        Examples:
            >>> run = Cluster.local("demo").attach("rl-lustre-tiny-0f3a9c1e")  # doctest: +SKIP
            >>> run.status()  # doctest: +SKIP
            'RUNNING'

        Raises:
            NotReadyError: the cluster is not up.
            RayError: the cluster has no such job.
        """
        v.need("Cluster.attach", "job_id", job_id, str, "a Ray submission id (str)")
        if not job_id or v.control_char(job_id) is not None:
            raise ConfigError("Cluster.attach", "job_id", job_id, "must be a non-empty id without control characters")
        return self._backend().attach(job_id)

    def metrics(self, start: Any = None, end: Any = None, *, step: int = 60, monitoring: Any = None) -> ClusterMetrics:
        """GPU utilisation of the deployment's pods and its Lustre throughput, from Cloud Monitoring.

        Example::

            m = cluster.metrics()                # the last hour, one point a minute
            m.gpu_utilization.mean(), m.volume.write_mbps.max()

        ``start``, ``end``, ``step`` and ``monitoring`` are as for
        :meth:`LustreVolume.metrics <rl_lustre.LustreVolume.metrics>` (default: the last hour).

        Raises:
            ConfigError: a local cluster, or a bad window or step.
            GCPError: Cloud Monitoring refused (e.g. no ``roles/monitoring.viewer``).
        """
        from .metrics import cluster_metrics

        return cluster_metrics(self, start=start, end=end, step=step, monitoring=monitoring)

    def use_kubeconfig(self, path: str | Path | None = None, context: str | None = None) -> Cluster:
        """Reach the RayCluster through a kubeconfig context instead of through the GKE API.

        For a RayCluster named like this cluster (in its namespace) that runs somewhere
        you already have credentials for, or a control plane reached only through a
        kubeconfig. ``submit``, ``attach`` and the run handles then go through it;
        ``up()`` and ``down()`` still work through the Google Cloud APIs.

        Examples:
            >>> cluster = Cluster(name="demo", project="my-project", region="us-east1",
            ...                   zone="us-east1-b")
            >>> run = cluster.use_kubeconfig("~/.kube/config", "gke_my-project_us-east1_demo").submit(job)  # doctest: +SKIP

        Args:
            path: the kubeconfig; by default ``$KUBECONFIG`` or ``~/.kube/config``.
            context: the context; by default the file's current context.

        Returns:
            The cluster itself, for chaining.

        Raises:
            ConfigError: a local cluster, or a kubeconfig that is missing, unreadable or
                lacks ``context`` (checked now; nothing is requested).
        """
        v.need("Cluster.use_kubeconfig", "path", path, (str, os.PathLike), "a kubeconfig path (str or Path)",
               optional=True)
        v.need("Cluster.use_kubeconfig", "context", context, str, "a context name (str)", optional=True)
        for param, value in (("path", path), ("context", context)):
            if value is not None:
                v.no_control("Cluster.use_kubeconfig", param, os.fspath(value))
        if self.backend != "gke":
            v.fail(self, "backend", self.backend, "only a GKE cluster is reached through a kubeconfig")
        self._backend().use_kubeconfig(path, context)  # type: ignore[attr-defined]
        return self

    def _backend(self) -> Backend:
        if self._live.backend is None:
            from .backends import backend_for

            self._live.backend = backend_for(self)
        backend: Backend = self._live.backend
        return backend

    def _down_at_exit(self) -> None:
        logger.info("cluster %r is still up at interpreter exit; tearing it down", self.name)
        self._backend().down()
