"""Managed Lustre instances (``google.cloud.lustre_v1``): create, read, delete, and
import from / export to Cloud Storage.

Long-running operations are awaited by polling ``google.longrunning.Operations``
ourselves (capped backoff, deadline), not with the client's own poller, so that one
retry policy and one timeout apply everywhere.

Examples:
    >>> from rl_lustre import LustreVolume
    >>> vol = LustreVolume(name="demo-lustre", project="my-project", zone="us-east1-b",
    ...                    network="demo-net")
    >>> req = instance_request(vol, deployment="demo")
    >>> req.network, req.per_unit_storage_throughput, req.labels["managed-by"]
    ('projects/my-project/global/networks/demo-net', 500, 'rl-lustre')
"""

from __future__ import annotations

import builtins
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
from google.cloud import lustre_v1

from .._public import public
from ..errors import ConfigError, NotFoundError
from . import _clients
from ._errors import LUSTRE, Call, RetryPolicy, call, operation_error
from ._ownership import LABELS_FILTER, Ensured, is_ours
from ._resource import DELETE_TIMEOUT, StatefulResource
from ._wait import Backoff, ProgressCallback, wait_for

if TYPE_CHECKING:
    from ..spec import VolumeSpec

log = logging.getLogger("rl_lustre.gcp.lustre")

KIND = "Lustre instance"
CREATE_TIMEOUT = 2 * 3600.0
TRANSFER_TIMEOUT = 24 * 3600.0
_NAME = re.compile(r"projects/(?P<project>[^/]+)/locations/(?P<zone>[^/]+)/instances/(?P<id>[^/]+)")
State = lustre_v1.Instance.State


def instance_request(
    volume: VolumeSpec, *, deployment: str, labels: Mapping[str, str] | None = None
) -> lustre_v1.Instance:
    """The ``Instance`` to create for ``volume``, carrying our ownership labels.

    Args:
        volume: the spec; its project, zone and network must be set.
        deployment: the deployment the instance belongs to (the ``Cluster``'s name).
        labels: more labels (e.g. the ``Cluster``'s); the volume's own and ours are added.

    Raises:
        ConfigError: the volume's project, zone or network is not set.
    """
    from ..plan.lustre import instance_labels, instance_settings

    settings = instance_settings(volume)
    fields = {
        k: settings[k]
        for k in (
            "filesystem",
            "capacity_gib",
            "network",
            "per_unit_storage_throughput",
            "description",
            "gke_support_enabled",
        )
    }
    return lustre_v1.Instance(
        name=volume.resource_name(), labels=instance_labels(volume, deployment=deployment, labels=labels), **fields
    )


@public("rl_lustre")
@attrs.frozen
class TransferResult:
    """The outcome of an import from or export to Cloud Storage.

    Attributes:
        operation: the operation's name.
        objects_copied: objects copied.
        bytes_copied: bytes copied.
        objects_skipped: objects already present and skipped.
        objects_failed: objects that failed to copy.
    """

    operation: str
    objects_copied: int = 0
    bytes_copied: int = 0
    objects_skipped: int = 0
    objects_failed: int = 0


@attrs.frozen
class TransferStatus:
    """A transfer as its operation shows it now.

    Attributes:
        operation: the operation's name.
        kind: ``"export"`` or ``"import"``.
        target: the instance it runs on.
        done: whether it has finished.
        objects_found: objects it found to consider so far.
        bytes_found: their bytes.
        objects_copied: objects copied so far.
        bytes_copied: bytes copied so far.
        objects_skipped: objects already there with the same content.
        objects_failed: objects that failed to copy.
        error: the error it finished with (``""``: none).
        source: what it reads (the Lustre path of an export).
        destination: where it writes (the ``gs://`` URI of an export).
        bytes_skipped: the bytes of the objects skipped.
        error_code: the error's ``google.rpc`` code (5: NOT_FOUND, a missing path); 0: none.
    """

    operation: str
    kind: str
    target: str
    done: bool
    objects_found: int = 0
    bytes_found: int = 0
    objects_copied: int = 0
    bytes_copied: int = 0
    objects_skipped: int = 0
    objects_failed: int = 0
    error: str = ""
    source: str = ""
    destination: str = ""
    bytes_skipped: int = 0
    error_code: int = 0


def gcs_dir(uri: str) -> str:
    """``uri`` as a transfer names a place in a bucket: a path inside one ends with ``/``.

    Examples:
        >>> gcs_dir("gs://b/run-1"), gcs_dir("gs://b/run-1/"), gcs_dir("gs://b")
        ('gs://b/run-1/', 'gs://b/run-1/', 'gs://b')
    """
    path = uri.removeprefix("gs://").partition("/")[2]
    return uri if not path or path.endswith("/") else uri + "/"


def _status(op: Any) -> TransferStatus:
    """A transfer's status from its ``operations_pb2.Operation`` (export or import metadata)."""
    error = op.error.message if op.HasField("error") and op.error.code else ""
    for kind, metadata_type in (("export", lustre_v1.ExportDataMetadata), ("import", lustre_v1.ImportDataMetadata)):
        if not op.metadata.type_url.endswith(metadata_type.meta.full_name):
            continue
        meta = metadata_type.deserialize(op.metadata.value)
        t, c = meta.operation_metadata, meta.operation_metadata.counters
        return TransferStatus(
            op.name,
            kind,
            meta.target,
            bool(op.done),
            c.found_objects_count,
            c.bytes_found_count,
            c.objects_copied_count,
            c.bytes_copied_count,
            c.objects_skipped_count,
            c.objects_failed_count,
            error,
            t.source_lustre_path.path if kind == "export" else t.source_gcs_path.uri,
            t.destination_gcs_path.uri if kind == "export" else t.destination_lustre_path.path,
            c.bytes_skipped_count,
            int(op.error.code) if error else 0,
        )
    return TransferStatus(op.name, "other", "", bool(op.done), error=error)


def _split(name: str) -> re.Match[str]:
    m = _NAME.fullmatch(name)
    if m is None:
        raise ConfigError("LustreInstances", "name", name, "must be projects/P/locations/ZONE/instances/ID")
    return m


def _zone(name: str) -> str | None:
    m = _NAME.fullmatch(name)
    return m["zone"] if m else None


def _state(instance: lustre_v1.Instance | None) -> str:
    if instance is None:
        return "ABSENT"
    state = State(instance.state).name
    return f"{state} ({instance.state_reason})" if instance.state_reason else state


class LustreInstances(StatefulResource):
    """Managed Lustre instances through ``LustreClient``.

    Example::

        api = LustreInstances()           # a client from the environment, on first use
        api.get_or_none("projects/p/locations/us-east1-b/instances/x")

    Args:
        client: a ``lustre_v1.LustreClient``; by default the cached one for this
            environment (the emulator's when ``RL_LUSTRE_GCP_EMULATOR_HOST`` is set).
        backoff: polling delays of waits.
        retry: retries of transient failures.
    """

    kind = KIND
    api = LUSTRE
    _log = log

    def __init__(
        self,
        client: Any = None,
        *,
        backoff: Backoff | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._client = client
        self._backoff = backoff
        self._retry = retry

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else _clients.lustre()

    def _call(self, action: str, name: str, fn: Any, **kwargs: Any) -> Any:
        ctx = Call(LUSTRE, action, f"{KIND} {name}", zone=_zone(name))
        return call(ctx, fn, policy=self._retry, **kwargs)

    def _labels_of(self, found: lustre_v1.Instance) -> Mapping[str, str]:
        return found.labels

    def _being_deleted(self, found: lustre_v1.Instance) -> bool:
        return found.state == State.DELETING

    def _state_of(self, found: lustre_v1.Instance | None) -> str:
        return _state(found)

    def get_or_none(self, name: str) -> lustre_v1.Instance | None:
        """The instance called ``name`` (``projects/P/locations/ZONE/instances/ID``), or None.

        Example::

            LustreInstances().get_or_none("projects/p/locations/z/instances/x")
        """
        _split(name)
        try:
            return self._call("get", name, self.client.get_instance, request={"name": name}, retry=None)
        except NotFoundError:
            return None

    def list(self, parent: str) -> list[lustre_v1.Instance]:
        """Instances under ``parent`` (``projects/P/locations/ZONE``, or ``locations/-``).

        Example::

            [i.name for i in LustreInstances().list("projects/p/locations/-")]
        """

        def fetch() -> list[lustre_v1.Instance]:
            return list(self.client.list_instances(request={"parent": parent}, retry=None))

        return self._call("list instances in", parent, fetch)

    def list_ours(self, project: str) -> builtins.list[lustre_v1.Instance]:
        """Every instance in ``project`` (all zones) that carries our labels.

        The server filters on ``labels.managed-by``; the labels are checked again here.

        Example::

            [i.labels["rl-lustre-deployment"] for i in LustreInstances().list_ours("my-project")]
        """
        parent = f"projects/{project}/locations/-"

        def fetch() -> builtins.list[lustre_v1.Instance]:
            return builtins.list(
                self.client.list_instances(request={"parent": parent, "filter": LABELS_FILTER}, retry=None)
            )

        return [i for i in self._call("list instances in", parent, fetch) if is_ours(i.labels)]

    def create(
        self,
        instance: lustre_v1.Instance,
        *,
        deployment: str,
        wait: bool = True,
        timeout: float = CREATE_TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> Ensured[lustre_v1.Instance]:
        """Create ``instance`` (its ``name`` says where), or adopt it if it exists with our labels.

        Example::

            api = LustreInstances()
            done = api.create(instance_request(vol, deployment="demo"), deployment="demo")
            done.adopted, done.resource.mount_point
            # (False, '10.90.1.4@tcp:/lustrefs')

        Args:
            instance: from :func:`instance_request`.
            deployment: the deployment whose labels an existing instance must carry.
            wait: wait until the instance is ACTIVE.
            timeout: seconds to wait.
            progress: called with each observation while waiting.

        Raises:
            OwnershipError: an instance of that name exists without our labels.
            OperationFailedError: the creation failed.
            WaitTimeoutError: not ACTIVE within ``timeout``.
        """
        name = instance.name
        m = _split(name)

        def send() -> Any:
            body = lustre_v1.Instance(instance)
            body.name = ""
            return self._call(
                "create",
                name,
                self.client.create_instance,
                request={
                    "parent": f"projects/{m['project']}/locations/{m['zone']}",
                    "instance_id": m["id"],
                    "instance": body,
                },
                retry=None,
            )

        return self._create_or_adopt(
            name,
            instance,
            deployment=deployment,
            send=send,
            await_op=lambda op: self.wait_operation(
                op.operation.name,
                f"{KIND} {name} to be created",
                timeout=timeout,
                action="create",
                resource=name,
                progress=progress,
            ),
            wait=wait,
            timeout=timeout,
            progress=progress,
            detail=(" (%d GiB, %d MB/s/TiB)", instance.capacity_gib, instance.per_unit_storage_throughput),
        )

    def wait_ready(
        self, name: str, *, timeout: float = CREATE_TIMEOUT, progress: ProgressCallback | None = None
    ) -> lustre_v1.Instance:
        """Wait until the instance is ACTIVE and return it.

        Example::

            LustreInstances().wait_ready("projects/p/locations/z/instances/x").mount_point
            # '10.90.1.4@tcp:/lustrefs'

        Raises:
            NotFoundError: the instance does not exist (or disappeared).
            WaitTimeoutError: not ACTIVE within ``timeout``.
        """
        return self._wait_for_state(
            name, "ACTIVE", done=lambda i: i.state == State.ACTIVE, timeout=timeout, progress=progress
        )

    def delete(
        self,
        name: str,
        *,
        deployment: str,
        wait: bool = True,
        timeout: float = DELETE_TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> bool:
        """Delete the instance if it exists and carries our labels.

        Example::

            LustreInstances().delete("projects/p/locations/z/instances/x", deployment="demo")
            # True

        Returns:
            True if a deletion was started (and, with ``wait``, finished); False if the
            instance did not exist.

        Raises:
            OwnershipError: the instance exists without our labels; it is left alone.
        """
        return self._delete_if_ours(
            name,
            deployment=deployment,
            send=lambda: self._call("delete", name, self.client.delete_instance, request={"name": name}, retry=None),
            await_op=lambda op: self.wait_operation(
                op.operation.name,
                f"{KIND} {name} to be deleted",
                timeout=timeout,
                action="delete",
                resource=name,
                progress=progress,
            ),
            wait=wait,
            timeout=timeout,
            progress=progress,
        )

    def import_data(
        self,
        name: str,
        gcs_uri: str,
        lustre_path: str,
        *,
        timeout: float = TRANSFER_TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> TransferResult:
        """Copy ``gs://bucket/prefix`` into the instance at ``lustre_path`` (ImportData).

        Example::

            LustreInstances().import_data(name, "gs://my-bucket/models", "/models")
            # TransferResult(operation='...', objects_copied=12, ...)
        """
        request = {"name": name, "gcs_path": {"uri": gcs_dir(gcs_uri)}, "lustre_path": {"path": lustre_path}}
        log.info("importing %s into %s %s at %s", gcs_uri, KIND, name, lustre_path)
        op = self._call(f"import {gcs_uri} into", name, self.client.import_data, request=request, retry=None)
        return self._transfer(
            op.operation.name, f"import of {gcs_uri} into {name}", name, timeout, progress, lustre_v1.ImportDataMetadata
        )

    def export_data(
        self,
        name: str,
        lustre_path: str,
        gcs_uri: str,
        *,
        timeout: float = TRANSFER_TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> TransferResult:
        """Copy ``lustre_path`` of the instance to ``gs://bucket/prefix`` (ExportData) and wait.

        Example::

            LustreInstances().export_data(name, "/checkpoints", "gs://my-bucket/ckpt")
            # TransferResult(operation='...', objects_copied=4, ...)
        """
        op_name = self.start_export(name, lustre_path, gcs_uri)
        return self._transfer(
            op_name, f"export of {name} to {gcs_uri}", name, timeout, progress, lustre_v1.ExportDataMetadata
        )

    def start_export(self, name: str, lustre_path: str, gcs_uri: str, *, request_id: str = "") -> str:
        """Start ExportData of ``lustre_path`` to ``gcs_uri``; returns the operation's name.

        The directory's contents go under the prefix (``/a/b`` to ``gs://k/p/`` makes
        ``p/<files under b>``). ``request_id`` (a UUID) makes a retried request the same one.

        Example::

            op = LustreInstances().start_export(name, "/checkpoints/run-1", "gs://my-bucket/run-1/")
            LustreInstances().transfer_status(op).bytes_copied
        """
        request = {"name": name, "lustre_path": {"path": lustre_path}, "gcs_path": {"uri": gcs_dir(gcs_uri)}}
        if request_id:
            request["request_id"] = request_id
        log.info("exporting %s of %s %s to %s", lustre_path, KIND, name, gcs_uri)
        op = self._call(f"export to {gcs_uri} from", name, self.client.export_data, request=request, retry=None)
        return str(op.operation.name)

    def transfer_status(self, op_name: str, *, resource: str = "") -> TransferStatus:
        """Where transfer ``op_name`` stands: done or not, its counters so far, its error.

        Example::

            s = LustreInstances().transfer_status(op)
            s.done, s.bytes_copied, s.error
        """
        op = self._call(
            f"poll the operation {op_name} of",
            resource or op_name,
            self.client.get_operation,
            request={"name": op_name},
            retry=None,
        )
        return _status(op)

    def running_transfers(self, name: str) -> builtins.list[TransferStatus]:
        """The transfers of instance ``name`` that have not finished (one at most: the
        service runs one per instance at a time), e.g. an export a client interrupted.

        Example::

            [t.operation for t in LustreInstances().running_transfers(name)]
        """
        parent = name.rsplit("/instances/", 1)[0]

        def fetch() -> builtins.list[Any]:
            return builtins.list(self.client.list_operations(request={"name": parent}, retry=None).operations)

        found = []
        for op in self._call("list the operations of", name, fetch):
            if op.done or not op.metadata.value:
                continue
            status = _status(op)
            if status.target == name and status.kind in ("import", "export"):
                found.append(status)
        return found

    def set_labels(self, name: str, labels: Mapping[str, str], *, timeout: float = 600.0) -> None:
        """Replace the instance's labels with ``labels`` (UpdateInstance, ``labels`` only).

        Example::

            LustreInstances().set_labels(name, {**instance.labels, "rl-lustre-results": "not-exported"})
        """
        body = lustre_v1.Instance(name=name, labels=dict(labels))
        request = {"instance": body, "update_mask": {"paths": ["labels"]}}
        log.info("labelling %s %s: %s", KIND, name, dict(labels))
        op = self._call("update the labels of", name, self.client.update_instance, request=request, retry=None)
        self.wait_operation(
            op.operation.name, f"the labels of {KIND} {name}", timeout=timeout, action="update", resource=name
        )

    def _transfer(
        self, op_name: str, what: str, name: str, timeout: float, progress: ProgressCallback | None, metadata_type: Any
    ) -> TransferResult:
        done = self.wait_operation(
            op_name, what, timeout=timeout, action="transfer data of", resource=name, progress=progress
        )
        counters = None
        if done.metadata.value:
            counters = metadata_type.deserialize(done.metadata.value).operation_metadata.counters
        if counters is None:
            return TransferResult(op_name)
        return TransferResult(
            op_name,
            counters.objects_copied_count,
            counters.bytes_copied_count,
            counters.objects_skipped_count,
            counters.objects_failed_count,
        )

    def wait_operation(
        self,
        op_name: str,
        what: str,
        *,
        timeout: float,
        action: str = "finish",
        resource: str = "",
        progress: ProgressCallback | None = None,
    ) -> Any:
        """Poll ``google.longrunning.Operations/GetOperation`` until ``op_name`` is done.

        Returns:
            The finished ``operations_pb2.Operation``.

        Raises:
            OperationFailedError: it finished with an error (QuotaExceededError for a
                capacity or quota failure).
            WaitTimeoutError: still running after ``timeout``; carries its last state.
        """

        def poll() -> Any:
            return self._call(
                f"poll the operation {op_name} of",
                resource or op_name,
                self.client.get_operation,
                request={"name": op_name},
                retry=None,
            )

        def describe(op: Any) -> str:
            return "done" if op.done else "running"

        op = wait_for(
            what,
            poll,
            done=lambda o: o.done,
            describe=describe,
            timeout=timeout,
            backoff=self._backoff,
            progress=progress,
        )
        if op.HasField("error") and op.error.code:
            err = operation_error(
                Call(LUSTRE, action, f"{KIND} {resource}", zone=_zone(resource)), op.error.message, code=op.error.code
            )
            # The google.rpc code (5: NOT_FOUND, a transfer's missing path), for callers that tell them apart.
            err.grpc_code = int(op.error.code)  # type: ignore[attr-defined]
            raise err
        return op
