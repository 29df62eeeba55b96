"""An in-process gRPC server on loopback that hosts the fake Google services.

Methods are registered by full name with their request and response message classes
(proto-plus or protobuf); every other method answers UNIMPLEMENTED naming itself.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from ._core import Core, FakeError, RequestRecord


def _codec(message_type: Any) -> tuple[Callable[[bytes], Any], Callable[[Any], bytes]]:
    if hasattr(message_type, "deserialize") and hasattr(message_type, "serialize"):  # proto-plus
        return message_type.deserialize, message_type.serialize
    return message_type.FromString, lambda message: message.SerializeToString()


def _target(request: Any) -> str:
    for field in ("name", "parent", "resource"):
        value = getattr(request, field, "")
        if value:
            return str(value)
    return ""


class GrpcServer:
    """A ``grpc.server`` on ``127.0.0.1:0`` dispatching by method path."""

    def __init__(self, core: Core, max_workers: int = 16) -> None:
        self._core = core
        self._routes: dict[str, grpc.RpcMethodHandler] = {}
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="fake-gcp-grpc")
        )
        self._server.add_generic_rpc_handlers([_Dispatch(self)])
        self.port = 0

    def add(
        self, service: str, method: str, short: str, fn: Callable[[Any], Any], request_type: Any, response_type: Any
    ) -> None:
        """Serve ``/service/method`` with ``fn(request) -> response``, logged and faulted as ``short``.

        ``fn`` runs under the fake's lock and raises :class:`FakeError` for errors.
        """
        decode, _ = _codec(request_type)
        _, encode = _codec(response_type)
        core = self._core
        core.methods.add(short)

        def unary(request: Any, context: grpc.ServicerContext) -> bytes:
            try:
                # Serialised under the fake's lock: the stored messages change as time passes.
                return core.handle(short, _target(request), lambda: encode(fn(request)))
            except FakeError as err:
                context.abort(err.grpc_code, err.message)
                raise  # abort() raises; this tells type checkers so

        self._routes[f"/{service}/{method}"] = grpc.unary_unary_rpc_method_handler(unary, request_deserializer=decode)

    def _unimplemented(self, path: str) -> grpc.RpcMethodHandler:
        def unary(request: bytes, context: grpc.ServicerContext) -> None:
            with self._core.lock:
                self._core.log.append(RequestRecord(self._core.now(), path, "", "UNIMPLEMENTED"))
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                f"rl_lustre.testing: the fake does not implement {path}; "
                f"it implements {', '.join(sorted(self._routes))}",
            )

        return grpc.unary_unary_rpc_method_handler(unary)

    def start(self) -> int:
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return self.port

    def stop(self) -> None:
        self._server.stop(grace=None).wait()


class _Dispatch(grpc.GenericRpcHandler):
    def __init__(self, server: GrpcServer) -> None:
        self._server = server

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        path = handler_call_details.method
        return self._server._routes.get(path) or self._server._unimplemented(path)
