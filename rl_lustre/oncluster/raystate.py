"""Ray's live view of the cluster, read from its state API over HTTP (``/api/v0/...``).

The queue and the lost-node watch need three lists of the dashboard's state API, the
same in Ray 2.46 and later: nodes (alive or dead, GPUs), placement groups (the GPUs
each bundle reserves on which node, and which Ray job created it) and jobs (which Ray
job is the driver of a submission). Plain ``urllib``: a supervisor waiting in the queue
imports no Ray and holds no Ray connection.

- :func:`read_view` -> :class:`View`: per node, its GPUs and those reserved by placement
  groups; :meth:`View.capacity` counts whole nodes of a job's size, up and free.
- :func:`attempt_nodes`: the nodes an attempt's NeMo-RL placed its groups on: the
  submission's driver (checked to be a process of the attempt) and the groups it created.

It runs on the cluster (shipped with the supervisor; standard library only).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from .queue.policy import Capacity

__all__ = ["NodeView", "StateApi", "View", "attempt_nodes", "read_view"]

# The states in which a placement group's bundles hold their resources.
_HOLDING = ("CREATED", "RESCHEDULING")


class StateApi:
    """The dashboard's state API at ``url`` (with Ray's bearer token when the head uses one)."""

    def __init__(
        self, url: str, *, token: str | None = None, timeout: float = 10.0, headers: dict[str, str] | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        # ``headers``: a client's own (the Jobs API's, with its token) in place of ``token``.
        self._headers = dict(headers) if headers is not None else {"Authorization": f"Bearer {token}"} if token else {}

    @classmethod
    def for_job(cls, url: str | None) -> StateApi:
        """The API of the head this job runs on: ``RAY_DASHBOARD_ADDRESS`` where the head's own
        processes have it (a local head sets it to the port it chose), else ``url`` (from the
        job's metadata), else the RayCluster's default dashboard port; the token from
        ``RAY_AUTH_TOKEN_PATH`` if set."""
        token = None
        path = os.environ.get("RAY_AUTH_TOKEN_PATH")
        if path:
            try:
                with open(path) as f:
                    token = f.read().strip() or None
            except OSError:
                token = None
        url = os.environ.get("RAY_DASHBOARD_ADDRESS") or url or "http://127.0.0.1:8265"
        return cls(url, token=token)

    def list(self, resource: str, **params: str) -> list[dict[str, Any]]:
        """One list (``nodes``, ``placement_groups``, ``jobs``), every entry, in detail."""
        query = urllib.parse.urlencode({"detail": "true", "limit": "10000", **params})
        request = urllib.request.Request(f"{self.url}/api/v0/{resource}?{query}", headers=self._headers)
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            body = json.loads(response.read())
        data = body.get("data", {}).get("result", {})
        result = data.get("result", []) if isinstance(data, dict) else data
        if not isinstance(result, list):
            raise ValueError(f"unexpected answer from {self.url}/api/v0/{resource}: {str(body)[:200]}")
        return result

    def text(self, path: str, *, timeout: float | None = None, **params: str) -> str:
        """The body of a GET of ``path`` (``/worker/traceback``, ``/api/v0/logs/file``, ...) as
        text; ``urllib.error.HTTPError`` when the dashboard answers with an error."""
        query = urllib.parse.urlencode(params)
        request = urllib.request.Request(f"{self.url}{path}?{query}", headers=self._headers)
        with urllib.request.urlopen(request, timeout=self.timeout if timeout is None else timeout) as response:
            return response.read().decode(errors="replace")

    def __repr__(self) -> str:
        return f"StateApi({self.url!r})"


@dataclasses.dataclass(frozen=True)
class NodeView:
    """One node of Ray's node table."""

    node_id: str
    name: str
    address: str
    alive: bool
    head: bool
    gpus: float
    reserved: float
    reason: str = ""
    dead_at: float | None = None
    # When its raylet started (seconds since the epoch), when Ray says.
    started_at: float | None = None

    def record(self) -> dict[str, Any]:
        """The node as the supervisor's records name it."""
        return {"node_id": self.node_id, "address": self.address, "name": self.name, "reason": self.reason}


@dataclasses.dataclass(frozen=True)
class View:
    """Every node Ray knows, when it was read."""

    at: float
    nodes: tuple[NodeView, ...]

    def capacity(self, gpus_per_node: float) -> Capacity:
        """Whole nodes of ``gpus_per_node`` GPUs: up, and free of any reservation.

        On a local head without worker nodes, the head is one node holding every GPU:
        its blocks of ``gpus_per_node`` count as nodes.

        Examples:
            >>> v = View(0.0, (NodeView("a", "w1", "", True, False, 8, 8), NodeView("b", "w2", "", True, False, 8, 0),
            ...                NodeView("c", "w3", "", False, False, 8, 0)))
            >>> v.capacity(8)
            Capacity(up=2, free=1)
        """
        size = max(gpus_per_node, 1e-9)
        alive = [n for n in self.nodes if n.alive]
        up = sum(int(n.gpus // size) for n in alive)
        free = sum(int(max(n.gpus - n.reserved, 0) // size) for n in alive)
        return Capacity(up=up, free=free)

    def workers(self) -> dict[str, NodeView]:
        """The nodes other than the head, by id."""
        return {n.node_id: n for n in self.nodes if not n.head}


def read_view(api: StateApi, *, groups: bool = True, clock: Callable[[], float] = time.time) -> View:
    """Nodes and the GPUs placement groups reserve on each (two requests; one without ``groups``)."""
    nodes = api.list("nodes")
    reserved = _gpus_by_node(api.list("placement_groups")) if groups else {}
    out = []
    for n in nodes:
        node_id = str(n.get("node_id") or "")
        end, start = n.get("end_time_ms"), n.get("start_time_ms")
        out.append(
            NodeView(
                node_id=node_id,
                name=str(n.get("node_name") or ""),
                address=str(n.get("node_ip") or ""),
                alive=n.get("state") == "ALIVE",
                head=bool(n.get("is_head_node")),
                gpus=float((n.get("resources_total") or {}).get("GPU", 0) or 0),
                reserved=reserved.get(node_id, 0.0),
                reason=str(n.get("state_message") or ""),
                dead_at=end / 1000 if end else None,
                started_at=start / 1000 if start else None,
            )
        )
    return View(at=clock(), nodes=tuple(out))


def attempt_nodes(
    api: StateApi, submission_id: str, session: int, in_session: Callable[[int, int], bool]
) -> tuple[str, dict[str, float]] | None:
    """The Ray job id of this attempt's driver and the nodes its placement groups hold
    (node id -> GPUs reserved there).

    The submission's entry names its driver (NeMo-RL, which connected under this
    submission; the supervisor itself never connects) and the driver's pid. It is taken
    only if ``in_session(pid, session)``, i.e. the driver is a process of this attempt,
    never a previous attempt's. None until the driver has connected.
    """
    entries = [j for j in api.list("jobs") if j.get("submission_id") == submission_id]
    for entry in entries:
        job_id = entry.get("job_id")
        pid = (entry.get("driver_info") or {}).get("pid")
        if not job_id or pid is None or not in_session(int(pid), session):
            continue
        groups = [g for g in api.list("placement_groups") if g.get("creator_job_id") == job_id]
        return str(job_id), _gpus_by_node(groups)
    return None


def _gpus_by_node(groups: Iterable[dict[str, Any]]) -> dict[str, float]:
    """GPUs reserved per node by the bundles of the groups that hold theirs."""
    out: dict[str, float] = {}
    for bundle in _bundles(groups, _HOLDING):
        node = bundle.get("node_id")
        if node:
            out[str(node)] = out.get(str(node), 0.0) + float((bundle.get("unit_resources") or {}).get("GPU", 0) or 0)
    return out


def _bundles(groups: Iterable[dict[str, Any]], states: tuple[str, ...]) -> Iterable[dict[str, Any]]:
    for group in groups:
        if group.get("state") in states:
            yield from group.get("bundles") or []
