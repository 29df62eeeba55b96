"""Results outlive a local cluster: a with block that ends (normally, or on an exception)
copies every run's records, complete checkpoints and logs to ``results`` (a directory),
and the run read back from there in a fresh process equals the run read from the cluster;
a copy that fails says so and leaves the volume directory as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from rl_lustre import Cluster, GRPOJob, Run
from rl_lustre.catalog import RESULTS_MANIFEST
from rl_lustre.errors import ResultsKeptWarning
from rl_lustre.nemo_rl.converters import hf_layout
from rl_lustre.oncluster import rundir
from rl_lustre.oncluster.runview import history

pytestmark = pytest.mark.slow

READ_BACK = """
import json, sys
from rl_lustre import Run
run = Run.from_results(sys.argv[1])
ledger = run.goodput()
if len(sys.argv) > 2:
    run.plot(sys.argv[2])
print(json.dumps({
    "status": run.status(),
    "steps": [s.step for s in run.steps()],
    "metrics": {str(k): v for k, v in run.metrics().items()},
    "checkpoints": [[c.step, c.size_bytes, c.uri] for c in run.checkpoints()],
    "restarts": len(run.restarts()),
    "goodput": [ledger.total_seconds, ledger.seconds["training"], ledger.attributed_fraction],
}))
"""


def job(name: str, steps: int = 4) -> GRPOJob:
    return GRPOJob(name=name, recipe="grpo_math_1B", max_num_steps=steps, save_period=2)


def read_back(uri: str, *plot: str) -> dict[str, object]:
    """The run read from its results by a fresh interpreter: no cluster, no state of ours."""
    out = subprocess.run(
        [sys.executable, "-c", READ_BACK, uri, *plot], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout.splitlines()[-1]))


def test_results_leave_with_the_block_and_read_back_the_same(tmp_path: Path) -> None:
    results = tmp_path / "results"
    cluster = Cluster.local("res-local", volume_dir=tmp_path / "vol", results=str(results), rehearsal_step_seconds=0.1)
    with cluster:
        run = cluster.submit(job("done"))
        assert run.wait(timeout=300) == "SUCCEEDED"
        ledger = run.goodput()
        live = {
            "status": "SUCCEEDED",
            "steps": [s.step for s in run.steps()],
            "metrics": {str(k): v for k, v in run.metrics().items()},
            "checkpoints": [[c.step, c.size_bytes] for c in run.checkpoints()],
            "restarts": len(run.restarts()),
            "goodput": [ledger.total_seconds, ledger.seconds["training"], ledger.attributed_fraction],
        }
        run_id = run.job_id
        # The model out: the rehearsal's converter takes NeMo-RL's converter's command line.
        planned = run.export_model(str(tmp_path / "model"), format="hf", dry_run=True)
        assert planned.command is not None
        assert "-m rl_lustre.rehearsal.converter --backend dtensor" in planned.command
        assert "--dcp-ckpt-path" in planned.command
        assert not (tmp_path / "model").exists()
        model = run.export_model(str(tmp_path / "model"), format="hf")
        assert sorted(p.name for p in (tmp_path / "model").iterdir()) == sorted(hf_layout("dtensor"))
        assert model.step == 4
        plain = run.export_model(str(tmp_path / "step-2"), step=2)
        assert (plain.format, (tmp_path / "step-2" / "training_info.json").is_file()) == ("checkpoint", True)
    assert live["checkpoints"], "the job saved no checkpoint to compare"
    where = results / run_id
    manifest = json.loads((where / RESULTS_MANIFEST).read_text())
    assert [c["step"] for c in manifest["checkpoints"]] == [c[0] for c in live["checkpoints"]]  # type: ignore[index]
    # The run's directory as the supervisor laid it out (issue 31), with teardown's two files.
    for name in (rundir.SUBMISSION, rundir.JOURNAL, rundir.DRIVER_LOG, rundir.SUMMARY, rundir.EXPORT):
        assert (where / name).is_file(), name
    assert not list(where.rglob("tmp_step_*")), "a save cut short is never exported"
    stored = read_back(str(where), str(tmp_path / "read-back.png"))
    assert (tmp_path / "read-back.png").stat().st_size > 5_000
    uris = [c.pop() for c in stored["checkpoints"]]  # type: ignore[attr-defined]
    assert uris == [str(where / "checkpoints" / f"step_{c[0]}") for c in live["checkpoints"]]  # type: ignore[index]
    assert stored == live

    # A block that raises copies what the run left, the run stopped by teardown.
    started: list[Run] = []

    def script_that_breaks() -> None:
        with cluster:
            started.append(cluster.submit(job("broken", steps=400)))
            deadline = time.monotonic() + 120
            while not started[0].checkpoints():
                assert time.monotonic() < deadline, "no checkpoint within 120 s"
                time.sleep(0.2)
            raise RuntimeError("the script broke")

    with pytest.raises(RuntimeError, match="the script broke"):
        script_that_breaks()
    run = started[0]
    stopped = results / run.job_id
    summary = json.loads((stopped / rundir.SUMMARY).read_text())
    assert (summary["status"], summary["stopped_by"]) == ("STOPPED", "teardown")
    assert json.loads((tmp_path / "vol" / rundir.RUNS / run.job_id / rundir.STOPPED).read_text())["by"] == "teardown"
    # The keeper went first; then teardown marked the run in flight, and ended the keeper's history.
    [*_, down] = history(str(tmp_path / "vol"), "res-local")
    assert (down["event"], down["stopped"]) == ("down", [run.run_id])
    assert json.loads((stopped / rundir.STOPPED).read_text())["by"] == "teardown"
    steps = sorted(p.name for p in (stopped / "checkpoints").iterdir())
    assert steps
    assert all(s.startswith("step_") for s in steps)
    assert Run.from_results(str(stopped)).status() == "STOPPED"


def test_a_copy_that_fails_says_so_and_the_volume_directory_stays(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.write_text("a file where the results directory should be: every copy fails")
    cluster = Cluster.local("res-fail", volume_dir=tmp_path / "vol", results=str(results), rehearsal_step_seconds=0.1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with cluster:
            run = cluster.submit(job("unlucky"))
            run.wait(timeout=300)
    kept = [w for w in seen if issubclass(w.category, ResultsKeptWarning)]
    assert kept, [str(w.message) for w in seen]
    text = str(kept[0].message)
    assert "could not be copied" in text
    assert run.job_id in text
    assert "newest checkpoint step_4" in text
    assert sorted(p.name for p in (tmp_path / "vol" / "checkpoints" / "unlucky").iterdir()) == ["step_2", "step_4"]
    # A later down() (the head is gone) exports from what the seal left on the volume.
    results.unlink()
    cluster.down()
    assert json.loads((results / run.job_id / RESULTS_MANIFEST).read_text())["checkpoints"][-1]["step"] == 4
