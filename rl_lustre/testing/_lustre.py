"""The fake ``google.cloud.lustre.v1.Lustre`` service and its ``google.longrunning.Operations``."""

# proto-plus ships no type information: mypy takes its enum members for plain ints.
# mypy: disable-error-code="assignment"

from __future__ import annotations

import datetime
import ipaddress
import re
import uuid
from typing import Any

import grpc
from google.cloud import lustre_v1
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2
from google.rpc import status_pb2

from ..catalog import LUSTRE_TIERS
from ._core import Core, FakeError
from ._filters import label_filter
from ._grpc import GrpcServer
from ._transfer import Transfer

LUSTRE = "google.cloud.lustre.v1.Lustre"
OPERATIONS = "google.longrunning.Operations"
_PARENT = re.compile(r"projects/([^/]+)/locations/([^/]+)")
_NAME = re.compile(r"projects/([^/]+)/locations/([^/]+)/instances/([^/]+)")
_ID = re.compile(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?")
_FS = re.compile(r"[A-Za-z][A-Za-z0-9]{0,7}")
_GCS = re.compile(r"gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])(/.*)?")
_NETWORK = re.compile(r"projects/([^/]+)/global/networks/([^/]+)")
State = lustre_v1.Instance.State


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(type(message).pb(message) if hasattr(type(message), "pb") else message)
    return packed


class LustreFake:
    """Managed Lustre instances that go CREATING → ACTIVE (with a mount point) → DELETING → gone."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.ops: dict[str, operations_pb2.Operation] = {}
        self._ips: dict[str, int] = {}
        # Transfer operations, by name: the instance they run on; and by request id.
        self._transfers: dict[str, str] = {}
        self._requests: dict[str, str] = {}

    def register(self, server: GrpcServer) -> None:
        add = server.add
        add(
            LUSTRE,
            "CreateInstance",
            "lustre.CreateInstance",
            self.create_instance,
            lustre_v1.CreateInstanceRequest,
            operations_pb2.Operation,
        )
        add(
            LUSTRE,
            "GetInstance",
            "lustre.GetInstance",
            self.get_instance,
            lustre_v1.GetInstanceRequest,
            lustre_v1.Instance,
        )
        add(
            LUSTRE,
            "ListInstances",
            "lustre.ListInstances",
            self.list_instances,
            lustre_v1.ListInstancesRequest,
            lustre_v1.ListInstancesResponse,
        )
        add(
            LUSTRE,
            "DeleteInstance",
            "lustre.DeleteInstance",
            self.delete_instance,
            lustre_v1.DeleteInstanceRequest,
            operations_pb2.Operation,
        )
        add(
            LUSTRE,
            "UpdateInstance",
            "lustre.UpdateInstance",
            self.update_instance,
            lustre_v1.UpdateInstanceRequest,
            operations_pb2.Operation,
        )
        add(
            LUSTRE,
            "ImportData",
            "lustre.ImportData",
            self.import_data,
            lustre_v1.ImportDataRequest,
            operations_pb2.Operation,
        )
        add(
            LUSTRE,
            "ExportData",
            "lustre.ExportData",
            self.export_data,
            lustre_v1.ExportDataRequest,
            operations_pb2.Operation,
        )
        add(
            OPERATIONS,
            "GetOperation",
            "longrunning.GetOperation",
            self.get_operation,
            operations_pb2.GetOperationRequest,
            operations_pb2.Operation,
        )
        add(
            OPERATIONS,
            "ListOperations",
            "longrunning.ListOperations",
            self.list_operations,
            operations_pb2.ListOperationsRequest,
            operations_pb2.ListOperationsResponse,
        )
        add(
            OPERATIONS,
            "DeleteOperation",
            "longrunning.DeleteOperation",
            self.delete_operation,
            operations_pb2.DeleteOperationRequest,
            empty_pb2.Empty,
        )
        add(
            OPERATIONS,
            "CancelOperation",
            "longrunning.CancelOperation",
            self.cancel_operation,
            operations_pb2.CancelOperationRequest,
            empty_pb2.Empty,
        )

    def _start_op(self, parent: str, verb: str, target: str, metadata: Any) -> operations_pb2.Operation:
        name = f"{parent}/operations/operation-{self.core.next_id()}-{uuid.uuid4().hex[:8]}"
        op = operations_pb2.Operation(name=name, done=False, metadata=_pack(metadata))
        self.ops[name] = op
        return op

    def _finish(self, op: operations_pb2.Operation, response: Any = None, error: FakeError | None = None) -> None:
        if op.done:
            return
        if error is not None:
            op.error.CopyFrom(status_pb2.Status(code=error.grpc_code.value[0], message=error.message))
        elif response is not None:
            op.response.CopyFrom(_pack(response))
        op.done = True

    def _instance(self, name: str) -> lustre_v1.Instance:
        found = self.core.lustre.get(name)
        if found is None:
            raise FakeError(grpc.StatusCode.NOT_FOUND, f"Resource '{name}' was not found")
        return found

    def _mount_ip(self, network: str) -> str:
        m = _NETWORK.fullmatch(network)
        base = ipaddress.ip_address("10.90.0.0")
        if m is not None:
            conn = self.core.connections.get((m[1], m[2]))
            ranges = conn["reservedPeeringRanges"] if conn else []
            addr = self.core.addresses.get((m[1], ranges[0])) if ranges else None
            if addr is not None:
                base = ipaddress.ip_address(addr["address"])
        n = self._ips.get(network, 0)
        self._ips[network] = n + 1
        return str(base + 256 + 4 + n)

    def _check_network(self, network: str) -> None:
        m = _NETWORK.fullmatch(network)
        if m is None:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"instance.network {network!r} must be projects/PROJECT/global/networks/NAME",
            )
        if (m[1], m[2]) not in self.core.networks:
            raise FakeError(grpc.StatusCode.FAILED_PRECONDITION, f"network {network} does not exist")
        conn = self.core.connections.get((m[1], m[2]))
        if not conn or not conn["reservedPeeringRanges"]:
            raise FakeError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"network {network} has no private services access connection: reserve a range "
                "with purpose VPC_PEERING and connect it to servicenetworking.googleapis.com",
            )

    def create_instance(self, request: lustre_v1.CreateInstanceRequest) -> operations_pb2.Operation:
        if not _PARENT.fullmatch(request.parent):
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT, f"parent {request.parent!r} is not projects/P/locations/L"
            )
        if not _ID.fullmatch(request.instance_id):
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"instance_id {request.instance_id!r} is invalid")
        spec = request.instance
        tier = LUSTRE_TIERS.get(spec.per_unit_storage_throughput)
        if tier is None:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT, f"per_unit_storage_throughput must be one of {sorted(LUSTRE_TIERS)}"
            )
        if not tier.valid(spec.capacity_gib):
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"capacity_gib {spec.capacity_gib} is invalid for throughput "
                f"{tier.mbps_per_tib}: {tier.min_gib} to {tier.max_gib}, in steps of {tier.step_gib} "
                f"(of {tier.large_step_gib} above {tier.threshold_gib})",
            )
        if not _FS.fullmatch(spec.filesystem):
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"filesystem {spec.filesystem!r} is invalid")
        self._check_network(spec.network)
        name = f"{request.parent}/instances/{request.instance_id}"
        if name in self.core.lustre:
            raise FakeError(grpc.StatusCode.ALREADY_EXISTS, f"Resource '{name}' already exists")
        inst = lustre_v1.Instance(spec)
        inst.name = name
        inst.state = State.CREATING
        inst.create_time = _now()
        inst.uid = uuid.uuid4().hex
        self.core.lustre[name] = inst
        op = self._start_op(
            request.parent,
            "create",
            name,
            lustre_v1.OperationMetadata(create_time=_now(), target=name, verb="create", api_version="v1"),
        )
        fault = self.core.operation_fault("lustre.CreateInstance")

        def finish() -> None:
            if self.core.lustre.get(name) is not inst or inst.state != State.CREATING:
                self._finish(op, error=FakeError(grpc.StatusCode.ABORTED, f"instance {name} was deleted"))
                return
            if fault is not None:
                del self.core.lustre[name]
                self._finish(op, error=fault)
                return
            inst.state = State.ACTIVE
            self.core.files.instance_dir(name)
            inst.mount_point = f"{self._mount_ip(inst.network)}@tcp:/{inst.filesystem}"
            inst.update_time = _now()
            self._finish(op, response=inst)

        self.core.schedule(self.core.delay("lustre.create"), finish)
        return op

    def get_instance(self, request: lustre_v1.GetInstanceRequest) -> lustre_v1.Instance:
        return self._instance(request.name)

    def list_instances(self, request: lustre_v1.ListInstancesRequest) -> lustre_v1.ListInstancesResponse:
        m = _PARENT.fullmatch(request.parent)
        if m is None:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT, f"parent {request.parent!r} is not projects/P/locations/L"
            )
        prefix = f"projects/{m[1]}/locations/" + ("" if m[2] == "-" else f"{m[2]}/")
        wanted = label_filter(request.filter)
        found = [i for n, i in sorted(self.core.lustre.items()) if n.startswith(prefix) and wanted(i.labels)]
        return lustre_v1.ListInstancesResponse(instances=found)

    def delete_instance(self, request: lustre_v1.DeleteInstanceRequest) -> operations_pb2.Operation:
        name = request.name
        inst = self._instance(name)
        parent = name.rsplit("/instances/", 1)[0]
        op = self._start_op(
            parent,
            "delete",
            name,
            lustre_v1.OperationMetadata(create_time=_now(), target=name, verb="delete", api_version="v1"),
        )
        inst.state = State.DELETING
        fault = self.core.operation_fault("lustre.DeleteInstance")

        def finish() -> None:
            if fault is not None:
                inst.state = State.ACTIVE
                self._finish(op, error=fault)
                return
            if self.core.lustre.get(name) is inst:
                del self.core.lustre[name]
                self.core.files.wipe(name)
            self._finish(op, response=empty_pb2.Empty())

        self.core.schedule(self.core.delay("lustre.delete"), finish)
        return op

    def _transfer(self, request: Any, kind: str) -> operations_pb2.Operation:
        inst = self._instance(request.name)
        if inst.state != State.ACTIVE:
            raise FakeError(
                grpc.StatusCode.FAILED_PRECONDITION, f"instance {request.name} is {State(inst.state).name}, not ACTIVE"
            )
        m = _GCS.fullmatch(request.gcs_path.uri)
        if m is None:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT, f"gcs_path.uri {request.gcs_path.uri!r} is not gs://BUCKET/..."
            )
        if m[2] and m[2] != "/" and not m[2].endswith("/"):
            # The real API: "If a path inside the bucket is specified, it must end with a forward slash".
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"gcs_path.uri {request.gcs_path.uri!r}: a path inside the bucket must end with '/'",
            )
        if not request.lustre_path.path.startswith("/"):
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT, f"lustre_path.path {request.lustre_path.path!r} is not absolute"
            )
        busy = [
            o
            for o in self.ops.values()
            if not o.done and o.name in self._transfers and self._transfers[o.name] == request.name
        ]
        if busy:
            # The real service: one transfer per instance at a time.
            raise FakeError(grpc.StatusCode.ABORTED, "unable to queue the operation")
        if request.request_id and request.request_id in self._requests:
            # The same request again (a retry): the operation it started.
            return self.ops[self._requests[request.request_id]]
        bucket, prefix = m[1], (m[2] or "").strip("/")
        directory = request.lustre_path.path.strip("/")
        parent = request.name.rsplit("/instances/", 1)[0]
        counters = lustre_v1.TransferCounters()
        if kind == "import":
            transfer = lustre_v1.TransferOperationMetadata(
                source_gcs_path=request.gcs_path,
                destination_lustre_path=request.lustre_path,
                counters=counters,
                transfer_type=lustre_v1.TransferType.IMPORT,
            )
            method, latency = "lustre.ImportData", "lustre.import_data"
        else:
            transfer = lustre_v1.TransferOperationMetadata(
                source_lustre_path=request.lustre_path,
                destination_gcs_path=request.gcs_path,
                counters=counters,
                transfer_type=lustre_v1.TransferType.EXPORT,
            )
            method, latency = "lustre.ExportData", "lustre.export_data"
        op = self._start_op(parent, kind, request.name, self._transfer_metadata(kind, request.name, transfer))
        self._transfers[op.name] = request.name
        if request.request_id:
            self._requests[request.request_id] = op.name
        fault = self.core.operation_fault(method)
        Transfer(self, op, inst, kind, bucket, prefix, directory, transfer, fault).schedule(self.core.delay(latency))
        return op

    def _transfer_metadata(self, kind: str, name: str, transfer: Any) -> Any:
        if kind == "import":
            return lustre_v1.ImportDataMetadata(
                operation_metadata=transfer, create_time=_now(), target=name, api_version="v1"
            )
        return lustre_v1.ExportDataMetadata(
            operation_metadata=transfer, create_time=_now(), target=name, verb="export", api_version="v1"
        )

    def update_instance(self, request: lustre_v1.UpdateInstanceRequest) -> operations_pb2.Operation:
        name = request.instance.name
        inst = self._instance(name)
        paths = list(request.update_mask.paths)
        if not paths:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, "update_mask must name the fields to change")
        for path in paths:
            if path == "labels":
                inst.labels.clear()
                inst.labels.update(dict(request.instance.labels))
            elif path == "description":
                inst.description = request.instance.description
            else:
                raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"rl_lustre.testing: updating {path!r} is not served")
        inst.update_time = _now()
        parent = name.rsplit("/instances/", 1)[0]
        op = self._start_op(
            parent,
            "update",
            name,
            lustre_v1.OperationMetadata(create_time=_now(), target=name, verb="update", api_version="v1"),
        )
        self._finish(op, response=inst)
        return op

    def import_data(self, request: lustre_v1.ImportDataRequest) -> operations_pb2.Operation:
        return self._transfer(request, "import")

    def export_data(self, request: lustre_v1.ExportDataRequest) -> operations_pb2.Operation:
        return self._transfer(request, "export")

    def get_operation(self, request: operations_pb2.GetOperationRequest) -> operations_pb2.Operation:
        op = self.ops.get(request.name)
        if op is None:
            raise FakeError(grpc.StatusCode.NOT_FOUND, f"Operation '{request.name}' was not found")
        return op

    def list_operations(self, request: operations_pb2.ListOperationsRequest) -> operations_pb2.ListOperationsResponse:
        prefix = request.name.rstrip("/") + "/operations/"
        return operations_pb2.ListOperationsResponse(
            operations=[op for name, op in sorted(self.ops.items()) if name.startswith(prefix)]
        )

    def delete_operation(self, request: operations_pb2.DeleteOperationRequest) -> empty_pb2.Empty:
        if self.ops.pop(request.name, None) is None:
            raise FakeError(grpc.StatusCode.NOT_FOUND, f"Operation '{request.name}' was not found")
        return empty_pb2.Empty()

    def cancel_operation(self, request: operations_pb2.CancelOperationRequest) -> empty_pb2.Empty:
        op = self.get_operation(operations_pb2.GetOperationRequest(name=request.name))
        self._finish(op, error=FakeError(grpc.StatusCode.CANCELLED, "Operation was cancelled"))
        return empty_pb2.Empty()
