"""What deployments share, found by its role labels: the preload disk images, and the
temporary VMs and disks that build them; and, by its manifest, a warm-start export in
your bucket (:func:`find_warm_start`).

A preload image (``rl-lustre-role=preload-image``) belongs to no deployment: every
deployment of its container image's digest boots its GPU nodes from it, and ``down()``
keeps it. :func:`find_shared` lists them with what they hold, their size, what they cost
per month and which node pools (of any GKE cluster in the project) boot from them.
:func:`collect_shared` deletes, when asked, the images no node pool uses, and always the
builder leftovers (``rl-lustre-role=preload-build``) older than a build can take — what a
killed ``up()`` leaves before the VM's own ``maxRunDuration`` deletes it.

Example::

    for image in find_shared("my-project").images:
        print(image.short_name, image.image, image.disk_gb, image.used_by)
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import attrs

from ._public import public
from .catalog import PRELOAD_BUILD_TIMEOUT, ROLE_PRELOAD_BUILD, ROLE_PRELOAD_IMAGE

if TYPE_CHECKING:
    from .gcp.storage import BucketObjects
    from .prices import Prices
    from .provision.context import Apis

__all__ = [
    "CollectedShared",
    "PreloadImage",
    "Shared",
    "WarmStartExport",
    "collect_shared",
    "find_shared",
    "find_warm_start",
]

logger = logging.getLogger("rl_lustre.inventory")


@attrs.frozen(kw_only=True)
class PreloadImage:
    """A preload disk image found in the project.

    Attributes:
        name: ``projects/P/global/images/NAME``.
        image: the container image it holds (``nvcr.io/nvidia/nemo-rl:v0.4.0``).
        digest: the image's digest it was built from (``sha256:…``), as far as known.
        disk_gb: its size: each node's secondary boot disk is this big.
        archive_gb: what is stored (GB), when Compute Engine says.
        status: ``READY``, ``PENDING`` or ``FAILED``.
        created: when it was built.
        used_by: ``cluster/pool`` of each node pool that boots from it.
    """

    name: str
    image: str
    digest: str
    disk_gb: int
    archive_gb: float | None
    status: str
    created: datetime.datetime | None
    used_by: tuple[str, ...] = ()

    @property
    def short_name(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    def usd_per_month(self, prices: Prices | None = None) -> float:
        """Its storage per month, priced at its disk size (an upper bound of what is stored)."""
        from .prices import Prices

        return self.disk_gb * (prices or Prices()).table.image_gib_month

    def to_dict(self, prices: Prices | None = None) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.image,
            "digest": self.digest,
            "disk_gb": self.disk_gb,
            "archive_gb": self.archive_gb,
            "status": self.status,
            "created": None if self.created is None else self.created.isoformat(),
            "used_by": list(self.used_by),
            "usd_per_month": round(self.usd_per_month(prices), 2),
        }


@attrs.frozen(kw_only=True)
class Leftover:
    """A builder VM or disk (``rl-lustre-role=preload-build``)."""

    kind: str
    name: str
    created: datetime.datetime | None

    def age_seconds(self, now: float) -> float | None:
        return None if self.created is None else now - self.created.timestamp()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "created": None if self.created is None else self.created.isoformat(),
        }


@attrs.frozen(kw_only=True)
class Shared:
    """What :func:`find_shared` found."""

    project: str
    images: tuple[PreloadImage, ...]
    builders: tuple[Leftover, ...]

    def to_dict(self, prices: Prices | None = None) -> dict[str, Any]:
        return {
            "preload_images": [i.to_dict(prices) for i in self.images],
            "preload_builders": [b.to_dict() for b in self.builders],
            "usd_per_month": round(sum(i.usd_per_month(prices) for i in self.images), 2),
        }


@attrs.frozen(kw_only=True)
class CollectedShared:
    """What :func:`collect_shared` found and did."""

    images: tuple[PreloadImage, ...]
    builders: tuple[Leftover, ...]
    deleted: bool
    in_use: tuple[PreloadImage, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "preload_images": [i.to_dict() for i in self.images],
            "in_use": [i.to_dict() for i in self.in_use],
            "preload_builders": [b.to_dict() for b in self.builders],
            "deleted": self.deleted,
        }


def _timestamp(value: Any) -> datetime.datetime | None:
    from .inventory import _timestamp as parse

    return parse(value)


def _image(found: Any, used_by: list[str]) -> PreloadImage:
    from .catalog import LABEL_DIGEST
    from .provision.preload import image_path

    try:
        about = json.loads(found.description or "{}")
    except ValueError:
        about = {}
    about = about if isinstance(about, dict) else {}
    archive = int(found.archive_size_bytes or 0)
    return PreloadImage(
        name=image_path(found),
        image=str(about.get("image", "?")),
        digest=str(about.get("digest") or f"sha256:{found.labels.get(LABEL_DIGEST, '?')}"),
        disk_gb=int(found.disk_size_gb or 0),
        archive_gb=archive / 1e9 if archive else None,
        status=str(found.status),
        created=_timestamp(found.creation_timestamp),
        used_by=tuple(used_by),
    )


def find_shared(project: str, *, apis: Apis | None = None) -> Shared:
    """The preload images and builder leftovers of ``project``, with the node pools that use
    each image (every GKE cluster's, ours or not).

    Raises:
        GCPError: a list call failed.
    """
    from .provision.context import Apis
    from .provision.preload import image_path, pools_using

    apis = apis or Apis.from_env()
    found = apis.images.list_role(project, ROLE_PRELOAD_IMAGE)
    clusters = apis.clusters.list_all(project) if found else []
    images = [_image(i, pools_using(clusters, image_path(i))) for i in sorted(found, key=lambda i: str(i.name))]
    builders = [
        Leftover(kind=kind, name=str(r.self_link or r.name), created=_timestamp(r.creation_timestamp))
        for kind, api in (("compute.v1.Instance", apis.instances), ("compute.v1.Disk", apis.disks))
        for r in api.list_role(project, ROLE_PRELOAD_BUILD)
    ]
    return Shared(project=project, images=tuple(images), builders=tuple(builders))


def _path(link: str) -> str:
    return link[link.index("projects/") :] if "projects/" in link else link


def collect_shared(
    project: str,
    *,
    delete: bool = False,
    preload_images: bool = False,
    older_than: float = PRELOAD_BUILD_TIMEOUT,
    apis: Apis | None = None,
) -> CollectedShared:
    """The builder leftovers older than ``older_than`` seconds and, with ``preload_images``,
    the preload images no node pool boots from; with ``delete``, their deletion. An image in
    use is never deleted (it is listed in ``in_use``).

    Raises:
        GCPError: a call failed.
    """
    from .provision.context import Apis

    apis = apis or Apis.from_env()
    shared = find_shared(project, apis=apis)
    now = time.time()
    builders = tuple(b for b in shared.builders if (b.age_seconds(now) or 0) >= older_than)
    unused = tuple(i for i in shared.images if not i.used_by) if preload_images else ()
    in_use = tuple(i for i in shared.images if i.used_by) if preload_images else ()
    if delete:
        # The VM first: deleting it deletes its attached auto-delete disks too.
        for b in sorted(builders, key=lambda b: b.kind != "compute.v1.Instance"):
            api = apis.instances if b.kind == "compute.v1.Instance" else apis.disks
            logger.info("deleting the preload builder's %s %s", b.kind, b.name)
            api.delete_ours(_path(b.name), role=ROLE_PRELOAD_BUILD)
        for i in unused:
            logger.info("deleting the unused preload image %s", i.name)
            apis.images.delete_ours(i.name, role=ROLE_PRELOAD_IMAGE)
    return CollectedShared(images=unused, builders=builders, deleted=delete, in_use=in_use)


@public("rl_lustre")
@attrs.frozen(kw_only=True)
class WarmStartExport:
    """What a warm-start export (``Cluster.warm_start``) holds, from its manifest.

    Attributes:
        uri: ``gs://BUCKET/PREFIX``.
        exported_at: when the last export finished (UTC, ISO 8601).
        deployment: the deployment that exported it last.
        models: the prefetched models it holds.
        objects: ``(path on the volume, bytes)`` of every exported file.
        secrets_removed: paths that looked like credentials and were deleted from the bucket.
    """

    uri: str
    exported_at: str
    deployment: str
    models: tuple[str, ...]
    objects: tuple[tuple[str, int], ...]
    secrets_removed: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(n for _, n in self.objects)

    def usd_per_month(self, prices: Prices | None = None) -> float:
        """What its Cloud Storage costs a month at the dated list price."""
        from .prices import Prices

        return self.total_bytes / 1e9 * (prices or Prices()).table.gcs_gb_month

    def to_dict(self, prices: Prices | None = None) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "exported_at": self.exported_at,
            "deployment": self.deployment,
            "models": list(self.models),
            "objects": [{"path": p, "bytes": n} for p, n in self.objects],
            "total_bytes": self.total_bytes,
            "secrets_removed": list(self.secrets_removed),
            "usd_per_month": round(self.usd_per_month(prices), 2),
        }


@public("rl_lustre")
def find_warm_start(uri: str, *, storage: BucketObjects | None = None) -> WarmStartExport | None:
    """The export at ``uri`` (``gs://BUCKET/PREFIX``, as ``Cluster.warm_start``), or None
    when nothing was exported there.

    Example::

        export = find_warm_start("gs://my-bucket/qwen72b")
        print(export.exported_at, f"{export.total_bytes / 1e9:.1f} GB", export.models)

    Raises:
        ConfigError: ``uri`` is not a warm-start location, or holds a manifest rl_lustre did not write.
    """
    from .errors import ConfigError
    from .gcp.storage import BucketObjects
    from .plan.warmstart import WarmStart
    from .provision.warmstart import read_manifest
    from .spec.cluster_storage import WARM_START_RULE, is_warm_start

    if not is_warm_start(uri):
        raise ConfigError("find_warm_start", "uri", uri, WARM_START_RULE)
    found = read_manifest(storage or BucketObjects(), WarmStart(uri))
    if found is None:
        return None
    return WarmStartExport(
        uri=uri,
        exported_at=str(found.get("exported_at", "")),
        deployment=str(found.get("deployment", "")),
        models=tuple(found.get("models") or ()),
        objects=tuple((str(o["path"]), int(o["bytes"])) for o in found["objects"]),
        secrets_removed=tuple(found.get("secrets_removed") or ()),
    )
