"""The fake Service Networking API (REST): the private services access connection of a
VPC network (its reserved peering ranges) and its operations.

:class:`ServiceNetworkingFake` holds the handlers; :class:`~rl_lustre.testing._rest.RestFake`
serves them over HTTP (:meth:`ServiceNetworkingFake.routes`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ._compute import NETWORK_URL, Handler
from ._core import Core, FakeError, project_number

__all__ = ["ServiceNetworkingFake"]


class ServiceNetworkingFake:
    """Service Networking connections and their operations."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self._sn_ops: dict[str, dict[str, Any]] = {}

    def routes(self) -> list[tuple[str, str, str, Handler]]:
        """``(verb, path regex, method, handler)`` of every Service Networking method served."""
        return [
            (
                "POST",
                "/v1/services/(?P<service>[^/]+)/connections",
                "servicenetworking.connections.create",
                self.connection_create,
            ),
            (
                "GET",
                "/v1/services/(?P<service>[^/]+)/connections",
                "servicenetworking.connections.list",
                self.connection_list,
            ),
            (
                "PATCH",
                "/v1/services/(?P<service>[^/]+)/connections/(?P<name>[^/:]+)",
                "servicenetworking.connections.patch",
                self.connection_patch,
            ),
            (
                "POST",
                "/v1/services/(?P<service>[^/]+)/connections/(?P<name>[^/:]+):deleteConnection",
                "servicenetworking.connections.deleteConnection",
                self.connection_delete,
            ),
            ("GET", "/v1/(?P<name>operations/[^/]+)", "servicenetworking.operations.get", self.sn_operation_get),
        ]

    def _consumer(self, network: str) -> tuple[str, str]:
        m = re.fullmatch(r"projects/([^/]+)/global/networks/([^/]+)", network or "")
        if m is None:
            raise FakeError(400, f"Invalid network {network!r}: want projects/PROJECT_NUMBER/global/networks/NAME")
        number, name = m[1], m[2]
        for project, net in self.core.networks:
            if project_number(project) == number and net == name:
                return project, net
        if not number.isdigit():
            raise FakeError(400, f"Network {network!r} must name the project by number, not id")
        raise FakeError(404, f"Network {network!r} was not found")

    def _check_ranges(self, project: str, network: str, ranges: list[str]) -> None:
        if not ranges:
            raise FakeError(400, "reservedPeeringRanges must not be empty")
        for r in ranges:
            addr = self.core.addresses.get((project, r))
            m = NETWORK_URL.match(addr.get("network", "")) if addr else None
            if addr is None or addr.get("purpose") != "VPC_PEERING" or m is None or m[2] != network:
                raise FakeError(400, f"Allocated IP range {r!r} not found in network {network}")

    def _sn_op(self, method: str, latency: str, effect: Callable[[], None]) -> dict[str, Any]:
        name = f"operations/pssn.fake-{self.core.next_id()}"
        op: dict[str, Any] = {"name": name, "done": False}
        self._sn_ops[name] = op
        fault = self.core.operation_fault(method)

        def finish() -> None:
            if fault is None:
                try:
                    effect()
                except FakeError as err:
                    op["error"] = {"code": err.grpc_code.value[0], "message": err.message}
            else:
                op["error"] = {"code": fault.grpc_code.value[0], "message": fault.message}
            if "error" not in op:
                op["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
            op["done"] = True

        self.core.schedule(self.core.delay(latency), finish)
        return dict(op)

    def sn_operation_get(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        op = self._sn_ops.get(p["name"])
        if op is None:
            raise FakeError(404, f"Operation {p['name']!r} was not found")
        return dict(op)

    def _check_service(self, p: dict[str, str]) -> None:
        if p["service"] != "servicenetworking.googleapis.com":
            raise FakeError(400, f"service {p['service']!r} is not servicenetworking.googleapis.com")

    def connection_create(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        self._check_service(p)
        key = self._consumer(b.get("network", ""))
        ranges = list(b.get("reservedPeeringRanges", []))
        self._check_ranges(*key, ranges)
        if key in self.core.connections:
            raise FakeError(400, "Cannot modify allocated ranges in CreateConnection. Please use UpdateConnection.")

        def connect() -> None:
            self.core.connections[key] = {
                "network": b["network"],
                "reservedPeeringRanges": ranges,
                "peering": "servicenetworking-googleapis-com",
                "service": "services/servicenetworking.googleapis.com",
            }

        return self._sn_op("servicenetworking.connections.create", "servicenetworking.connect", connect)

    def connection_list(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        self._check_service(p)
        key = self._consumer(q.get("network", ""))
        conn = self.core.connections.get(key)
        return {"connections": [dict(conn)]} if conn else {}

    def connection_patch(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        self._check_service(p)
        key = self._consumer(b.get("network", ""))
        conn = self.core.connections.get(key)
        if conn is None:
            raise FakeError(404, f"No connection for network {b.get('network')!r}")
        ranges = list(b.get("reservedPeeringRanges", []))
        self._check_ranges(*key, ranges)
        removed = set(conn["reservedPeeringRanges"]) - set(ranges)
        if removed and q.get("force") != "true":
            raise FakeError(400, f"Removing ranges {sorted(removed)} needs force=true")

        def update() -> None:
            conn["reservedPeeringRanges"] = ranges

        return self._sn_op("servicenetworking.connections.patch", "servicenetworking.connect", update)

    def connection_delete(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        self._check_service(p)
        key = self._consumer(b.get("consumerNetwork", ""))
        if key not in self.core.connections:
            raise FakeError(404, f"No connection for network {b.get('consumerNetwork')!r}")

        def disconnect() -> None:
            network = f"projects/{key[0]}/global/networks/{key[1]}"
            users = [n for n, i in sorted(self.core.lustre.items()) if i.network == network]
            if users:
                raise FakeError(
                    400,
                    "Producer services (e.g. CloudSQL, Cloud Memstore, etc.) are still using this "
                    f"connection: {', '.join(users)}",
                )
            self.core.connections.pop(key, None)

        return self._sn_op("servicenetworking.connections.deleteConnection", "servicenetworking.disconnect", disconnect)
