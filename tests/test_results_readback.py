"""A run read back from its results is read by the one reader of a run's directory (issue 31's
``RunView``) and told as a run whose head is gone is told: its submissions across a head loss,
its status from its records, the head loss the keeper recorded (carried by the seal)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from rl_lustre import Run
from rl_lustre.catalog import RESULTS_FORMAT, RESULTS_MANIFEST
from rl_lustre.cli._app import cli
from rl_lustre.oncluster import rundir
from rl_lustre.oncluster.records import HEAD_LOST, RUN_ID, TOTAL_STEPS
from rl_lustre.oncluster.runrecords import RunWriter, mark_stopped
from rl_lustre.oncluster.seal import seal_runs
from rl_lustre.oncluster.teardown import teardown

RUN = "rl-lustre-lost-0a1b2c3d"
CLUSTER = "demo"


def supervised(mount: Path, *, lost: bool) -> Path:
    """The run's directory as its supervisors leave it: a first submission, and (``lost``) the
    keeper's resubmission after a head loss, each printing a step."""
    path = Path(rundir.run_dir(str(mount), RUN))
    meta = {RUN_ID: RUN, TOTAL_STEPS: "8", "rl_lustre.cluster": CLUSTER}
    first = RunWriter.open(path, submission=RUN, metadata=meta, runtime_env={}, argv=[])
    first.feed(b"the first head's output\n")
    if lost:
        again = {**meta, HEAD_LOST: "1"}
        second = RunWriter.open(path, submission=f"{RUN}-h0a1b2c3d", metadata=again, runtime_env={}, argv=[])
        second.feed(b"the second head's output\n")
    return path


def exported(mount: Path, results: Path) -> str:
    """What teardown leaves in ``results`` of the run: its sealed directory and the manifest."""
    where = results / RUN
    shutil.copytree(Path(rundir.run_dir(str(mount), RUN)), where)
    (where / RESULTS_MANIFEST).write_text(json.dumps({"format": RESULTS_FORMAT, "checkpoints": []}))
    return str(where)


def test_a_run_resubmitted_after_a_head_loss_reads_back_with_both_submissions(tmp_path: Path) -> None:
    mount = tmp_path / "vol"
    path = supervised(mount, lost=True)
    with open(path / rundir.JOURNAL, "a") as f:  # the resubmission's supervisor ends: exit status 0
        f.write(json.dumps({"event": "end", "status": 0, "at": time.time()}) + "\n")
    seal_runs(str(mount), [], volume_id="v", cluster=CLUSTER)
    run = Run.from_results(exported(mount, tmp_path / "results"))
    assert run.status() == "SUCCEEDED"
    assert run.job_id == f"{RUN}-h0a1b2c3d"
    assert run.run_id == RUN
    assert run._total == 8
    # Both submissions' output, from the run's log (driver.log), in order.
    log = run.logs()
    assert log.index("the first head's output") < log.index("the second head's output")


def test_a_run_stopped_reads_back_stopped_though_its_supervisor_ended_nonzero(tmp_path: Path) -> None:
    # A stopped supervisor records its end with a status of its own (1, or 143 on SIGTERM).
    mount = tmp_path / "vol"
    path = supervised(mount, lost=False)
    assert mark_stopped(path, "teardown")
    with open(path / rundir.JOURNAL, "a") as f:
        f.write(json.dumps({"event": "end", "status": 1, "at": time.time()}) + "\n")
    seal_runs(str(mount), [], volume_id="v", cluster=CLUSTER)
    info = Run.from_results(exported(mount, tmp_path / "results")).info()
    assert (info.status, info.message) == ("STOPPED", "it was stopped (teardown)")


@pytest.mark.parametrize("lost", [True, False])
def test_a_run_torn_down_after_its_head_was_lost_says_so(tmp_path: Path, lost: bool) -> None:
    mount = tmp_path / "vol"
    path = supervised(mount, lost=False)
    # The head is lost and the cluster torn down before the keeper resubmitted the run.
    told = {"head": "demo-head-x", "reason": "OOMKilled", "lost_at": time.time() + 1} if lost else None
    assert teardown(str(mount), CLUSTER, lost=told) == [RUN]
    assert not mark_stopped(path, "teardown")  # the first marker stays
    seal_runs(str(mount), [], volume_id="v", cluster=CLUSTER)
    uri = exported(mount, tmp_path / "results")
    info = Run.from_results(uri).info()
    assert info is not None
    if lost:
        assert info.status == "FAILED"
        assert "its Ray head was lost (OOMKilled: demo-head-x)" in info.message
        assert "torn down before the run was resubmitted" in info.message
    else:
        assert (info.status, info.message) == ("STOPPED", "it was stopped (teardown)")
    out = CliRunner().invoke(cli, ["results", "ls", str(tmp_path / "results")], catch_exceptions=False).output
    assert f"{RUN}  {info.status}" in out
