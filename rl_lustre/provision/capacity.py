"""Getting the GPU nodes: the capacity policy's lanes tried in order (``gpu-pool``'s driver).

:class:`CapacityPoolDriver` asks for the first lane's pool (:func:`rl_lustre.plan.capacity.
capacity_lanes`). A lane ends without nodes when

- the pool's operation fails with a stock-out, a quota or a reservation problem (GKE's
  ``GCE_STOCKOUT``, Compute's ``ZONE_RESOURCE_POOL_EXHAUSTED``, "Specified reservation ...
  does not have available resources"), classified by :mod:`rl_lustre.gcp.stockouts`;
- flex-start without queued provisioning (a pool autoscaled from 0): the cluster
  autoscaler's ``FailedScaleUp`` on the pods that ask for its nodes, or not all nodes
  Ready within the lane's ``wait`` (:mod:`rl_lustre.provision.scaleup`);
- queued flex-start: its ProvisioningRequest turns ``Failed``, ``CapacityRevoked`` or
  ``BookingExpired`` (:func:`rl_lustre.kube.capacity_signals.provisioning_request_state`),
  or is not ``Provisioned`` within the lane's ``wait``.

Then the lane's pool (and request) is deleted in the background and the next lane is
asked for at once: the reaction to a signal is one poll of the wait that saw it. Each
lane is an :class:`Attempt`; progress lines (the ``rl_lustre.provision.capacity`` log and
the live view's row) say what is awaited, since when, what was tried and what is next.
When every lane is spent the driver raises :class:`~rl_lustre.errors.CapacityExhaustedError`
with every attempt; the executor keeps what ``ClusterSpec.on_no_capacity`` says.

The Lustre volume never moves: a lane in another zone of the region reaches the zonal
instance across zones (inter-zone traffic is billed, and adds latency); the attempt and
the progress line say so. Any other failure is a failure of the step, as before.
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
from ..plankeys import GKE_CLUSTER_KEY, GPU_POOL_KEY
from .context import Context
from .step import Done, Step

if TYPE_CHECKING:
    from ..kube.capacity_signals import Signal
    from ..plan.capacity import Lane

__all__ = ["Attempt", "CapacityPoolDriver", "capacity_signal"]

logger = logging.getLogger("rl_lustre.provision.capacity")


@attrs.define
class Attempt:
    """One lane tried: when, and how it ended.

    Attributes:
        index: the lane's place in the order.
        label: ``spot in us-east1-c``.
        kind: the capacity kind.
        zone: the zone.
        pool: the GKE node pool asked for.
        started: when it was asked for (``time.time()``).
        ended: when it ended (None while it runs).
        outcome: ``running``, ``granted``, ``stockout``, ``quota``, ``reservation``,
            ``timeout``, ``revoked``, ``expired``, ``skipped``.
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
    """The GPU pool, from the first lane of the capacity policy that delivers (see the module's doc).

    Args:
        ctx: the deployment's context (``ctx.capacity_zones``: the candidate zones;
            ``ctx.time_scale``: wall seconds per second of the lanes' waits).
        kube: whether the Kubernetes part runs (queued flex-start needs it).
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
        from ..plan.capacity import capacity_lanes

        return capacity_lanes(self.ctx.cluster, self.ctx.capacity_zones)

    def _path(self, lane: Lane) -> str:
        return f"{self.cluster}/nodePools/{lane.pool_name}"

    def _say(self, text: str) -> None:
        from ..gcp._wait import report_progress

        logger.info("GPU capacity: %s", text)
        report_progress("GPU capacity", text)

    def ensure(self, step: Step) -> Done:
        from .gcp_drivers import NodePoolDriver

        lanes = self.lanes()
        pools = self.ctx.apis.pools
        for lane in lanes:  # one an earlier up() got: adopt it, whichever lane it was
            found = pools.get_or_none(self._path(lane))
            if found is not None and type(found).Status(found.status).name == "RUNNING":
                node = self._node(lane)
                done = NodePoolDriver(self.ctx, GPU_POOL_KEY).adopt(step, node)
                self.ctx.capacity_lane = lane
                return done
        preload = NodePoolDriver(self.ctx, GPU_POOL_KEY).preload_path(step)
        t0 = time.time()
        try:
            for i, lane in enumerate(lanes):
                step.check()
                attempt = Attempt(lane.index, lane.label, lane.kind, lane.zone, lane.pool_name, time.time())
                self.attempts.append(attempt)
                nxt = f"next: {lanes[i + 1].label}" if i + 1 < len(lanes) else "nothing after it"
                tried = "; ".join(f"{a.label}: {a.outcome}" for a in self.attempts[:-1]) or "nothing yet"
                where = (
                    ""
                    if lane.zone == self.ctx.cluster.zone
                    else (
                        f"; the volume stays in {self.ctx.cluster.zone} and is reached across zones "
                        "(inter-zone traffic is billed)"
                    )
                )
                self._say(
                    f"asking for {lane.label} (pool {lane.pool_name}, {self.ctx.cluster.num_nodes} nodes), "
                    f"waiting since {time.strftime('%H:%M:%S', time.localtime(t0))}; tried: {tried}; {nxt}{where}"
                )
                value = self._try(step, lane, attempt, preload)
                if value is not None:
                    attempt.end("granted", f"{self.ctx.cluster.num_nodes} nodes")
                    self.ctx.capacity_lane, self.ctx.capacity_granted_at = lane, attempt.ended
                    self._say(f"got {lane.label} after {len(self.attempts)} attempt(s)")
                    return Done(
                        "created",
                        value,
                        note=f"{lane.label}"
                        + (f", after {len(self.attempts) - 1} stock-out(s)" if len(self.attempts) > 1 else ""),
                    )
                self._say(f"{lane.label}: {attempt.outcome} ({attempt.reason}); {nxt}")
        finally:
            self._settle()
        summary = "\n".join(
            [
                f"no GPU capacity from any of the {len(lanes)} lane(s) of the policy:",
                *[f"  {a.line()}" for a in self.attempts],
            ]
        )
        raise CapacityExhaustedError(summary, list(self.attempts))

    def _node(self, lane: Lane) -> Any:
        from ..plan.nodepools import gpu_pool

        base = self.ctx.plan.get(GPU_POOL_KEY)
        return gpu_pool(self.ctx.cluster, {"action": base.action, "labels": dict(base.labels)}, lane)

    def _try(self, step: Step, lane: Lane, attempt: Attempt, preload: str | None) -> Any:
        """The pool of ``lane`` with its nodes, or None (``attempt`` says why)."""
        from ..gcp.container_requests import node_pool_request

        if lane.capacity.queued and not self.kube:
            attempt.end("skipped", "queued flex-start needs the Kubernetes part (a ProvisioningRequest)")
            return None
        if _autoscaled(lane) and not self.kube:
            attempt.end(
                "skipped",
                "flex-start without queued provisioning needs the Kubernetes part (pods for the "
                "cluster autoscaler to scale the pool up for)",
            )
            return None
        request = node_pool_request(self.ctx.plan, GPU_POOL_KEY, preload_image=preload, node=self._node(lane))
        step.requesting()
        try:
            pool = self.ctx.apis.pools.create(request, cluster=self.cluster, deployment=self.ctx.deployment).resource
        except GCPError as exc:
            signal = capacity_signal(exc, lane)
            if signal is None:
                raise
            attempt.end(signal.kind, signal.short(400), signal)
            self._drop(lane)
            return None
        if lane.capacity.queued and not self._queue(step, lane, attempt):
            self._drop(lane)
            return None
        if _autoscaled(lane):
            from .scaleup import wait_for_scale_up

            if not wait_for_scale_up(self.ctx, step, lane, attempt):
                self._drop(lane)
                return None
        return pool

    def _queue(self, step: Step, lane: Lane, attempt: Attempt) -> bool:
        """Ask for every node of ``lane`` through a ProvisioningRequest; True once Provisioned."""
        from ..gcp._wait import wait_for
        from ..kube.capacity_signals import provisioning_request_state
        from ..kube.client import ResourceClient
        from ..kube.provisioning_request import (
            consume_in_raycluster,
            pod_template,
            provisioning_request,
            worker_resources,
        )
        from ..plankeys import RAYCLUSTER_KEY

        api = self.ctx.kube_api(step.records[GKE_CLUSTER_KEY].value)
        ns = self.ctx.cluster.namespace
        raycluster = self.ctx.manifest(RAYCLUSTER_KEY)
        template = pod_template(self.ctx.cluster, lane, worker_resources(raycluster))
        pr = provisioning_request(self.ctx.cluster, lane)
        ResourceClient(api, "PodTemplate", ns).create(template)
        requests = ResourceClient(api, "ProvisioningRequest", ns)
        requests.create(pr)
        name = pr["metadata"]["name"]
        since = time.strftime("%H:%M:%S")
        seen: dict[str, Any] = {}

        def poll() -> str:
            found = requests.get(name) or {}
            state, signal, message = provisioning_request_state(found)
            seen.update(state=state, signal=signal, message=message)
            return state

        def describe(state: str) -> str:
            return f"ProvisioningRequest {name} {state} since {since}: {seen.get('message') or 'queued'}"

        timeout = lane.capacity.wait * self.ctx.time_scale
        try:
            wait_for(
                f"{lane.label}: all {self.ctx.cluster.num_nodes} nodes at once (queued provisioning)",
                poll,
                done=lambda s: s not in ("pending", "accepted"),
                describe=describe,
                timeout=timeout,
                backoff=self.ctx.backoff,
            )
        except Exception as exc:
            from ..errors import WaitTimeoutError

            if not isinstance(exc, WaitTimeoutError):
                raise
            attempt.end(
                "timeout",
                f"not provisioned within its wait of {lane.capacity.wait:g}s ({seen.get('message') or 'queued'})",
            )
            return False
        if seen.get("state") != "provisioned":
            signal = seen.get("signal")
            attempt.end(
                signal.kind if signal is not None else str(seen.get("state")),
                signal.short() if signal is not None else str(seen.get("message")),
                signal,
            )
            return False
        with self.ctx._lock:
            consume_in_raycluster(raycluster, self.ctx.cluster, lane)
        return True

    def _drop(self, lane: Lane) -> None:
        """Delete ``lane``'s pool (and request) in the background; :meth:`_settle` waits for it."""
        run = contextvars.copy_context().run
        pool = concurrent.futures.ThreadPoolExecutor(1, "rl-lustre-capacity-drop")
        self._deleting.append(pool.submit(run, self._delete_lane, lane))
        pool.shutdown(wait=False)

    def _delete_lane(self, lane: Lane) -> None:
        from ..gcp._ownership import check_owned

        if lane.capacity.queued and self.kube:
            self._delete_request(lane)
        found = self.ctx.apis.pools.get_or_none(self._path(lane))
        if found is None:
            return
        check_owned("GKE node pool", self._path(lane), found.config.resource_labels, self.ctx.deployment)
        self._wait_idle()
        self.ctx.apis.pools.delete(self._path(lane), deployment=self.ctx.deployment)

    def _delete_request(self, lane: Lane) -> None:
        from .. import naming
        from ..kube.client import ResourceClient

        gke = self.ctx.apis.clusters.get_or_none(self.cluster)
        if gke is None:
            return
        api = self.ctx.kube_api(gke)
        name = naming.provisioning_request_name(self.ctx.cluster, lane.pool_name)
        for kind in ("ProvisioningRequest", "PodTemplate"):
            ResourceClient(api, kind, self.ctx.cluster.namespace).delete(name)

    def _wait_idle(self) -> None:
        from .gcp_drivers import _cluster_busy

        clusters = self.ctx.apis.clusters
        found = clusters.get_or_none(self.cluster)
        if found is not None and _cluster_busy(found):
            self.ctx.wait_settled(
                f"GKE cluster {self.cluster}", lambda: clusters.get_or_none(self.cluster), _cluster_busy
            )

    def _settle(self) -> None:
        """Wait for the failed lanes' pools to be gone (nothing of a lane is left behind)."""
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
        """Delete whichever lane's pool exists (every one of them, on a rollback)."""
        from ..gcp._ownership import check_owned

        pools = self.ctx.apis.pools
        outcome: Literal["deleted", "absent"] = "absent"
        for lane in self.lanes():
            found = pools.get_or_none(self._path(lane))
            if found is None:
                continue
            check_owned("GKE node pool", self._path(lane), found.config.resource_labels, self.ctx.deployment)
            self._wait_idle()
            if pools.delete(self._path(lane), deployment=self.ctx.deployment):
                outcome = "deleted"
        return outcome


def _autoscaled(lane: Lane) -> bool:
    """A pool created with 0 nodes that the cluster autoscaler fills: flex-start, not queued."""
    return lane.kind == "flex-start" and not lane.capacity.queued


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
