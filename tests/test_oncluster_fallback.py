"""The supervisor says when a run holds on-demand nodes of a fallback (issue 34, point 2):
told the on-demand pools' node-name prefixes at submission (``--on-demand``), it writes an
``on_demand`` journal record and an ``ON-DEMAND FALLBACK`` line when the attempt's placement
groups hold such nodes, once per attempt and nodes."""

from __future__ import annotations

import pytest

from rl_lustre.oncluster.jobargs import parser
from rl_lustre.oncluster.records import read_journal
from rl_lustre.oncluster.supervisor import Supervisor

# The on-cluster package's tests: nox -s tests-oncluster runs them on the image's Python and Ray too.
pytestmark = pytest.mark.oncluster

DEMAND = "gke-demo-gpu-ondemand-b-1a2b3c4d-"


def supervisor(*flags: str) -> Supervisor:
    args = parser().parse_args(["--nodes", "0", *flags, "--", "true"])
    return Supervisor(args, metadata={})


def held(*names: str) -> list[dict[str, object]]:
    return [{"node_id": name[-4:], "address": "", "name": name, "reason": "", "gpus": 8.0} for name in names]


def test_held_on_demand_nodes_get_a_journal_record_and_a_loud_line(capsys: pytest.CaptureFixture[str]) -> None:
    sup = supervisor(f"--on-demand={DEMAND}", "--fallback-note", "the policy starts with spot; $64.15/h more")
    sup.attempts = 2
    sup._held(held(f"{DEMAND}x7k2", "gke-demo-gpu-pool-5e6f7a8b-q1w2"))
    sup._held(held(f"{DEMAND}x7k2", "gke-demo-gpu-pool-5e6f7a8b-q1w2"))  # found again: said once
    out = capsys.readouterr().out
    [record] = [r for r in read_journal(out) if r["event"] == "on_demand"]
    assert record["attempt"] == 2
    assert record["nodes"] == [f"{DEMAND}x7k2"]
    assert record["note"] == "the policy starts with spot; $64.15/h more"
    assert out.count("ON-DEMAND FALLBACK: attempt 2 runs on 1 on-demand GPU node(s)") == 1
    # The next attempt on them is said again; more nodes of the same attempt too.
    sup.attempts = 3
    sup._held(held(f"{DEMAND}x7k2"))
    sup._held(held(f"{DEMAND}x7k2", f"{DEMAND}m9p4"))
    later = [r for r in read_journal(capsys.readouterr().out) if r["event"] == "on_demand"]
    assert [(r["attempt"], r["nodes"]) for r in later] == [
        (3, [f"{DEMAND}x7k2"]),
        (3, [f"{DEMAND}m9p4", f"{DEMAND}x7k2"]),
    ]


def test_without_on_demand_pools_nothing_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    sup = supervisor()
    sup.attempts = 1
    sup._held(held(f"{DEMAND}x7k2"))
    out = capsys.readouterr().out
    assert not [r for r in read_journal(out) if r["event"] == "on_demand"]
    assert "ON-DEMAND" not in out
