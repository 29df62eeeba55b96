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

This module holds the fake's public face (its knobs, state and fault API); the parts
behind it: ``_kube_server`` (HTTPS on a thread of its own), ``_kube_http`` (routing,
watches, logs), ``_kube_store`` (objects), ``_kube_controllers`` (simulated controllers),
``_kube_portforward`` and ``_kube_schema`` (:func:`schema_validator`).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
import os
import time
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from .._public import public
from ._kube_controller import pod_ready
from ._kube_controllers import Controllers
from ._kube_faults import KubeFaults, KubeTimings
from ._kube_http import ApiHandler, KubeRequest
from ._kube_programs import Programs, ServiceProxy
from ._kube_schema import schema_validator
from ._kube_server import TlsServer
from ._kube_store import KINDS, Obj, Store, labels_of

if TYPE_CHECKING:
    from google.cloud import container_v1
    from kubernetes.client import ApiClient

    from ..backends.gke import GKEBackend
    from ..cluster import Cluster
    from ._kube_headloss import RayHeads
    from ._kube_provisioning import Decider
    from ._kube_spot import RayletStarter
    from ._preemption import HeadLoss, Preemption

__all__ = ["DEFAULT_TOKEN", "KubeFake", "KubeFaults", "KubeRequest", "KubeTimings", "schema_validator"]

logger = logging.getLogger("rl_lustre.testing.kube")

DEFAULT_TOKEN = "kube-fake-token"
T = TypeVar("T")


@public("rl_lustre.testing")
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
        raylets: ``start(pod_name, node_name, resources)`` joins a real Ray worker node named
            ``node_name`` (what the pod's manifest makes ``ray start`` name it, see
            :mod:`rl_lustre.testing._kube_spot`) declaring ``resources`` (``{"CPU": n, "GPU": n,
            "memory": bytes}``, what KubeRay's ``ray start`` declares from the pod's
            ``rayStartParams`` and container resources) to the head behind ``head_target`` and
            returns a handle with ``kill()``; with it, every RayCluster
            worker pod is backed by such a raylet (Ready once it runs, killed with the pod),
            and :meth:`preempt` takes them away as Spot does.
        ray_heads: the real Ray heads behind the head pod (``kill()``, ``start()``: see
            :mod:`rl_lustre.testing._kube_headloss`), for :meth:`lose_head`.
        programs: run the pods of the on-cluster package's programs (the keeper, the
            teardown Job) as real processes here (see :mod:`rl_lustre.testing._kube_programs`).
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
        raylets: RayletStarter | None = None,
        ray_heads: RayHeads | None = None,
        programs: bool = False,
    ) -> None:
        from ..kube.tokens import EMULATOR_TOKEN

        self.ray_heads = ray_heads
        self._programs_on = programs
        self._programs: Programs | None = None
        self._service: ServiceProxy | None = None

        self.tokens = {DEFAULT_TOKEN, EMULATOR_TOKEN} if tokens is None else set(tokens)
        self.validate = validate
        self.head_target = head_target
        self.port_targets = dict(port_targets or {})
        self.faults = faults if faults is not None else KubeFaults()
        self.timings = timings if timings is not None else KubeTimings()
        self.watch_timeout = watch_timeout
        self.requests: list[KubeRequest] = []
        self.rejected: list[str] = []
        self.unhandled: list[str] = []
        self.controller_errors: list[str] = []
        self.portforwards = 0
        self.outages: list[Any] = []  # futures of outage(): done once the fake is back
        self._store = Store()
        self._controllers = Controllers(self._store, self.faults, self.timings, raylets=raylets)
        api = ApiHandler(self, self._store, self._controllers)
        self._server = TlsServer(api.handle, self._tick, on_stop=self._end_watches, sockets=api.sockets)

    # lifecycle

    def start(self) -> KubeFake:
        """Start serving (idempotent)."""
        if self._server.running:
            return self
        if self._programs_on:
            self._controllers.workloads.external = Programs.runs
        self._server.start()
        if self._programs_on:
            # After the server started: its port and CA are what the pods' credentials carry.
            self._service = ServiceProxy(lambda: self.head_target)
            host, port = self.endpoint.rsplit(":", 1)
            self._programs = Programs(
                self._store, api=(host, int(port)), ca_pem=self.ca_pem, token=DEFAULT_TOKEN, head=self._service
            )
        logger.debug("KubeFake serving on %s", self.url)
        KubeFake._serving.add(self)
        return self

    def stop(self) -> None:
        """Stop serving; raises if a simulated controller failed during the run."""
        if not self._server.running:
            return
        KubeFake._serving.discard(self)
        self._server.stop()
        self._controllers.spot.close()
        if self._programs is not None:
            self._programs.close()
        if self._service is not None:
            self._service.close()
        if self._controllers.spot.failures:
            self.controller_errors += [f"raylet behind pod {f}" for f in self._controllers.spot.failures]
        if self.controller_errors:
            raise RuntimeError("KubeFake controllers failed:\n" + "\n".join(self.controller_errors))

    def __enter__(self) -> KubeFake:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _tick(self) -> None:
        while True:
            try:
                self._controllers.step()
                if self._programs is not None:
                    self._programs.step(self._store_log)
            except Exception as exc:  # a bug in the fake must not pass silently
                logger.exception("KubeFake controller pass failed")
                self.controller_errors.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(self.timings.tick)

    def _end_watches(self) -> None:
        """End every open watch (on the server's loop)."""
        for w in list(self._store.watchers):
            w.queue.put_nowait(None)

    def _on_loop(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop (where the store changes) and return its result."""
        return self._server.on_loop(fn)

    # connection facts

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:<port>``: what GKE reports as the cluster endpoint."""
        return f"127.0.0.1:{self._server.port}"

    @property
    def url(self) -> str:
        return f"https://{self.endpoint}"

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate that signed the server certificate (PEM)."""
        return self._server.ca_pem

    @property
    def ca_b64(self) -> str:
        """The CA certificate as GKE reports it: base64 of the PEM."""
        return base64.b64encode(self._server.ca_pem).decode()

    def api_client(self, token: str = DEFAULT_TOKEN) -> ApiClient:
        """A kubernetes ``ApiClient`` for this fake, made by :func:`rl_lustre.kube.client.kube_api_client`
        (``token`` becomes one the fake accepts)."""
        from ..kube.client import kube_api_client
        from ..kube.tokens import StaticTokenSource

        self.tokens.add(token)  # the cluster issued it
        return kube_api_client(self.endpoint, self.ca_pem, StaticTokenSource(token))

    def write_kubeconfig(
        self,
        path: str | os.PathLike[str],
        *,
        token: str = DEFAULT_TOKEN,
        context: str = "kube-fake",
        namespace: str = "default",
    ) -> Path:
        """Write a kubeconfig for this fake (JSON, which is valid YAML) and return its path
        (``token`` becomes one the fake accepts)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "kube-fake", "cluster": {"server": self.url, "certificate-authority-data": self.ca_b64}}
            ],
            "users": [{"name": "kube-fake-user", "user": {"token": token}}],
            "contexts": [
                {"name": context, "context": {"cluster": "kube-fake", "user": "kube-fake-user", "namespace": namespace}}
            ],
            "current-context": context,
        }
        self.tokens.add(token)  # the cluster issued it
        out = Path(path)
        out.write_text(json.dumps(config, indent=2))
        out.chmod(0o600)
        return out

    # state

    def objects(
        self, kind: str | None = None, *, namespace: str | None = None, include_events: bool = False
    ) -> list[Obj]:
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

    def preload(self, pool: str, images: Sequence[str]) -> None:
        """The nodes of node pool ``pool`` boot with ``images`` on a secondary boot disk (a
        GKE preload image): their pods start without pulling them."""
        self._on_loop(lambda: self._controllers.workloads.preloaded.__setitem__(pool, set(images)))

    def remove_nodes(self, pool: str) -> None:
        """Drop the Nodes of node pool ``pool``, as deleting the pool does."""
        self._on_loop(lambda: self._controllers.workloads.remove_nodes(pool))

    # what GKE does to the cluster's Kubernetes API (FakeGCP(kube=...) calls these)

    def node_pool_ready(self, pool: container_v1.NodePool) -> list[str]:
        """Register the Nodes of a RUNNING GKE node pool (a ``container_v1.NodePool`` whose
        ``self_link`` names its cluster), shaped as GKE registers them
        (:func:`rl_lustre.testing._gke_nodes.gke_node`: labels, the GPU taint, capacity and
        allocatable), Ready, with their ``RegisteredNode`` and ``NodeReady`` Events, and the
        pool itself as the cluster autoscaler's node group
        (:mod:`rl_lustre.testing._kube_node_groups`); returns the Nodes' names."""
        from ._gke_nodes import node_group, pool_nodes

        nodes = pool_nodes(pool)
        group = node_group(pool)
        self._on_loop(lambda: self._controllers.autoscaler.register(group, nodes))
        return [node["metadata"]["name"] for node in nodes]

    def node_pool_updated(self, pool: container_v1.NodePool) -> None:
        """A pool changed in place: its Nodes get its labels and taints, its node group the new
        bounds (:meth:`rl_lustre.testing._kube_node_groups.NodeGroups.pool_updated`)."""
        from ._gke_nodes import node_group, pool_nodes

        group, template = node_group(pool), pool_nodes(pool, count=1)[0]
        self._on_loop(lambda: self._controllers.autoscaler.pool_updated(group, template))

    @property
    def autoscaling(self) -> Decider | None:
        """How the autoscaler's scale-ups of autoscaled pools are answered (same shape as
        :attr:`provisioning`; see :mod:`rl_lustre.testing._kube_autoscaler`)."""
        return self._controllers.autoscaler.decide

    @autoscaling.setter
    def autoscaling(self, decide: Decider | None) -> None:
        self._controllers.autoscaler.decide = decide

    @property
    def provisioning(self) -> Decider | None:
        """How ProvisioningRequests are answered: ``(pool, count, asked_at) -> (state, message,
        nodes)`` (see :mod:`rl_lustre.testing._kube_provisioning`); None grants each at once."""
        return self._controllers.provisioning.decide

    @provisioning.setter
    def provisioning(self, decide: Decider | None) -> None:
        self._controllers.provisioning.decide = decide

    def node_pool_deleted(self, name: str) -> None:
        """The Nodes of node pool ``name`` go with it."""
        self._on_loop(lambda: self._controllers.autoscaler.forget(name))
        self.remove_nodes(name)

    def cluster_deleted(self, name: str) -> None:
        """Deleting the GKE cluster takes its API server's objects with it."""
        self.remove_all()

    def evict(
        self, pod: str, *, namespace: str = "default", message: str = "The node was low on resource: memory. "
    ) -> None:
        """The kubelet evicts ``pod``: it ends ``Failed``, reason ``Evicted`` (KubeRay then
        replaces a Ray pod)."""
        from ._kube_store import now_rfc3339

        def evicted(o: Obj) -> None:
            stamp = now_rfc3339()
            image_ids = {
                c.get("name"): c.get("imageID", "") for c in (o.get("status") or {}).get("containerStatuses") or []
            }
            statuses = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": image_ids.get(c["name"], ""),
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {
                        "terminated": {"exitCode": 137, "reason": "Error", "startedAt": stamp, "finishedAt": stamp}
                    },
                }
                for c in (o.get("spec") or {}).get("containers") or []
            ]
            conditions = [
                c
                for c in (o.get("status") or {}).get("conditions") or []
                if c.get("type") not in ("Ready", "ContainersReady")
            ]
            conditions += [
                {"type": t, "status": "False", "reason": "PodFailed", "lastTransitionTime": stamp}
                for t in ("Ready", "ContainersReady")
            ]
            o["status"] = {
                **(o.get("status") or {}),
                "phase": "Failed",
                "reason": "Evicted",
                "message": message,
                "containerStatuses": statuses,
                "conditions": conditions,
            }

        if self._on_loop(lambda: self._store.update("Pod", namespace, pod, evicted)) is None:
            raise ValueError(f"no pod {namespace}/{pod}")

    @classmethod
    def serving(cls, cluster: Cluster) -> KubeFake | None:
        """The KubeFake of this process that serves ``cluster``'s Kubernetes API, if any."""
        host = cast("GKEBackend", cluster._backend())._kube_api().configuration.host.rstrip("/")
        return next((fake for fake in list(cls._serving) if fake.url.rstrip("/") == host), None)

    def preempt(
        self, raycluster: str, *, nodes: int = 1, back_after: float | None = 5.0, namespace: str = "default"
    ) -> Preemption:
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
        from ._preemption import Preemption

        def choose() -> list[Obj]:
            workers = sorted(
                (
                    p
                    for p in self._store.find("Pod", namespace)
                    if labels_of(p).get("ray.io/cluster") == raycluster
                    and labels_of(p).get("ray.io/node-type") == "worker"
                    and pod_ready(p)
                    and not p["metadata"].get("deletionTimestamp")
                ),
                key=lambda p: p["metadata"]["name"],
            )
            if len(workers) < nodes:
                raise ValueError(
                    f"cannot preempt {nodes} worker node(s) of RayCluster {raycluster!r}: "
                    f"{len(workers)} worker pod(s) are Ready"
                )
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
                    ready = self._on_loop(
                        lambda: [
                            p["metadata"]["name"]
                            for p in self._store.find("Pod", namespace)
                            if labels_of(p).get("ray.io/cluster") == raycluster
                            and pod_ready(p)
                            and labels_of(p).get("ray.io/node-type") == "worker"
                            and p["metadata"]["name"] not in names
                        ]
                    )
                    fresh = [n for n in ready if n not in before]
                    if len(fresh) >= len(names):
                        return fresh[: len(names)]
                    time.sleep(0.1)
                raise TimeoutError(f"the replacements of {names} were not Ready after 300 s")

            preemption._bring_back(replacements)
        return preemption

    def _store_log(self, pod: str, text: str, namespace: str) -> None:
        self._controllers.workloads.logs[(namespace, pod)] = text

    def lose_head(
        self, raycluster: str, *, reason: str = "Killed", back_after: float | None = 1.0, namespace: str = "default"
    ) -> HeadLoss:
        """Lose the head of ``raycluster`` as GKE does, and bring a new one back as KubeRay does
        (see :mod:`rl_lustre.testing._kube_headloss`); needs ``ray_heads``."""
        from ._kube_headloss import lose_head

        return lose_head(self, raycluster, reason=reason, back_after=back_after, namespace=namespace)

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
            self._end_watches()

        self._on_loop(compact)

    def remove_all(self) -> None:
        """Drop every object at once, as deleting a GKE cluster takes its API server's objects
        with it; open port-forwards end. Requests, faults and other records are kept."""

        def clear() -> None:
            self._store.clear()
            self._controllers.reset()
            self._end_watches()

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
        self.outages.append(self._server.submit(self._server.outage(seconds, on_down=self._end_watches)))

    def kill_portforwards(self) -> int:
        """Drop every open port-forward stream, as a restarting API server would."""
        if not self._server.running:
            return 0
        return self._server.submit(self._server.close_sockets()).result(30)
