"""The HTTP fake for the REST APIs: Compute Engine networking (:mod:`._compute`),
Service Networking (:mod:`._servicenetworking`) and Cloud Storage (:mod:`._storage`).

Routes follow the real URL templates (``/compute/v1/projects/{project}/global/networks``,
``/v1/services/{service}/connections``, ...). Any other route answers 501 naming itself.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ._compute import ComputeFake, Handler
from ._core import Core, FakeError, RequestRecord
from ._servicenetworking import ServiceNetworkingFake
from ._storage import Media, StorageFake

# Methods whose request body is not JSON (a media upload): the handler gets ``(bytes, content type)``.
_RAW_BODY = frozenset({"storage.objects.insert"})


class RestFake:
    """One HTTP server for the REST fakes: Compute networking and Service Networking."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.base = ""
        self._routes: list[tuple[str, re.Pattern[str], str, Handler]] = []
        self.compute = ComputeFake(core, lambda: self.base)
        self.servicenetworking = ServiceNetworkingFake(core)
        self.storage = StorageFake(core)
        for verb, path, method, fn in [
            *self.compute.routes(),
            *self.servicenetworking.routes(),
            *self.storage.routes(),
        ]:
            self.add_route(verb, path, method, fn)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def add_route(self, verb: str, path: str, method: str, fn: Handler) -> None:
        """Serve ``verb path`` (a regex with named groups) with ``fn(params, query, body)``."""
        self._routes.append((verb, re.compile(path), method, fn))
        self.core.methods.add(method)

    def start(self) -> str:
        fake = self

        class RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Answer at once: with Nagle's algorithm on, every small response waits ~40 ms
            # for the client's delayed ACK, which a real API front end does not add.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, payload = fake.dispatch(
                    self.command, self.path, raw, self.headers.get("Content-Type") or "application/octet-stream"
                )
                if isinstance(payload, Media):
                    body, content_type = payload.data, payload.content_type
                else:
                    body, content_type = json.dumps(payload).encode(), "application/json; charset=UTF-8"
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), RequestHandler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-gcp-rest", daemon=True
        )
        self._thread.start()
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self.base

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def dispatch(
        self, verb: str, raw_path: str, raw_body: bytes, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        url = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        for route_verb, pattern, method, fn in self._routes:
            m = pattern.fullmatch(url.path)
            if m is None or route_verb != verb:
                continue
            try:
                if method in _RAW_BODY:
                    body: Any = (raw_body, content_type)
                else:
                    body = json.loads(raw_body) if raw_body else {}
                params = m.groupdict()

                def run(fn: Handler = fn, params: dict[str, str] = params, body: Any = body) -> Any:
                    return fn(params, query, body)

                named = verb == "POST" and isinstance(body, dict) and isinstance(body.get("name"), str)
                resource = f"{url.path}/{body['name']}" if named else url.path
                return 200, self.core.handle(method, url.path, run, resource=resource)
            except FakeError as err:
                return err.http_code, self._error(err)
            except json.JSONDecodeError as err:
                return 400, self._error(FakeError(400, f"invalid JSON body: {err}"))
        with self.core.lock:
            self.core.log.append(RequestRecord(self.core.now(), f"{verb} {url.path}", "", "UNIMPLEMENTED"))
        return 501, self._error(FakeError(501, f"rl_lustre.testing: the fake does not implement {verb} {url.path}"))

    @staticmethod
    def _error(err: FakeError) -> dict[str, Any]:
        return {
            "error": {
                "code": err.http_code,
                "message": err.message,
                "status": err.grpc_code.name,
                "errors": [
                    {"message": err.message, "domain": "global", "reason": err.reason or err.grpc_code.name.lower()}
                ],
            }
        }
