"""The supervisor and capacity that ends (issue 21, point 4): before each attempt it tells
NeMo-RL when to save (``checkpointing.checkpoint_must_save_by``) from the nodes the attempt
may run on; when NeMo-RL stopped at that deadline with steps left, the run goes on once
those nodes are gone, as after a preemption.

The shipped supervisor runs as on the cluster (``python -m rl_lustre_oncluster.supervisor``), NeMo-RL
is the rehearsal (NeMo-RL's config code, its save-by timeout as NeMo-RL v0.4.0 keeps it), and
Ray's node table comes from a loopback server answering the dashboard's state API
(``/api/v0/nodes``, the JSON Ray 2.46 sends): the test decides which nodes exist and when
they go, as GKE would delete flex-start nodes at their ``max_run_duration``.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rl_lustre.oncluster.lifetimes import ARRIVAL_ALLOWANCE, attempt_end
from rl_lustre.oncluster.nemo_formats import DEADLINE_KEY, parse_save_by
from rl_lustre.oncluster.nodeends import TERMINATION_ANNOTATION, read_ends, rfc3339, termination_time
from rl_lustre.oncluster.raystate import NodeView
from rl_lustre.oncluster.records import read_journal
from rl_lustre.recovery import parse_restarts, shipped_package, supervised
from rl_lustre.testing import KubeFake
from rl_lustre.testing.kube import DEFAULT_TOKEN

# The on-cluster package's tests: nox -s tests-oncluster runs them on the image's Python and Ray too.
pytestmark = pytest.mark.oncluster

STANDBY = "gke-c-gpu-standby-1a2b3c4d-"
SPOT = "gke-c-gpu-pool-5e6f7a8b-"
OVERRIDES = re.compile(r"^Overrides: (.*)$", re.M)


class StateApi(http.server.ThreadingHTTPServer):
    """Ray's state API for nodes, placement groups and jobs, the nodes set by the test."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.nodes: list[dict[str, Any]] = [
            {
                "node_id": "head",
                "node_name": "head",
                "node_ip": "10.0.0.1",
                "state": "ALIVE",
                "is_head_node": True,
                "resources_total": {"CPU": 8},
            }
        ]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def add(self, name: str, *, started: float) -> None:
        with self.lock:
            self.nodes.append(
                {
                    "node_id": name[-4:] * 8,
                    "node_name": name,
                    "node_ip": "10.0.1.1",
                    "state": "ALIVE",
                    "is_head_node": False,
                    "resources_total": {"CPU": 200, "GPU": 8},
                    "start_time_ms": int(started * 1000),
                }
            )

    def kill(self, prefix: str) -> None:
        with self.lock:
            for n in self.nodes:
                if n["node_name"].startswith(prefix):
                    n.update(state="DEAD", state_message="the node was deleted", end_time_ms=int(time.time() * 1000))


class _Handler(http.server.BaseHTTPRequestHandler):
    server: StateApi

    def do_GET(self) -> None:
        resource = self.path.split("?")[0].removeprefix("/api/v0/")
        with self.server.lock:
            rows = [dict(n) for n in self.server.nodes] if resource == "nodes" else []
        body = json.dumps(
            {
                "result": True,
                "msg": "",
                "data": {
                    "result": {
                        "total": len(rows),
                        "num_after_truncation": len(rows),
                        "num_filtered": len(rows),
                        "result": rows,
                    }
                },
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def state_api() -> Iterator[StateApi]:
    server = StateApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _supervise(
    api: StateApi,
    tmp: Path,
    steps: int,
    max_restarts: int = 2,
    *,
    kube: KubeFake | None = None,
    **ends: Any,
) -> subprocess.Popen[str]:
    """The shipped supervisor around a rehearsal of ``steps`` steps of 0.4 s, saving every 4;
    with ``kube``, in a pod of that cluster: its API server and the head's credentials where
    the supervisor is told to find them (``--kube-credentials``)."""
    command = (
        f"{sys.executable} -m rl_lustre.rehearsal --step-seconds 0.4 --checkpoint-scale 1e-6 "
        f"grpo.max_num_steps={steps} checkpointing.save_period=4 grpo.val_period=0 "
        f"checkpointing.metric_name=null checkpointing.checkpoint_dir={tmp}/ckpt logger.log_dir={tmp}/logs"
    )
    entrypoint = supervised(
        command,
        python=sys.executable,
        max_restarts=max_restarts,
        nodes=2,
        gpus_per_node=8,
        capacity_timeout=60,
        checkpoint_dir=f"{tmp}/ckpt",
        poll=0.2,
        settle=0.5,
        watch=False,
        **ends,
    )
    root = os.path.dirname(shipped_package())
    env = {**os.environ, "RAY_DASHBOARD_ADDRESS": api.url, "PYTHONPATH": root}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    if kube is not None:
        creds = _credentials(kube, tmp / "serviceaccount")
        entrypoint = entrypoint.replace(" -- ", f" --kube-credentials {shlex.quote(str(creds))} -- ", 1)
        host, port = kube.url.removeprefix("https://").rsplit(":", 1)
        env.update(KUBERNETES_SERVICE_HOST=host, KUBERNETES_SERVICE_PORT=port)
    return subprocess.Popen(
        ["/bin/sh", "-c", entrypoint], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _credentials(kube: KubeFake, where: Path, token: str = DEFAULT_TOKEN) -> Path:
    """A pod's service account files, as the kubelet mounts them: token, CA, namespace."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "token").write_text(token)
    (where / "ca.crt").write_bytes(kube.ca_pem)
    (where / "namespace").write_text("default")
    return where


def _node(kube: KubeFake, name: str, end: str | None) -> None:
    """A Kubernetes Node, with the end GKE puts on flex-start nodes if ``end``."""
    annotations = {TERMINATION_ANNOTATION: end} if end else {}
    kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations}})


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_nodes_with_a_lifetime_make_nemo_rl_save_and_stop_and_the_run_goes_on_once_they_are_gone(
    state_api: StateApi, tmp_path: Path
) -> None:
    margin, left = 1.0, 3.0
    # Standby nodes whose raylets started now and live long enough to leave 3 s to train.
    started = time.time()
    lifetime = ARRIVAL_ALLOWANCE + margin + left
    for suffix in ("aaaa", "bbbb"):
        state_api.add(STANDBY + suffix, started=started)
    proc = _supervise(state_api, tmp_path, 24, lifetimes=[(STANDBY, lifetime)], save_margin=margin)
    assert proc.stdout is not None
    out: list[str] = []
    for line in proc.stdout:
        out.append(line)
        if line.startswith("rl_lustre supervisor: NeMo-RL stopped at the deadline"):
            # GKE deletes the standby nodes at their end; Spot nodes (no lifetime) come instead.
            state_api.kill(STANDBY)
            for suffix in ("cccc", "dddd"):
                state_api.add(SPOT + suffix, started=time.time())
    assert proc.wait(timeout=120) == 0, "".join(out[-30:])
    log = "".join(out)
    records = read_journal(log)

    # Attempt 1 ran on the standby nodes: told to save within their lifetime, less the margin.
    [deadline] = [r for r in records if r["event"] == "deadline"]
    assert deadline["attempt"] == 1
    assert deadline["nodes"] == [STANDBY + "aaaa", STANDBY + "bbbb"]
    assert deadline["end"] == pytest.approx(started - ARRIVAL_ALLOWANCE + lifetime, abs=0.01)
    first, second = OVERRIDES.findall(log)
    [value] = re.findall(re.escape(DEADLINE_KEY) + r"=([\d:]+)", first)
    assert parse_save_by(value) is not None
    assert 0 < parse_save_by(value) <= left
    # NeMo-RL stopped at it, having saved: not at a save period's step, before max_num_steps.
    stopped = [r for r in records if r["event"] == "finished"]
    assert [r["why"] for r in stopped] == ["timeout", "max_steps"]
    saves_1 = [r["step"] for r in records if r["event"] == "save" and r["attempt"] == 1]
    assert saves_1
    assert saves_1[-1] < 24
    [ended] = [r for r in records if r["event"] == "capacity_end"]
    assert ended["nodes"] == deadline["nodes"]
    assert ended["resume_step"] == saves_1[-1]
    # ... and the run went on as after a preemption: the nodes lost because their capacity ended.
    [restart] = parse_restarts(log)
    assert restart.cause == "capacity-ended"
    assert {n.name for n in restart.nodes} == set(deadline["nodes"])
    assert {n.reason for n in restart.nodes} == {"its capacity ended"}
    assert restart.resumed_from_step == saves_1[-1]
    # The rerun on Spot nodes has no end: no save-by, and it trains to the last step.
    assert DEADLINE_KEY not in second
    assert f"resuming from {tmp_path}/ckpt/step_{saves_1[-1]}" in log
    assert [r["step"] for r in records if r["event"] == "step" and r["attempt"] == 2][-1] == 24
    assert sorted(int(p.name.split("_")[1]) for p in (tmp_path / "ckpt").glob("step_*"))[-1] == 24


def test_a_stop_at_the_deadline_with_recovery_off_ends_the_run_failed_at_once_not_succeeded(
    state_api: StateApi, tmp_path: Path
) -> None:
    started = time.time()
    for suffix in ("aaaa", "bbbb"):
        state_api.add(STANDBY + suffix, started=started)
    proc = _supervise(
        state_api, tmp_path, 24, max_restarts=0, lifetimes=[(STANDBY, ARRIVAL_ALLOWANCE + 1.0 + 2.0)], save_margin=1.0
    )
    out, _ = proc.communicate(timeout=60)
    # Steps were left: not SUCCEEDED; and with no restart allowed, no wait for the nodes to go.
    assert proc.returncode == 1, out
    assert "with steps left: the run is not done" in out
    assert "recovery is off (max_restarts=0): not restarted" in out
    records = read_journal(out)
    assert [r["event"] for r in records if r["event"] in ("capacity_end", "capacity_wait")] == ["capacity_end"]
    assert records[-1] == {**records[-1], "event": "end", "status": 1}


def test_an_end_granted_at_up_caps_the_nodes_own_and_is_counted_from_the_attempts_start(
    state_api: StateApi, tmp_path: Path
) -> None:
    # The end up() was granted comes with the submission; the supervisor gives NeMo-RL the
    # time from the attempt's start (not the submission's) to the earlier of it and the
    # nodes' own end.
    now = time.time()
    state_api.add(STANDBY + "aaaa", started=now)
    state_api.add(STANDBY + "bbbb", started=now)
    granted = now + 3600.0
    proc = _supervise(state_api, tmp_path, 2, capacity_end=granted, lifetimes=[(STANDBY, 86400.0)], save_margin=60.0)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    [deadline] = [r for r in read_journal(out) if r["event"] == "deadline"]
    assert deadline["end"] == pytest.approx(granted, abs=0.01)
    [value] = re.findall(re.escape(DEADLINE_KEY) + r"=([\d:]+)", OVERRIDES.findall(out)[0])
    assert 3600 - 60 - 30 <= parse_save_by(value) <= 3600 - 60
    # Not in a pod: the nodes' ends are computed, and the supervisor says why, once.
    assert deadline["read"] == []
    assert out.count("is computed, not read from its Node: not in a Kubernetes pod") == 1


def test_the_supervisor_reads_a_flex_start_nodes_end_from_its_kubernetes_node(
    state_api: StateApi, tmp_path: Path
) -> None:
    # Two flex-start nodes a ComputeClass brought mid-run: GKE put its end on one Node (10 min
    # from now, far sooner than the 24 h computed from the pool's lifetime); the other's Node
    # is gone from Kubernetes (404): its end is computed.
    now = time.time()
    state_api.add(STANDBY + "aaaa", started=now)
    state_api.add(STANDBY + "bbbb", started=now)
    end = float(int(now) + 600)
    with KubeFake() as kube:
        _node(kube, STANDBY + "aaaa", _stamp(end))
        proc = _supervise(state_api, tmp_path, 2, kube=kube, lifetimes=[(STANDBY, 86400.0)], save_margin=60.0)
        out, _ = proc.communicate(timeout=120)
        gets = [r.path for r in kube.requests if r.method == "GET" and r.path.startswith("/api/v1/nodes/")]
    assert proc.returncode == 0, out
    [deadline] = [r for r in read_journal(out) if r["event"] == "deadline"]
    assert deadline["end"] == end
    assert deadline["nodes"] == [STANDBY + "aaaa", STANDBY + "bbbb"]
    assert deadline["read"] == [STANDBY + "aaaa"]
    assert f"{STANDBY}aaaa (read from its Node), {STANDBY}bbbb (computed)" in deadline["why"]
    assert f"{STANDBY}aaaa (read from its Node)" in out
    assert "not read from its Node" not in out
    [value] = re.findall(re.escape(DEADLINE_KEY) + r"=([\d:]+)", OVERRIDES.findall(out)[0])
    assert 600 - 60 - 30 <= parse_save_by(value) <= 600 - 60
    # One GET per node with a lifetime, by its name; no list of Nodes.
    assert sorted(gets) == [f"/api/v1/nodes/{STANDBY}aaaa", f"/api/v1/nodes/{STANDBY}bbbb"]


def test_the_ends_are_read_with_the_pods_token_and_a_failure_falls_back_saying_why(tmp_path: Path) -> None:
    with KubeFake() as kube:
        _node(kube, "flex-1", "2026-12-12T01:00:00Z")
        _node(kube, "spot-1", None)
        ca = kube.ca_pem.decode()
        read = read_ends(["flex-1", "spot-1", "gone-1", "flex-1"], api=kube.url, token=DEFAULT_TOKEN, ca_pem=ca)
        assert read.ends == {"flex-1": 1797037200.0}
        assert read.failed == ""
        # Through the pod's own files, as the supervisor reads them.
        creds = _credentials(kube, tmp_path / "sa")
        host, port = kube.url.removeprefix("https://").rsplit(":", 1)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KUBERNETES_SERVICE_HOST", host)
            mp.setenv("KUBERNETES_SERVICE_PORT", port)
            assert read_ends(["flex-1"], credentials=str(creds)).ends == {"flex-1": 1797037200.0}
            # A token the API server did not issue: refused, said, nothing read.
            refused = read_ends(["flex-1"], credentials=str(_credentials(kube, tmp_path / "bad", "not-a-token")))
        assert refused.ends == {}
        assert "GET Node flex-1: HTTP 401" in refused.failed
    # The API server gone: the reading stops at once with the reason, within its timeout.
    started = time.monotonic()
    down = read_ends(["flex-1", "flex-2"], api=kube.url, token=DEFAULT_TOKEN, ca_pem=ca, timeout=1.0)
    assert time.monotonic() - started < 3.0
    assert down.ends == {}
    assert down.failed.startswith("GET Node flex-1: ")
    # Not in a pod: nothing sent.
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        assert read_ends(["flex-1"]).failed == "not in a Kubernetes pod (no in-cluster credentials)"
    assert read_ends([]).failed == ""


def test_gkes_end_of_a_node_is_parsed_as_rfc_3339_in_utc() -> None:
    assert rfc3339("2026-12-12T01:00:00Z") == 1797037200.0
    assert rfc3339("2026-12-12T02:00:00+01:00") == 1797037200.0
    assert rfc3339("2026-12-12T01:00:00.5Z") == 1797037200.5
    assert rfc3339("2026-12-12T01:00:00") == 1797037200.0
    for bad in ("", "soon", "12/12/2026", None, 1797037200):
        assert rfc3339(bad) is None
    assert termination_time({"metadata": {"annotations": {TERMINATION_ANNOTATION: "2026-12-12T01:00:00Z"}}}) == (
        1797037200.0
    )
    assert termination_time({"metadata": {"annotations": {"other": "2026-12-12T01:00:00Z"}}}) is None
    assert termination_time({"metadata": {}}) is None


def test_a_nodes_end_read_from_its_node_wins_over_the_computed_one_and_the_earliest_end_rules() -> None:
    def node(name: str, started: float | None, *, alive: bool = True, gpus: float = 8) -> NodeView:
        return NodeView(name[-4:], name, "", alive, False, gpus, 0, started_at=started)

    asked: list[list[str]] = []

    def read(given: dict[str, float]) -> Any:
        def reader(names: list[str]) -> dict[str, float]:
            asked.append(names)
            return {n: t for n, t in given.items() if n in names}

        return reader

    life = [(STANDBY, 7200.0)]
    nodes = [node(STANDBY + "aaaa", 5000.0), node(STANDBY + "bbbb", 5000.0), node(STANDBY + "cccc", 100.0, alive=False)]
    nodes.append(node(SPOT + "eeee", 100.0))
    computed = 5000.0 - ARRIVAL_ALLOWANCE + 7200.0
    # Later than computed: GKE's word holds for that node; the other's computed end rules.
    later = attempt_end(nodes, life, gpus_per_node=8, read=read({STANDBY + "aaaa": computed + 999.0}))
    assert later is not None
    assert (later.end, later.read) == (computed, [STANDBY + "aaaa"])
    assert later.why == f"2 node(s) with a lifetime: {STANDBY}aaaa (read from its Node), {STANDBY}bbbb (computed)"
    # Only the nodes that may carry the attempt are asked about: not the dead one, not Spot's.
    assert asked == [[STANDBY + "aaaa", STANDBY + "bbbb"]]
    # Sooner than computed (the pool's lifetime is only a bound): the read end rules.
    sooner = attempt_end(nodes, life, gpus_per_node=8, read=read({STANDBY + "bbbb": 6000.0}), lost_at=100.0)
    assert sooner is not None
    assert (sooner.end, sooner.nodes, sooner.read) == (6000.0, [STANDBY + "aaaa", STANDBY + "bbbb"], [STANDBY + "bbbb"])
    # A node with no start known is taken by its read end alone; the end granted at up() still caps.
    unknown = attempt_end([node(STANDBY + "dddd", None)], life, gpus_per_node=8, read=read({STANDBY + "dddd": 9e9}))
    assert unknown is not None
    assert unknown.end == 9e9
    assert attempt_end([node(STANDBY + "dddd", None)], life, gpus_per_node=8, read=read({})) is None
    capped = attempt_end(nodes, life, gpus_per_node=8, capacity_end=1.0, read=read({STANDBY + "aaaa": 2.0}))
    assert capped is not None
    assert capped.end == 1.0
    # Nothing with a lifetime: nothing asked.
    asked.clear()
    assert attempt_end([node(SPOT + "eeee", 1.0)], life, gpus_per_node=8, read=read({})) is None
    assert asked == []


def test_a_nodes_end_is_counted_from_the_earlier_of_its_start_less_the_allowance_and_the_loss_it_replaces() -> None:
    def node(name: str, started: float | None, *, alive: bool = True, gpus: float = 8) -> NodeView:
        return NodeView(name[-4:], name, "", alive, False, gpus, 0, started_at=started)

    life = [(STANDBY, 7200.0)]
    # A replacement whose raylet started 20 min after the loss: counted from the loss.
    late = attempt_end([node(STANDBY + "aaaa", 2200.0)], life, gpus_per_node=8, lost_at=1000.0)
    assert late is not None
    assert late.end == 1000.0 + 7200.0
    # A node there before the loss: from its start less the allowance.
    early = attempt_end([node(STANDBY + "aaaa", 500.0)], life, gpus_per_node=8, lost_at=1000.0)
    assert early is not None
    assert early.end == 500.0 - ARRIVAL_ALLOWANCE + 7200.0
    # The earliest node rules; dead nodes, nodes without the GPUs and nodes of other pools do not count.
    mixed = attempt_end(
        [
            node(STANDBY + "aaaa", 5000.0),
            node(STANDBY + "bbbb", 4000.0),
            node(STANDBY + "cccc", 100.0, alive=False),
            node(STANDBY + "dddd", 100.0, gpus=0),
            node(SPOT + "eeee", 100.0),
        ],
        life,
        gpus_per_node=8,
    )
    assert mixed is not None
    assert mixed.end == 4000.0 - ARRIVAL_ALLOWANCE + 7200.0
    assert mixed.nodes == [STANDBY + "aaaa", STANDBY + "bbbb"]
    # Nothing with a lifetime, and no end granted: no deadline.
    assert attempt_end([node(SPOT + "eeee", 100.0)], life, gpus_per_node=8) is None
    assert attempt_end([node(SPOT + "eeee", 100.0)], life, gpus_per_node=8, capacity_end=9000.0).end == 9000.0


def test_the_supervisor_refuses_a_lifetime_without_a_margin_or_a_malformed_one(tmp_path: Path) -> None:
    root = os.path.dirname(shipped_package())
    base = [
        sys.executable,
        "-c",
        f"import sys, runpy; sys.path.insert(0, {root!r}); "
        "runpy.run_module('rl_lustre_oncluster.supervisor', run_name='__main__', alter_sys=True)",
    ]
    missing = subprocess.run([*base, "--lifetime", f"{STANDBY}=600", "--", "true"], capture_output=True, text=True)
    assert missing.returncode == 2
    assert "--lifetime need --save-margin" in missing.stderr
    bad = subprocess.run(
        [*base, "--lifetime", STANDBY, "--save-margin", "60", "--", "true"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert "--lifetime" in bad.stderr
