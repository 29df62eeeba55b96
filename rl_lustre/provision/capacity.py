"""Getting the GPU nodes (``gpu-pool``'s driver): every GPU pool of the capacity policy, then
the first nodes from the deployment's ComputeClass.

Which capacity comes is GKE's decision: the ComputeClass (:mod:`rl_lustre.kube.computeclass`)
orders the policy's pools, and the cluster autoscaler tries them in that order each time
nodes are needed, falling back at once on a stock-out. :class:`CapacityPoolDriver` only

1. creates every pool of the policy, in parallel (each kind in each candidate zone: Spot,
   on-demand and flex-start from 0 nodes, a reservation's held; adopting the ones an
   earlier ``up()`` made, and bringing a pool made before the ComputeClass, a fixed-size
   Spot pool, to the new shape in place, :mod:`rl_lustre.provision.pool_upgrade`); a
   reservation pool that cannot get its nodes is a failed attempt, and is deleted;
2. with the Kubernetes part, asks for the first nodes with capacity probes that select
   the class (:mod:`rl_lustre.provision.scaleup`), so that the nodes come while Managed
   Lustre is still being created, and waits for them.

What stays on this side, because a ComputeClass cannot do it:

- **queued flex-start**: a pool with queued provisioning gets nodes only for a
  ProvisioningRequest, never from the autoscaler for a pending pod (GKE's "Run a
  large-scale workload with flex-start with queued provisioning"). ``up()`` applies the
  class with the rules before a queued flex-start kind (:func:`rl_lustre.spec.lanes.class_stages`);
  when they have no capacity it asks for every node at once through a request in each zone
  of that kind, in order, each for at most the kind's ``wait`` (``Failed``,
  ``CapacityRevoked`` or ``BookingExpired`` end it at once), and adds the rules after it
  only if the request does not deliver; once the nodes are there the whole class is applied;
- **giving up**: the class has no deadline; with ``whenUnsatisfiable: DoNotScaleUp`` the
  pods wait for ever. ``up()`` waits at most the sum of the waits of the kinds the class
  tries (the lanes of the stage), and ends sooner when the probes' events say the
  autoscaler has nothing left to try (every rule in backoff after a failed scale-up, or
  none can take the pod). Then it raises :class:`~rl_lustre.errors.CapacityExhaustedError`
  with every attempt, and the executor keeps what ``ClusterSpec.on_no_capacity`` says;
- **the pools themselves**, in the zones ``capacity_zones`` allows (a class's ``nodepools``
  rules name pools that must exist; the region's zones are found at ``up()``).

Each stage is an :class:`Attempt`; progress lines (the ``rl_lustre.provision.capacity`` log and
the live view's row) say what is awaited, since when, what was tried and what is next. The
Lustre volume never moves: a pool in another zone of the region reaches the zonal instance
across zones (inter-zone traffic is billed, and adds latency); the plan's pools say so.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ..errors import CapacityExhaustedError, GCPError
from ..plankeys import GKE_CLUSTER_KEY, GPU_POOL_KEY, RAYCLUSTER_KEY
from .context import Context
from .step import Done, Step

if TYPE_CHECKING:
    from ..kube.capacity_signals import Signal
    from ..spec.lanes import Lane

__all__ = ["Attempt", "CapacityPoolDriver", "capacity_signal", "zones_for"]

logger = logging.getLogger("rl_lustre.provision.capacity")


@attrs.define
class Attempt:
    """One thing tried for the GPU nodes: when, and how it ended.

    Attributes:
        index: its place in the order.
        label: ``ComputeClass demo-gpus: spot in us-east1-b, spot in us-east1-c`` or
            ``flex-start (queued, 7d) in us-east1-b``.
        kind: the capacity kind (``class`` for the ComputeClass's rules).
        zone: the zone (the cluster's, for the class).
        pool: the GKE node pool asked for (the class's first, for the class).
        started: when it was asked for (``time.time()``).
        ended: when it ended (None while it runs).
        outcome: ``running``, ``granted``, ``stockout``, ``quota``, ``reservation``,
            ``backoff``, ``misconfigured``, ``timeout``, ``revoked``, ``expired``, ``skipped``.
        reason: what Google or Kubernetes said, in one line.
        signal: the classified signal, when there was one.
    """

    index: int
    label: str
    kind: str
    zone: str
    pool: str
    started: float
    ended: float | None = None
    outcome: str = "running"
    reason: str = ""
    signal: Signal | None = None

    def end(self, outcome: str, reason: str, signal: Signal | None = None) -> None:
        self.ended, self.outcome, self.reason, self.signal = time.time(), outcome, reason, signal

    def line(self) -> str:
        took = f" after {self.ended - self.started:.0f}s" if self.ended is not None else ""
        return f"{self.index + 1}. {self.label} (pool {self.pool}): {self.outcome}{took}" + (
            f" — {self.reason}" if self.reason else ""
        )


def capacity_signal(exc: BaseException, lane: Lane) -> Signal | None:
    """The capacity signal in a failed pool operation, or None for any other failure."""
    from ..gcp.stockouts import classify_gcp

    found = getattr(exc, "signal", None)
    if found is not None:
        return found
    if not isinstance(exc, GCPError):
        return None
    return classify_gcp(None, str(exc), source="node-pool operation", zone=lane.zone)


class CapacityPoolDriver:
    """Every GPU pool of the capacity policy, then the first nodes (see the module's doc).

    Args:
        ctx: the deployment's context (``ctx.capacity_zones``: the candidate zones;
            ``ctx.time_scale``: wall seconds per second of the policy's waits).
        kube: whether the Kubernetes part runs (the nodes come for pods; without it only
            the pools are made).
    """

    deleted_with: str | None = GKE_CLUSTER_KEY
    interruptible = True

    def __init__(self, ctx: Context, *, kube: bool = True) -> None:
        from ..gcp.container_requests import cluster_path

        self.ctx = ctx
        self.kube = kube
        self.cluster = cluster_path(ctx.plan)
        self.attempts: list[Attempt] = []
        self._deleting: list[concurrent.futures.Future[Any]] = []

    def lanes(self) -> tuple[Lane, ...]:
        from ..spec.lanes import capacity_lanes

        return capacity_lanes(self.ctx.cluster, self.ctx.capacity_zones)

    def _path(self, pool: str) -> str:
        return f"{self.cluster}/nodePools/{pool}"

    def _say(self, text: str) -> None:
        from ..gcp._wait import report_progress

        logger.info("GPU capacity: %s", text)
        report_progress("GPU capacity", text)

    def _node(self, lane: Lane, *, queued: bool = False) -> Any:
        from ..plan.nodepools import gpu_pool

        base = self.ctx.plan.get(GPU_POOL_KEY)
        created = {"action": base.action, "labels": dict(base.labels)}
        return gpu_pool(self.ctx.cluster, created, lane, zones=self.ctx.capacity_zones, queued=queued)

    def ensure(self, step: Step) -> Done:
        from .gcp_drivers import NodePoolDriver
        from .pool_upgrade import retire_standby

        lanes = self.lanes()
        preload = NodePoolDriver(self.ctx, GPU_POOL_KEY).preload_path(step)
        api = self.ctx.kube_api(step.records[GKE_CLUSTER_KEY].value) if self.kube else None
        notes = retire_standby(self.ctx, self.cluster, api=api)
        try:
            made, usable = self._pools(step, lanes, preload)
            notes += made
            if not self.kube:
                first = self.ctx.apis.pools.get_or_none(self._path(lanes[0].pool_name))
                return Done(
                    "created" if step.record.requested else "adopted",
                    first,
                    note="; ".join([*notes, "the cluster autoscaler brings nodes when pods ask for them"]),
                )
            delivered = self._first_nodes(step, lanes, usable)
        finally:
            self._settle()
        if delivered.kind == "on-demand" and self.ctx.cluster.capacity[0].kind != "on-demand":
            logger.warning(
                "GPU capacity: ON-DEMAND FALLBACK: the GPU nodes are on-demand, the costliest kind of the policy "
                "(%s came first and had none)",
                self.ctx.cluster.capacity[0].label,
            )
        return Done(
            "created" if step.record.requested else "adopted",
            self.ctx.apis.pools.get_or_none(self._path(delivered.pool_name)),
            note="; ".join([delivered.label, *notes])
            + (f", after {len(self.attempts) - 1} attempt(s) without capacity" if len(self.attempts) > 1 else ""),
        )

    # the pools

    def _pools(self, step: Step, lanes: tuple[Lane, ...], preload: str | None) -> tuple[list[str], list[Lane]]:
        """Create (in parallel) or adopt every pool of the class; returns notes and the lanes
        whose pool is there."""
        from .pool_upgrade import bring_to_shape

        pools = self.ctx.apis.pools
        todo, notes = [], []
        for lane in lanes:
            found = pools.get_or_none(self._path(lane.pool_name))
            if found is None:
                todo.append(lane)
                continue
            note = bring_to_shape(self.ctx, self._path(lane.pool_name), found, self._node(lane))
            if note:
                notes.append(note)
        if todo:
            step.requesting()
            self._say(f"creating {len(todo)} GPU node pool(s): {', '.join(la.pool_name for la in todo)}")
        failed: dict[str, BaseException] = {}
        with concurrent.futures.ThreadPoolExecutor(max(1, len(todo)), "rl-lustre-gpu-pools") as ex:
            # One copy of this thread's context per pool (the progress display lives there).
            futures = {
                la.pool_name: ex.submit(contextvars.copy_context().run, self._create, lane=la, preload=preload)
                for la in todo
            }
            for name, fut in futures.items():
                exc = fut.exception()
                if exc is not None:
                    failed[name] = exc
        step.check()
        usable = []
        for lane in lanes:
            exc = failed.get(lane.pool_name)
            if exc is None:
                usable.append(lane)
                continue
            signal = capacity_signal(exc, lane)
            if signal is None:
                raise exc
            attempt = Attempt(len(self.attempts), lane.label, lane.kind, lane.zone, lane.pool_name, time.time())
            attempt.end(signal.kind, signal.short(400), signal)
            self.attempts.append(attempt)
            self._say(f"{lane.label}: {attempt.outcome} ({attempt.reason}); its pool is dropped from the class")
            self._drop(lane.pool_name)
        if not usable:
            raise self._exhausted(lanes)
        return notes, usable

    def _create(self, *, lane: Lane, preload: str | None) -> Any:
        from ..gcp.container_requests import node_pool_request

        request = node_pool_request(self.ctx.plan, GPU_POOL_KEY, preload_image=preload, node=self._node(lane))
        return self.ctx.apis.pools.create(request, cluster=self.cluster, deployment=self.ctx.deployment).resource

    # the first nodes

    def _first_nodes(self, step: Step, lanes: tuple[Lane, ...], usable: list[Lane]) -> Lane:
        """The first ``num_nodes`` nodes, from the class's stages (and queued requests)."""
        from .. import naming
        from ..kube.computeclass import compute_class_manifest
        from ..kube.labels import deployment_labels
        from ..kube.provisioning_request import worker_resources
        from ..kube.readiness import termination_end
        from ..spec.lanes import class_stages
        from .scaleup import class_nodes, release_probes, top_up_probes, wait_for_nodes

        spec = self.ctx.cluster
        api = self.ctx.kube_api(step.records[GKE_CLUSTER_KEY].value)
        zones = self.ctx.capacity_zones
        labels = deployment_labels(spec)
        if len(class_nodes(api, spec)) >= spec.num_nodes:  # an earlier up()'s nodes (and workers)
            self._apply_class(api, compute_class_manifest(spec, labels, zones))
            return self._delivered(api, lanes)
        resources = worker_resources(self.ctx.manifest(RAYCLUSTER_KEY))
        have = {la.pool_name for la in usable}
        kind_of = {la.pool_name: spec.capacity.index(la.capacity) for la in lanes}
        t0 = time.strftime("%H:%M:%S")
        tried: set[int] = set()
        try:
            for kinds, queued in class_stages(spec):
                step.check()
                new = [la for la in lanes if kind_of[la.pool_name] in kinds and kind_of[la.pool_name] not in tried]
                rules = [la for la in lanes if kind_of[la.pool_name] in kinds and la.pool_name in have]
                tried.update(kinds)
                self._apply_class(api, compute_class_manifest(spec, labels, zones, kinds=kinds))
                # Probes for the nodes still missing, once the class has this stage's rules.
                top_up_probes(api, spec, resources)
                if new and rules:
                    what = ", ".join(la.label for la in rules)
                    attempt = Attempt(
                        len(self.attempts),
                        f"ComputeClass {naming.compute_class_name(spec)}: {what}",
                        "class",
                        spec.zone or "",
                        rules[0].pool_name,
                        time.time(),
                    )
                    self.attempts.append(attempt)
                    after = [la for la in lanes if kind_of[la.pool_name] == queued]
                    nxt = f"then {after[0].label}" if after else "nothing after it"
                    self._say(
                        f"asking the cluster autoscaler for {spec.num_nodes} nodes from {what}, waiting since {t0}; "
                        f"{nxt}"
                    )
                    budget = sum(la.capacity.wait for la in new)
                    if wait_for_nodes(self.ctx, step, attempt, budget, what=what):
                        attempt.end("granted", f"{spec.num_nodes} nodes")
                        break
                    self._say(f"the ComputeClass's rules have no capacity: {attempt.outcome} ({attempt.reason})")
                if queued is not None and self._queued(step, api, lanes, queued, resources):
                    break
            else:
                raise self._exhausted(lanes)
        except BaseException:
            release_probes(api, spec)
            raise
        self._apply_class(api, compute_class_manifest(spec, labels, zones))
        delivered = self._delivered(api, lanes)
        self.ctx.capacity_lane, self.ctx.capacity_granted_at = delivered, time.time()
        self.ctx.capacity_ends_at = termination_end(class_nodes(api, self.ctx.cluster))
        self._say(f"got {spec.num_nodes} nodes: {delivered.label}, after {len(self.attempts)} attempt(s)")
        return delivered

    def _apply_class(self, api: Any, manifest: dict[str, Any]) -> None:
        from ..kube import apply

        apply.apply_manifests(api, [manifest], deployment=self.ctx.deployment)

    def _delivered(self, api: Any, lanes: tuple[Lane, ...]) -> Lane:
        """The lane most of the class's nodes came from (the first in the order on a tie)."""
        from ..catalog import GKE_NODEPOOL_LABEL
        from ..naming import gpu_queued_pool_name
        from .scaleup import class_nodes

        counts: dict[str, int] = {}
        for node in class_nodes(api, self.ctx.cluster):
            pool = node["metadata"]["labels"].get(GKE_NODEPOOL_LABEL, "")
            counts[pool] = counts.get(pool, 0) + 1
        scored = [
            (counts.get(la.pool_name, 0) + counts.get(gpu_queued_pool_name(self.ctx.cluster, la.pool_name), 0), la)
            for la in lanes
        ]
        best = max(n for n, _ in scored)
        return next(la for n, la in scored if n == best)

    def _queued(self, step: Step, api: Any, lanes: tuple[Lane, ...], kind: int, resources: dict[str, Any]) -> bool:
        """Ask for the nodes the class did not bring through a ProvisioningRequest in each
        zone of the queued flex-start kind ``kind``, in order; True once they are there."""
        from .queued import ask_queued

        for lane in (la for la in lanes if self.ctx.cluster.capacity.index(la.capacity) == kind):
            step.check()
            attempt = Attempt(len(self.attempts), lane.label, lane.kind, lane.zone, lane.pool_name, time.time())
            self.attempts.append(attempt)
            self._say(f"asking for {lane.label}: every node at once through a ProvisioningRequest")
            if ask_queued(self, step, api, lane, attempt, resources):
                attempt.end("granted", "the request's nodes")
                return True
            self._say(f"{lane.label}: {attempt.outcome} ({attempt.reason})")
            self._drop_queued(lane)
        return False

    def _exhausted(self, lanes: tuple[Lane, ...]) -> CapacityExhaustedError:
        summary = "\n".join(
            [
                f"no GPU capacity from the {len(lanes)} pool(s) of the policy:",
                *[f"  {a.line()}" for a in self.attempts],
            ]
        )
        return CapacityExhaustedError(summary, list(self.attempts))

    # dropping and deleting

    def _drop(self, pool: str) -> None:
        """Delete ``pool`` in the background; :meth:`_settle` waits for it."""
        run = contextvars.copy_context().run
        ex = concurrent.futures.ThreadPoolExecutor(1, "rl-lustre-capacity-drop")
        self._deleting.append(ex.submit(run, self._delete_pool, pool))
        ex.shutdown(wait=False)

    def _drop_queued(self, lane: Lane) -> None:
        from ..naming import gpu_queued_pool_name
        from .queued import delete_request

        if self.kube:
            delete_request(self.ctx, lane)
        self._drop(gpu_queued_pool_name(self.ctx.cluster, lane.pool_name))

    def _delete_pool(self, pool: str) -> bool:
        from ..gcp._ownership import check_owned

        found = self.ctx.apis.pools.get_or_none(self._path(pool))
        if found is None:
            return False
        check_owned("GKE node pool", self._path(pool), found.config.resource_labels, self.ctx.deployment)
        self._wait_idle()
        return bool(self.ctx.apis.pools.delete(self._path(pool), deployment=self.ctx.deployment))

    def _wait_idle(self) -> None:
        from .gcp_drivers import _cluster_busy

        clusters = self.ctx.apis.clusters
        found = clusters.get_or_none(self.cluster)
        if found is not None and _cluster_busy(found):
            self.ctx.wait_settled(
                f"GKE cluster {self.cluster}", lambda: clusters.get_or_none(self.cluster), _cluster_busy
            )

    def _settle(self) -> None:
        """Wait for the dropped pools to be gone (nothing of a failed attempt is left behind)."""
        errors = []
        for fut in self._deleting:
            try:
                fut.result()
            except Exception as exc:  # reported once all are done
                errors.append(exc)
        self._deleting.clear()
        if errors:
            raise errors[0]

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        """Delete every GPU pool of the deployment (the class's, the queued ones, one of an older
        version's standby pool), and the capacity probes when the GKE cluster stays."""
        from ..naming import gpu_queued_pool_name, gpu_standby_pool_name
        from .queued import delete_request
        from .scaleup import release_probes

        gke = self.ctx.apis.clusters.get_or_none(self.cluster)
        if gke is not None and self.kube:
            api = self.ctx.kube_api(gke)
            release_probes(api, self.ctx.cluster)
            for lane in self.lanes():
                if lane.queued:
                    delete_request(self.ctx, lane)
        outcome: Literal["deleted", "absent"] = "absent"
        names = [la.pool_name for la in self.lanes()]
        names += [gpu_queued_pool_name(self.ctx.cluster, la.pool_name) for la in self.lanes() if la.queued]
        names.append(gpu_standby_pool_name(self.ctx.cluster))
        for name in names:
            if self._delete_pool(name):
                outcome = "deleted"
        return outcome


def zones_for(ctx: Context, finder: Callable[[Any], tuple[str, ...]] | None) -> tuple[str, ...]:
    """The candidate zones of ``ctx``'s cluster: its own, an explicit list, or (``"region"``)
    what ``finder`` (by default ``rl_lustre.gcp.zones.capacity_zones``) finds."""
    from ..errors import ConfigError

    spec = ctx.cluster
    assert spec.zone is not None
    if spec.capacity_zones == "zone":
        return (spec.zone,)
    if isinstance(spec.capacity_zones, tuple):
        return spec.capacity_zones
    if finder is None:
        import importlib

        try:
            finder = importlib.import_module("rl_lustre.gcp.zones").capacity_zones
        except (ImportError, AttributeError):
            raise ConfigError(
                type(spec).__name__,
                "capacity_zones",
                "region",
                "needs the zone discovery of rl_lustre.gcp.zones, not in this version; list the "
                "zones instead (capacity_zones=('us-east1-b', 'us-east1-c'))",
            ) from None
    assert finder is not None
    zones = tuple(finder(spec))
    return (spec.zone, *[z for z in zones if z != spec.zone])
