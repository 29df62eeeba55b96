"""Where a ``ClusterSpec``'s files live: its volume (the default one and its size, and the
rules a volume follows beside its cluster), the path the volume is mounted at (``/lustre``
on GKE, a directory of this machine locally), the warm start from Cloud Storage and where
the runs' results go (``results``)."""

from __future__ import annotations

import functools
import os
import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .. import _validate as v
from .. import naming
from ..errors import ConfigError
from ._fields import settle

if TYPE_CHECKING:
    from .cluster import ClusterSpec

__all__ = [
    "DEFAULT_MOUNT_PATH",
    "RESULTS_RULE",
    "WARM_START_RULE",
    "check_results",
    "check_volume",
    "default_local_root",
    "default_volume_size",
    "is_warm_start",
    "local_mount",
    "results_path",
    "results_value",
    "settle_mount_path",
    "warm_start_value",
]

_SYSTEM_DIRS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
    "/opt/nemo-rl",
)
DEFAULT_MOUNT_PATH = "/lustre"


def default_local_root() -> Path:
    """Where local deployments keep their volume directories: ``$XDG_DATA_HOME/rl_lustre``."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "rl_lustre"


# A Cloud Storage bucket (its naming rules, dots aside) and an optional prefix of plain
# '/'-separated names: where the warm-start export lives (rl_lustre.plan.warmstart).
_WARM_START = re.compile(r"gs://([a-z0-9][a-z0-9_-]{1,61}[a-z0-9])((?:/[A-Za-z0-9_.=+-]+)*)")
WARM_START_RULE = (
    "must be a Cloud Storage location 'gs://BUCKET' or 'gs://BUCKET/PREFIX': a bucket name of 3-63 "
    "lowercase letters, digits, '-' or '_' that starts and ends with a letter or digit (no dots, "
    "not starting with 'goog'), and a prefix of '/'-separated names of letters, digits and "
    "'_.=+-' (no '.' or '..' name, no trailing '/', no spaces or wildcards)"
)


def is_warm_start(value: Any) -> bool:
    """Whether ``value`` follows :data:`WARM_START_RULE`."""
    m = _WARM_START.fullmatch(value) if isinstance(value, str) else None
    return not (
        m is None
        or m[1].startswith("goog")
        or "google" in m[1]
        or any(part in (".", "..") for part in m[2].split("/")[1:])
    )


def warm_start_value(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    """The validator of ``ClusterSpec.warm_start``: None or :data:`WARM_START_RULE`."""
    if value is not None and not is_warm_start(value):
        v.fail(inst, "warm_start", value, WARM_START_RULE)


RESULTS_RULE = (
    "must say where the runs' results go: 'gs://BUCKET' or 'gs://BUCKET/PREFIX' on GKE (Managed Lustre "
    "exports to Cloud Storage), a directory path or a 'file://' URI on a local cluster"
)


def results_value(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    """The validator of ``ClusterSpec.results`` before the backend is known: None or text
    without control characters (the backend's rule is checked by :func:`check_results`)."""
    if value is None:
        return
    if not isinstance(value, str) or not value.strip() or v.control_char(value) is not None:
        v.fail(inst, "results", value, RESULTS_RULE)


def results_path(value: str) -> str:
    """A local ``results`` value (a path or a ``file://`` URI) as an absolute, normalised path.

    Examples:
        >>> results_path("file:///data/rl-results/"), results_path("/data/x/../rl")
        ('/data/rl-results', '/data/rl')
    """
    raw = value[len("file://") :] if value.startswith("file://") else value
    return posixpath.normpath(str(Path(raw).expanduser().absolute()))


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def check_results(spec: ClusterSpec) -> None:
    """Check ``spec.results`` against its backend: a bucket URI on GKE, a directory locally;
    never inside (or around) the warm-start prefix, nor, locally, the volume directory."""
    value = spec.results
    if value is None:
        return
    if spec.backend == "gke":
        if not value.startswith("gs://"):
            v.fail(spec, "results", value, RESULTS_RULE)
        if not is_warm_start(value):
            v.fail(spec, "results", value, WARM_START_RULE)
        warm = spec.warm_start
        if warm is not None and (_inside(value, warm) or _inside(warm, value)):
            v.fail(
                spec,
                "results",
                value,
                f"must not be inside warm_start {warm!r} (nor hold it): the two would write over each other; "
                "the same bucket is fine, under another prefix (e.g. 'gs://BUCKET/results')",
            )
        return
    if "://" in value.removeprefix("file://"):
        v.fail(spec, "results", value, RESULTS_RULE)
    path = results_path(value)
    if path == "/" or any(ch.isspace() for ch in path) or ":" in path:
        v.fail(spec, "results", value, "must be a directory other than '/', without whitespace or ':' in its path")
    if _inside(path, spec.mount_path) or _inside(spec.mount_path, path):
        v.fail(
            spec,
            "results",
            value,
            f"must be outside the volume directory {spec.mount_path!r} (and not hold it): the results are "
            "copied out of it",
        )


@functools.lru_cache(maxsize=1)
def default_volume_size() -> tuple[int, int]:
    """``(capacity_gib, throughput_mbps_per_tib)`` of the volume a ``Cluster`` gets when
    given none: what :func:`~rl_lustre.size_lustre` picks for the default job
    (``GRPOJob()``'s model and ``keep_top_k``, a checkpoint written in 300 s).

    Examples:
        >>> default_volume_size()
        (9000, 1000)
    """
    from .._sizing import smallest_instance
    from .job import JobSpec

    fields = attrs.fields(JobSpec)
    return smallest_instance(str(fields.model.default), checkpoints_kept=fields.keep_top_k.default or 2)


def check_volume(spec: ClusterSpec) -> None:
    """Settle the volume of a GKE ``spec``: the one given, or the default one named after the
    cluster (which follows it through ``attrs.evolve``), in the cluster's project, zone and
    network; a warm start needs a volume the deployment creates."""
    kind = spec._volume_class
    vol = spec.volume
    if vol is not None and not isinstance(vol, kind):
        v.fail(spec, "volume", vol, f"must be a {kind.__name__}")
    if vol is None or "name" in vol._filled:
        # The default volume follows the cluster (also through attrs.evolve).
        capacity, tier = default_volume_size()
        vol = kind(name=naming.default_volume_name(spec), capacity_gib=capacity, throughput_mbps_per_tib=tier)
        object.__setattr__(vol, "_filled", frozenset({"name"}))
    else:
        vol = vol._unfilled()
    for field in ("project", "zone"):
        theirs = getattr(vol, field)
        if theirs is not None and theirs != getattr(spec, field):
            v.fail(
                spec,
                "volume",
                f"{vol.name} ({field}={theirs})",
                f"the volume must be in the cluster's {field} {getattr(spec, field)!r}",
            )
    net = spec.network_name
    if vol.network is not None and vol.network != net:
        v.fail(
            spec,
            "volume",
            f"{vol.name} (network={vol.network})",
            f"the volume must be on the cluster's network {net!r}",
        )
    object.__setattr__(spec, "volume", vol._with_defaults(project=spec.project, zone=spec.zone, network=net))
    if spec.warm_start is not None and spec.volume is not None and spec.volume.existing:
        v.fail(
            spec,
            "warm_start",
            spec.warm_start,
            f"needs a volume this deployment creates; {spec.volume.name!r} is existing=True, and an existing "
            "volume keeps its files between deployments already (copy to or from a bucket with "
            "volume.import_data() / volume.export_data())",
        )


def settle_mount_path(spec: ClusterSpec, *, gke: bool) -> None:
    """Settle ``spec.mount_path``: the one given, or :data:`DEFAULT_MOUNT_PATH` on GKE and
    locally the volume directory under :func:`default_local_root` named after the cluster;
    then check it."""
    if gke:
        settle(spec, "mount_path", DEFAULT_MOUNT_PATH if spec._given_mount_path is None else spec._given_mount_path)
    elif spec._given_mount_path is None:
        default = posixpath.normpath(str((default_local_root() / spec.name / "volume").absolute()))
        settle(spec, "mount_path", default)
        if any(ch.isspace() for ch in default) or ":" in default or v.control_char(default) is not None:
            v.fail(
                spec,
                "mount_path",
                default,
                "the default volume directory must not contain whitespace, control characters or ':'; "
                "pass volume_dir= to Cluster.local()",
            )
    else:
        settle(spec, "mount_path", spec._given_mount_path)
    _check_mount_path(spec, gke=gke)


def _check_mount_path(spec: ClusterSpec, *, gke: bool) -> None:
    p = spec.mount_path
    if not isinstance(p, str) or not p.startswith("/"):
        v.fail(spec, "mount_path", p, "must be an absolute path")
    # normpath keeps a leading '//' (POSIX leaves its meaning to the system): refused too.
    if posixpath.normpath(p) != p or p == "/" or p.startswith("//"):
        v.fail(spec, "mount_path", p, "must be a normalised path other than '/' (no trailing '/', '..' or '//')")
    if any(c.isspace() for c in p) or ":" in p or v.control_char(p) is not None:
        v.fail(spec, "mount_path", p, "must not contain whitespace, control characters or ':'")
    if gke and any(p == d or p.startswith(d + "/") for d in _SYSTEM_DIRS):
        v.fail(spec, "mount_path", p, f"must not be inside a system directory ({', '.join(_SYSTEM_DIRS)})")


def local_mount(owner: str, volume_dir: str | os.PathLike[str]) -> str:
    """``volume_dir`` as the absolute, normalised mount path of a local deployment."""
    raw = os.fspath(volume_dir)
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(
            owner,
            "volume_dir",
            raw,
            f"must be a directory path, not empty (the default is {default_local_root() / '<name>' / 'volume'})",
        )
    if v.control_char(raw) is not None:
        v.no_control(owner, "volume_dir", raw)
    try:
        # expanduser() leaves a path without a leading "~" as it is.
        expanded = Path(raw).expanduser()
    except RuntimeError:
        raise ConfigError(
            owner,
            "volume_dir",
            raw,
            "starts with '~user' for a user this machine does not know; give the directory's path",
        ) from None
    mount = posixpath.normpath(str(expanded.absolute()))
    if mount == "/" or any(ch.isspace() for ch in mount) or ":" in mount:
        raise ConfigError(
            owner, "volume_dir", raw, "must be a directory other than '/', without whitespace or ':' in its path"
        )
    return mount
