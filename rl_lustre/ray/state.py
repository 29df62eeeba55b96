"""Ray's node table, dead nodes included, over the dashboard's state API.

``GET /api/v0/nodes`` (read by :class:`rl_lustre.oncluster.raystate.StateApi`, the supervisor's
reader too) on the same dashboard the Jobs API uses (the local head's, or a port-forwarded
one on GKE), with the same headers (the bearer token when Ray auth is on): each node's
``node_id``, ``node_name``, ``node_ip``, ``state``, ``state_message``, ``resources_total``,
``is_head_node`` and (detail) ``start_time_ms`` -- when its raylet registered -- and
``end_time_ms`` (``ray.util.state.common.NodeState``, the same fields in
Ray 2.46 and 2.60). Dead nodes stay listed: the dashboard keeps up to 1000 of them.
"""

from __future__ import annotations

import urllib.error
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import RayError
from ..oncluster.raystate import StateApi

__all__ = ["RayNode", "node_table"]


@attrs.frozen
class RayNode:
    """One node of Ray's node table.

    Attributes:
        node_id: Ray's node id.
        name: its ``node_name`` (ours: ``worker-3`` locally, the Kubernetes node's name on
            GKE; by default Ray uses its IP).
        address: its IP.
        state: ``ALIVE`` or ``DEAD``.
        gpus: the GPUs it declared.
        start: when its raylet registered (seconds since the epoch), if reported.
        end: when it died, if it did.
        message: why it died, in Ray's words.
        is_head: it is the head node.
    """

    node_id: str
    name: str
    address: str
    state: str
    gpus: float
    start: float | None
    end: float | None
    message: str = ""
    is_head: bool = False


def node_table(address: str, headers: Mapping[str, str] | None = None, *, timeout: float = 10.0) -> list[RayNode]:
    """Every node Ray knows of, alive or dead, oldest first.

    Examples:
        >>> [n.name for n in node_table(head.dashboard_url, head.headers())]  # doctest: +SKIP
        ['127.0.0.1', 'worker-1', 'worker-2']

    Raises:
        RayError: the dashboard cannot be reached, refuses the request, or answers with
            something else than a node list.
    """
    try:
        rows = StateApi(address, headers=dict(headers or {}), timeout=timeout).list("nodes")
    except urllib.error.HTTPError as exc:
        exc.close()  # the response it holds, at once rather than when collected
        raise RayError(f"cannot read Ray's node table at {address}: HTTP {exc.code} {exc.reason}") from exc
    except (OSError, ValueError) as exc:
        raise RayError(f"cannot read Ray's node table at {address}: {exc}") from exc
    try:
        nodes = [_node(row) for row in rows]
    except (KeyError, TypeError, AttributeError) as exc:
        raise RayError(f"Ray's node table at {address} is not in the state API's shape: {exc!r}") from exc
    return sorted(nodes, key=lambda n: (n.start is None, n.start or 0.0))


def _node(row: Mapping[str, Any]) -> RayNode:
    def seconds(ms: Any) -> float | None:
        return ms / 1000 if isinstance(ms, (int, float)) and ms > 0 else None

    resources = row.get("resources_total") or {}
    return RayNode(
        node_id=str(row["node_id"]),
        name=str(row.get("node_name") or ""),
        address=str(row.get("node_ip") or ""),
        state=str(row.get("state") or ""),
        gpus=float(resources.get("GPU", 0) or 0),
        start=seconds(row.get("start_time_ms")),
        end=seconds(row.get("end_time_ms")),
        message=str(row.get("state_message") or ""),
        is_head=bool(row.get("is_head_node")),
    )
