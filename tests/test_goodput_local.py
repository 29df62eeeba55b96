"""run.goodput() and cluster.goodput() on a real local head: a rehearsal's ledger, so far and in full."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest
from click.testing import CliRunner
from helpers.goodput import SCHEMA

from rl_lustre import Cluster, GRPOJob
from rl_lustre.backends.goodput_local import worker_spans
from rl_lustre.cli._app import cli
from rl_lustre.goodput import CATEGORIES
from rl_lustre.ray.state import RayNode

JOB = GRPOJob(
    name="ledger",
    recipe="grpo_math_1B",
    max_num_steps=4,
    save_period=2,
    overrides={"grpo.val_period": 3, "checkpointing.metric_name": None},
)


def test_a_finished_rehearsals_ledger_is_its_steps_saves_and_validation(local_cluster: Cluster, tmp_path) -> None:
    run = local_cluster.submit(JOB, fresh=True)
    deadline = time.monotonic() + 180
    while run.progress.step < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    so_far = run.goodput()
    if run.status() == "RUNNING":
        assert not so_far.complete
        assert any("counted as training so far" in n for n in so_far.notes)
    assert run.wait(timeout=300) == "SUCCEEDED"

    ledger = run.goodput()
    assert ledger.complete
    assert ledger.scope == "run"
    assert ledger.name == run.job_id
    assert ledger.attributed_fraction >= 0.95, str(ledger)
    assert ledger.total_seconds == pytest.approx(sum(ledger.seconds[c] for c in CATEGORIES))
    # The head-only cluster stands for its one node: one lane, the run's from submission to end.
    info = run.info()
    assert [n.node for n in ledger.nodes] == ["head/1"]
    assert info.start_time is not None
    assert info.end_time is not None
    assert ledger.total_seconds == pytest.approx(info.end_time - info.start_time, abs=0.01)
    steps = run.steps()
    assert [s.step for s in steps] == [1, 2, 3, 4]
    timed = sum((s.seconds or 0) - s.timings.get("checkpointing", 0) - (s.validation_seconds or 0) for s in steps)
    saves = sum(s.timings.get("checkpointing", 0) for s in steps)
    validation = sum(s.validation_seconds or 0 for s in steps)
    # NeMo-RL's own times, plus at most the untimed logging between steps.
    untimed = ledger.details["untimed_seconds"]
    assert timed - 0.05 <= ledger.seconds["training"] <= timed + untimed + 0.05
    assert ledger.seconds["checkpoint"] == pytest.approx(saves, rel=0.10, abs=0.05)
    assert ledger.seconds["validation"] == pytest.approx(validation, rel=0.10, abs=0.05)
    assert ledger.seconds["startup"] > 0
    assert ledger.seconds["lost"] == 0
    assert ledger.total_usd == 0
    assert "a local deployment has no cloud cost" in ledger.notes
    assert "rehearsal: no model is trained" in ledger.notes
    # The same run in the cluster's ledger since just before it, which adds the cluster's own time.
    cluster = local_cluster.goodput(since=info.start_time - 5)
    assert cluster.run(run.job_id).seconds == pytest.approx(ledger.seconds)
    for c in CATEGORIES:
        assert cluster.seconds[c] == pytest.approx(sum(r.seconds[c] for r in cluster.runs) + cluster.own.seconds[c])

    # The command line: the run's ledger as JSON (the schema of tests/data), the cluster's as a table.
    script = tmp_path / "deploy.py"
    c = local_cluster
    script.write_text(
        f"from rl_lustre import Cluster\nc = Cluster.local({c.name!r}, volume_dir={c.mount_path!r}, "
        f"secrets={tuple(c.secrets)!r}, rehearsal_step_seconds={c.rehearsal_step_seconds!r})\n"
    )
    result = CliRunner().invoke(cli, ["goodput", f"{script}:c", run.job_id, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["categories"]["training"]["seconds"] == pytest.approx(ledger.seconds["training"])
    result = CliRunner().invoke(cli, ["goodput", f"{script}:c", "--since", "10m"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"Goodput of cluster {c.name}")
    assert run.job_id in result.stdout


def test_a_down_cluster_has_no_ledger(tmp_path) -> None:
    from rl_lustre.errors import NotReadyError

    cluster = Cluster.local("rll-goodput-down", volume_dir=tmp_path)
    with pytest.raises(NotReadyError, match="before down"):
        cluster.goodput()


def test_worker_raylets_are_billed_from_launch_to_end_and_matched_to_ray_by_name_and_time() -> None:
    ray = [
        RayNode("old", "worker-1", "127.0.0.1", "DEAD", 1.0, 1.0, 5.0),  # an earlier head's, before the launch
        RayNode("a", "worker-1", "127.0.0.1", "DEAD", 1.0, 12.0, 41.0),
        RayNode("b", "worker-2", "127.0.0.1", "ALIVE", 1.0, 22.0, None),
    ]
    records = {
        "worker-1": {"pid": 1, "num_gpus": 1, "launched_at": 10.0, "ready_at": 12.5, "ended_at": 40.0},
        "worker-2": {"pid": 2, "num_gpus": 1, "launched_at": 20.0, "ready_at": 22.5, "ended_at": None},
        "worker-3": {"pid": 3, "num_gpus": 1, "launched_at": None, "ready_at": None, "ended_at": None},
    }
    one, two = worker_spans(records, ray)
    assert (one.billed_from, one.ready_at, one.worker_at, one.billed_to, one.ray_node_ids) == (10, 12, 12, 40, ("a",))
    assert (two.billed_from, two.ready_at, two.billed_to, two.ray_node_ids) == (20, 22, None, ("b",))
    assert one.kind == "local"
    assert one.usd_per_hour == 0
