"""Port-forward to a Service through the Kubernetes API, in Python, without ``kubectl``.

:class:`PortForward` listens on ``127.0.0.1:<free port>``. For each local connection it
opens a websocket to ``/api/v1/namespaces/NS/pods/POD/portforward?ports=P`` speaking
the ``v4.channel.k8s.io`` subprotocol, where every binary frame starts with a channel
byte (0 data, 1 error) and the first frame of each channel carries the port as two
little-endian bytes. The pod is a ready pod behind the Service (its selector), and the
port the Service's ``targetPort`` for the asked port, named or numbered, as
``kubectl port-forward svc/...`` resolves them.

A dropped stream only ends the local connection it carried; the next connection opens
a new stream, resolving the pod again when the last one failed (the head pod may have
been replaced). Bytes pass through untouched, so HTTP headers such as Ray's
``Authorization: Bearer`` token reach the pod as sent.

Why not ``kubernetes.stream.portforward``: it verifies TLS only against a CA *file*
(the GKE CA arrives as data), and it swaps ``call_api`` on the shared ``ApiClient``
while it connects, which races with other threads using that client.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..catalog import DASHBOARD_PORT
from ..errors import KubernetesError, RLLustreError
from .client import ResourceClient, auth_headers, ssl_context, translate_errors

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["PortForward", "port_forward"]

logger = logging.getLogger("rl_lustre.kube.portforward")

PROTOCOL = "v4.channel.k8s.io"
_DATA, _ERROR = 0, 1
_CHUNK = 256 * 1024


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


class PortForward:
    """A local TCP port forwarded to ``service:remote_port`` through the Kubernetes API.

    Examples:
        >>> with PortForward(api, "demo-head-svc", namespace="default") as pf:   # doctest: +SKIP
        ...     JobSubmissionClient(pf.url).list_jobs()

    Args:
        api_client: a kubernetes ``ApiClient`` (its TLS settings and token are used).
        service: the Service name, e.g. ``<cluster>-head-svc``.
        namespace: the Service's namespace.
        remote_port: the Service port (8265: the Ray dashboard and Jobs API).
        local_port: the local port; 0 picks a free one.
        resolve_timeout: how long to wait for a ready pod behind the Service.
        connect_timeout: how long opening one stream may take.
    """

    def __init__(
        self,
        api_client: ApiClient,
        service: str,
        *,
        namespace: str = "default",
        remote_port: int = DASHBOARD_PORT,
        local_port: int = 0,
        resolve_timeout: float = 60.0,
        connect_timeout: float = 30.0,
    ) -> None:
        self._api = api_client
        self.service = service
        self.namespace = namespace
        self.remote_port = remote_port
        self.resolve_timeout = resolve_timeout
        self.connect_timeout = connect_timeout
        self._want_port = local_port
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()
        self._target: tuple[str, int] | None = None
        self._streams: set[tuple[socket.socket, Any]] = set()
        self._closed = threading.Event()
        self._accepter: threading.Thread | None = None
        self.connections = 0
        self.resolutions = 0

    def __repr__(self) -> str:
        where = f"127.0.0.1:{self.local_port}" if self._listener else "not started"
        return f"PortForward({where} -> {self.namespace}/{self.service}:{self.remote_port})"

    @property
    def local_port(self) -> int:
        """The local port (after :meth:`start`)."""
        if self._listener is None:
            raise KubernetesError("the port-forward is not started")
        return int(self._listener.getsockname()[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<local_port>``."""
        return f"http://127.0.0.1:{self.local_port}"

    @property
    def api(self) -> Any:
        """The Kubernetes ``ApiClient`` it forwards through."""
        return self._api

    @property
    def pod(self) -> str | None:
        """The pod the next connection goes to, when known."""
        target = self._target
        return target[0] if target else None

    def start(self) -> PortForward:
        """Resolve a ready pod, then listen and forward in background threads.

        Raises:
            KubernetesError: the Service does not exist, exposes no such port, or has
                no ready pod within ``resolve_timeout``.
        """
        if self._listener is not None:
            return self
        self._resolve()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self._want_port))
        listener.listen(64)
        # accept() is not woken by close() from another thread; a short timeout lets
        # the loop notice close() instead.
        listener.settimeout(0.25)
        self._listener = listener
        self._accepter = threading.Thread(target=self._accept_loop, name=f"port-forward {self.service}", daemon=True)
        self._accepter.start()
        logger.info(
            "forwarding %s to %s/%s:%d (pod %s)", self.url, self.namespace, self.service, self.remote_port, self.pod
        )
        return self

    def close(self) -> None:
        """Stop listening and end every open stream."""
        self._closed.set()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._lock:
            streams = list(self._streams)
        for conn, ws in streams:
            _shutdown(conn)
            ws.abort()
        if self._accepter is not None:
            self._accepter.join(5)
        logger.debug("port-forward to %s/%s closed", self.namespace, self.service)

    def __enter__(self) -> PortForward:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # resolution

    def _resolve(self) -> tuple[str, int]:
        """A ready pod behind the Service and the pod port to reach; waits up to ``resolve_timeout``."""
        deadline = time.monotonic() + self.resolve_timeout
        delay = 0.2
        while True:
            found, why = self._resolve_once()
            if found is not None:
                with self._lock:
                    self._target = found
                    self.resolutions += 1
                logger.debug("port-forward %s:%d resolves to pod %s port %d", self.service, self.remote_port, *found)
                return found
            if time.monotonic() + delay > deadline:
                raise KubernetesError(
                    f"cannot port-forward to {self.namespace}/{self.service}:{self.remote_port}: {why}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _resolve_once(self) -> tuple[tuple[str, int] | None, str]:
        what = f"Service {self.namespace}/{self.service}"
        with translate_errors(f"read {what}"):
            svc = ResourceClient(self._api, "Service", self.namespace).get(self.service)
        if svc is None:
            return None, f"{what} does not exist"
        spec = svc.get("spec") or {}
        selector = spec.get("selector") or {}
        if not selector:
            raise KubernetesError(f"cannot port-forward to {what}: it has no pod selector")
        entry = next((p for p in spec.get("ports") or [] if int(p.get("port", 0)) == self.remote_port), None)
        if entry is None:
            raise KubernetesError(f"cannot port-forward to {what}: it exposes no port {self.remote_port}")
        target_port = entry.get("targetPort", self.remote_port)
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        with translate_errors(f"list pods of {what}"):
            pods, _ = ResourceClient(self._api, "Pod", self.namespace).list(label_selector=label_selector)
        ready = sorted(
            (p for p in pods if _pod_ready(p)),
            key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""),
            reverse=True,
        )
        if not ready:
            return None, f"no ready pod matches {label_selector} ({len(pods)} pod(s) exist)"
        pod = ready[0]
        port = _container_port(pod, target_port)
        if port is None:
            raise KubernetesError(
                f"cannot port-forward to {what}: pod {pod['metadata']['name']} has no port named {target_port!r}"
            )
        return (str(pod["metadata"]["name"]), port), ""

    # streams

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._closed.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connections += 1
            threading.Thread(
                target=self._serve, args=(conn,), name=f"port-forward {self.service} conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            ws, pod = self._open_stream()
        except RLLustreError as exc:
            logger.warning("port-forward connection dropped: %s", exc)
            _shutdown(conn)
            return
        with self._lock:
            self._streams.add((conn, ws))
        try:
            self._pump(conn, ws, pod)
            broken = False
        except Exception as exc:  # a broken stream ends this connection only
            logger.debug("port-forward stream to %s ended: %s", pod, exc)
            broken = True
        finally:
            with self._lock:
                self._streams.discard((conn, ws))
            _shutdown(conn)
            ws.abort()
            ws.shutdown()
        # A close from the server's side is how a stream normally ends (an HTTP response
        # with "Connection: close"); only a broken one makes us doubt the pod. A pod that
        # is gone is also caught when the next stream cannot open (see _open_stream).
        if broken and not self._closed.is_set():
            # Find the pod again for the next connection: it may have been replaced.
            with self._lock:
                if self._target is not None and self._target[0] == pod:
                    self._target = None

    def _open_stream(self) -> tuple[Any, str]:
        """A websocket to the current pod, resolving it (again) when needed."""
        import websocket

        last: Exception | None = None
        for attempt in range(2):
            with self._lock:
                target = self._target
            if target is None or attempt:
                target = self._resolve()
            pod, port = target
            try:
                return self._connect(pod, port), pod
            except (websocket.WebSocketException, OSError) as exc:
                last = exc
                logger.debug("port-forward stream to pod %s failed (%s); resolving the pod again", pod, exc)
        raise KubernetesError(f"cannot open a port-forward stream to {self.namespace}/{self.service}: {last}")

    def _connect(self, pod: str, port: int) -> Any:
        import websocket

        cfg = self._api.configuration
        base = str(cfg.host).rstrip("/")
        scheme = "wss://" if base.startswith("https://") else "ws://"
        url = (
            f"{scheme}{base.split('://', 1)[1]}/api/v1/namespaces/{quote(self.namespace)}/pods/{quote(pod)}"
            f"/portforward?ports={port}"
        )
        with translate_errors(f"authenticate the port-forward to pod {pod}"):
            headers = [f"{k}: {v}" for k, v in auth_headers(cfg).items()]
        ctx = ssl_context(cfg)
        ws = websocket.create_connection(
            url,
            header=headers,
            subprotocols=[PROTOCOL],
            sslopt={"context": ctx} if ctx is not None else None,
            timeout=self.connect_timeout,
            enable_multithread=True,
        )
        if ws.getsubprotocol() != PROTOCOL:
            ws.close()
            raise websocket.WebSocketException(f"the server chose subprotocol {ws.getsubprotocol()!r}, not {PROTOCOL}")
        ws.settimeout(None)
        return ws

    def _pump(self, conn: socket.socket, ws: Any, pod: str) -> bool:
        """Copy bytes both ways until either side ends; True when the local side ended it."""
        from websocket import ABNF

        sock = ws.sock
        announced = {_DATA: False, _ERROR: False}
        while True:
            readable, _, _ = select.select([conn, sock], [], [])
            if conn in readable:
                data = conn.recv(_CHUNK)
                if not data:
                    return True
                ws.send_binary(bytes([_DATA]) + data)
            if sock not in readable:
                continue
            # TLS may hold whole frames already decrypted, which select cannot see.
            while True:
                opcode, frame = ws.recv_data_frame(True)
                if opcode == ABNF.OPCODE_CLOSE:
                    return False
                if opcode == ABNF.OPCODE_BINARY and frame.data:
                    channel, payload = frame.data[0], frame.data[1:]
                    if channel not in announced:
                        raise KubernetesError(f"port-forward stream sent unknown channel {channel}")
                    if not announced[channel]:
                        # The first frame of each channel names the port (2 bytes, little-endian).
                        announced[channel] = True
                    elif channel == _DATA:
                        conn.sendall(payload)
                    elif payload:
                        logger.warning(
                            "port-forward to pod %s port %d failed: %s",
                            pod,
                            self.remote_port,
                            payload.decode("utf-8", "replace"),
                        )
                        return False
                if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                    break


def _container_port(pod: Mapping[str, Any], target: Any) -> int | None:
    """A Service targetPort (number or container port name) as a pod port number."""
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for p in container.get("ports") or []:
            if p.get("name") == target:
                return int(p["containerPort"])
    return None


def _shutdown(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    conn.close()


def port_forward(
    api_client: ApiClient, service: str, *, namespace: str = "default", remote_port: int = DASHBOARD_PORT
) -> PortForward:
    """Start a :class:`PortForward` (close it, or use it as a context manager).

    Examples:
        >>> pf = port_forward(api, "demo-head-svc")     # doctest: +SKIP
        >>> pf.url                                       # doctest: +SKIP
        'http://127.0.0.1:41235'
    """
    return PortForward(api_client, service, namespace=namespace, remote_port=remote_port).start()
