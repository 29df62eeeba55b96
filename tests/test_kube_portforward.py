"""Port-forward to ``<name>-head-svc:8265`` through the Kubernetes API (no kubectl).

The fake's portforward endpoint connects the head pod's port 8265 to a local HTTP
server (and, in the last test, to the session's real Ray head), so bytes really
travel: local socket → websocket (v4.channel.k8s.io) over TLS → fake → target.
"""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers.kube_deploy import deploy_reference

from rl_lustre import Cluster
from rl_lustre.errors import KubernetesError
from rl_lustre.kube.client import kube_api_client_from_kubeconfig
from rl_lustre.kube.portforward import PortForward
from rl_lustre.testing.kube import KubeFake

NAME = "pf-demo"
SERVICE = f"{NAME}-head-svc"


class EchoHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one local connection carries many requests

    def _reply(self, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._reply({"path": self.path, "authorization": self.headers.get("Authorization")})

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers["Content-Length"]))
        self._reply({"length": len(data), "sha256": hashlib.sha256(data).hexdigest()})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def echo() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EchoHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def fake(echo: http.server.ThreadingHTTPServer) -> Iterator[KubeFake]:
    with KubeFake(head_target=echo.server_address[:2]) as server:
        deploy_reference(server, NAME)
        yield server


@pytest.fixture
def api(fake: KubeFake):
    return fake.api_client()


def get(url: str, headers: dict[str, str] | None = None) -> dict:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def head_pod(fake: KubeFake) -> str:
    pods = [
        p
        for p in fake.objects("Pod")
        if p["metadata"]["labels"].get("ray.io/node-type") == "head" and not p["metadata"].get("deletionTimestamp")
    ]
    assert len(pods) == 1
    return pods[0]["metadata"]["name"]


def test_http_reaches_the_head_with_authorization_untouched(fake: KubeFake, api) -> None:
    before = fake.portforwards
    with PortForward(api, SERVICE) as pf:
        assert pf.url.startswith("http://127.0.0.1:")
        pod = pf.pod
        assert pod == head_pod(fake)
        reply = get(pf.url + "/api/jobs/?x=1", {"Authorization": "Bearer ray-token-123"})
        assert reply == {"path": "/api/jobs/?x=1", "authorization": "Bearer ray-token-123"}
        assert get(pf.url + "/plain") == {"path": "/plain", "authorization": None}
    assert fake.portforwards - before == 2, "one stream per local connection"
    stream_requests = [r for r in fake.requests if r.path.endswith("/portforward")]
    assert all(r.query == "ports=8265" and r.path.endswith(f"/pods/{pod}/portforward") for r in stream_requests)
    assert all(r.token == "kube-fake-token" for r in stream_requests), "the stream carries the API token"


def test_large_and_concurrent_transfers_arrive_intact(api) -> None:
    payloads = [bytes([i]) * (700_000 + i * 1000) for i in range(6)]
    with PortForward(api, SERVICE) as pf:

        def post(data: bytes) -> dict:
            request = urllib.request.Request(pf.url + "/upload", data=data, method="POST")
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())

        with ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(post, payloads))
    assert replies == [{"length": len(p), "sha256": hashlib.sha256(p).hexdigest()} for p in payloads]


def test_dropped_stream_ends_one_connection_and_the_next_one_works(fake: KubeFake, api) -> None:
    with PortForward(api, SERVICE) as pf:
        conn = http.client.HTTPConnection("127.0.0.1", pf.local_port, timeout=10)
        conn.request("GET", "/first")
        assert json.loads(conn.getresponse().read())["path"] == "/first"
        assert fake.kill_portforwards() == 1
        conn.sock.settimeout(5)
        assert conn.sock.recv(1) == b"", "the local connection of a dropped stream is closed"
        conn.close()
        assert get(pf.url + "/second")["path"] == "/second"
        assert pf.connections == 2


def test_replaced_head_pod_is_found_again(fake: KubeFake, api) -> None:
    with PortForward(api, SERVICE, resolve_timeout=20) as pf:
        old = pf.pod
        assert get(pf.url + "/before")["path"] == "/before"
        fake.delete("Pod", old)
        deadline = time.monotonic() + 10
        while fake.get("Pod", old) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert get(pf.url + "/after")["path"] == "/after"
        assert pf.pod != old
        assert pf.pod == head_pod(fake)
        assert pf.resolutions >= 2


def test_refused_target_closes_the_connection_and_recovers(fake: KubeFake, api, echo, caplog) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()
    fake.head_target = dead
    try:
        with PortForward(api, SERVICE) as pf:
            caplog.set_level(logging.WARNING, logger="rl_lustre.kube.portforward")
            with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
                get(pf.url + "/nothing-there")
            assert any("connection refused" in r.getMessage().lower() for r in caplog.records)
            fake.head_target = echo.server_address[:2]
            assert get(pf.url + "/back")["path"] == "/back"
    finally:
        fake.head_target = echo.server_address[:2]


def test_missing_service_or_no_ready_pod_is_a_kubernetes_error(fake: KubeFake, api) -> None:
    with pytest.raises(KubernetesError, match="does not exist"):
        PortForward(api, "nope-head-svc", resolve_timeout=0.3).start()
    fake.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "lonely", "namespace": "default"},
            "spec": {"selector": {"app": "none"}, "ports": [{"port": 8265, "targetPort": 8265}]},
        }
    )
    try:
        with pytest.raises(KubernetesError, match="no ready pod matches app=none"):
            PortForward(api, "lonely", resolve_timeout=0.3).start()
        with pytest.raises(KubernetesError, match="exposes no port 9999"):
            PortForward(api, "lonely", remote_port=9999).start()
    finally:
        fake.delete("Service", "lonely")


def test_named_target_port_is_resolved_from_the_pod(fake: KubeFake, api) -> None:
    fake.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "named", "namespace": "default"},
            "spec": {
                "selector": {"ray.io/cluster": NAME, "ray.io/node-type": "head"},
                "ports": [{"name": "http", "port": 80, "targetPort": "dashboard"}],
            },
        }
    )
    try:
        with PortForward(api, "named", remote_port=80) as pf:
            assert get(pf.url + "/named")["path"] == "/named"
        assert [r.query for r in fake.requests if r.path.endswith("/portforward")][-1] == "ports=8265"
    finally:
        fake.delete("Service", "named")


def test_through_a_kubeconfig_client(fake: KubeFake, tmp_path) -> None:
    api = kube_api_client_from_kubeconfig(fake.write_kubeconfig(tmp_path / "config", token="kc-token"))
    with PortForward(api, SERVICE) as pf:
        assert get(pf.url + "/kc")["path"] == "/kc"
    assert [r.token for r in fake.requests if r.path.endswith("/portforward")][-1] == "kc-token"


def test_close_stops_listening_and_ends_open_streams(api) -> None:
    pf = PortForward(api, SERVICE).start()
    conn = http.client.HTTPConnection("127.0.0.1", pf.local_port, timeout=10)
    conn.request("GET", "/open")
    conn.getresponse().read()
    port = pf.local_port
    started = time.monotonic()
    pf.close()
    assert time.monotonic() - started < 2
    conn.sock.settimeout(5)
    assert conn.sock.recv(1) == b""
    conn.close()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


@pytest.mark.slow
def test_real_ray_head_through_the_port_forward(fake: KubeFake, api, echo, local_cluster: Cluster) -> None:
    head = getattr(local_cluster._backend(), "head", None)
    if head is None:
        pytest.skip("the local backend exposes no head handle")
    host, port = head.dashboard_url.removeprefix("http://").rsplit(":", 1)
    fake.head_target = (host, int(port))
    try:
        with PortForward(api, SERVICE) as pf:
            version = get(pf.url + "/api/version", head.headers())
            assert "ray_version" in version
            jobs_request = urllib.request.Request(pf.url + "/api/jobs/", headers=head.headers())
            with urllib.request.urlopen(jobs_request, timeout=30) as response:
                assert isinstance(json.loads(response.read()), list)
            if head.headers():
                with pytest.raises(urllib.error.HTTPError) as info:
                    urllib.request.urlopen(pf.url + "/api/jobs/", timeout=30)
                info.value.close()
                assert info.value.code in (401, 403), "Ray's token auth sees exactly what the client sent"
    finally:
        fake.head_target = echo.server_address[:2]
