"""The fake Compute Engine images, disks and VM instances (REST), and the preload builder's
guest: what building a preload disk image touches, as ``compute.v1`` answers it.

- Images: ``insert`` from a source disk that no instance uses (PENDING, then READY after
  ``compute.create_image``; FAILED when an operation fault is injected), ``get``, ``list``
  with label filters, ``delete``.
- Disks: created with an instance (``initializeParams``), ``get``, ``delete`` (refused while
  attached), ``aggregatedList``.
- Instances: ``insert`` (PROVISIONING, RUNNING after ``compute.create_instance``),
  ``get``, ``delete`` (with the disks still attached that ``autoDelete``), ``detachDisk``,
  ``getGuestAttributes`` (404 until the guest writes one), ``getSerialPortOutput``,
  ``aggregatedList``; zone operations.

The guest: an instance whose metadata names ``rl-lustre-images`` runs the preload builder's
startup script, simulated — after ``compute.preload_boot`` plus
``compute.preload_unpack_per_gb`` per GB of the images' compressed layers (read from the
registry fake), it writes the guest attributes ``rl-lustre/status`` (``running``, then
``done`` or ``failed``), ``progress``, ``unpacked-bytes`` and ``error``, and records what
the data disk now holds (fake-internal, copied into the image made from it). Knobs:
:class:`PreloadKnobs` (``FakeGCP.preload``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs

from ._compute import ComputeFake, Handler, _now
from ._core import Core, FakeError
from ._filters import compute_filter

__all__ = ["ComputeVmFake", "PreloadKnobs"]

_DISK_URL = re.compile(r"(?:.*/)?projects/([^/]+)/zones/([^/]+)/disks/([^/]+)$")
_DATA_DEVICE = "rl-lustre-data"


@attrs.define
class PreloadKnobs:
    """How the simulated builder guest behaves.

    Attributes:
        script_failure: the guest reports ``status=failed`` with this ``error`` instead of finishing.
        hang: the guest never finishes (the builder's timeout is then what ends it).
        unpack_ratio: unpacked bytes per compressed byte (NGC images unpack to ~2.4x).
    """

    script_failure: str | None = None
    hang: bool = False
    unpack_ratio: float = 2.4


class ComputeVmFake:
    """Images, disks, instances and the builder guest, on the shared :class:`Core`.

    Args:
        core: the fakes' shared state.
        compute: the networking fake (operations and self links are shared with it).
        image_bytes: the compressed size of a pullable image reference, or None if the
            registry does not have it.
    """

    def __init__(self, core: Core, compute: ComputeFake, image_bytes: Callable[[str], int | None]) -> None:
        self.core = core
        self.compute = compute
        self.image_bytes = image_bytes
        self.knobs = PreloadKnobs()
        self._attributes: dict[tuple[str, str, str], dict[str, str]] = {}
        self._serial: dict[tuple[str, str, str], str] = {}

    def routes(self) -> list[tuple[str, str, str, Handler]]:
        p = "/compute/v1/projects/(?P<project>[^/]+)"
        z = p + "/zones/(?P<zone>[^/]+)"
        return [
            ("POST", p + "/global/images", "compute.images.insert", self.image_insert),
            ("GET", p + "/global/images", "compute.images.list", self.image_list),
            ("GET", p + "/global/images/(?P<name>[^/]+)", "compute.images.get", self.image_get),
            ("DELETE", p + "/global/images/(?P<name>[^/]+)", "compute.images.delete", self.image_delete),
            ("GET", z + "/disks/(?P<name>[^/]+)", "compute.disks.get", self.disk_get),
            ("DELETE", z + "/disks/(?P<name>[^/]+)", "compute.disks.delete", self.disk_delete),
            ("GET", p + "/aggregated/disks", "compute.disks.aggregatedList", self.disk_aggregated_list),
            ("POST", z + "/instances", "compute.instances.insert", self.instance_insert),
            ("GET", z + "/instances/(?P<name>[^/]+)", "compute.instances.get", self.instance_get),
            ("DELETE", z + "/instances/(?P<name>[^/]+)", "compute.instances.delete", self.instance_delete),
            ("POST", z + "/instances/(?P<name>[^/]+)/detachDisk", "compute.instances.detachDisk", self.detach_disk),
            (
                "GET",
                z + "/instances/(?P<name>[^/]+)/getGuestAttributes",
                "compute.instances.getGuestAttributes",
                self.guest_attributes,
            ),
            (
                "GET",
                z + "/instances/(?P<name>[^/]+)/serialPort",
                "compute.instances.getSerialPortOutput",
                self.serial_port,
            ),
            ("GET", p + "/aggregated/instances", "compute.instances.aggregatedList", self.instance_aggregated_list),
            ("GET", z + "/operations/(?P<name>[^/]+)", "compute.zoneOperations.get", self.compute.operation_get),
        ]

    def _link(self, path: str) -> str:
        return self.compute._link(path)

    @staticmethod
    def _labels(body: dict[str, Any], where: str) -> dict[str, str]:
        labels = body.get("labels") or {}
        bad = [
            k
            for k, v in labels.items()
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", k) or not re.fullmatch(r"[a-z0-9_-]{0,63}", v)
        ]
        if bad or len(labels) > 64:
            raise FakeError(400, f"Invalid value for field '{where}.labels': {bad or len(labels)}", "invalid")
        return dict(labels)

    # images

    def image_insert(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        name = self.compute._check_name(b)
        project = p["project"]
        path = f"projects/{project}/global/images/{name}"
        if (project, name) in self.core.images:
            raise FakeError(409, f"The resource '{path}' already exists", "alreadyExists")
        m = _DISK_URL.match(b.get("sourceDisk") or "")
        if m is None:
            raise FakeError(400, "Invalid value for field 'resource.sourceDisk': a disk is required", "invalid")
        disk = self.core.disks.get((m[1], m[2], m[3]))
        disk_path = f"projects/{m[1]}/zones/{m[2]}/disks/{m[3]}"
        if disk is None:
            raise FakeError(404, f"The resource '{disk_path}' was not found", "notFound")
        if disk.get("users"):
            raise FakeError(
                400,
                f"The disk resource '{disk_path}' is already being used by '{disk['users'][0]}'",
                "resourceInUseByAnotherResource",
            )
        held = dict(self.core.contents.get(disk_path, {}))
        image = {
            **b,
            "labels": self._labels(b, "resource"),
            "kind": "compute#image",
            "id": str(self.core.next_id()),
            "selfLink": self._link(path),
            "creationTimestamp": _now(),
            "status": "PENDING",
            "sourceDisk": self._link(disk_path),
            "sourceType": "RAW",
            "diskSizeGb": disk["sizeGb"],
            "archiveSizeBytes": str(int(held.get("unpacked_bytes", 0))),
        }
        self.core.images[(project, name)] = image

        def ready() -> None:
            image["status"] = "READY"
            self.core.contents[path] = held

        def failed() -> None:
            image["status"] = "FAILED"

        return self.compute._compute_op(
            project, None, "insert", path, "compute.images.insert", "compute.create_image", ready, on_failure=failed
        )

    def image_get(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key = (p["project"], p["name"])
        return self.compute._get(self.core.images, key, f"projects/{key[0]}/global/images/{key[1]}")

    def image_list(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        return self.compute._list(self.core.images, p["project"], "image", q)

    def image_delete(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key = (p["project"], p["name"])
        path = f"projects/{key[0]}/global/images/{key[1]}"
        self.compute._get(self.core.images, key, path)
        self.core.images[key]["status"] = "DELETING"

        def remove() -> None:
            self.core.images.pop(key, None)
            self.core.contents.pop(path, None)

        return self.compute._compute_op(
            key[0], None, "delete", path, "compute.images.delete", "compute.delete_image", remove
        )

    # disks

    def disk_get(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key = (p["project"], p["zone"], p["name"])
        return self.compute._get(self.core.disks, key, f"projects/{key[0]}/zones/{key[1]}/disks/{key[2]}")

    def disk_delete(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key = (p["project"], p["zone"], p["name"])
        path = f"projects/{key[0]}/zones/{key[1]}/disks/{key[2]}"
        disk = self.compute._get(self.core.disks, key, path)
        if disk.get("users"):
            raise FakeError(
                400,
                f"The disk resource '{path}' is already being used by '{disk['users'][0]}'",
                "resourceInUseByAnotherResource",
            )

        def remove() -> None:
            self.core.disks.pop(key, None)
            self.core.contents.pop(path, None)

        return self.compute._compute_op(
            key[0], None, "delete", path, "compute.disks.delete", "compute.delete_disk", remove, zone=key[1]
        )

    def _aggregated(
        self, table: dict[tuple[str, str, str], dict[str, Any]], project: str, field: str, q: dict[str, str]
    ) -> Any:
        wanted = compute_filter(q.get("filter", ""))
        items: dict[str, dict[str, Any]] = {}
        for (proj, zone, _), value in sorted(table.items()):
            if proj == project and wanted(value):
                items.setdefault(f"zones/{zone}", {field: []})[field].append(dict(value))
        return {
            "kind": f"compute#{field[:-1]}AggregatedList",
            "id": f"projects/{project}/aggregated/{field}",
            "items": items,
            "selfLink": self._link(f"projects/{project}/aggregated/{field}"),
        }

    def disk_aggregated_list(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        return self._aggregated(self.core.disks, p["project"], "disks", q)

    # instances

    def instance_insert(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        name = self.compute._check_name(b)
        project, zone = p["project"], p["zone"]
        key = (project, zone, name)
        path = f"projects/{project}/zones/{zone}/instances/{name}"
        if key in self.core.instances:
            raise FakeError(409, f"The resource '{path}' already exists", "alreadyExists")
        labels = self._labels(b, "resource")
        attached, made = [], []
        for i, spec in enumerate(b.get("disks") or []):
            init = spec.get("initializeParams") or {}
            disk_name = init.get("diskName") or (name if spec.get("boot") else f"{name}-{i}")
            disk_key = (project, zone, disk_name)
            disk_path = f"projects/{project}/zones/{zone}/disks/{disk_name}"
            if disk_key in self.core.disks:
                raise FakeError(409, f"The resource '{disk_path}' already exists", "alreadyExists")
            made.append(
                (
                    disk_key,
                    {
                        "kind": "compute#disk",
                        "id": str(self.core.next_id()),
                        "name": disk_name,
                        "sizeGb": str(init.get("diskSizeGb") or "10"),
                        "type": self._link(init.get("diskType") or f"zones/{zone}/diskTypes/pd-standard"),
                        "zone": self._link(f"projects/{project}/zones/{zone}"),
                        "status": "READY",
                        "labels": self._labels(init, f"resource.disks[{i}].initializeParams"),
                        "sourceImage": init.get("sourceImage", ""),
                        "selfLink": self._link(disk_path),
                        "creationTimestamp": _now(),
                        "users": [self._link(path)],
                    },
                )
            )
            attached.append(
                {
                    "kind": "compute#attachedDisk",
                    "index": i,
                    "type": "PERSISTENT",
                    "mode": "READ_WRITE",
                    "boot": bool(spec.get("boot")),
                    "autoDelete": bool(spec.get("autoDelete")),
                    "deviceName": spec.get("deviceName") or disk_name,
                    "source": self._link(disk_path),
                }
            )
        instance = {
            **b,
            "labels": labels,
            "kind": "compute#instance",
            "id": str(self.core.next_id()),
            "status": "PROVISIONING",
            "zone": self._link(f"projects/{project}/zones/{zone}"),
            "disks": attached,
            "selfLink": self._link(path),
            "creationTimestamp": _now(),
        }
        self.core.instances[key] = instance
        for disk_key, disk in made:
            self.core.disks[disk_key] = disk

        def running() -> None:
            if key in self.core.instances:
                instance["status"] = "RUNNING"
                self._serial[key] = f"{_now()} Booting {name}\n"
                self._start_guest(key, instance)

        return self.compute._compute_op(
            project, None, "insert", path, "compute.instances.insert", "compute.create_instance", running, zone=zone
        )

    def _instance(self, p: dict[str, str]) -> tuple[tuple[str, str, str], dict[str, Any], str]:
        key = (p["project"], p["zone"], p["name"])
        path = f"projects/{key[0]}/zones/{key[1]}/instances/{key[2]}"
        found = self.core.instances.get(key)
        if found is None:
            raise FakeError(404, f"The resource '{path}' was not found", "notFound")
        return key, found, path

    def instance_get(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        return dict(self._instance(p)[1])

    def instance_aggregated_list(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        return self._aggregated(self.core.instances, p["project"], "instances", q)

    def instance_delete(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key, instance, path = self._instance(p)
        instance["status"] = "STOPPING"

        def remove() -> None:
            self.core.instances.pop(key, None)
            self._attributes.pop(key, None)
            self._serial.pop(key, None)
            for disk in instance["disks"]:
                m = _DISK_URL.match(disk["source"])
                assert m is not None
                disk_key = (m[1], m[2], m[3])
                if disk_key in self.core.disks:
                    self.core.disks[disk_key]["users"] = []
                    if disk["autoDelete"]:
                        self.core.disks.pop(disk_key, None)
                        self.core.contents.pop(f"projects/{m[1]}/zones/{m[2]}/disks/{m[3]}", None)

        return self.compute._compute_op(
            key[0], None, "delete", path, "compute.instances.delete", "compute.delete_instance", remove, zone=key[1]
        )

    def detach_disk(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key, instance, path = self._instance(p)
        device = q.get("deviceName", "")
        disk = next((d for d in instance["disks"] if d["deviceName"] == device), None)
        if disk is None:
            raise FakeError(400, f"Invalid value for field 'deviceName': {device!r}: no such disk attached", "invalid")

        def detach() -> None:
            instance["disks"] = [d for d in instance["disks"] if d is not disk]
            m = _DISK_URL.match(disk["source"])
            assert m is not None
            if (m[1], m[2], m[3]) in self.core.disks:
                self.core.disks[(m[1], m[2], m[3])]["users"] = []

        return self.compute._compute_op(
            key[0], None, "detachDisk", path, "compute.instances.detachDisk", "compute.detach_disk", detach, zone=key[1]
        )

    def guest_attributes(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key, _, path = self._instance(p)
        query = q.get("queryPath", "")
        namespace = query.rstrip("/")
        found = {k: v for k, v in self._attributes.get(key, {}).items() if k.startswith(f"{namespace}/")}
        if not found:
            raise FakeError(404, f"The resource 'guestAttributes/{query}' of '{path}' was not found", "notFound")
        return {
            "kind": "compute#guestAttributes",
            "queryPath": query,
            "selfLink": self._link(path),
            "queryValue": {
                "items": [
                    {"namespace": k.split("/", 1)[0], "key": k.split("/", 1)[1], "value": v}
                    for k, v in sorted(found.items())
                ]
            },
        }

    def serial_port(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key, _, path = self._instance(p)
        text = self._serial.get(key, "")
        start = min(int(q.get("start") or 0), len(text))
        return {
            "kind": "compute#serialPortOutput",
            "contents": text[start:],
            "start": str(start),
            "next": str(len(text)),
            "selfLink": self._link(f"{path}/serialPort"),
        }

    # the builder's guest

    def _start_guest(self, key: tuple[str, str, str], instance: dict[str, Any]) -> None:
        meta = {i.get("key"): i.get("value") for i in (instance.get("metadata") or {}).get("items") or []}
        refs = (meta.get("rl-lustre-images") or "").split()
        if not refs or "startup-script" not in meta:
            return
        enabled = str(meta.get("enable-guest-attributes", "")).upper() == "TRUE"
        attrs_: dict[str, str] = {}

        def put(**values: str) -> None:
            attrs_.update({f"rl-lustre/{k.replace('_', '-')}": v for k, v in values.items()})
            if enabled:
                self._attributes[key] = dict(attrs_)
            self._serial[key] = self._serial.get(key, "") + "".join(
                f"rl-lustre: {k.replace('_', '-')}={v}\n" for k, v in values.items()
            )

        sizes = [self.image_bytes(r) for r in refs]
        compressed = sum(s or 0 for s in sizes)
        put(status="running", progress=f"0.0 of {compressed / 1e9:.1f} GB")
        took = self.core.delay("compute.preload_boot") + compressed / 1e9 * self.core.delay(
            "compute.preload_unpack_per_gb"
        )

        def finish() -> None:
            if key not in self.core.instances or self.knobs.hang:
                return
            missing = [r for r, s in zip(refs, sizes, strict=True) if s is None]
            data = next((d for d in instance["disks"] if d["deviceName"] == _DATA_DEVICE), None)
            unpacked = int(compressed * self.knobs.unpack_ratio)
            if self.knobs.script_failure is not None:
                put(status="failed", error=self.knobs.script_failure)
            elif missing:
                put(status="failed", error=f"ctr: failed to resolve reference {missing[0]!r}: not found")
            elif data is None:
                put(status="failed", error=f"no disk /dev/disk/by-id/google-{_DATA_DEVICE}")
            else:
                m = _DISK_URL.match(data["source"])
                assert m is not None
                capacity = int(self.core.disks[(m[1], m[2], m[3])]["sizeGb"]) * 10**9
                if unpacked > capacity:
                    put(status="failed", error=f"disk too small: unpacked {unpacked} bytes > {capacity}")
                    return
                self.core.contents[f"projects/{m[1]}/zones/{m[2]}/disks/{m[3]}"] = {
                    "images": refs,
                    "layout": meta.get("rl-lustre-layout", ""),
                    "unpacked_bytes": unpacked,
                }
                put(
                    progress=f"{compressed / 1e9:.1f} of {compressed / 1e9:.1f} GB",
                    unpacked_bytes=str(unpacked),
                    status="done",
                )

        self.core.schedule(took, finish)
