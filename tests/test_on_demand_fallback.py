"""A run on an on-demand fallback says so (issue 34, point 2): jobs submitted on a deployment
whose policy lists on-demand after another kind carry the on-demand pools' node-name prefixes
(``--on-demand``) and what that costs; the supervisor's ``on_demand`` journal record
(tests/test_oncluster_fallback.py) becomes the run handle's note and repr."""

from __future__ import annotations

import json
import shlex

import pytest
from helpers.specs import SMALL

from rl_lustre import Cluster, GRPOJob
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.backends.granted import on_demand_fallback
from rl_lustre.backends.submission import prepare
from rl_lustre.catalog import COMPUTE_CLASS_LABEL, GKE_NODEPOOL_LABEL
from rl_lustre.oncluster.jobargs import parser
from rl_lustre.oncluster.records import MARK
from rl_lustre.ray.jobs import JobInfo
from rl_lustre.run import Run
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, KubeFake

BASE: dict[str, object] = {**SMALL, "prepull_image": False, "prefetch_models": (), "secrets": ()}


def backend(cluster: Cluster) -> GKEBackend:
    return GKEBackend(cluster, backoff=FAST_BACKOFF, retry=FAST_RETRY)


def supervisor_args(entrypoint: str) -> object:
    words = shlex.split(entrypoint)
    return parser().parse_args(words[words.index("rl_lustre_oncluster.supervisor") + 1 :])


def test_jobs_on_a_spot_then_on_demand_policy_name_the_on_demand_nodes_and_their_cost() -> None:
    c = Cluster(**{**BASE, "capacity": ("spot", "on-demand")})  # type: ignore[arg-type]
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        gcp.stock.out("spot")
        b = backend(c)
        b.up(check=False)
        gpu = {
            n["metadata"]["name"]: n["metadata"]["labels"][GKE_NODEPOOL_LABEL]
            for n in kube.objects("Node")
            if COMPUTE_CLASS_LABEL in n["metadata"]["labels"]
        }
        assert set(gpu.values()) == {"gpu-ondemand-b"}
        told = b.capacity_fallback()
        assert told is not None
        # The prefixes name the on-demand pool's nodes, and only them.
        assert all(any(name.startswith(p) for p in told.prefixes) for name in gpu), (gpu, told)
        spot = [p for p in b.live_node_pools() or () if p.name == "gpu-pool"]
        assert not any(
            u.rsplit("/", 1)[-1].startswith(p) for s in spot for u in s.instance_group_urls for p in told.prefixes
        )
        assert told.note == "the policy starts with spot; an on-demand a4-highgpu-8g node costs $64.15/h more"
        sub = prepare(c, GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=4), fallback=told)
        args = supervisor_args(sub.entrypoint)
        assert args.on_demand == list(told.prefixes)  # type: ignore[attr-defined]
        assert args.fallback_note == told.note  # type: ignore[attr-defined]
        # The run's identity does not depend on it.
        assert sub.base_id == prepare(c, GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=4)).base_id
        b.down()


def test_a_policy_without_an_on_demand_fallback_tells_nothing() -> None:
    for capacity in (("spot",), ("on-demand",)):
        c = Cluster(**{**BASE, "capacity": capacity})  # type: ignore[arg-type]
        assert backend(c).capacity_fallback() is None  # decided from the policy: no call to GKE
        assert on_demand_fallback(c, []) is None
    sub = prepare(Cluster(**BASE), GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=4))  # type: ignore[arg-type]
    assert "--on-demand" not in sub.entrypoint
    assert supervisor_args(sub.entrypoint).on_demand == []  # type: ignore[attr-defined]


RECORD = (
    MARK + '{"at": 1.0, "attempt": 2, "event": "on_demand", "nodes": ["gke-demo-gpu-ondemand-b-1a2b-x7k2"], '
    '"note": "the policy starts with spot; an on-demand a4-highgpu-8g node costs $64.15/h more", "v": 1}\n'
)


class Jobs:
    """The Jobs API of one running job whose log the test writes."""

    def __init__(self) -> None:
        self.log = "rl_lustre supervisor: running the command\n"

    def info(self, job_id: str) -> JobInfo:
        return JobInfo(job_id, "RUNNING", metadata={"rl_lustre.job": "x"})

    def logs(self, job_id: str) -> str:
        return self.log


def test_the_run_handle_shows_the_supervisors_on_demand_record() -> None:
    record = RECORD
    jobs = Jobs()
    run = Run(jobs, "rl-lustre-run-1-abc")  # type: ignore[arg-type]
    assert run.notes() == []
    jobs.log += record
    [note] = run.notes()
    assert note == (
        "ON-DEMAND FALLBACK: attempt 2 runs on 1 on-demand GPU node(s), the costliest kind of the capacity policy: "
        "gke-demo-gpu-ondemand-b-1a2b-x7k2 (the policy starts with spot; an on-demand a4-highgpu-8g node costs "
        "$64.15/h more)"
    )
    assert repr(run) == "Run(job_id='rl-lustre-run-1-abc', ON-DEMAND FALLBACK)"


def test_cli_status_shows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from rl_lustre.cli import jobs as cli_jobs

    jobs = Jobs()
    jobs.log += RECORD
    monkeypatch.setattr(cli_jobs, "_run", lambda target, job_id: Run(jobs, job_id))  # type: ignore[arg-type]
    shown = CliRunner().invoke(cli_jobs.status, ["demo.toml", "rl-lustre-run-1-abc"])
    assert shown.exit_code == 0, shown.output
    assert "\n  ON-DEMAND FALLBACK: attempt 2 runs on 1 on-demand GPU node(s)" in shown.output
    as_json = CliRunner().invoke(cli_jobs.status, ["demo.toml", "rl-lustre-run-1-abc", "--json"])
    assert json.loads(as_json.output)["notes"][0].startswith("ON-DEMAND FALLBACK: attempt 2")
