"""Compute disk images, disks and VM instances: what building a preload disk image needs.

Unlike the networking resources of :mod:`rl_lustre.gcp.compute`, these carry real
``labels``, and what they mark is not a deployment's: a preload image is shared by every
deployment of its image digest (``rl-lustre-role=preload-image``), and the builder VM and
its data disk are temporary (``rl-lustre-role=preload-build``). So each adapter finds,
inserts and deletes by labels and role:

- :class:`Images` (global): ``find`` the READY image of a digest and layout, ``insert``,
  ``delete_ours``, ``list_role``.
- :class:`Disks` and :class:`Instances` (zonal): ``insert``, ``delete_ours``,
  ``list_role`` (every zone); an instance's ``detach_disk``, its ``guest_attributes``
  (404 until the guest writes one) and the tail of its serial port.

Examples:
    >>> Images().find("my-project", digest="ab" * 32, layout="v1")  # doctest: +SKIP
    >>> labels_filter({"managed-by": "rl-lustre", "rl-lustre-role": "preload-image"})
    '(labels.managed-by = "rl-lustre") (labels.rl-lustre-role = "preload-image")'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.cloud import compute_v1

from ..catalog import (
    LABEL_DIGEST,
    LABEL_LAYOUT,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    ROLE_PRELOAD_IMAGE,
)
from ..errors import GCPError, NotFoundError, OwnershipError
from ._wait import ProgressCallback
from .compute import TIMEOUT, _ComputeResource

__all__ = ["Disks", "Images", "Instances", "digest_label", "labels_filter"]


def labels_filter(labels: Mapping[str, str]) -> str:
    """A Compute list filter selecting resources that carry all of ``labels``."""
    return " ".join(f'(labels.{k} = "{v}")' for k, v in labels.items())


def digest_label(digest: str) -> str:
    """A label value for an image digest: its hex, cut to the 63 characters a label holds.

    Examples:
        >>> len(digest_label("sha256:" + "a" * 64))
        63
    """
    return digest.removeprefix("sha256:")[:63]


class _Labelled(_ComputeResource):
    """A Compute resource whose ownership is in its ``labels``, by role."""

    def _labels_of(self, found: Any) -> Mapping[str, str]:
        return dict(found.labels)

    def list_role(self, project: str, role: str, extra: Mapping[str, str] | None = None) -> list[Any]:
        """Every resource of this kind in ``project`` labelled ours with ``role`` (and ``extra``)."""
        wanted = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ROLE: role, **(extra or {})}
        return [
            r
            for r in self._list(project, labels_filter(wanted))
            if all(r.labels.get(k) == v for k, v in wanted.items())
        ]

    def insert(
        self, body: Any, *, parent: str, timeout: float = TIMEOUT, progress: ProgressCallback | None = None
    ) -> Any:
        """Insert ``body`` under ``parent`` and wait for its operation; returns the resource.

        Raises:
            AlreadyExistsError: one of that name exists (a concurrent build, say).
            OperationFailedError: the operation failed.
        """
        name = f"{parent}/{self.collection}/{body.name}"
        m = self._split(name)
        self._log.info("creating %s %s", self.kind, name)
        op = self._call(
            "create",
            name,
            self.client.insert_unary,
            request={**self._keys(m), f"{self.field}_resource": body},
            retry=None,
        )
        self.wait_operation(op, name=name, action="create", timeout=timeout, progress=progress)
        found = self.get_or_none(name)
        if found is None:
            raise NotFoundError(f"{self.api}: {self.kind} {name} was created but cannot be read")
        return found

    def delete_ours(self, name: str, *, role: str, wait: bool = True, timeout: float = TIMEOUT) -> bool:
        """Delete ``name`` if it exists and is labelled ours with ``role``.

        Returns:
            True if deleted (or, without ``wait``, deletion started); False if it was not there.

        Raises:
            OwnershipError: it exists without those labels; it is left alone.
        """
        found = self.get_or_none(name)
        if found is None:
            return False
        labels = self._labels_of(found)
        if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or labels.get(LABEL_ROLE) != role:
            raise OwnershipError(
                f"{self.kind} {name} is not an rl_lustre {role} (its labels: {dict(labels)}); "
                "rl_lustre never deletes it"
            )
        self._log.info("deleting %s %s", self.kind, name)
        m = self._split(name)
        try:
            op = self._call(
                "delete", name, self.client.delete_unary, request={**self._keys(m), self.field: m["name"]}, retry=None
            )
        except NotFoundError:
            return False
        if wait:
            self.wait_operation(op, name=name, action="delete", timeout=timeout)
        return True


class Images(_Labelled):
    """Disk images (``compute_v1.ImagesClient``): the preload images.

    Example::

        Images().find("my-project", digest="sha256:…", layout="v1")
    """

    title = "disk image"
    client_cls = compute_v1.ImagesClient
    field = "image"
    collection = "images"

    def find(self, project: str, *, digest: str, layout: str) -> Any:
        """Our preload image of ``digest`` built with ``layout``: a READY one if any, else
        one still being built (PENDING), else a FAILED one (for its builder to clear), else None."""
        found = self.list_role(project, ROLE_PRELOAD_IMAGE, {LABEL_DIGEST: digest_label(digest), LABEL_LAYOUT: layout})
        rank = {"READY": 0, "PENDING": 1}
        found.sort(key=lambda image: (rank.get(image.status, 2), image.name))
        return found[0] if found else None


class Disks(_Labelled):
    """Zonal persistent disks (``compute_v1.DisksClient``): the builder's data disk."""

    title = "disk"
    client_cls = compute_v1.DisksClient
    field = "disk"
    collection = "disks"
    scope = "zones"


class Instances(_Labelled):
    """VM instances (``compute_v1.InstancesClient``): the builder VM."""

    title = "VM instance"
    client_cls = compute_v1.InstancesClient
    field = "instance"
    collection = "instances"
    scope = "zones"

    def detach_disk(self, name: str, device_name: str, *, timeout: float = TIMEOUT) -> None:
        """Detach the disk attached as ``device_name`` and wait (a detached disk is no longer
        deleted with the instance)."""
        m = self._split(name)
        op = self._call(
            "detach a disk from",
            name,
            self.client.detach_disk_unary,
            request={**self._keys(m), "instance": m["name"], "device_name": device_name},
            retry=None,
        )
        self.wait_operation(op, name=name, action="detach its disk", timeout=timeout)

    def guest_attributes(self, name: str, query_path: str) -> dict[str, str] | None:
        """The guest attributes under ``query_path`` (``"rl-lustre/"``) as key → value, or
        None while the guest has written none (the API answers 404 until then)."""
        m = self._split(name)
        try:
            found = self._call(
                "read the guest attributes of",
                name,
                self.client.get_guest_attributes,
                request={**self._keys(m), "instance": m["name"], "query_path": query_path},
                retry=None,
            )
        except NotFoundError:
            return None
        return {item.key: item.value for item in found.query_value.items}

    def serial_tail(self, name: str, size: int = 4096) -> str:
        """The last ``size`` characters of serial port 1 ("" when it cannot be read)."""
        m = self._split(name)
        try:
            found = self._call(
                "read the serial port of",
                name,
                self.client.get_serial_port_output,
                request={**self._keys(m), "instance": m["name"], "port": 1},
                retry=None,
            )
        except GCPError:  # best effort: it only adds detail to an error
            return ""
        return str(found.contents)[-size:]
