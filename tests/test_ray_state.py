"""Ray's node table over the dashboard's state API, against the session's real head."""

from __future__ import annotations

import time

import pytest

from rl_lustre import Cluster
from rl_lustre.errors import RayError
from rl_lustre.ray.state import node_table


def test_the_head_is_listed_with_its_start_and_a_bad_token_is_refused(local_cluster: Cluster) -> None:
    head = local_cluster._backend().head  # type: ignore[attr-defined]
    nodes = node_table(head.dashboard_url, head.headers())
    [me] = [n for n in nodes if n.is_head]
    assert me.state == "ALIVE"
    assert me.start is not None
    assert me.start <= time.time()
    assert me.end is None
    assert me.node_id
    with pytest.raises(RayError, match="node table"):
        node_table(head.dashboard_url, {"Authorization": "Bearer not-the-token"})
    with pytest.raises(RayError, match="node table"):
        node_table("http://127.0.0.1:9", timeout=2)
