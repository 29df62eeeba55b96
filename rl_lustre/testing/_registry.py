"""A container registry on loopback: the OCI distribution API's manifests and the token flow.

Served at ``RL_LUSTRE_REGISTRY_EMULATOR`` (set by :class:`~rl_lustre.testing.FakeGCP`), one
server for every registry host, the host as the first path segment:

- ``HEAD|GET /<host>/v2/<repository>/manifests/<tag or digest>``: without a token, ``401``
  with ``WWW-Authenticate: Bearer realm=…/token,service=<host>,scope=repository:<repo>:pull``;
  with one, the manifest (an OCI index naming a ``linux/amd64`` manifest, whose layers have
  sizes) and its ``Docker-Content-Digest``; ``404 MANIFEST_UNKNOWN`` for what is not there.
- ``GET /token?service=…&scope=…``: an anonymous pull token, as nvcr.io and Docker Hub give.
- A :meth:`~RegistryFake.private` repository answers ``401`` even with a token.

Requests go through the fakes' request log and faults (``registry.manifests.head``,
``registry.manifests.get``, ``registry.token``: ``gcp.faults.fail_call("registry.manifests.get",
503)``). The images of :data:`rl_lustre.catalog.IMAGE_COMPRESSED_BYTES` are there from the
start, with their stated sizes.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..catalog import IMAGE_COMPRESSED_BYTES
from ..registry import parse_reference
from ._core import Core, FakeError

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
_MANIFEST_PATH = re.compile(r"/(?P<host>[^/]+)/v2/(?P<repo>.+)/manifests/(?P<ref>[^/]+)")


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def split_layers(total: int, count: int = 40) -> list[int]:
    """``count`` layer sizes adding up to ``total`` bytes."""
    base = total // count
    return [base] * (count - 1) + [total - base * (count - 1)]


class RegistryFake:
    """Repositories, tags and manifests, served over HTTP on loopback."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.base = ""
        # (host, repository) -> {"tags": {tag: digest}, "blobs": {digest: (media type, bytes)}}
        self._repos: dict[tuple[str, str], dict[str, Any]] = {}
        self._private: set[tuple[str, str]] = set()
        self._tokens: set[str] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        for ref, size in IMAGE_COMPRESSED_BYTES.items():
            self.add(ref, layers=split_layers(size))
        core.methods.update({"registry.manifests.head", "registry.manifests.get", "registry.token"})

    def add(self, ref: str, *, layers: Sequence[int] = (1_000_000,), index: bool = True) -> str:
        """Push ``ref`` (``host/repo:tag``) with layers of these sizes; returns its digest
        (the index's, or the manifest's with ``index=False``). Pushing again moves the tag."""
        parsed = parse_reference(ref)
        repo = self._repos.setdefault((parsed.host, parsed.repository), {"tags": {}, "blobs": {}})
        salt = secrets.token_hex(8)  # a new push is a new image, even with the same sizes
        config = json.dumps({"architecture": "amd64", "os": "linux", "rl_lustre_fake": salt}).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST,
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "size": len(config),
                    "digest": _digest(config),
                },
                "layers": [
                    {"mediaType": LAYER, "size": int(n), "digest": _digest(f"{salt}/{i}".encode())}
                    for i, n in enumerate(layers)
                ],
            }
        ).encode()
        repo["blobs"][_digest(manifest)] = (MANIFEST, manifest)
        top = manifest
        if index:
            top = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": INDEX,
                    "manifests": [
                        {
                            "mediaType": MANIFEST,
                            "size": len(manifest),
                            "digest": _digest(manifest),
                            "platform": {"architecture": "amd64", "os": "linux"},
                        }
                    ],
                }
            ).encode()
            repo["blobs"][_digest(top)] = (INDEX, top)
        if parsed.tag:
            repo["tags"][parsed.tag] = _digest(top)
        return _digest(top)

    def digest(self, ref: str) -> str:
        """The digest ``ref``'s tag points at now."""
        parsed = parse_reference(ref)
        return str(self._repos[(parsed.host, parsed.repository)]["tags"][parsed.tag])

    def compressed_bytes(self, ref: str) -> int | None:
        """The summed layer sizes of ``ref``'s linux/amd64 image (by tag or digest), or None."""
        parsed = parse_reference(ref)
        repo = self._repos.get((parsed.host, parsed.repository))
        if repo is None:
            return None
        digest = parsed.digest or repo["tags"].get(parsed.tag)
        blob = repo["blobs"].get(digest)
        if blob is None:
            return None
        manifest = json.loads(blob[1])
        if blob[0] == INDEX:
            manifest = json.loads(repo["blobs"][manifest["manifests"][0]["digest"]][1])
        return sum(int(layer["size"]) for layer in manifest["layers"])

    def private(self, ref: str) -> None:
        """Make ``ref``'s repository private: 401 even with an anonymous token."""
        parsed = parse_reference(ref)
        self._private.add((parsed.host, parsed.repository))

    def remove(self, ref: str) -> None:
        """Delete ``ref``'s repository."""
        parsed = parse_reference(ref)
        self._repos.pop((parsed.host, parsed.repository), None)

    # serving

    def _manifest(self, verb: str, host: str, repo: str, ref: str, auth: str) -> tuple[int, dict[str, str], bytes]:
        if not (auth.startswith("Bearer ") and auth[7:] in self._tokens) or (host, repo) in self._private:
            challenge = f'Bearer realm="{self.base}/token",service="{host}",scope="repository:{repo}:pull"'
            return 401, {"WWW-Authenticate": challenge}, _error("UNAUTHORIZED", "authentication required")
        found = self._repos.get((host, repo))
        digest = (found or {}).get("tags", {}).get(ref, ref)
        blob = (found or {}).get("blobs", {}).get(digest)
        if blob is None:
            return 404, {}, _error("MANIFEST_UNKNOWN" if found else "NAME_UNKNOWN", f"manifest unknown: {repo}:{ref}")
        media_type, body = blob
        return 200, {"Content-Type": media_type, "Docker-Content-Digest": digest}, body if verb == "GET" else b""

    def dispatch(self, verb: str, raw: str, headers: Any) -> tuple[int, dict[str, str], bytes]:
        url = urlsplit(raw)
        if verb == "GET" and url.path == "/token":

            def token() -> str:
                value = f"fake-{secrets.token_hex(8)}"
                self._tokens.add(value)
                return value

            try:
                value = self.core.handle("registry.token", url.path, token)
            except FakeError as err:
                return err.http_code, {}, _error("UNAVAILABLE", err.message)
            query = parse_qs(url.query)
            return (
                200,
                {"Content-Type": "application/json"},
                json.dumps({"token": value, "expires_in": 300, "scope": query.get("scope", [""])[0]}).encode(),
            )
        m = _MANIFEST_PATH.fullmatch(url.path)
        if m is None or verb not in ("HEAD", "GET"):
            return 404, {}, _error("NAME_UNKNOWN", f"no route {verb} {url.path}")
        try:
            return self.core.handle(
                f"registry.manifests.{verb.lower()}",
                url.path,
                lambda: self._manifest(verb, m["host"], m["repo"], m["ref"], headers.get("Authorization", "")),
            )
        except FakeError as err:
            return err.http_code, {}, _error("UNAVAILABLE", err.message)

    def start(self) -> str:
        fake = self

        class RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                status, extra, body = fake.dispatch(self.command, self.path, self.headers)
                self.send_response(status)
                extra.setdefault("Content-Type", "application/json")
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_POST = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), RequestHandler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-registry", daemon=True
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


def _error(code: str, message: str) -> bytes:
    return json.dumps({"errors": [{"code": code, "message": message}]}).encode()
