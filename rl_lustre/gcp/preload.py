"""Building the preload disk image: a container image unpacked onto a disk, made a disk
image that GKE attaches to each GPU node as a secondary boot disk (``CONTAINER_IMAGE_CACHE``).

:func:`ensure_preload_image` finds a READY image of the digest (by its labels) or builds
one, through the Compute API only:

1. ``instances.insert``: a Debian 12 VM with a pd-ssd data disk and our startup script
   (:file:`preload_startup.sh`), which pulls the image (pinned by digest) onto the data disk
   and reports through guest attributes; ``maxRunDuration`` with ``DELETE`` deletes it and
   its disks should this process die;
2. guest attributes ``rl-lustre/status`` polled until ``done`` (or ``failed``: the error,
   with the serial port's tail, secrets scrubbed; a too-small disk is retried once, bigger);
3. ``instances.detachDisk`` of the data disk; ``images.insert`` from it, waited until READY;
4. always, on failure and cancellation too: the VM and its data disk deleted, and an image
   this call inserted but that is not READY.

A 409 on the VM means another ``up()`` builds the same digest now: this one waits for its
image instead. The image is kept: deployments share it; ``rl-lustre gc --preload-images``
collects unused ones.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from importlib import resources
from typing import Any, Literal

import attrs
from google.cloud import compute_v1

from ..catalog import (
    LABEL_CREATED_BY,
    LABEL_DIGEST,
    LABEL_LAYOUT,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    PRELOAD_BOOT_IMAGE,
    PRELOAD_BUILD_TIMEOUT,
    PRELOAD_DATA_DISK_GB,
    PRELOAD_DATA_DISK_TYPE,
    PRELOAD_LAYOUT,
    PRELOAD_MACHINE_TYPE,
    PRELOAD_MAX_RUN_SECONDS,
    ROLE_PRELOAD_BUILD,
    ROLE_PRELOAD_IMAGE,
)
from ..errors import PreloadBuildError, WaitTimeoutError
from ._errors import AlreadyExistsError
from ._wait import Backoff, ProgressCallback, progress_hook, wait_for
from .images import Disks, Images, Instances, digest_label

__all__ = ["Built", "PreloadBuild", "ensure_preload_image", "startup_script"]

log = logging.getLogger("rl_lustre.gcp.preload")

DATA_DEVICE = "rl-lustre-data"
ATTRIBUTES = "rl-lustre/"
# Google documents at most 10 guest-attribute queries a minute; never poll faster than 6 s.
GUEST_BACKOFF = Backoff(initial=6.0, maximum=30.0, multiplier=1.5)
CLEANUP_TIMEOUT = 900.0


def startup_script() -> str:
    """The builder VM's startup script (package data)."""
    return resources.files("rl_lustre.gcp").joinpath("preload_startup.sh").read_text()


@attrs.frozen(kw_only=True)
class PreloadBuild:
    """What to build, and how.

    Attributes:
        project, zone: where the builder VM runs (the deployment's zone) and the image lives.
        subnetwork: the builder VM's subnetwork (the deployment's), a full path.
        image: the image reference as the cluster names it.
        pullable: the reference pinned by digest (``image@sha256:…``), what the VM pulls.
        digest: the image's digest, the preload image's key.
        compressed_bytes: the image's compressed size (from the registry).
        family, name: the disk image's family and name (:func:`rl_lustre.naming.preload_image_name`).
        builder: the temporary VM's name; its data disk is ``<builder>-data``.
        created_by: the deployment whose ``up()`` builds it (a label, not ownership).
        storage_location: where the image is stored (the deployment's region).
        data_disk_gb: the data disk's size.
        timeout: seconds the VM's script may take.
    """

    project: str
    zone: str
    subnetwork: str
    image: str
    pullable: str
    digest: str
    compressed_bytes: int
    family: str
    name: str
    builder: str
    created_by: str
    storage_location: str
    machine_type: str = PRELOAD_MACHINE_TYPE
    boot_image: str = PRELOAD_BOOT_IMAGE
    data_disk_type: str = PRELOAD_DATA_DISK_TYPE
    data_disk_gb: int = PRELOAD_DATA_DISK_GB
    timeout: float = PRELOAD_BUILD_TIMEOUT
    service_account: str = "default"

    @property
    def data_disk(self) -> str:
        return f"{self.builder}-data"

    @property
    def zone_path(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}"

    @property
    def instance_path(self) -> str:
        return f"{self.zone_path}/instances/{self.builder}"

    @property
    def disk_path(self) -> str:
        return f"{self.zone_path}/disks/{self.data_disk}"

    @property
    def image_path(self) -> str:
        return f"projects/{self.project}/global/images/{self.name}"

    def labels(self, role: str) -> dict[str, str]:
        labels = {
            LABEL_MANAGED_BY: MANAGED_BY,
            LABEL_ROLE: role,
            LABEL_DIGEST: digest_label(self.digest),
            LABEL_CREATED_BY: self.created_by,
        }
        if role == ROLE_PRELOAD_IMAGE:
            labels[LABEL_LAYOUT] = PRELOAD_LAYOUT
        return labels

    @property
    def pull_auth(self) -> Literal["none", "google"]:
        from ..registry import google_registry, parse_reference

        return "google" if google_registry(parse_reference(self.pullable).host) else "none"

    def instance_request(self) -> compute_v1.Instance:
        """The builder VM: boot disk and data disk deleted with it, a self-deleting run time."""
        labels = self.labels(ROLE_PRELOAD_BUILD)

        def disk(boot: bool, **init: Any) -> compute_v1.AttachedDisk:
            return compute_v1.AttachedDisk(
                boot=boot,
                auto_delete=True,
                device_name="boot" if boot else DATA_DEVICE,
                initialize_params=compute_v1.AttachedDiskInitializeParams(labels=labels, **init),
            )

        metadata = {
            "startup-script": startup_script(),
            "enable-guest-attributes": "TRUE",
            "rl-lustre-images": self.pullable,
            "rl-lustre-pull-auth": self.pull_auth,
            "rl-lustre-layout": PRELOAD_LAYOUT,
        }
        return compute_v1.Instance(
            name=self.builder,
            machine_type=f"zones/{self.zone}/machineTypes/{self.machine_type}",
            labels=labels,
            disks=[
                disk(
                    True,
                    source_image=self.boot_image,
                    disk_size_gb=20,
                    disk_type=f"zones/{self.zone}/diskTypes/pd-balanced",
                ),
                disk(
                    False,
                    disk_name=self.data_disk,
                    disk_size_gb=self.data_disk_gb,
                    disk_type=f"zones/{self.zone}/diskTypes/{self.data_disk_type}",
                ),
            ],
            network_interfaces=[
                compute_v1.NetworkInterface(
                    subnetwork=self.subnetwork,
                    access_configs=[compute_v1.AccessConfig(type_="ONE_TO_ONE_NAT", name="External NAT")],
                )
            ],
            service_accounts=[
                compute_v1.ServiceAccount(
                    email=self.service_account, scopes=["https://www.googleapis.com/auth/cloud-platform"]
                )
            ],
            scheduling=compute_v1.Scheduling(
                max_run_duration=compute_v1.Duration(seconds=PRELOAD_MAX_RUN_SECONDS),
                instance_termination_action="DELETE",
            ),
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in metadata.items()]),
        )

    def image_request(self, unpacked_bytes: int) -> compute_v1.Image:
        """The disk image, from the detached data disk, stored in the deployment's region."""
        about = {
            "image": self.image,
            "digest": self.digest,
            "compressed_bytes": self.compressed_bytes,
            "unpacked_bytes": unpacked_bytes,
            "by": "rl_lustre",
            "layout": PRELOAD_LAYOUT,
        }
        return compute_v1.Image(
            name=self.name,
            family=self.family,
            source_disk=self.disk_path,
            storage_locations=[self.storage_location],
            labels=self.labels(ROLE_PRELOAD_IMAGE),
            description=json.dumps(about, sort_keys=True),
        )


@attrs.frozen
class Built:
    """The preload image, and how this call got it.

    Attributes:
        image: the READY ``compute_v1.Image``.
        outcome: ``"adopted"`` (found READY, or built by a concurrent ``up()``) or ``"created"``.
        note: what happened, in words.
    """

    image: Any
    outcome: Literal["adopted", "created"]
    note: str


def _status(found: Any) -> str:
    return "ABSENT" if found is None else str(found.status)


class _Attempt:
    """One build: what it created, and its cleanup."""

    def __init__(self, build: PreloadBuild, images: Images, disks: Disks, instances: Instances) -> None:
        self.build, self.images, self.disks, self.instances = build, images, disks, instances
        self.image_sent = False

    def cleanup(self) -> None:
        """Delete the VM, its data disk and a non-READY image of ours; never interrupted by
        the executor's cancellation (an interrupted cleanup would leave them behind)."""
        b = self.build
        with progress_hook(None):
            for what, fn in (
                (
                    "VM",
                    lambda: self.instances.delete_ours(
                        b.instance_path, role=ROLE_PRELOAD_BUILD, timeout=CLEANUP_TIMEOUT
                    ),
                ),
                (
                    "data disk",
                    lambda: self.disks.delete_ours(b.disk_path, role=ROLE_PRELOAD_BUILD, timeout=CLEANUP_TIMEOUT),
                ),
            ):
                try:
                    fn()
                except Exception as exc:  # the next step and gc still get their chance
                    log.warning("could not delete the preload builder's %s (%s); `rl-lustre gc` collects it", what, exc)
            if self.image_sent:
                found = self.images.get_or_none(b.image_path)
                if found is not None and found.status != "READY":
                    self.images.delete_ours(b.image_path, role=ROLE_PRELOAD_IMAGE, timeout=CLEANUP_TIMEOUT)


def _wait_for_image(
    build: PreloadBuild, images: Images, backoff: Backoff | None, progress: ProgressCallback | None, why: str
) -> Any:
    """Wait while another process builds the image; the READY image, or None once it is
    clear nobody will (no image and no builder VM)."""
    instances = Instances(backoff=backoff)

    def poll() -> tuple[Any, Any]:
        found = images.find(build.project, digest=build.digest, layout=PRELOAD_LAYOUT)
        vm = instances.get_or_none(build.instance_path) if found is None or found.status != "READY" else None
        return found, vm

    found, _ = wait_for(
        f"the preload image of {build.pullable} ({why})",
        poll,
        done=lambda r: (r[0] is not None and r[0].status in ("READY", "FAILED")) or (r[0] is None and r[1] is None),
        describe=lambda r: f"image {_status(r[0])}, builder VM {_status(r[1])}",
        timeout=build.timeout,
        backoff=backoff or GUEST_BACKOFF,
        progress=progress,
    )
    return found if found is not None and found.status == "READY" else None


def ensure_preload_image(
    build: PreloadBuild,
    *,
    images: Images,
    disks: Disks,
    instances: Instances,
    backoff: Backoff | None = None,
    progress: ProgressCallback | None = None,
) -> Built:
    """The READY preload image of ``build.digest``: found, or built once.

    Args:
        build: what to build.
        images, disks, instances: the Compute adapters.
        backoff: polling delays (the guest's attributes: no faster than every 6 s unless given).
        progress: called on each poll of the build.

    Raises:
        PreloadBuildError: the VM's script failed, or timed out; nothing of the build is left.
        GCPError: a Compute call failed; nothing of the build is left.
    """
    found = images.find(build.project, digest=build.digest, layout=PRELOAD_LAYOUT)
    if found is not None and found.status == "PENDING":
        log.info("preload image %s is being built by another up(); waiting for it", found.name)
        ready = _wait_for_image(build, images, backoff, progress, "built by another up()")
        if ready is not None:
            return Built(ready, "adopted", f"built by another up(): {ready.name}")
        found = images.find(build.project, digest=build.digest, layout=PRELOAD_LAYOUT)
    if found is not None and found.status == "READY":
        return Built(found, "adopted", f"found {found.name} (built {found.creation_timestamp[:10]})")
    if found is not None:
        log.info("deleting the %s preload image %s before building it again", found.status, found.name)
        images.delete_ours(f"projects/{build.project}/global/images/{found.name}", role=ROLE_PRELOAD_IMAGE)

    for attempt_no in range(2):
        attempt = _Attempt(build, images, disks, instances)
        try:
            try:
                instances.insert(build.instance_request(), parent=build.zone_path)
            except AlreadyExistsError:
                ready = _wait_for_image(build, images, backoff, progress, "another up() is building it")
                if ready is not None:
                    return Built(ready, "adopted", f"built by another up(): {ready.name}")
                raise PreloadBuildError(
                    f"another builder VM {build.instance_path} ended without an image; run up() again"
                ) from None
            attrs_ = _wait_for_guest(build, instances, backoff, progress)
            error = attrs_.get("error", "")
            if attrs_.get("status") != "done":
                if error.startswith("disk too small") and attempt_no == 0:
                    build = attrs.evolve(build, data_disk_gb=_bigger_disk(build.data_disk_gb, error))
                    log.warning(
                        "the preload builder's data disk was too small (%s); retrying with %d GB",
                        error,
                        build.data_disk_gb,
                    )
                    continue
                raise PreloadBuildError(_failure(build, instances, error or "the build script failed"))
            unpacked = int(attrs_.get("unpacked-bytes") or 0)
            instances.detach_disk(build.instance_path, DATA_DEVICE)
            attempt.image_sent = True
            images.insert(build.image_request(unpacked), parent=f"projects/{build.project}/global")
            image = wait_for(
                f"preload image {build.name} to be READY",
                functools.partial(images.get_or_none, build.image_path),
                done=lambda i: i is None or i.status in ("READY", "FAILED"),
                describe=_status,
                timeout=build.timeout,
                backoff=backoff,
                progress=progress,
            )
            if image is None or image.status != "READY":
                raise PreloadBuildError(f"Compute could not make disk image {build.image_path}: {_status(image)}")
            return Built(image, "created", f"built {image.name} ({unpacked / 1e9:.1f} GB unpacked)")
        finally:
            attempt.cleanup()
    raise AssertionError("unreachable: the second attempt returns or raises")  # pragma: no cover


def _wait_for_guest(
    build: PreloadBuild, instances: Instances, backoff: Backoff | None, progress: ProgressCallback | None
) -> dict[str, str]:
    try:
        return wait_for(
            f"the preload builder to unpack {build.pullable}",
            lambda: instances.guest_attributes(build.instance_path, ATTRIBUTES) or {},
            done=lambda a: a.get("status") in ("done", "failed"),
            describe=lambda a: a.get("progress") or a.get("status") or "booting",
            timeout=build.timeout,
            backoff=backoff or GUEST_BACKOFF,
            progress=progress,
        )
    except WaitTimeoutError as exc:
        raise PreloadBuildError(
            _failure(build, instances, f"no result after {build.timeout:.0f} s ({exc.last_state})"),
        ) from exc


def _failure(build: PreloadBuild, instances: Instances, error: str) -> str:
    from .._secrets import redact

    tail = redact(instances.serial_tail(build.instance_path, 4096)).strip()
    shown = "\n".join(tail.splitlines()[-20:])
    return (
        f"building the preload image of {build.pullable} failed: {redact(error)}"
        + (f"\nthe builder VM's serial port ended with:\n{shown}" if shown else "")
        + "\nCluster(preload_image=False) deploys without it (the image is then pulled on each node)"
    )


def _bigger_disk(current_gb: int, error: str) -> int:
    """A data disk for a retry: twice as big, and half again what was unpacked when it filled."""
    import re

    m = re.search(r"unpacked (\d+) bytes", error)
    needed = int(m.group(1)) * 1.5 / 1e9 if m else 0
    return int(max(2 * current_gb, math.ceil(needed / 10) * 10))
