"""A RayCluster's head lost on :class:`~rl_lustre.testing.kube.KubeFake`, and brought back as KubeRay does.

The fake's head pod is backed by a real local Ray head (``KubeFake(ray_heads=...)``,
:class:`RayHeads`). :func:`lose_head` does what losing the head does on GKE:

- the head's processes die at once (the Ray head behind the pod: :meth:`RayHeads.kill`);
- the pod says why, as the kubelet and KubeRay leave it: a container killed in place
  (``OOMKilled``, ``Error``) restarts in the same pod (``restartCount``, ``lastState``); an
  eviction fails the pod (``Evicted``), which the operator replaces; anything else is a pod
  deletion (the kubelet's ``Killing`` event), which the operator replaces too;
- after ``back_after`` seconds a new Ray head serves the head pod (:meth:`RayHeads.start_head`,
  on other ports: :attr:`KubeFake.head_target` follows it), and the worker pods, whose raylets
  exit once their GCS is gone (no GCS fault tolerance), restart their containers: new
  raylets join the new head.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ._kube_store import Obj, labels_of, now_rfc3339
from ._preemption import HeadLoss

if TYPE_CHECKING:
    from .kube import KubeFake

__all__ = ["RayHeads", "lose_head"]

logger = logging.getLogger("rl_lustre.testing.kube")

# Reasons of a container killed inside its pod (the pod stays; the container restarts).
_IN_PLACE = ("OOMKilled", "Error", "ContainerCannotRun")


class RayHeads(Protocol):
    """The real Ray heads behind a KubeFake's head pod."""

    def kill(self) -> str:
        """Kill the running head's processes at once; returns what went (``pid <n>``)."""

    def start_head(self) -> tuple[str, int]:
        """Start a new head; returns its dashboard's ``(host, port)``."""


def _restarted(reason: str, code: int) -> Callable[[Obj], None]:
    stamp = now_rfc3339()

    def change(o: Obj) -> None:
        status = o.setdefault("status", {})
        for c in status.get("containerStatuses") or []:
            c.update(
                ready=False,
                restartCount=int(c.get("restartCount") or 0) + 1,
                lastState={"terminated": {"exitCode": code, "reason": reason, "startedAt": stamp, "finishedAt": stamp}},
                state={"waiting": {"reason": "ContainerCreating"}},
            )
        status["conditions"] = [
            {**c, "status": "False"} if c.get("type") in ("Ready", "ContainersReady") else c
            for c in status.get("conditions") or []
        ]

    return change


def lose_head(fake: KubeFake, raycluster: str, *, reason: str, back_after: float | None, namespace: str) -> HeadLoss:
    """See the module's docstring and :func:`rl_lustre.testing.lose_head`."""
    heads = fake.ray_heads
    if heads is None:
        raise ValueError("this KubeFake has no real Ray heads behind its head pods (KubeFake(ray_heads=...))")
    store, controllers = fake._store, fake._controllers

    def pods(kind: str) -> list[Obj]:
        return store.find(
            "Pod",
            namespace,
            lambda p: (
                labels_of(p).get("ray.io/cluster") == raycluster
                and labels_of(p).get("ray.io/node-type") == kind
                and not p["metadata"].get("deletionTimestamp")
            ),
        )

    found = fake._on_loop(lambda: pods("head"))
    if not found:
        raise ValueError(f"RayCluster {raycluster!r} has no head pod to lose")
    pod = found[0]
    name = pod["metadata"]["name"]
    at = time.time()
    what = heads.kill()

    def mark() -> None:
        if reason in _IN_PLACE:
            store.update("Pod", namespace, name, _restarted(reason, 137))
            controllers.event(pod, "BackOff", f"Back-off restarting failed container ray-head in pod {name}")
        elif reason == "Evicted":

            def evicted(o: Obj) -> None:
                o["status"] = {
                    **(o.get("status") or {}),
                    "phase": "Failed",
                    "reason": "Evicted",
                    "message": "The node was low on resource: memory. ",
                }

            store.update("Pod", namespace, name, evicted)
            controllers.event(pod, "Evicted", "The node was low on resource: memory.", warning=True)
        else:
            controllers.event(pod, "Killing", "Stopping container ray-head", component="kubelet")
            store.mark_deleted("Pod", namespace, name, foreground=False)

    fake._on_loop(mark)
    logger.info("lost the head of RayCluster %s (%s: %s)", raycluster, reason, what)
    loss = HeadLoss(name, reason, at, back_after)
    if back_after is not None:

        def back() -> float:
            fake.head_target = heads.start_head()
            ready = time.time()

            def restart_workers() -> None:
                for worker in pods("worker"):
                    controllers.spot.release(worker["metadata"]["name"])
                    store.update("Pod", namespace, worker["metadata"]["name"], _restarted("Error", 1))

            fake._on_loop(restart_workers)
            return ready

        loss._bring_back(back)
    return loss
