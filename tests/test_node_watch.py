"""The supervisor's node watch after a failed command: nodes taken at once but declared dead
one health check apart are all part of the one loss (the CI failure of stop 28: a second
preemption of two nodes recorded as a loss of one)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from rl_lustre.oncluster.watch import NodeWatch

# The on-cluster package's tests: nox -s tests-oncluster runs them on the image's Python and Ray too.
pytestmark = pytest.mark.oncluster


class NodeTable:
    """Ray's state API as the watch reads it: worker nodes that die at given times."""

    def __init__(self, dies_after: dict[str, float | None]) -> None:
        self.start = time.monotonic()
        self.dies_after = dies_after

    def list(self, what: str) -> list[dict[str, Any]]:
        assert what == "nodes"
        now = time.monotonic() - self.start
        return [{"node_id": "head", "is_head_node": True, "state": "ALIVE"}] + [
            {
                "node_id": node,
                "node_name": f"worker-{node}",
                "node_ip": "127.0.0.1",
                "state": "DEAD" if after is not None and now >= after else "ALIVE",
                "state_message": "health check failed" if after is not None and now >= after else "",
                "resources_total": {"GPU": 1},
            }
            for node, after in self.dies_after.items()
        ]


def _watch(table: NodeTable) -> NodeWatch:
    watch = NodeWatch(table, None, say=lambda _: None, on_held=lambda _: None)  # type: ignore[arg-type]
    watch.start(None)
    return watch


def test_two_nodes_declared_dead_a_second_apart_are_one_loss_of_both() -> None:
    watch = _watch(NodeTable({"a": 0.2, "b": 1.2}))
    time.sleep(0.3)
    watch.look()
    assert [n["node_id"] for n in watch.own_losses()] == ["a"]
    watch.settle(3.0, 0.1)
    assert sorted(n["node_id"] for n in watch.own_losses()) == ["a", "b"]


def test_the_look_ends_as_soon_as_every_node_is_lost() -> None:
    watch = _watch(NodeTable({"a": 0.2, "b": 0.5}))
    began = time.monotonic()
    watch.settle(30.0, 0.1)
    assert len(watch.own_losses()) == 2
    assert time.monotonic() - began < 5


def test_a_node_still_alive_keeps_the_look_going_only_a_short_while_after_the_last_loss() -> None:
    watch = _watch(NodeTable({"a": 0.2, "b": None}))
    began = time.monotonic()
    watch.settle(30.0, 0.1)
    took = time.monotonic() - began
    assert [n["node_id"] for n in watch.own_losses()] == ["a"]
    assert 4.5 <= took < 10, took
    short = _watch(NodeTable({"a": 0.2, "b": None}))
    began = time.monotonic()
    short.settle(30.0, 0.1, siblings=1.0)
    assert [n["node_id"] for n in short.own_losses()] == ["a"]
    assert 0.9 <= time.monotonic() - began < 4


def test_with_no_loss_the_look_lasts_the_settle_time() -> None:
    watch = _watch(NodeTable({"a": None}))
    began = time.monotonic()
    watch.settle(1.0, 0.1)
    assert watch.own_losses() == []
    assert 0.9 <= time.monotonic() - began < 3
