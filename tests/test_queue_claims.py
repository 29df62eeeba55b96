"""The queue's ledger with real processes: flock liveness, no over-admission under races,
atomic claim files (rl_lustre.oncluster.queue.claims and .member)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rl_lustre.oncluster.queue.claims import Claim, Store

# The on-cluster package's tests: nox -s tests-oncluster runs them on the image's Python and Ray too.
pytestmark = pytest.mark.oncluster

# One job's supervisor, as far as the queue goes: join, wait its turn, hold, release.
# Ray's view is stood in for by 8 free nodes (the ledger is what is under test here).
MEMBER = r"""
import json, sys, threading, time
from rl_lustre.oncluster.queue import member as m
from rl_lustre.oncluster.queue.claims import Claim, Store
from rl_lustre.oncluster.raystate import NodeView, StateApi, View

root, job, out = sys.argv[1], sys.argv[2], sys.argv[6]
nodes, seq, hold = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
m.read_view = lambda api: View(time.time(), (NodeView("n", "head", "", True, True, 64, 0),))
claim = Claim(job=job, nodes=nodes, gpus_per_node=8, cluster_nodes=8, submitted_at=1.0, seq=seq)
member = m.Member(Store(root), claim, StateApi("http://127.0.0.1:9"), say=lambda text: None, poll=0.05)
member.join()
print("\njoined", flush=True)
member.wait(threading.Event())
start = time.time()
time.sleep(hold)
end = time.time()
member.release("succeeded")
with open(out, "a") as f:
    f.write(json.dumps({"job": job, "nodes": nodes, "start": start, "end": end, "seq": seq}) + "\n")
"""


def _member(root: Path, job: str, nodes: int, seq: int, hold: float, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", MEMBER, str(root), job, str(nodes), str(seq), str(hold), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_killed_supervisors_claim_is_reaped_by_the_next_reader(tmp_path: Path) -> None:
    holder = _member(tmp_path, "holder", 8, 0, 60, tmp_path / "out.jsonl")
    try:
        assert holder.stdout is not None
        assert "joined" in (line.strip() for line in iter(holder.stdout.readline, ""))  # after its "queued" record
        store = Store(tmp_path)
        deadline = time.monotonic() + 20
        while True:
            with store.locked():
                live, reaped = store.read()
            if live and live[0].state == "holding":
                break
            assert time.monotonic() < deadline, "the holder was never admitted"
            time.sleep(0.05)
        assert (live[0].job, live[0].nodes, reaped) == ("holder", 8, [])
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        with store.locked():
            live, reaped = store.read()
        assert live == []
        assert [c.job for c in reaped] == ["holder"]
        assert sorted(p.name for p in (tmp_path / "claims").iterdir()) == []
    finally:
        holder.kill()
        holder.wait()


def test_jobs_racing_for_eight_nodes_never_hold_more_than_eight_at_once(tmp_path: Path) -> None:
    out = tmp_path / "held.jsonl"
    sizes = [(1, 2, 4, 8)[i % 4] for i in range(8)]
    procs = [_member(tmp_path, f"j{i:02d}", n, i, 0.1, out) for i, n in enumerate(sizes)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    held = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(h["job"] for h in held) == [f"j{i:02d}" for i in range(8)]
    # The nodes held at each moment a job starts (the most held at any instant is at one of them).
    for h in held:
        during = sum(o["nodes"] for o in held if o["start"] <= h["start"] < o["end"])
        assert during <= 8, (h, during)
    assert list((tmp_path / "claims").iterdir()) == []


def test_a_reader_never_sees_half_a_claim(tmp_path: Path) -> None:
    store = Store(tmp_path)
    me = Claim(job="w", nodes=1, gpus_per_node=8, cluster_nodes=8)
    with store.locked():
        store.join(me)
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            me.slots = list(range(i % 500))  # claims of very different lengths
            store.save(me)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        path = tmp_path / "claims" / "w.json"
        for _ in range(2000):
            Claim.from_json(path.read_text())  # raises on a torn file
    finally:
        stop.set()
        thread.join()
    with store.locked():
        store.release("w")
    assert store.generation() == 1
    assert not os.listdir(tmp_path / "claims")


def test_a_supervisor_finds_its_heads_dashboard_where_the_head_says(monkeypatch) -> None:
    """A local head exports RAY_DASHBOARD_ADDRESS to its jobs; it wins over the job's metadata,
    which wins over the RayCluster's default port."""
    from rl_lustre.oncluster.raystate import StateApi

    monkeypatch.delenv("RAY_DASHBOARD_ADDRESS", raising=False)
    assert StateApi.for_job(None).url == "http://127.0.0.1:8265"
    assert StateApi.for_job("http://127.0.0.1:9000").url == "http://127.0.0.1:9000"
    monkeypatch.setenv("RAY_DASHBOARD_ADDRESS", "http://127.0.0.1:41234/")
    assert StateApi.for_job("http://127.0.0.1:8265").url == "http://127.0.0.1:41234"
