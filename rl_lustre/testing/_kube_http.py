"""The Kubernetes API of :class:`~rl_lustre.testing.kube.KubeFake`: routing, CRUD, watches, logs.

:class:`ApiHandler` answers every HTTP request the server receives: the bearer token,
``/version``, discovery (``_kube_discovery``), the resource paths of the kind table
(``/api/v1/...``, ``/apis/<group>/<version>/...``) with list, create, get, merge and
strategic merge patch, put and delete on the store (``_kube_store``), watches that honour
``resourceVersion`` and ``timeoutSeconds``, ``pods/<name>/log`` and
``pods/<name>/portforward`` (``_kube_portforward``). What it does not implement gets a
``404`` saying so and is listed in :attr:`KubeFake.unhandled`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ..catalog import DASHBOARD_PORT
from . import _kube_discovery as _discovery
from ._core import RequestRecord
from ._kube_store import (
    BY_PATH,
    ApiError,
    Gone,
    KindInfo,
    Obj,
    Store,
    Watcher,
    labels_of,
    parse_field_selector,
    parse_label_selector,
)

if TYPE_CHECKING:
    from aiohttp import web

    from ._kube_controllers import Controllers
    from .kube import KubeFake

logger = logging.getLogger("rl_lustre.testing.kube")

_CORE = re.compile(
    r"/api/v1(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[a-z]+))?)?"
)
_GROUP = re.compile(
    r"/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[a-z]+))?)?"
)
_MERGE_PATCH = "application/merge-patch+json"
_STRATEGIC_PATCH = "application/strategic-merge-patch+json"
_DISCOVERY = re.compile(
    r"/api(?:/v1)?|/apis(?:/[a-z0-9.-]+/v[0-9a-z]+)?|/openapi/v3(?:/api/v1|/apis/[a-z0-9.-]+/v[0-9a-z]+)?"
)


@attrs.define
class KubeRequest(RequestRecord):
    """One request the Kubernetes fake received, in arrival order (never its body: it may
    hold Secret values): a :class:`~rl_lustre.testing.RequestRecord` whose ``target`` is
    the URL path, plus the query, the bearer token and the HTTP ``status``, set once the
    answer starts (0 until then; ``outcome`` follows it)."""

    query: str = ""
    token: str | None = attrs.field(default=None, repr=False)
    status: int = 0

    @property
    def path(self) -> str:
        """The URL path (``target``)."""
        return self.target

    def answered(self, status: int) -> None:
        self.status = status
        self.outcome = "ok" if status < 400 else str(status)


class ApiHandler:
    """Answers the requests of ``fake`` (whose tokens, faults, validator, port-forward targets
    and records it reads and writes) from ``store``; :attr:`sockets` holds the open port-forwards."""

    def __init__(self, fake: KubeFake, store: Store, controllers: Controllers) -> None:
        self.fake = fake
        self.store = store
        self.controllers = controllers
        self.sockets: set[Any] = set()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        token = _bearer(request)
        record = KubeRequest(time.monotonic(), request.method, request.path, query=request.query_string, token=token)
        self.fake.requests.append(record)
        try:
            if token is None or token not in self.fake.tokens:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if request.path == "/version" and request.method == "GET":
                response: web.StreamResponse = web.json_response(
                    {"major": "1", "minor": "33", "gitVersion": "v1.33.0-kube-fake", "platform": "linux/amd64"}
                )
            elif request.path == "/openapi/v2":
                raise ApiError(404, "NotFound", "the server could not find the requested resource (OpenAPI v3 only)")
            elif request.method == "GET" and _DISCOVERY.fullmatch(request.path.rstrip("/")):
                response = web.json_response(self._discovery(request.path.rstrip("/")))
            else:
                response = await self._dispatch(request, record)
        except ApiError as err:
            response = web.json_response(err.status(), status=err.code)
        record.answered(response.status)
        return response

    def _discovery(self, path: str) -> Obj:
        """Discovery documents (see :mod:`._kube_discovery`); RayClusters vanish with ``no_crd``."""
        hidden = {"ray.io"} if self.fake.faults.no_crd else set()
        roots = {
            "/api": lambda: _discovery.api_versions(self.fake.endpoint),
            "/apis": lambda: _discovery.api_group_list(hidden),
            "/openapi/v3": _discovery.openapi_v3_index,
        }
        body: Obj | None
        if path in roots:
            body = roots[path]()
        else:
            openapi = path.startswith("/openapi/v3/")
            rest = path.removeprefix("/openapi/v3")
            gv = "v1" if rest == "/api/v1" else rest.removeprefix("/apis/")
            hide = gv.partition("/")[0] in hidden
            body = None if hide else _discovery.openapi_v3(gv) if openapi else _discovery.api_resource_list(gv)
        if body is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return body

    async def _dispatch(self, request: web.Request, record: KubeRequest) -> web.StreamResponse:
        from aiohttp import web

        path, method, query = request.path, request.method, request.query
        m = _CORE.fullmatch(path)
        api_version = "v1"
        if m is None:
            m = _GROUP.fullmatch(path)
            if m is not None:
                api_version = f"{m['group']}/{m['version']}"
        info = BY_PATH.get((api_version, m["plural"])) if m else None
        if m is None or info is None or (m["ns"] is not None and not info.namespaced):
            return self._unhandled(request)
        if info.kind == "RayCluster" and self.fake.faults.no_crd:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns, name, sub = (m["ns"] if info.namespaced else None), m["name"], m["sub"]
        if sub == "portforward" and info.kind == "Pod" and name and method == "GET":
            return await self._portforward(request, ns or "default", name)
        if sub == "log" and info.kind == "Pod" and name and method == "GET":
            return self._log(ns or "default", name, query)
        if sub is not None:
            return self._unhandled(request)
        if name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    return await self._watch(request, info, ns, record)
                return web.json_response(self._list(info, ns, query))
            if method == "POST" and (ns is not None or not info.namespaced):
                body = await self._json_body(request)
                warnings: list[str] = []
                created = self._create(info, ns, body, query.get("fieldValidation", "Warn"), warnings)
                return _warned(web.json_response(created, status=201), warnings)
            return self._unhandled(request)
        if method == "GET":
            return web.json_response(self.store.require(info.kind, ns, name))
        if method == "PATCH":
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
            if ctype not in (_MERGE_PATCH, _STRATEGIC_PATCH):
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the KubeFake applies merge and strategic merge patches, not {ctype!r}",
                )
            patch = await self._json_body(request)
            warnings = []
            check = self._validator(info, name, query.get("fieldValidation", "Warn"), warnings, patch=True)
            patched = self.store.patch(info.kind, ns, name, patch, check, strategic=ctype == _STRATEGIC_PATCH)
            return _warned(web.json_response(patched), warnings)
        if method == "PUT":
            body = await self._json_body(request)
            warnings = []
            check = self._validator(info, name, query.get("fieldValidation", "Warn"), warnings)
            return _warned(web.json_response(self.store.put(info.kind, ns, name, body, check)), warnings)
        if method == "DELETE":
            options = await self._json_body(request, optional=True)
            policy = query.get("propagationPolicy") or options.get("propagationPolicy") or "Background"
            if policy == "Orphan":
                raise ApiError(400, "BadRequest", "the KubeFake does not implement propagationPolicy=Orphan")
            obj, removed = self.store.delete(info.kind, ns, name, foreground=policy == "Foreground")
            if not removed:
                return web.json_response(obj)
            # Gone at once: the server answers with a Status, not the object.
            return web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {"name": name, "group": info.group, "kind": info.plural, "uid": obj["metadata"]["uid"]},
                }
            )
        return self._unhandled(request)

    def _log(self, ns: str, name: str, query: Mapping[str, str]) -> web.StreamResponse:
        """``pods/<name>/log``: what :meth:`write_log` gave the pod (``tailLines`` honoured)."""
        from aiohttp import web

        pod = self.store.require("Pod", ns, name)
        if (pod.get("status") or {}).get("phase") not in ("Running", "Succeeded", "Failed"):
            container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name", "")
            raise ApiError(
                400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: PodInitializing'
            )
        lines = self.controllers.workloads.logs.get((ns, name), "").splitlines(keepends=True)
        tail = query.get("tailLines")
        if tail is not None and tail.isdigit():
            lines = lines[len(lines) - int(tail) :] if int(tail) else []
        return web.Response(text="".join(lines), content_type="text/plain")

    def _unhandled(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        what = f"{request.method} {request.path_qs}"
        self.fake.unhandled.append(what)
        logger.error("KubeFake does not implement %s", what)
        return web.json_response(
            ApiError(404, "NotFound", f"the KubeFake does not implement {what}").status(), status=404
        )

    @staticmethod
    async def _json_body(request: web.Request, *, optional: bool = False) -> Obj:
        raw = await request.read()
        if not raw:
            if optional:
                return {}
            raise ApiError(400, "BadRequest", "request body required")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"invalid JSON body: {exc}") from exc
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        return body

    def _validator(
        self, info: KindInfo, name: str, field_validation: str, warnings: list[str], *, patch: bool = False
    ) -> Callable[[Obj], None]:
        """What the server checks before storing ``obj``: its fields against the kind's
        schema (``fieldValidation``, see :mod:`._kube_fields`), then the test's ``validate``."""
        from ._kube_fields import check_fields

        check = self.fake.validate

        def run(obj: Obj) -> None:
            check_fields(obj, field_validation, patch=patch, warnings=warnings)
            if info.kind == "ComputeClass":
                # The CRD's schema holds on every write (types, values, ranges), as on GKE.
                from ..kube.schema import validate_compute_class

                try:
                    validate_compute_class(obj)
                except Exception as exc:
                    self.fake.rejected.append(f"{info.kind} {name}: {exc}")
                    raise ApiError(422, "Invalid", f'{info.kind}.cloud.google.com "{name}" is invalid: {exc}') from exc
            if check is None:
                return
            try:
                check(copy.deepcopy(obj))
            except Exception as exc:
                problem = f"{info.kind} {name}: {type(exc).__name__}: {exc}"
                self.fake.rejected.append(problem)
                raise ApiError(422, "Invalid", f'{info.kind} "{name}" is invalid: {exc}') from exc

        return run

    def _create(self, info: KindInfo, ns: str | None, body: Obj, field_validation: str, warnings: list[str]) -> Obj:
        # As the API server: a body without apiVersion and kind is of the kind its path names.
        body.setdefault("apiVersion", info.api_version)
        body.setdefault("kind", info.kind)
        if body.get("kind") != info.kind or body.get("apiVersion") != info.api_version:
            raise ApiError(
                400,
                "BadRequest",
                f"the body's {body.get('apiVersion')}/{body.get('kind')} does not match {info.api_version}/{info.kind}",
            )
        meta = body.setdefault("metadata", {})
        if info.namespaced:
            if meta.get("namespace") not in (None, ns):
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = ns
        self._validator(info, str(meta.get("name") or meta.get("generateName") or "?"), field_validation, warnings)(
            body
        )
        return self.store.create(body)

    def _list(self, info: KindInfo, ns: str | None, query: Mapping[str, str]) -> Obj:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), info)
        with self.store.lock:
            items = self.store.find(info.kind, ns, lambda o: labels(labels_of(o)) and fields(o))
            rv = str(self.store.rv)
        if info.api_version == "v1":
            # Like the real server, typed core lists leave kind/apiVersion off their items.
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        return {
            "kind": f"{info.kind}List",
            "apiVersion": info.api_version,
            "metadata": {"resourceVersion": rv},
            "items": items,
        }

    async def _watch(
        self, request: web.Request, info: KindInfo, ns: str | None, record: KubeRequest
    ) -> web.StreamResponse:
        from aiohttp import web

        query = request.query
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), info)
        queue: asyncio.Queue[tuple[str, Obj] | None] = asyncio.Queue()
        watcher = Watcher(info.kind, ns, lambda o: labels(labels_of(o)) and fields(o), queue)
        timeout = float(query.get("timeoutSeconds") or self.fake.watch_timeout)
        since = query.get("resourceVersion")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        record.answered(response.status)
        # No await between reading the backlog and registering: no event can slip between.
        try:
            if since in (None, "", "0"):
                backlog = [("ADDED", copy.deepcopy(o)) for o in self.store.find(info.kind, ns, watcher.match)]
            else:
                backlog = self.store.events_since(int(since), watcher)
        except (Gone, ValueError) as exc:
            gone = isinstance(exc, Gone)
            status = ApiError(410 if gone else 400, "Expired" if gone else "BadRequest", str(exc)).status()
            await response.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
            await response.write_eof()
            return response
        self.store.watchers.add(watcher)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            for event in backlog:
                await response.write(_event_line(event))
            while (remaining := deadline - loop.time()) > 0:
                try:
                    # Wake up now and then to notice a client that went away.
                    live = await asyncio.wait_for(queue.get(), min(remaining, 0.5))
                except asyncio.TimeoutError:
                    if request.transport is None or request.transport.is_closing():
                        break
                    continue
                if live is None:
                    break
                await response.write(_event_line(live))
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client went away
        finally:
            self.store.watchers.discard(watcher)
        return response

    # port-forward

    def _target(self, pod: Obj, port: int) -> tuple[str, int] | None:
        if port == DASHBOARD_PORT and labels_of(pod).get("ray.io/node-type") == "head" and self.fake.head_target:
            return self.fake.head_target
        return self.fake.port_targets.get(port)

    async def _portforward(self, request: web.Request, ns: str, name: str) -> web.StreamResponse:
        """``pods/<name>/portforward`` over a websocket: ``v4.channel.k8s.io`` (ours) or
        kubectl's tunnelled SPDY (see :mod:`._kube_portforward`)."""
        from aiohttp import web

        from . import _kube_portforward as pf

        pod = self.store.require("Pod", ns, name)
        if (pod.get("status") or {}).get("phase") != "Running":
            raise ApiError(400, "BadRequest", f"unable to upgrade connection: pod {name} is not running")
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        ports = [int(p) for value in request.query.getall("ports", []) for p in value.split(",") if p.strip()]
        if pf.SPDY_TUNNEL not in offered and len(ports) != 1:
            raise ApiError(400, "BadRequest", f"the KubeFake forwards exactly one port per v4 connection, not {ports}")
        ws = web.WebSocketResponse(protocols=pf.PROTOCOLS, max_msg_size=16 * 1024 * 1024, autoping=True)
        if not ws.can_prepare(request).ok:
            raise ApiError(
                400, "BadRequest", f"port-forward needs a websocket upgrade (subprotocol {' or '.join(pf.PROTOCOLS)})"
            )
        await ws.prepare(request)
        if ws.ws_protocol not in pf.PROTOCOLS:
            await ws.close(message=b"unsupported subprotocol")
            return ws
        self.fake.portforwards += 1
        self.sockets.add(ws)
        try:
            if ws.ws_protocol == pf.SPDY_TUNNEL:
                await pf.SpdySession(ws, pod, lambda port: self._target(pod, port)).run()
            else:
                await pf.serve_v4(ws, pod, ports[0], lambda port: self._target(pod, port))
        finally:
            self.sockets.discard(ws)
        return ws


def _warned(response: web.Response, warnings: list[str]) -> web.Response:
    """``response`` with a ``Warning: 299`` header per warning, as the API server sends them."""
    for warning in warnings:
        response.headers.add("Warning", "299 - " + json.dumps(warning))
    return response


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def _event_line(event: tuple[str, Obj]) -> bytes:
    typ, obj = event
    return json.dumps({"type": typ, "object": obj}).encode() + b"\n"
