"""A Kubernetes API server fake, served over TLS, that simulates the KubeRay operator.

:class:`KubeFake` speaks the real wire protocol, so the real ``kubernetes`` client,
rl_lustre's own code paths and the real ``kubectl`` (``tests/test_kubectl.py``) run
unchanged against it:

- HTTPS on ``127.0.0.1:<free port>`` with a CA generated at start; :attr:`KubeFake.endpoint`
  and :attr:`KubeFake.ca_b64` are what a (fake) GKE cluster reports as its endpoint
  and ``master_auth.cluster_ca_certificate``;
- a bearer token the cluster issued is required on every request (``401`` otherwise):
  see :attr:`KubeFake.tokens`;
- discovery (``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>/<version>``, ``/openapi/v3``)
  built from the kind table in ``_kube_kinds`` (one ``register_kind`` call per kind);
- the kinds are stored as an API server stores them: ``201`` with
  ``uid``/``resourceVersion``/``creationTimestamp``/``namespace`` filled in, empty
  ``omitempty`` strings of built-in kinds dropped, ``409`` AlreadyExists, ``404``; label
  selectors and the field selectors each kind supports (others: ``400``); PUT with
  optimistic concurrency; JSON merge patches and, for built-in kinds, strategic merge
  patches (``415`` for custom resources), with the immutability rules of PV/PVC specs;
  status subresources; DELETE answered with a ``Status`` when the object goes at once and
  with the object while finalizers (``pvc-protection``, ``pv-protection``,
  ``foregroundDeletion``) or a pod's graceful termination hold it; owner references;
- watches honour ``resourceVersion`` and ``timeoutSeconds``, send ``ADDED``/``DELETED``
  when an object enters or leaves a selector, and answer a compacted version with
  ``410 Gone`` (:meth:`KubeFake.compact`);
- simulated controllers (KubeRay operator, scheduler, kubelet, PV binder, garbage
  collector) turn a RayCluster into a headless head Service as KubeRay v1.x makes it,
  head and worker Pods that go Running and Ready, a bound PVC and a ready RayCluster
  status, or fail in the ways :class:`KubeFaults` asks for; a volume whose claim is
  deleted is ``Released`` (bound to no other claim until its ``claimRef`` is cleared);
  DaemonSets get a pod per matching Node, Jobs a pod that runs and completes or fails
  (see ``_kube_workloads``);
- ``pods/<name>/log`` returns what :meth:`KubeFake.write_log` wrote for the pod;
- ``pods/<name>/portforward`` over a websocket, as ``v4.channel.k8s.io`` (rl_lustre's)
  or as kubectl's tunnelled ``SPDY/3.1+portforward.k8s.io``, connects to a real local
  TCP target: :attr:`KubeFake.head_target` for the head's dashboard port 8265.

Examples:
    >>> from rl_lustre.testing.kube import KubeFake
    >>> with KubeFake() as fake:                                # doctest: +SKIP
    ...     api = fake.api_client()
    ...     fake.objects()
    []

Requests the fake does not implement get a ``404`` whose message says so, and are
listed in :attr:`KubeFake.unhandled`.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import json
import logging
import os
import re
import ssl
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from . import _kube_discovery as _discovery
from ._kube_certs import make_certs
from ._kube_operator import Controllers, KubeFaults, KubeTimings
from ._kube_store import (
    BY_PATH,
    KINDS,
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
    from kubernetes.client import ApiClient

    from ._preempt import Preemption

__all__ = ["DEFAULT_TOKEN", "KubeFake", "KubeFaults", "KubeTimings", "RequestRecord", "schema_validator"]

logger = logging.getLogger("rl_lustre.testing.kube")

DEFAULT_TOKEN = "kube-fake-token"
DASHBOARD_PORT = 8265
_CORE = re.compile(r"/api/v1(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[a-z]+))?)?")
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
class RequestRecord:
    """One request the fake received, in arrival order (never its body: it may hold
    Secret values). ``status`` is set once the answer starts (0 until then)."""

    method: str
    path: str
    query: str
    token: str | None = attrs.field(repr=False)
    status: int = 0


def schema_validator(crd_path: str | os.PathLike[str] | None = None, *, kubernetes_version: str = "1.33.0") -> Callable[[Obj], None]:
    """A ``validate`` callable for :class:`KubeFake`: the real schemas, strictly.

    Core objects go through ``kubernetes_validate`` in strict mode (unknown fields
    are errors). RayClusters go through ``jsonschema`` against KubeRay's CRD with
    unknown fields forbidden, as the API server prunes and rejects them: the schema
    shipped in :mod:`rl_lustre.kube.schema`, or the CRD YAML at ``crd_path``.
    ``networking.gke.io/v1`` objects go through the schemas shipped in
    ``rl_lustre/kube/crds`` (:func:`rl_lustre.kube.schema.validate_networking`).

    Examples:
        >>> check = schema_validator()
        >>> check({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque"})
        >>> check({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "tpye": "Opaque"})
        ... # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        kubernetes_validate.utils.ValidationError: unknown field 'tpye'

    Args:
        crd_path: a ``ray.io_rayclusters.yaml`` CRD to use instead of the shipped schema.
        kubernetes_version: the Kubernetes version whose schemas apply.
    """
    import kubernetes_validate

    ray_validator = _crd_validator(os.fspath(crd_path) if crd_path is not None else None)

    def validate(obj: Obj) -> None:
        if obj.get("apiVersion") == "networking.gke.io/v1":
            from ..kube.schema import validate_networking

            validate_networking(obj)
            return
        if obj.get("apiVersion") == "ray.io/v1":
            ray_validator.validate(obj)
            return
        kubernetes_validate.validate(obj, kubernetes_version, strict=True)

    return validate


@functools.lru_cache(maxsize=4)
def _crd_validator(crd_path: str | None) -> Any:
    """A jsonschema validator for the CRD's v1 schema, built once per file (it is large)."""
    import jsonschema

    from ..kube.schema import forbid_unknown_fields, raycluster_schema

    if crd_path is None:
        schema = raycluster_schema()
    else:
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        crd = yaml.load(Path(crd_path).read_text(), Loader=loader)
        version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
        schema = forbid_unknown_fields(version["schema"]["openAPIV3Schema"])
    return jsonschema.validators.validator_for(schema)(schema)


class KubeFake:
    """A TLS Kubernetes API server with simulated KubeRay, for tests.

    Examples:
        >>> from rl_lustre.kube.client import ResourceClient
        >>> with KubeFake() as fake:                                  # doctest: +SKIP
        ...     secrets = ResourceClient(fake.api_client(), "Secret", "default")
        ...     created = secrets.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})
        ...     created["metadata"]["uid"] != ""
        True

    Args:
        tokens: the bearer tokens this cluster accepts (any other gets 401): by default
            ``kube-fake-token`` (what :meth:`api_client` and :meth:`write_kubeconfig` use)
            and the token rl_lustre sends under the GCP emulators.
        validate: called with every object a client creates or patches (the merged
            result); an exception rejects the request with ``422 Invalid`` and is
            listed in :attr:`rejected`. See :func:`schema_validator`.
        head_target: ``(host, port)`` that a port-forward to a head pod's port 8265 reaches.
        port_targets: ``{port: (host, port)}`` for port-forwards to any pod's other ports.
        faults: fault knobs (also settable later through :attr:`faults`).
        timings: how fast the simulated cluster moves.
        watch_timeout: how long a watch without ``timeoutSeconds`` stays open.
        raylets: ``start(pod_name)`` joins a real Ray worker node to the head behind
            ``head_target`` and returns a handle with ``kill()``; with it, every RayCluster
            worker pod is backed by such a raylet (Ready once it runs, killed with the pod),
            and :meth:`preempt` takes them away as Spot does.
    """

    _serving: ClassVar[weakref.WeakSet[KubeFake]] = weakref.WeakSet()

    def __init__(
        self,
        *,
        tokens: Collection[str] | None = None,
        validate: Callable[[Obj], None] | None = None,
        head_target: tuple[str, int] | None = None,
        port_targets: Mapping[int, tuple[str, int]] | None = None,
        faults: KubeFaults | None = None,
        timings: KubeTimings | None = None,
        watch_timeout: float = 300.0,
        raylets: Callable[[str], Any] | None = None,
    ) -> None:
        from ..kube.client import EMULATOR_TOKEN

        self.tokens = {DEFAULT_TOKEN, EMULATOR_TOKEN} if tokens is None else set(tokens)
        self.validate = validate
        self.head_target = head_target
        self.port_targets = dict(port_targets or {})
        self.faults = faults if faults is not None else KubeFaults()
        self.timings = timings if timings is not None else KubeTimings()
        self.watch_timeout = watch_timeout
        self.requests: list[RequestRecord] = []
        self.rejected: list[str] = []
        self.unhandled: list[str] = []
        self.controller_errors: list[str] = []
        self.portforwards = 0
        self.outages: list[Any] = []  # futures of outage(): done once the fake is back
        self._store = Store()
        self._controllers = Controllers(self._store, self.faults, self.timings, raylets=raylets)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._sockets: set[Any] = set()
        self._port = 0
        self._ca_pem = b""

    # lifecycle

    def start(self) -> KubeFake:
        """Start serving (idempotent)."""
        if self._thread is not None:
            return self
        certs = make_certs("127.0.0.1")
        self._ca_pem = certs.ca_pem
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory(prefix="kube-fake-") as tmp:
            cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert.write_bytes(certs.cert_pem)
            key.write_bytes(certs.key_pem)
            key.chmod(0o600)
            ctx.load_cert_chain(cert, key)
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(ctx))
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name="kube-fake", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            self._thread = None
            raise RuntimeError(f"KubeFake did not start: {failure[0]}") from failure[0]
        logger.debug("KubeFake serving on %s", self.url)
        KubeFake._serving.add(self)
        return self

    def stop(self) -> None:
        """Stop serving; raises if a simulated controller failed during the run."""
        if self._thread is None or self._loop is None:
            return
        KubeFake._serving.discard(self)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._thread = None
        self._controllers.spot.close()
        if self._controllers.spot.failures:
            self.controller_errors += [f"raylet behind pod {f}" for f in self._controllers.spot.failures]
        if self.controller_errors:
            raise RuntimeError("KubeFake controllers failed:\n" + "\n".join(self.controller_errors))

    def __enter__(self) -> KubeFake:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, ctx: ssl.SSLContext) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        self._site, self._ssl = site, ctx
        self._port = site.port
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _shutdown(self) -> None:
        self._ticker.cancel()
        for w in list(self._store.watchers):
            w.queue.put_nowait(None)
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _tick(self) -> None:
        while True:
            try:
                self._controllers.step()
            except Exception as exc:  # a bug in the fake must not pass silently
                logger.exception("KubeFake controller pass failed")
                self.controller_errors.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(self.timings.tick)

    def _on_loop(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the server's loop (where the store changes) and return its result."""
        if self._loop is None or self._thread is None:
            raise RuntimeError("KubeFake is not running: call start() or use it as a context manager")

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(30)

    # connection facts

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:<port>``: what GKE reports as the cluster endpoint."""
        return f"127.0.0.1:{self._port}"

    @property
    def url(self) -> str:
        return f"https://{self.endpoint}"

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate that signed the server certificate (PEM)."""
        return self._ca_pem

    @property
    def ca_b64(self) -> str:
        """The CA certificate as GKE reports it: base64 of the PEM."""
        return base64.b64encode(self._ca_pem).decode()

    def api_client(self, token: str = DEFAULT_TOKEN) -> ApiClient:
        """A kubernetes ``ApiClient`` for this fake, made by :func:`rl_lustre.kube.client.kube_api_client`
        (``token`` becomes one the fake accepts)."""
        from ..kube.client import StaticTokenSource, kube_api_client

        self.tokens.add(token)  # the cluster issued it
        return kube_api_client(self.endpoint, self.ca_pem, StaticTokenSource(token))

    def write_kubeconfig(self, path: str | os.PathLike[str], *, token: str = DEFAULT_TOKEN, context: str = "kube-fake",
                         namespace: str = "default") -> Path:
        """Write a kubeconfig for this fake (JSON, which is valid YAML) and return its path
        (``token`` becomes one the fake accepts)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kube-fake", "cluster": {"server": self.url, "certificate-authority-data": self.ca_b64}}],
            "users": [{"name": "kube-fake-user", "user": {"token": token}}],
            "contexts": [{"name": context, "context": {"cluster": "kube-fake", "user": "kube-fake-user", "namespace": namespace}}],
            "current-context": context,
        }
        self.tokens.add(token)  # the cluster issued it
        out = Path(path)
        out.write_text(json.dumps(config, indent=2))
        out.chmod(0o600)
        return out

    # state

    def objects(self, kind: str | None = None, *, namespace: str | None = None, include_events: bool = False) -> list[Obj]:
        """Copies of the stored objects, for assertions and leak counting.

        Events are left out unless asked for: no one owns them and a real cluster
        expires them on its own.
        """
        with self._store.lock:
            return [
                copy.deepcopy(o)
                for o in self._store.find(kind, namespace)
                if include_events or kind == "Event" or o["kind"] != "Event"
            ]

    def get(self, kind: str, name: str, namespace: str | None = "default") -> Obj | None:
        """A copy of one stored object, or ``None``."""
        obj = self._store.get(kind, namespace if KINDS[kind].namespaced else None, name)
        return copy.deepcopy(obj)

    def create(self, obj: Obj) -> Obj:
        """Store an object as if a client had created it (no token or validation)."""
        return copy.deepcopy(self._on_loop(lambda: self._store.create(obj)))

    def delete(self, kind: str, name: str, namespace: str | None = "default") -> None:
        """Start deleting an object as a client would (background propagation)."""
        ns = namespace if KINDS[kind].namespaced else None
        self._on_loop(lambda: self._store.delete(kind, ns, name, foreground=False))

    def add_nodes(self, pool: str, count: int, labels: Mapping[str, str] | None = None) -> list[str]:
        """Register ``count`` Ready ``v1`` Nodes of GKE node pool ``pool`` (DaemonSets then
        place a pod on each that their ``nodeSelector`` matches); returns their names."""
        return list(self._on_loop(lambda: self._controllers.workloads.add_nodes(pool, count, dict(labels or {}))))

    def remove_nodes(self, pool: str) -> None:
        """Drop the Nodes of node pool ``pool``, as deleting the pool does."""
        self._on_loop(lambda: self._controllers.workloads.remove_nodes(pool))

    @classmethod
    def serving(cls, cluster: Any) -> KubeFake | None:
        """The KubeFake of this process that serves ``cluster``'s Kubernetes API, if any."""
        host = cluster._backend()._kube_api().configuration.host.rstrip("/")
        return next((fake for fake in list(cls._serving) if fake.url.rstrip("/") == host), None)

    def preempt(self, raycluster: str, *, nodes: int = 1, back_after: float | None = 5.0,
                namespace: str = "default") -> Preemption:
        """Preempt the Spot nodes of ``nodes`` Ready worker pods of ``raycluster``, as GKE does.

        Their Nodes get the impending-termination taint and go NotReady, the pods end
        ``Failed`` (``Terminated``, ``DisruptionTarget``/``TerminationByKubelet``), their
        raylets are killed and the Nodes removed; new worker pods stay unschedulable (no
        Spot capacity) for ``back_after`` seconds (None: for ever), then land on new
        nodes. Returns at once; :meth:`Preemption.wait` waits for the replacements.

        Examples:
            >>> gone = fake.preempt("rl-e2e", nodes=1, back_after=3)  # doctest: +SKIP
            >>> gone.wait(timeout=60)  # doctest: +SKIP
            ['rl-e2e-gpu-workers-worker-x7k2p']

        Raises:
            ValueError: fewer than ``nodes`` worker pods are Ready.
        """
        from ._kube_operator import _pod_ready
        from ._preempt import Preemption

        def choose() -> list[Obj]:
            workers = sorted(
                (p for p in self._store.find("Pod", namespace)
                 if labels_of(p).get("ray.io/cluster") == raycluster and labels_of(p).get("ray.io/node-type") == "worker"
                 and _pod_ready(p) and not p["metadata"].get("deletionTimestamp")),
                key=lambda p: p["metadata"]["name"])
            if len(workers) < nodes:
                raise ValueError(f"cannot preempt {nodes} worker node(s) of RayCluster {raycluster!r}: "
                                 f"{len(workers)} worker pod(s) are Ready")
            victims = workers[:nodes]
            self._controllers.preempt(victims, back_after)
            return copy.deepcopy(victims)

        # The pods there before (the fake operator may create a replacement at once).
        before = set(self._on_loop(lambda: [p["metadata"]["name"] for p in self._store.find("Pod", namespace)]))
        victims = self._on_loop(choose)
        names = [p["metadata"]["name"] for p in victims]
        logger.info("preempted the Spot nodes of %s", names)
        preemption = Preemption(names, time.time(), back_after)
        if back_after is not None:
            def replacements() -> list[str]:
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    ready = self._on_loop(lambda: [
                        p["metadata"]["name"] for p in self._store.find("Pod", namespace)
                        if labels_of(p).get("ray.io/cluster") == raycluster and _pod_ready(p)
                        and labels_of(p).get("ray.io/node-type") == "worker" and p["metadata"]["name"] not in names])
                    fresh = [n for n in ready if n not in before]
                    if len(fresh) >= len(names):
                        return fresh[: len(names)]
                    time.sleep(0.1)
                raise TimeoutError(f"the replacements of {names} were not Ready after 300 s")

            preemption._bring_back(replacements)
        return preemption

    def write_log(self, pod: str, text: str, namespace: str = "default") -> None:
        """Append ``text`` to what ``pods/<pod>/log`` returns, as the pod's container printing it."""
        def write() -> None:
            logs = self._controllers.workloads.logs
            logs[(namespace, pod)] = logs.get((namespace, pod), "") + text

        self._on_loop(write)

    def compact(self) -> None:
        """Forget the watch history and end open watches, as an API server restart after
        etcd compaction does: watching again from an older resourceVersion gets 410 Gone."""
        def compact() -> None:
            self._store.compact()
            for w in list(self._store.watchers):
                w.queue.put_nowait(None)

        self._on_loop(compact)

    def remove_all(self) -> None:
        """Drop every object at once, as deleting a GKE cluster takes its API server's objects
        with it; open port-forwards end. Requests, faults and other records are kept."""
        def clear() -> None:
            self._store.clear()
            self._controllers.reset()
            for w in list(self._store.watchers):
                w.queue.put_nowait(None)

        self._on_loop(clear)
        self.kill_portforwards()

    def reset(self) -> None:
        """Forget every object and record, and restore default faults (keeps serving)."""
        def clear() -> None:
            self._store.clear()
            self._controllers.reset()

        self._on_loop(clear)
        self.kill_portforwards()
        self.faults.image_pull = False
        self.faults.unschedulable = None
        self.faults.pvc_never_binds = False
        self.faults.crash_loop = None
        self.faults.no_operator = False
        self.faults.no_crd = False
        self.faults.legacy_status = False
        self.faults.job_failure = None
        self.requests.clear()
        self.rejected.clear()
        self.unhandled.clear()

    def outage(self, seconds: float) -> None:
        """Go away for ``seconds`` and come back on the same address, as a restarting control
        plane does: connections are refused, open connections (watches, port-forwards,
        idle keep-alive ones) are dropped. Returns at once; objects are kept.

        Examples:
            >>> fake.outage(5.0)   # doctest: +SKIP
        """
        from aiohttp import web

        async def down() -> None:
            site = self._site
            await site.stop()
            for w in list(self._store.watchers):
                w.queue.put_nowait(None)
            for ws in list(self._sockets):
                await ws.close()
            server = self._runner.server if self._runner is not None else None
            for handler in list(getattr(server, "_connections", ())):
                handler.force_close()
            await asyncio.sleep(seconds)
            assert self._runner is not None
            self._site = web.TCPSite(self._runner, "127.0.0.1", self._port, ssl_context=self._ssl)
            await self._site.start()
            logger.debug("KubeFake is back after a %.1fs outage", seconds)

        if self._loop is None:
            raise RuntimeError("KubeFake is not running: call start() or use it as a context manager")
        self.outages.append(asyncio.run_coroutine_threadsafe(down(), self._loop))

    def kill_portforwards(self) -> int:
        """Drop every open port-forward stream, as a restarting API server would."""
        if self._loop is None:
            return 0

        async def kill() -> int:
            sockets = list(self._sockets)
            for ws in sockets:
                await ws.close()
            return len(sockets)

        killed: int = asyncio.run_coroutine_threadsafe(kill(), self._loop).result(30)
        return killed

    # HTTP

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        token = _bearer(request)
        record = RequestRecord(request.method, request.path, request.query_string, token)
        self.requests.append(record)
        try:
            if token is None or token not in self.tokens:
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
        record.status = response.status
        return response

    def _discovery(self, path: str) -> Obj:
        """Discovery documents (see :mod:`._kube_discovery`); RayClusters vanish with ``no_crd``."""
        hidden = {"ray.io"} if self.faults.no_crd else set()
        roots = {"/api": lambda: _discovery.api_versions(self.endpoint),
                 "/apis": lambda: _discovery.api_group_list(hidden),
                 "/openapi/v3": _discovery.openapi_v3_index}
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

    async def _dispatch(self, request: web.Request, record: RequestRecord) -> web.StreamResponse:
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
        if info.kind == "RayCluster" and self.faults.no_crd:
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
                return web.json_response(self._create(info, ns, body), status=201)
            return self._unhandled(request)
        if method == "GET":
            return web.json_response(self._store.require(info.kind, ns, name))
        if method == "PATCH":
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
            if ctype not in (_MERGE_PATCH, _STRATEGIC_PATCH):
                raise ApiError(415, "UnsupportedMediaType",
                               f"the KubeFake applies merge and strategic merge patches, not {ctype!r}")
            patch = await self._json_body(request)
            return web.json_response(self._store.patch(info.kind, ns, name, patch, self._validator(info, name),
                                                       strategic=ctype == _STRATEGIC_PATCH))
        if method == "PUT":
            body = await self._json_body(request)
            return web.json_response(self._store.put(info.kind, ns, name, body, self._validator(info, name)))
        if method == "DELETE":
            options = await self._json_body(request, optional=True)
            policy = query.get("propagationPolicy") or options.get("propagationPolicy") or "Background"
            if policy == "Orphan":
                raise ApiError(400, "BadRequest", "the KubeFake does not implement propagationPolicy=Orphan")
            obj, removed = self._store.delete(info.kind, ns, name, foreground=policy == "Foreground")
            if not removed:
                return web.json_response(obj)
            # Gone at once: the server answers with a Status, not the object.
            return web.json_response({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": info.group, "kind": info.plural, "uid": obj["metadata"]["uid"]},
            })
        return self._unhandled(request)

    def _log(self, ns: str, name: str, query: Mapping[str, str]) -> web.StreamResponse:
        """``pods/<name>/log``: what :meth:`write_log` gave the pod (``tailLines`` honoured)."""
        from aiohttp import web

        pod = self._store.require("Pod", ns, name)
        if (pod.get("status") or {}).get("phase") not in ("Running", "Succeeded", "Failed"):
            container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name", "")
            raise ApiError(400, "BadRequest",
                           f'container "{container}" in pod "{name}" is waiting to start: PodInitializing')
        lines = self._controllers.workloads.logs.get((ns, name), "").splitlines(keepends=True)
        tail = query.get("tailLines")
        if tail is not None and tail.isdigit():
            lines = lines[len(lines) - int(tail):] if int(tail) else []
        return web.Response(text="".join(lines), content_type="text/plain")

    def _unhandled(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        what = f"{request.method} {request.path_qs}"
        self.unhandled.append(what)
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

    def _validator(self, info: KindInfo, name: str) -> Callable[[Obj], None] | None:
        check = self.validate
        if check is None:
            return None

        def run(obj: Obj) -> None:
            try:
                check(copy.deepcopy(obj))
            except Exception as exc:
                problem = f"{info.kind} {name}: {type(exc).__name__}: {exc}"
                self.rejected.append(problem)
                raise ApiError(422, "Invalid", f'{info.kind} "{name}" is invalid: {exc}') from exc

        return run

    def _create(self, info: KindInfo, ns: str | None, body: Obj) -> Obj:
        if body.get("kind") != info.kind or body.get("apiVersion") != info.api_version:
            raise ApiError(
                400, "BadRequest",
                f"the body's {body.get('apiVersion')}/{body.get('kind')} does not match {info.api_version}/{info.kind}",
            )
        meta = body.setdefault("metadata", {})
        if info.namespaced:
            if meta.get("namespace") not in (None, ns):
                raise ApiError(
                    400, "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = ns
        check = self._validator(info, str(meta.get("name") or meta.get("generateName") or "?"))
        if check is not None:
            check(body)
        return self._store.create(body)

    def _list(self, info: KindInfo, ns: str | None, query: Mapping[str, str]) -> Obj:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), info)
        with self._store.lock:
            items = self._store.find(info.kind, ns, lambda o: labels(labels_of(o)) and fields(o))
            rv = str(self._store.rv)
        if info.api_version == "v1":
            # Like the real server, typed core lists leave kind/apiVersion off their items.
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        return {"kind": f"{info.kind}List", "apiVersion": info.api_version, "metadata": {"resourceVersion": rv}, "items": items}

    async def _watch(self, request: web.Request, info: KindInfo, ns: str | None, record: RequestRecord) -> web.StreamResponse:
        from aiohttp import web

        query = request.query
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), info)
        queue: asyncio.Queue[tuple[str, Obj] | None] = asyncio.Queue()
        watcher = Watcher(info.kind, ns, lambda o: labels(labels_of(o)) and fields(o), queue)
        timeout = float(query.get("timeoutSeconds") or self.watch_timeout)
        since = query.get("resourceVersion")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        record.status = response.status
        # No await between reading the backlog and registering: no event can slip between.
        try:
            if since in (None, "", "0"):
                backlog = [("ADDED", copy.deepcopy(o)) for o in self._store.find(info.kind, ns, watcher.match)]
            else:
                backlog = self._store.events_since(int(since), watcher)
        except (Gone, ValueError) as exc:
            gone = isinstance(exc, Gone)
            status = ApiError(410 if gone else 400, "Expired" if gone else "BadRequest", str(exc)).status()
            await response.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
            await response.write_eof()
            return response
        self._store.watchers.add(watcher)
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
            self._store.watchers.discard(watcher)
        return response

    # port-forward

    def _target(self, pod: Obj, port: int) -> tuple[str, int] | None:
        if port == DASHBOARD_PORT and labels_of(pod).get("ray.io/node-type") == "head" and self.head_target:
            return self.head_target
        return self.port_targets.get(port)

    async def _portforward(self, request: web.Request, ns: str, name: str) -> web.StreamResponse:
        """``pods/<name>/portforward`` over a websocket: ``v4.channel.k8s.io`` (ours) or
        kubectl's tunnelled SPDY (see :mod:`._kube_portforward`)."""
        from aiohttp import web

        from . import _kube_portforward as pf

        pod = self._store.require("Pod", ns, name)
        if (pod.get("status") or {}).get("phase") != "Running":
            raise ApiError(400, "BadRequest", f"unable to upgrade connection: pod {name} is not running")
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        ports = [int(p) for value in request.query.getall("ports", []) for p in value.split(",") if p.strip()]
        if pf.SPDY_TUNNEL not in offered and len(ports) != 1:
            raise ApiError(400, "BadRequest", f"the KubeFake forwards exactly one port per v4 connection, not {ports}")
        ws = web.WebSocketResponse(protocols=pf.PROTOCOLS, max_msg_size=16 * 1024 * 1024, autoping=True)
        if not ws.can_prepare(request).ok:
            raise ApiError(400, "BadRequest", f"port-forward needs a websocket upgrade (subprotocol {' or '.join(pf.PROTOCOLS)})")
        await ws.prepare(request)
        if ws.ws_protocol not in pf.PROTOCOLS:
            await ws.close(message=b"unsupported subprotocol")
            return ws
        self.portforwards += 1
        self._sockets.add(ws)
        try:
            if ws.ws_protocol == pf.SPDY_TUNNEL:
                await pf.SpdySession(ws, pod, lambda port: self._target(pod, port)).run()
            else:
                await pf.serve_v4(ws, pod, ports[0], lambda port: self._target(pod, port))
        finally:
            self._sockets.discard(ws)
        return ws


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def _event_line(event: tuple[str, Obj]) -> bytes:
    typ, obj = event
    return json.dumps({"type": typ, "object": obj}).encode() + b"\n"
