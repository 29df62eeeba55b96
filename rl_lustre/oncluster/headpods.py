"""Why a Ray head went: the head pod's last termination, as the keeper learns it.

Where the head runs decides where the answer is:

- :class:`KubeHead`: the RayCluster's head pods, read from the Kubernetes API with the
  keeper's service account (``get``/``list`` of pods and events in its namespace, nothing
  more): a container restarted in place says why in ``lastState.terminated`` (``OOMKilled``,
  ``Error``); a pod the kubelet evicted says ``Evicted``; a pod deleted and replaced by the
  operator is told by its events (``Killing``, ``Evicted``, ``Preempting``) or, failing
  those, ``deleted``;
- :class:`LocalHead`: a local head (``Cluster.local``) has no pod: whoever ends it the way a
  pod deletion does (``rl_lustre.testing.lose_head``) leaves a status file saying why.

Standard library only (part of the on-cluster package): plain HTTPS to the API server with
the token and CA Kubernetes mounts into the pod (:mod:`.incluster`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .incluster import SERVICE_ACCOUNT_DIR, connect
from .nodeends import rfc3339

__all__ = ["SERVICE_ACCOUNT", "KubeHead", "LocalHead", "Loss"]

# Where Kubernetes mounts a pod's service account credentials.
SERVICE_ACCOUNT = SERVICE_ACCOUNT_DIR
# Event reasons that say why a pod went, most telling first.
_REASONS = ("OOMKilling", "Evicted", "Preempting", "TerminationByKubelet", "NodeShutdown", "Killing")


class Loss(dict[str, Any]):
    """A head's loss: ``head`` (its pod, or the local head's pid), ``reason``, ``at`` (when, if known)."""


class LocalHead:
    """A local head's status file (written by whatever ended it)."""

    def __init__(self, status_file: str) -> None:
        self.path = Path(status_file)

    def look(self) -> None:
        """Nothing to follow: the file says all."""

    def healthy(self) -> None:
        """Nothing to remember."""

    def why(self) -> Loss:
        try:
            status = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return Loss(head="the local Ray head", reason="lost")
        return Loss(
            head=f"the local Ray head (pid {status.get('pid', '?')})",
            reason=str(status.get("reason") or "lost"),
            at=status.get("at"),
        )


class KubeHead:
    """The head pods of RayCluster ``raycluster`` in ``namespace``, followed by :meth:`look`."""

    def __init__(
        self,
        raycluster: str,
        namespace: str,
        *,
        credentials: str = SERVICE_ACCOUNT,
        say: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.raycluster = raycluster
        self.say = say
        # The last failure to read the pods (said once, not at every look).
        self.failed: str | None = None
        self.namespace = namespace
        self.credentials = Path(credentials)
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.url = f"https://{'[' + host + ']' if ':' in host else host}:{port}"
        # Every head pod seen, as last seen (by uid); those there at the last look; and the
        # restart counts of the head's pods when it last answered.
        self.seen: dict[str, dict[str, Any]] = {}
        self.present: set[str] = set()
        self.baseline: dict[str, int] = {}

    def _get(self, path: str, **query: str) -> dict[str, Any]:
        body = connect(api=self.url, credentials=str(self.credentials), timeout=10).get(path, **query)
        return body if isinstance(body, dict) else {}

    def look(self) -> None:
        """Read the head pods now (errors are the next look's business)."""
        try:
            pods = self._get(
                f"/api/v1/namespaces/{self.namespace}/pods",
                labelSelector=f"ray.io/cluster={self.raycluster},ray.io/node-type=head",
            ).get("items", [])
        except (OSError, ValueError) as exc:
            failure = f"{type(exc).__name__}: {exc}"
            if failure != self.failed:
                self.say(f"cannot read the head pods (a lost head's reason will be unknown): {failure}")
            self.failed = failure
            return
        if self.failed is not None:
            self.say("reading the head pods again")
            self.failed = None
        self.present = set()
        for pod in pods:
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            self.seen[uid] = pod
            self.present.add(uid)

    def healthy(self) -> None:
        """The head answers: remember its pods as they are (what a later loss is told against)."""
        self.baseline = {uid: _restarts(self.seen[uid]) for uid in self.present if uid in self.seen}

    def why(self) -> Loss:
        """Why the head the keeper knew went (best effort): a container restarted in place, a
        pod that failed (evicted), or a pod that is gone (its events)."""
        self.look()
        for uid, restarts in self.baseline.items():
            pod = self.seen.get(uid)
            if pod is None:
                continue
            ended = _terminated(pod, last=True)
            if uid in self.present and _restarts(pod) > restarts and ended is not None:
                return Loss(head=_name(pod), reason=ended[0], at=ended[1], restarts=_restarts(pod))
        for uid in self.baseline:
            pod = self.seen.get(uid)
            status = (pod or {}).get("status") or {}
            if pod is None or (uid in self.present and status.get("phase") != "Failed"):
                continue
            if status.get("reason"):
                return Loss(head=_name(pod), reason=str(status["reason"]), detail=status.get("message"))
            ended = _terminated(pod, last=False)
            if ended is not None and ended[0] not in ("Error", "Completed"):
                return Loss(head=_name(pod), reason=ended[0], at=ended[1])
            return Loss(head=_name(pod), reason=self._event_reason(_name(pod)) or "deleted")
        return Loss(head="the Ray head", reason="lost")

    def _event_reason(self, pod: str) -> str | None:
        try:
            events = self._get(
                f"/api/v1/namespaces/{self.namespace}/events", fieldSelector=f"involvedObject.name={pod}"
            ).get("items", [])
        except (OSError, ValueError):
            return None
        reasons = {str(e.get("reason")) for e in events}
        return next((r for r in _REASONS if r in reasons), None)


def _name(pod: dict[str, Any] | None) -> str:
    return str(((pod or {}).get("metadata") or {}).get("name") or "the Ray head")


def _restarts(pod: dict[str, Any] | None) -> int:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return max((int(s.get("restartCount") or 0) for s in statuses), default=0)


def _terminated(pod: dict[str, Any], *, last: bool) -> tuple[str, float | None] | None:
    """The Ray container's termination (``lastState`` with ``last``, else ``state``): reason and when."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = (status.get("lastState" if last else "state") or {}).get("terminated")
        if state:
            return str(state.get("reason") or f"exit code {state.get('exitCode')}"), rfc3339(state.get("finishedAt"))
    return None
