"""``ClusterSpec``: the fields and rules of a deployment (``Cluster``'s spec), and the
values derived from them (the GPU type and count of a machine type, the fabric, the
image's Ray version, the default volume and the local volume directory).

The rules of its volume, mount path and warm start are in
:mod:`rl_lustre.spec.cluster_storage`, those of its capacity policy in
:mod:`rl_lustre.spec.capacity`."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, cast

import attrs

from .. import _validate as v
from .. import naming
from ..catalog import (
    GPU_MACHINE_TYPES,
    HEAD_MACHINE_TYPE,
    REFERENCE_MODEL,
    nemo_rl_version_for_image,
    ray_version_for_image,
    rdma_machine_types,
)
from ._fields import settle
from .capacity import (
    NO_CAPACITY_OPTIONS,
    RESERVATION_PATTERN,
    RESERVATION_RULE,
    Capacity,
    check_capacity,
)
from .cluster_storage import (
    check_results,
    check_volume,
    local_mount,
    results_value,
    settle_mount_path,
    warm_start_value,
)
from .volume import PROJECT_PATTERN, PROJECT_RULE, ZONE_PATTERN, ZONE_RULE, VolumeSpec

__all__ = ["CLUSTER_NAME_RULE", "DEFAULT_SECRETS", "HF_REPO_ID_RULE", "MAINTENANCE_EXCLUSIONS", "ClusterSpec"]

CLUSTER_NAME_RULE = (
    "must be 1-40 lowercase letters, digits or hyphens, start with a letter and not end with "
    "a hyphen (GKE cluster name rule)"
)
DEFAULT_SECRETS = ("HF_TOKEN", "WANDB_API_KEY")
# GKE's maintenance exclusion scopes (MaintenanceExclusionOptions.Scope). NO_UPGRADES
# lasts at most 30 days and must end at a fixed time, so it is not offered here.
MAINTENANCE_EXCLUSIONS = ("NO_MINOR_OR_NODE_UPGRADES", "NO_MINOR_UPGRADES")

# The class local() is called on (Cluster.local() makes a Cluster): typing.Self before Python 3.11.
Self = TypeVar("Self", bound="ClusterSpec")
_T = TypeVar("_T")


def _check_secret_names(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    from .._secrets import secret_shape

    v.names(inst, attr, value)
    for name in value:
        what = secret_shape(name)
        if what is not None:
            v.fail(
                inst,
                v.field_name(attr),
                name,
                f"looks like {what}: secrets= takes the NAMES of environment variables that hold "
                "secrets, like ('HF_TOKEN', 'WANDB_API_KEY'); set the value in the environment "
                "(export HF_TOKEN=...) and list only its name here",
            )
    v.env_name(inst, attr, value)


PRELOAD_IMAGE_RULE = (
    "must be True (find or build a disk image holding `image`), False (no preload: the "
    "image is pre-pulled on each node), or your disk image as "
    "'projects/PROJECT/global/images/NAME' or 'global/images/NAME'"
)
_DISK_IMAGE = re.compile(
    r"(?:projects/([a-z][a-z0-9-]{4,28}[a-z0-9])/)?global/images/([a-z](?:[a-z0-9-]{0,61}[a-z0-9])?)"
)
# GKE is reported to refuse a secondary boot disk image named longer than this when it attaches it.
_GKE_DISK_IMAGE_NAME_MAX = 39


def _preload_image_value(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if value is None or isinstance(value, bool):
        return
    if not isinstance(value, str) or not _DISK_IMAGE.fullmatch(value):
        v.fail(inst, "preload_image", value, PRELOAD_IMAGE_RULE)


_HF_REPO_ID = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
HF_REPO_ID_RULE = (
    "must be a Hugging Face model id like 'Qwen/Qwen2.5-72B-Instruct' (letters, digits, '_', '.', "
    "'-', at most one '/', no '--' or '..')"
)


def _capacities(value: Iterable[Capacity | str] | None) -> tuple[Capacity | str, ...] | None:
    """Converter of ``capacity``: the kinds to try in order, as a tuple (checked by ``check_capacity``)."""
    return cast("tuple[Capacity | str, ...] | None", v.to_tuple(value))


def _zones(value: str | Iterable[str]) -> str | tuple[str, ...]:
    """Converter of ``capacity_zones``: ``"zone"``, ``"region"`` or a tuple of zones."""
    return cast("str | tuple[str, ...]", v.to_tuple(value))


def _hf_repo_ids(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, tuple):
        v.fail(inst, v.field_name(attr), value, "must be a list of Hugging Face model ids")
    for repo in value:
        if not isinstance(repo, str) or not _HF_REPO_ID.fullmatch(repo) or "--" in repo or ".." in repo:
            v.fail(inst, v.field_name(attr), repo, HF_REPO_ID_RULE)
    if len(set(value)) != len(value):
        v.fail(inst, v.field_name(attr), value, "model ids must be unique")


@v.keyword_errors
@attrs.frozen(kw_only=True)
class ClusterSpec:
    """The frozen, validated fields of a deployment; see :class:`rl_lustre.Cluster`, which
    adds the lifecycle (``plan``, ``up``, ``down``, ``submit``, ...) and documents every field.

    Fields left out that follow from others are derived on construction, and again by
    ``attrs.evolve`` from the new values: ``accelerator_type`` and ``gpus_per_node`` from
    ``machine_type``, ``fabric`` from the machine type's NICs, ``ray_version`` from
    ``image``, ``mount_path`` (``/lustre``; locally the volume directory under
    :func:`~rl_lustre.spec.cluster_storage.default_local_root` named after ``name``) and
    the default ``volume``.
    """

    # Cluster (the façade) holds a LustreVolume; this layer only needs its spec.
    _volume_class: ClassVar[type[VolumeSpec]] = VolumeSpec

    name: str = attrs.field(validator=v.matches(r"[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?", CLUSTER_NAME_RULE))
    project: str | None = attrs.field(default=None, validator=v.matches(PROJECT_PATTERN, PROJECT_RULE, optional=True))
    region: str | None = attrs.field(
        default=None,
        validator=v.matches(r"[a-z]+-[a-z]+[0-9]+", "must be a region like 'us-east1'", optional=True),
    )
    zone: str | None = attrs.field(
        default=None, validator=[v.matches(ZONE_PATTERN, ZONE_RULE, optional=True), v.known_zone]
    )
    volume: VolumeSpec | None = attrs.field(default=None)
    machine_type: str = attrs.field(
        default="a4-highgpu-8g",
        validator=v.matches(
            r"[a-z][a-z0-9]*-[a-z0-9-]+|local", "must be a Compute Engine machine type like 'a4-highgpu-8g'"
        ),
    )
    _given_accelerator_type: str | None = attrs.field(
        alias="accelerator_type",
        default=None,
        eq=False,
        repr=False,
        validator=v.matches(r"nvidia-[a-z0-9-]+", "must be a GKE accelerator like 'nvidia-b200'", optional=True),
    )
    accelerator_type: str | None = attrs.field(init=False)
    _given_gpus_per_node: int | None = attrs.field(
        alias="gpus_per_node", default=None, eq=False, repr=False, validator=v.integer(min=0, max=16, optional=True)
    )
    gpus_per_node: int = attrs.field(init=False)
    num_nodes: int = attrs.field(default=8, validator=v.integer(min=1, max=1000))
    _given_spot: bool | None = attrs.field(
        alias="spot", default=None, eq=False, repr=False, validator=attrs.validators.optional(v.boolean)
    )
    spot: bool = attrs.field(init=False)
    reservation: str | None = attrs.field(
        default=None, validator=v.matches(RESERVATION_PATTERN, RESERVATION_RULE, optional=True)
    )
    _given_capacity: tuple[Capacity | str, ...] | None = attrs.field(
        alias="capacity", default=None, eq=False, repr=False, converter=_capacities
    )
    capacity: tuple[Capacity, ...] = attrs.field(init=False)
    capacity_zones: str | tuple[str, ...] = attrs.field(default="zone", converter=_zones)
    on_no_capacity: str = attrs.field(default="storage", validator=v.one_of(NO_CAPACITY_OPTIONS))
    head_machine_type: str = attrs.field(
        default=HEAD_MACHINE_TYPE,
        validator=v.matches(r"[a-z][a-z0-9]*-[a-z0-9-]+", "must be a Compute Engine machine type like 'n2-highmem-16'"),
    )
    head_on_gpu_pool: bool = attrs.field(default=False, validator=v.boolean)
    image: str = attrs.field(
        default="nvcr.io/nvidia/nemo-rl:v0.4.0",
        validator=v.matches(
            r"[a-z0-9][a-z0-9._/:@-]*[A-Za-z0-9._-]", "must be a container image reference without spaces"
        ),
    )
    _given_ray_version: str | None = attrs.field(
        alias="ray_version",
        default=None,
        eq=False,
        repr=False,
        validator=v.matches(r"\d+\.\d+\.\d+", "must be a Ray version like '2.46.0'", optional=True),
    )
    ray_version: str | None = attrs.field(init=False)
    _given_mount_path: str | None = attrs.field(alias="mount_path", default=None, eq=False, repr=False)
    mount_path: str = attrs.field(init=False)
    namespace: str = attrs.field(
        default="default",
        validator=v.matches(
            r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", "must be a DNS-1123 label (Kubernetes namespace rule)"
        ),
    )
    network: str | None = attrs.field(
        default=None,
        validator=v.matches(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?", "must be a VPC network name", optional=True),
    )
    node_service_account: str | None = attrs.field(default=None, validator=v.service_account)
    authorized_networks: tuple[str, ...] = attrs.field(default=(), converter=v.strings, validator=v.cidr)
    public_control_plane: bool = attrs.field(default=False, validator=v.boolean)
    secrets: tuple[str, ...] = attrs.field(default=DEFAULT_SECRETS, converter=v.strings, validator=_check_secret_names)
    _given_fabric: Literal["rdma", "tcp"] | None = attrs.field(
        alias="fabric", default=None, eq=False, repr=False, validator=v.one_of(["rdma", "tcp"], optional=True)
    )
    fabric: Literal["rdma", "tcp"] = attrs.field(init=False)
    maintenance_exclusion: str | None = attrs.field(
        default=MAINTENANCE_EXCLUSIONS[0], validator=v.one_of(MAINTENANCE_EXCLUSIONS, optional=True)
    )
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=v.string_mapping, validator=v.gcp_labels)
    prefetch_models: tuple[str, ...] = attrs.field(
        default=(REFERENCE_MODEL,), converter=v.strings, validator=_hf_repo_ids
    )
    prepull_image: bool = attrs.field(default=True, validator=v.boolean)
    _given_preload_image: bool | str | None = attrs.field(
        alias="preload_image", default=None, eq=False, repr=False, validator=_preload_image_value
    )
    preload_image: bool | str = attrs.field(init=False)
    warm_start: str | None = attrs.field(default=None, validator=warm_start_value)
    results: str | None = attrs.field(default=None, validator=results_value)
    keep: bool = attrs.field(default=False, validator=v.boolean)
    backend: Literal["gke", "local"] = attrs.field(default="gke", validator=v.one_of(["gke", "local"]))
    nemo_rl_path: str | None = attrs.field(
        default=None,
        validator=v.matches(r"[^\x00-\x1f\x7f]+", "must be a path without control characters", optional=True),
    )
    rehearsal_scale: float = attrs.field(default=1e-5, validator=v.number(gt=0, le=1))
    rehearsal_step_seconds: float = attrs.field(default=0.5, validator=v.number(ge=0, le=3600))
    worker_nodes: int = attrs.field(default=0, validator=v.integer(min=0, max=16))
    # What is derived offline from this very spec, computed once (the plan): not part of
    # the spec. A spec made by attrs.evolve is another object, so it derives its own.
    _derived: _Derived = attrs.field(factory=lambda: _Derived(), init=False, repr=False, eq=False, hash=False)

    def _derive(self, name: str, compute: Callable[[], _T]) -> _T:
        """The value ``name`` derived from this spec alone: ``compute()`` on first use, then kept."""
        derived = self._derived
        if name not in derived:
            derived[name] = compute()
        value: _T = derived[name]
        return value

    def __attrs_post_init__(self) -> None:
        if self.backend == "gke":
            self._check_gke()
        else:
            self._check_local()
        if len(set(self.secrets)) != len(self.secrets):
            v.fail(self, "secrets", self.secrets, "names must be unique")
        check_results(self)

    def _check_gke(self) -> None:
        missing = [f for f in ("project", "region", "zone") if getattr(self, f) is None]
        if missing:
            v.fail(
                self,
                ", ".join(missing),
                None,
                f"{'are' if len(missing) > 1 else 'is'} required for a GKE cluster "
                "(use Cluster.local() for this machine)",
            )
        assert self.zone is not None
        assert self.region is not None
        if self.zone.rsplit("-", 1)[0] != self.region:
            v.fail(self, "zone", self.zone, f"must be a zone of region {self.region!r} (like '{self.region}-b')")
        settle_mount_path(self, gke=True)
        if self.worker_nodes:
            v.fail(
                self,
                "worker_nodes",
                self.worker_nodes,
                "is for Cluster.local(); a GKE cluster's worker nodes are its num_nodes GPU nodes",
            )

        accelerator, gpus = self._given_accelerator_type, self._given_gpus_per_node
        known = GPU_MACHINE_TYPES.get(self.machine_type)
        if known is None:
            for field, value in (("accelerator_type", accelerator), ("gpus_per_node", gpus)):
                if value is None:
                    v.fail(
                        self,
                        field,
                        None,
                        f"must be given for machine type {self.machine_type!r}, which rl_lustre does not know "
                        f"(known: {', '.join(sorted(GPU_MACHINE_TYPES))})",
                    )
        else:
            if accelerator is None:
                accelerator = known.accelerator
            elif accelerator != known.accelerator:
                v.fail(self, "accelerator_type", accelerator, f"{self.machine_type} carries {known.accelerator!r}")
            if gpus is None:
                gpus = known.gpus
            elif gpus != known.gpus:
                v.fail(self, "gpus_per_node", gpus, f"{self.machine_type} has exactly {known.gpus} GPU(s) per node")
        settle(self, "accelerator_type", accelerator)
        settle(self, "gpus_per_node", gpus)
        if gpus == 0:
            v.fail(self, "gpus_per_node", 0, "a GPU node pool needs at least 1 GPU per node")
        self._check_fabric(known.rdma_nics if known is not None else 0)
        check_capacity(self)
        if self.head_machine_type in GPU_MACHINE_TYPES:
            v.fail(
                self,
                "head_machine_type",
                self.head_machine_type,
                "the head pool is a CPU pool; use head_on_gpu_pool=True to put the head on GPU nodes",
            )
        everyone = v.whole_internet(self.authorized_networks)
        if everyone is not None and not self.public_control_plane:
            v.fail(
                self,
                "authorized_networks",
                everyone,
                "opens the control plane to the whole internet; pass public_control_plane=True if you mean it",
            )
        self._check_image()
        self._check_preload()
        check_volume(self)

    def _check_preload(self) -> None:
        given = self._given_preload_image
        value: bool | str = True if given is None else given
        if isinstance(value, str):
            m = _DISK_IMAGE.fullmatch(value)
            assert m is not None
            value = f"projects/{m[1] or self.project}/global/images/{m[2]}"
            if len(m[2]) > _GKE_DISK_IMAGE_NAME_MAX:
                from .._warnings import warn_caller

                warn_caller(
                    f"Cluster.preload_image={given!r}: the image name has {len(m[2])} characters; GKE is "
                    f"reported to refuse secondary boot disk images named longer than "
                    f"{_GKE_DISK_IMAGE_NAME_MAX} when it attaches them to a node",
                    UserWarning,
                )
        settle(self, "preload_image", value)

    def _check_fabric(self, rdma_nics: int) -> None:
        fabric = self._given_fabric
        if fabric is None:
            fabric = "rdma" if rdma_nics else "tcp"
        elif fabric == "rdma" and not rdma_nics:
            v.fail(
                self,
                "fabric",
                "rdma",
                f"machine type {self.machine_type!r} has no RDMA NICs; GPUDirect-RDMA needs one of "
                f"{', '.join(rdma_machine_types())} (use fabric='tcp')",
            )
        settle(self, "fabric", fabric)

    def _check_local(self) -> None:
        self._check_fabric(0)
        settle(self, "spot", bool(self._given_spot))
        if self._given_capacity is not None:
            v.fail(self, "capacity", self._given_capacity, "is for GKE clusters (the GPU node pools' capacity)")
        settle(self, "capacity", ())
        if isinstance(self._given_preload_image, str):
            v.fail(
                self,
                "preload_image",
                self._given_preload_image,
                "is for GKE clusters (a secondary boot disk of the GPU nodes); a local cluster has no nodes to boot",
            )
        settle(self, "preload_image", False)
        if self.warm_start is not None:
            v.fail(
                self,
                "warm_start",
                self.warm_start,
                "is for GKE clusters (Managed Lustre imports from and exports to Cloud Storage); a local "
                "cluster's volume directory stays on this machine between deployments",
            )
        if self.volume is not None:
            v.fail(self, "volume", self.volume, "a local cluster uses a directory, not a LustreVolume")
        settle(self, "accelerator_type", self._given_accelerator_type)
        settle_mount_path(self, gke=False)
        settle(self, "gpus_per_node", 1 if self._given_gpus_per_node is None else self._given_gpus_per_node)
        if self.nemo_rl_path is not None and not Path(self.nemo_rl_path).is_absolute():
            v.fail(self, "nemo_rl_path", self.nemo_rl_path, "must be an absolute path to a NeMo-RL checkout")
        if self.worker_nodes and self.num_nodes > self.worker_nodes:
            v.fail(
                self,
                "num_nodes",
                self.num_nodes,
                f"must be at most worker_nodes={self.worker_nodes}: each node of a job is one worker raylet",
            )
        settle(self, "ray_version", self._given_ray_version)

    def _check_image(self) -> None:
        known = ray_version_for_image(self.image)
        given_version = self._given_ray_version
        if given_version is None:
            if known is None:
                v.fail(
                    self,
                    "ray_version",
                    None,
                    f"must be given: rl_lustre does not know which Ray image {self.image!r} contains, and "
                    "KubeRay's rayVersion must match it",
                )
            settle(self, "ray_version", known)
        elif known is not None and known != given_version:
            v.fail(
                self,
                "ray_version",
                given_version,
                f"image {self.image!r} contains Ray {known}; rayVersion must match the image",
            )
        else:
            settle(self, "ray_version", given_version)

    @classmethod
    def local(
        cls: type[Self],
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
    ) -> Self:
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
                ``$XDG_DATA_HOME/rl_lustre/<name>/volume`` (which follows ``name`` through
                ``attrs.evolve``).
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
        owner = f"{cls.__name__}.local"
        v.need(owner, "name", name, str, "a deployment name (str)")
        v.need(owner, "volume_dir", volume_dir, (str, os.PathLike), "a directory path (str or Path)", optional=True)
        v.need(
            owner,
            "nemo_rl_path",
            nemo_rl_path,
            (str, os.PathLike),
            "a NeMo-RL checkout path (str or Path)",
            optional=True,
        )
        mount = None if volume_dir is None else local_mount(owner, volume_dir)
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
        return self.num_nodes * self.gpus_per_node

    @property
    def nemo_rl_version(self) -> str | None:
        """The NeMo-RL version the image carries, when its tag says so."""
        return nemo_rl_version_for_image(self.image)

    @property
    def head_service(self) -> str:
        """The Kubernetes service KubeRay creates for the head (``<name>-head-svc``)."""
        return naming.head_service_name(self)


class _Derived(dict[str, Any]):
    """A spec's derived values by name; pickled empty, since they are rebuilt on demand."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Derived, ())
