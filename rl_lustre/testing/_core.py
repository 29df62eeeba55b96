"""What the fake Google APIs share: simulated time, latency, faults, the request log and
the resources that exist."""

from __future__ import annotations

import fnmatch
import heapq
import itertools
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import grpc

from .._public import public
from ._files import Files

# Seconds each remote change takes before the time scale is applied. Small, so that
# tests are fast; the provisioning benchmark passes realistic proportions.
DEFAULT_LATENCY: dict[str, float] = {
    "compute.create_network": 0.02,
    "compute.delete_network": 0.02,
    "compute.create_subnetwork": 0.02,
    "compute.delete_subnetwork": 0.02,
    "compute.create_address": 0.02,
    "compute.delete_address": 0.02,
    "compute.create_firewall": 0.02,
    "compute.delete_firewall": 0.02,
    "servicenetworking.connect": 0.02,
    "servicenetworking.disconnect": 0.02,
    "lustre.create": 0.1,
    "lustre.delete": 0.05,
    "lustre.import_data": 0.05,
    "lustre.export_data": 0.05,
    # A transfer's copying, per GB moved (after its latency above): 0 copies at once.
    "lustre.transfer_per_gb": 0.0,
    "compute.create_instance": 0.03,
    "compute.delete_instance": 0.02,
    "compute.delete_disk": 0.02,
    "compute.detach_disk": 0.02,
    "compute.create_image": 0.05,
    "compute.delete_image": 0.02,
    # The builder VM's script: installing containerd and formatting the data disk, then
    # pulling and unpacking the image (per GB of compressed layers).
    "compute.preload_boot": 0.02,
    "compute.preload_unpack_per_gb": 0.0,
    "gke.create_cluster": 0.08,
    "gke.delete_cluster": 0.05,
    "gke.create_node_pool": 0.06,
    "gke.delete_node_pool": 0.04,
    "gke.update_node_pool": 0.02,
    # The cluster autoscaler's scale-up of a pool: until its new VMs are nodes, and until a
    # stock-out is known (Compute refuses the VMs well before one would have booted).
    "gke.scale_up": 0.02,
    "gke.scale_up_stockout": 0.01,
    # Until then a new service account is unknown to the project IAM policy (IAM is
    # eventually consistent): a grant to it is refused as a member that does not exist.
    "iam.create_service_account": 0.0,
}

_GRPC_TO_HTTP: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}
_HTTP_TO_GRPC: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ALREADY_EXISTS,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


@public("rl_lustre.testing")
class FakeError(Exception):
    """Raised inside a fake handler: becomes a gRPC status or an HTTP error response."""

    def __init__(self, code: grpc.StatusCode | int, message: str, reason: str = "") -> None:
        super().__init__(message)
        if isinstance(code, int):
            self.grpc_code = _HTTP_TO_GRPC.get(code, grpc.StatusCode.UNKNOWN)
            self.http_code = code
        else:
            self.grpc_code = code
            self.http_code = _GRPC_TO_HTTP.get(code, 500)
        self.message = message
        self.reason = reason


@public("rl_lustre.testing")
@attrs.define
class RequestRecord:
    """One request a fake received (the Google API fakes; the Kubernetes fake records a
    :class:`rl_lustre.testing.kube.KubeRequest`, which adds what HTTP carries).

    Attributes:
        time: ``time.monotonic()`` when it arrived.
        method: the method (``"lustre.GetInstance"``, ``"compute.networks.insert"``; for
            the Kubernetes fake the HTTP verb).
        target: the resource or operation it named (for the Kubernetes fake the path).
        outcome: ``"ok"`` or the error's status name.
    """

    time: float
    method: str
    target: str
    outcome: str = "ok"


@attrs.define
class _Fault:
    pattern: str
    kind: str  # "call" or "operation"
    code: grpc.StatusCode | int
    message: str
    after: int
    times: int
    resource: str = "*"
    seen: int = 0

    def hit(self, method: str, resource: str = "") -> bool:
        if not fnmatch.fnmatchcase(method, self.pattern) or not fnmatch.fnmatchcase(resource, self.resource):
            return False
        self.seen += 1
        return self.after < self.seen <= self.after + self.times


@public("rl_lustre.testing")
class Faults:
    """Fault injection for the fake APIs.

    Methods are named ``<api>.<Method>`` for gRPC (``"lustre.CreateInstance"``,
    ``"gke.CreateNodePool"``, ``"longrunning.GetOperation"``) and after the REST
    API's resource and verb otherwise (``"compute.networks.insert"``,
    ``"servicenetworking.connections.create"``). Patterns may use ``*``
    (``"compute.*.insert"``). Codes are ``grpc.StatusCode`` values or HTTP status
    numbers; each side gets its equivalent.

    Examples:
        >>> import grpc
        >>> from rl_lustre.testing import FakeGCP
        >>> with FakeGCP() as gcp:
        ...     gcp.faults.fail_call("lustre.CreateInstance", code=grpc.StatusCode.UNAVAILABLE, times=1)
        ...     gcp.faults.fail_operation("gke.CreateNodePool", message="ZONE_RESOURCE_POOL_EXHAUSTED")
        ...     gcp.faults.rate_limit("compute.*", times=2)
    """

    def __init__(self, known: Callable[[], Iterable[str]]) -> None:
        self._known = known
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()

    def _add(self, fault: _Fault) -> None:
        known = sorted(self._known())
        if not any(fnmatch.fnmatchcase(m, fault.pattern) for m in known):
            raise ValueError(f"no fake method matches {fault.pattern!r}; methods: {', '.join(known)}")
        if fault.times < 1 or fault.after < 0:
            raise ValueError("times must be at least 1 and after at least 0")
        if isinstance(fault.code, int) and not 400 <= fault.code <= 599:
            raise ValueError(
                f"code {fault.code}: a number is an HTTP status (400-599); pass a grpc.StatusCode for a gRPC status"
            )
        with self._lock:
            self._faults.append(fault)

    def fail_call(
        self,
        method: str,
        code: grpc.StatusCode | int = grpc.StatusCode.UNAVAILABLE,
        *,
        times: int = 1,
        after: int = 0,
        message: str | None = None,
        resource: str = "*",
    ) -> None:
        """Make calls of ``method`` fail with ``code``: the ``after+1``-th to the
        ``after+times``-th call from now. ``resource`` narrows it to calls on resources
        whose path matches (REST inserts: the collection path and the new name,
        ``*/subnetworks/demo-rdma-sub-3``).

        Examples:
            >>> import grpc
            >>> from rl_lustre.testing import FakeGCP
            >>> with FakeGCP() as gcp:
            ...     gcp.faults.fail_call("gke.GetCluster", grpc.StatusCode.PERMISSION_DENIED, after=2)
        """
        self._add(_Fault(method, "call", code, message or f"fault injected into {method}", after, times, resource))

    def fail_operation(
        self,
        method: str,
        code: grpc.StatusCode | int = grpc.StatusCode.INTERNAL,
        *,
        times: int = 1,
        after: int = 0,
        message: str | None = None,
        resource: str = "*",
    ) -> None:
        """Make the long-running operations started by ``method`` end with an error
        (only those on resources matching ``resource``, for the REST APIs).

        The call itself succeeds; the operation runs its latency and then fails. A
        failed GKE cluster or node pool is left in status ERROR (as GKE does); other
        failed creations leave nothing behind.

        Examples:
            >>> from rl_lustre.testing import FakeGCP
            >>> with FakeGCP() as gcp:
            ...     gcp.faults.fail_operation("lustre.CreateInstance", message="internal error")
        """
        self._add(
            _Fault(
                method, "operation", code, message or f"operation of {method} failed (injected)", after, times, resource
            )
        )

    def rate_limit(self, method: str = "*", *, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` with RESOURCE_EXHAUSTED / HTTP 429.

        Examples:
            >>> from rl_lustre.testing import FakeGCP
            >>> with FakeGCP() as gcp:
            ...     gcp.faults.rate_limit("compute.networks.get", times=3)
        """
        self._add(
            _Fault(
                method,
                "call",
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Rate limit exceeded for {method}: too many requests per minute (injected)",
                0,
                times,
            )
        )

    def clear(self) -> None:
        """Remove every fault."""
        with self._lock:
            self._faults.clear()

    def _take(self, method: str, kind: str, resource: str = "") -> FakeError | None:
        with self._lock:
            for fault in self._faults:
                if fault.kind == kind and fault.hit(method, resource):
                    return FakeError(fault.code, fault.message)
        return None


@public("rl_lustre.testing")
def project_number(project: str) -> str:
    """The fake's stable project number for ``project``.

    Examples:
        >>> project_number("my-project") == project_number("my-project")
        True
    """
    return str(100_000_000_000 + zlib.crc32(project.encode()) % 899_999_999_999)


class Core:
    """Simulated time, latency, faults, the request log and the world the fakes share.

    Remote changes are scheduled events; every request first applies the events that
    are due, so state moves on exactly as the clock does, with no background thread.
    """

    def __init__(self, latency: Mapping[str, float] | None = None, time_scale: float = 1.0) -> None:
        unknown = set(latency or {}) - set(DEFAULT_LATENCY)
        if unknown:
            raise ValueError(f"unknown latency keys {sorted(unknown)}; known: {', '.join(sorted(DEFAULT_LATENCY))}")
        if time_scale < 0:
            raise ValueError("time_scale must be at least 0")
        self.latency = {**DEFAULT_LATENCY, **(latency or {})}
        self.time_scale = time_scale
        self.lock = threading.RLock()
        self.methods: set[str] = set()
        self.faults = Faults(lambda: self.methods)
        self.log: list[RequestRecord] = []
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._ids = itertools.count(1)
        # The shared world: Compute and Service Networking state that the Lustre and GKE
        # fakes consult (a Lustre instance needs a peered network, a cluster its subnet).
        self.networks: dict[tuple[str, str], dict[str, Any]] = {}
        self.subnetworks: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.addresses: dict[tuple[str, str], dict[str, Any]] = {}
        self.firewalls: dict[tuple[str, str], dict[str, Any]] = {}
        self.connections: dict[tuple[str, str], dict[str, Any]] = {}
        # Compute images (project, name), disks and instances (project, zone, name), as JSON;
        # what a disk or image holds (fake-internal, never in an API answer) by its path.
        self.images: dict[tuple[str, str], dict[str, Any]] = {}
        self.disks: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.instances: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.contents: dict[str, dict[str, Any]] = {}
        self.lustre: dict[str, Any] = {}
        # What each Lustre instance holds (a directory) and what Cloud Storage objects hold
        # (a file each), on this machine; buckets (name -> object name -> object):
        # ImportData and ExportData copy between them.
        self.files = Files()
        self.buckets: dict[str, dict[str, dict[str, Any]]] = {}
        # Bucket IAM policies (role -> members), for those a test gave one.
        self.bucket_policies: dict[str, dict[str, list[str]]] = {}
        self.clusters: dict[str, Any] = {}
        # IAM service accounts by e-mail: GKE refuses node pools that run as one not there.
        self.service_accounts: dict[str, Any] = {}
        self.kube_endpoint: str | None = None
        self.kube_ca_pem: str | None = None
        # Called with a GKE cluster's name once its deletion has finished.
        self.on_cluster_deleted: Callable[[str], None] | None = None
        # Called with a node pool (container_v1.NodePool) once it is RUNNING, and with
        # its name once it is deleted: the Kubernetes side registers / drops its nodes.
        self.on_node_pool_ready: Callable[[Any], object] | None = None
        self.on_node_pool_deleted: Callable[[str], None] | None = None
        # Called with a node pool changed in place (its nodes' labels and taints, its autoscaling).
        self.on_node_pool_updated: Callable[[Any], object] | None = None

    def now(self) -> float:
        return time.monotonic()

    def next_id(self) -> int:
        return next(self._ids)

    def delay(self, key: str) -> float:
        return self.latency[key] * self.time_scale

    def schedule(self, after: float, effect: Callable[[], None]) -> None:
        """Apply ``effect`` once ``after`` seconds have passed (at the next request)."""
        with self.lock:
            heapq.heappush(self._events, (self.now() + after, next(self._seq), effect))

    def advance(self) -> None:
        with self.lock:
            now = self.now()
            while self._events and self._events[0][0] <= now:
                _, _, effect = heapq.heappop(self._events)
                effect()

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every scheduled change has happened."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                self.advance()
                if not self._events:
                    return
                wait = self._events[0][0] - self.now()
            if time.monotonic() + wait > deadline:
                raise TimeoutError("the fake still has pending changes")
            time.sleep(max(wait, 0.001))

    def handle(self, method: str, target: str, fn: Callable[[], Any], resource: str | None = None) -> Any:
        """Handle one request: apply due events, log it, raise an injected fault or run ``fn``
        under the lock. :class:`FakeError` propagates, and is recorded as the outcome."""
        with self.lock:
            self.advance()
            index = len(self.log)
            self.log.append(RequestRecord(self.now(), method, target))
            try:
                fault = self.faults._take(method, "call", target if resource is None else resource)
                if fault is not None:
                    raise fault
                return fn()
            except FakeError as err:
                self.log[index] = attrs.evolve(self.log[index], outcome=err.grpc_code.name)
                raise

    def operation_fault(self, method: str, resource: str = "") -> FakeError | None:
        return self.faults._take(method, "operation", resource)

    def counts(self, prefix: str = "") -> Counter[str]:
        with self.lock:
            return Counter(r.method for r in self.log if r.method.startswith(prefix))
