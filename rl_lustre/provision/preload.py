"""The driver of the ``preload-image`` node: the disk image the GPU nodes boot with.

``ensure``: with your image (``"use"``), check that it exists and is READY; otherwise ask
the registry for the image's digest and find our READY disk image of it, or build it once
(:func:`rl_lustre.gcp.preload.ensure_preload_image`). The image it returns is what every
GPU pool names as its secondary boot disk.

``delete`` runs only when asked (``down(delete_preload_image=True)``): our images of this
family go unless a node pool of any GKE cluster in the project still boots from one (then
``"kept"``, saying which).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

from ..catalog import PRELOAD_LAYOUT, ROLE_PRELOAD_IMAGE
from ..errors import NotFoundError
from ..plankeys import SUBNET_KEY
from .context import Context
from .step import Done, Step

if TYPE_CHECKING:
    from ..gcp.preload import PreloadBuild

__all__ = ["PreloadImageDriver", "image_path", "pools_using"]

log = logging.getLogger("rl_lustre.provision")


def image_path(image: Any) -> str:
    """``projects/P/global/images/NAME`` of a ``compute_v1.Image``."""
    link = str(image.self_link)
    return link[link.index("projects/") :] if "projects/" in link else str(image.name)


def pools_using(clusters: list[Any], path: str) -> list[str]:
    """``cluster/pool`` of every node pool whose secondary boot disk is the image ``path``."""
    name = path.rsplit("/", 1)[-1]
    return [
        f"{c.name}/{p.name}"
        for c in clusters
        for p in c.node_pools
        if any(d.disk_image == path or d.disk_image.endswith(f"/images/{name}") for d in p.config.secondary_boot_disks)
    ]


class PreloadImageDriver:
    """Finds, builds, checks or (when asked) deletes the preload disk image."""

    deleted_with: str | None = None
    # The build's waits may stop when up() is cancelled; its own cleanup still runs.
    interruptible = True

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def _build(self) -> PreloadBuild:
        from .. import naming, registry
        from ..gcp.preload import PreloadBuild

        cluster, plan = self.ctx.cluster, self.ctx.plan
        resolved = registry.resolve(cluster.image)
        subnet = plan.get(SUBNET_KEY).name
        return PreloadBuild(
            project=self.ctx.project,
            zone=str(cluster.zone),
            subnetwork=f"projects/{self.ctx.project}/regions/{self.ctx.region}/subnetworks/{subnet}",
            image=cluster.image,
            pullable=resolved.pullable,
            digest=resolved.digest,
            compressed_bytes=resolved.compressed_bytes,
            family=naming.preload_family(cluster.image),
            name=naming.preload_image_name(cluster.image, resolved.digest),
            builder=naming.preload_builder_name(resolved.digest),
            created_by=self.ctx.deployment,
            storage_location=self.ctx.region,
        )

    def ensure(self, step: Step) -> Done:
        from ..gcp.preload import ensure_preload_image

        apis = self.ctx.apis
        if step.node.action == "use":
            found = apis.images.get_or_none(step.node.name)
            if found is None:
                raise NotFoundError(
                    f"Cluster.preload_image={step.node.name!r}: no such disk image (or no access "
                    "to it); build it first, or use preload_image=True to let rl_lustre build one"
                )
            if found.status != "READY":
                raise NotFoundError(f"Cluster.preload_image={step.node.name!r} is {found.status}, not READY")
            return Done("used", found, note="your image, used as it is")
        build = self._build()
        built = ensure_preload_image(
            build, images=apis.images, disks=apis.disks, instances=apis.instances, backoff=self.ctx.backoff
        )
        return Done(built.outcome, built.image, note=built.note)

    def delete(self, step: Step) -> Literal["deleted", "absent", "kept"]:
        from ..catalog import LABEL_LAYOUT

        apis = self.ctx.apis
        ours = [
            i
            for i in apis.images.list_role(self.ctx.project, ROLE_PRELOAD_IMAGE, {LABEL_LAYOUT: PRELOAD_LAYOUT})
            if i.family == step.node.name
        ]
        if not ours:
            return "absent"
        clusters = apis.clusters.list_all(self.ctx.project)
        kept, deleted = [], 0
        for image in ours:
            path = image_path(image)
            users = pools_using(clusters, path)
            if users:
                kept.append(f"{image.name} (node pool {', '.join(users)} boots from it)")
                continue
            apis.images.delete_ours(path, role=ROLE_PRELOAD_IMAGE)
            deleted += 1
        if kept:
            step.record.note = "kept: still in use: " + "; ".join(kept)
            log.warning("preload image %s", step.record.note)
            return "kept"
        return "deleted" if deleted else "absent"
