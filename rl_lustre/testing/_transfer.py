"""One ImportData or ExportData of the fake Managed Lustre, copying real bytes over time.

A transfer lists what it has to move when its latency (``lustre.import_data`` /
``lustre.export_data``) has passed, then copies file after file, each at the moment the
rate allows (``lustre.transfer_per_gb`` seconds per GB), updating the operation's counters
as it goes: a client polling the operation sees the bytes grow. It is incremental, as the
real service: a file whose object is already there with its size and is newer than the file
is skipped. An injected operation fault stops it half-way (what was copied stays copied);
deleting the instance aborts it. It runs as Managed Lustre's service agent, which the
bucket's policy must let read (import) or write (export).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import grpc
from google.cloud import lustre_v1

from ..catalog import LUSTRE_SERVICE_AGENT
from ._core import FakeError, project_number
from ._storage import can_write, put_object

if TYPE_CHECKING:
    from google.longrunning import operations_pb2

    from ._lustre import LustreFake

__all__ = ["Transfer"]


class Transfer:
    """The state of one transfer operation (the fake's lock is held in every method)."""

    def __init__(
        self,
        lustre: LustreFake,
        op: operations_pb2.Operation,
        inst: Any,
        kind: str,
        bucket: str,
        prefix: str,
        directory: str,
        transfer: Any,
        fault: FakeError | None,
    ) -> None:
        self.lustre, self.core = lustre, lustre.core
        self.op, self.inst, self.kind = op, inst, kind
        self.bucket, self.prefix, self.directory = bucket, prefix, directory
        self.transfer, self.fault = transfer, fault
        self.counters = lustre_v1.TransferCounters()
        self.name = inst.name
        self.items: list[tuple[str, str, int]] = []

    def schedule(self, latency: float) -> None:
        self.core.schedule(latency, self._begin)

    def _fail(self, error: FakeError) -> None:
        self._publish()
        self.lustre._finish(self.op, error=error)

    def _gone(self) -> bool:
        if self.core.lustre.get(self.name) is not self.inst:
            self._fail(FakeError(grpc.StatusCode.ABORTED, f"instance {self.name} was deleted"))
            return True
        return False

    def _begin(self) -> None:
        if self.op.done or self._gone():
            return
        objects = self.core.buckets.get(self.bucket)
        if objects is None:
            self._fail(FakeError(grpc.StatusCode.NOT_FOUND, f"bucket {self.bucket} does not exist"))
            return
        project = self.name.split("/")[1]
        if not can_write(self.core, self.bucket, project, write=self.kind == "export"):
            agent = LUSTRE_SERVICE_AGENT.format(number=project_number(project))
            verb = "write to" if self.kind == "export" else "read"
            self._fail(
                FakeError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"the Managed Lustre service agent {agent} may not {verb} bucket {self.bucket}: grant it "
                    "roles/storage.objectUser on the bucket",
                )
            )
            return
        root = self.core.files.instance_dir(self.name)
        under = f"{self.directory}/" if self.directory else ""
        head = f"{self.prefix}/" if self.prefix else ""
        if self.kind == "import":
            self.items = [
                (n, under + n[len(head) :], o["size"])
                for n, o in sorted(objects.items())
                if n.startswith(head) and not n.endswith("/")
            ]
        else:
            from ._files import relative_files

            top = root / self.directory
            if not top.is_dir():
                self._fail(FakeError(grpc.StatusCode.NOT_FOUND, f"lustre_path /{self.directory} does not exist"))
                return
            self.items = [(p, head + p[len(under) :], size) for p, size in relative_files(root, self.directory).items()]
        # A fault stops half-way: what was copied stays copied, as on the real service.
        stop = len(self.items) // 2 if self.fault is not None else len(self.items)
        per_gb = self.core.delay("lustre.transfer_per_gb")
        at = 0.0
        for i, (_src, _dst, size) in enumerate(self.items[:stop]):
            at += size / 1e9 * per_gb
            self.core.schedule(at, functools.partial(self._copy, i))
        self.core.schedule(at, self._end)

    def _copy(self, i: int) -> None:
        if self.op.done or self._gone():
            return
        src, dst, size = self.items[i]
        c = self.counters
        c.found_objects_count += 1
        c.bytes_found_count += size
        root = self.core.files.instance_dir(self.name)
        if self.kind == "import":
            obj = self.core.buckets[self.bucket].get(src)
            target = root / dst
            if obj is None:
                c.objects_failed_count += 1
            elif target.is_file() and target.stat().st_size == obj["size"] and target.stat().st_mtime >= obj["updated"]:
                c.objects_skipped_count += 1
                c.bytes_skipped_count += size
            else:
                from ._files import copy_sparse

                copy_sparse(obj["blob"], target)
                c.objects_copied_count += 1
                c.bytes_copied_count += size
        else:
            source = root / src
            have = self.core.buckets[self.bucket].get(dst)
            if not source.is_file():
                c.objects_failed_count += 1
            elif have is not None and have["size"] == size and have["updated"] >= source.stat().st_mtime:
                c.objects_skipped_count += 1
                c.bytes_skipped_count += size
            else:
                put_object(self.core, self.bucket, dst, source)
                c.objects_copied_count += 1
                c.bytes_copied_count += size
        self._publish()

    def _publish(self) -> None:
        """The operation's metadata, with the counters as they are now."""
        self.transfer.counters = self.counters
        metadata = self.lustre._transfer_metadata(self.kind, self.name, self.transfer)
        self.op.metadata.Pack(type(metadata).pb(metadata))

    def _end(self) -> None:
        if self.op.done or self._gone():
            return
        self._publish()
        response = lustre_v1.ImportDataResponse() if self.kind == "import" else lustre_v1.ExportDataResponse()
        self.lustre._finish(self.op, response=response, error=self.fault)
