"""The seal of a stopped run (rl_lustre/oncluster/seal.py): what leaves the volume, under which
names, and what never does (a save cut short, a credential by its name or by its value)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_lustre.oncluster import rundir
from rl_lustre.oncluster.records import CHECKPOINT_DIR, LOG_DIR
from rl_lustre.oncluster.seal import SEAL_MARK, main, seal_runs

pytestmark = pytest.mark.oncluster

SECRET = "hf_abcdefghijklmnopqrstuvwxyz123456"


def volume(tmp_path: Path) -> Path:
    mount = tmp_path / "lustre"
    ckpt = mount / "checkpoints" / "run-1"
    for step in (4, 6):
        (ckpt / f"step_{step}" / "policy" / "weights").mkdir(parents=True)
        (ckpt / f"step_{step}" / "training_info.json").write_text(json.dumps({"step": step}))
        (ckpt / f"step_{step}" / "policy" / "weights" / "shard-0").write_bytes(b"w" * 100 * step)
    (ckpt / "tmp_step_8").mkdir()
    (ckpt / "tmp_step_8" / "half").write_bytes(b"h" * 7)
    logs = mount / "logs" / "run-1" / "exp_001"
    logs.mkdir(parents=True)
    (logs / "train.log").write_text("step 1\n")
    (logs / "env.txt").write_text(f"HF_TOKEN={SECRET}\n")
    (mount / "logs" / "run-1" / "secrets").mkdir()
    (mount / "logs" / "run-1" / "secrets" / "key.bin").write_bytes(b"k")
    return mount


def run(mount: Path, **more: object) -> dict[str, object]:
    return {
        "run_id": "rl-lustre-run-1-0a1b2c3d",
        "run_dir": str(mount / rundir.RUNS / "rl-lustre-run-1-0a1b2c3d"),
        "checkpoint_dir": str(mount / "checkpoints" / "run-1"),
        "log_dir": str(mount / "logs" / "run-1"),
        **more,
    }


def test_complete_checkpoints_and_logs_are_listed_never_a_partial_save_or_a_secret(tmp_path: Path) -> None:
    mount = volume(tmp_path)
    summary = {"status": "STOPPED", "attempts": [{"submission_id": "rl-lustre-run-1-0a1b2c3d"}]}
    logs = {"rl-lustre-run-1-0a1b2c3d": "Step 1/4\nSaving checkpoint for step 4...\n"}
    [sealed] = seal_runs(
        str(mount),
        [run(mount, summary=summary, attempts=["rl-lustre-run-1-0a1b2c3d"])],
        volume_id="uid-1",
        logs_of=logs.get,
        secret_values=[SECRET, "short"],
        now=100.0,
    )
    run_dir = mount / rundir.RUNS / "rl-lustre-run-1-0a1b2c3d"
    export = json.loads((run_dir / rundir.EXPORT).read_text())
    assert export["volume_id"] == "uid-1"
    assert export["sealed_at"] == 100.0
    assert [(u["to"], u["files"], u["bytes"]) for u in export["units"]] == [
        ("checkpoints/step_4", 2, 400 + 11),
        ("checkpoints/step_6", 2, 600 + 11),
        ("logs", 1, 7),
    ]
    assert [u["training_info"] for u in export["units"][:2]] == [{"step": 4}, {"step": 6}]
    why = {Path(w["path"]).name: w["why"] for w in export["withheld"]}
    assert why["tmp_step_8"].startswith("a save cut short (tmp_step_8)")
    assert why["env.txt"].startswith("holds the value of one of the cluster's secrets")
    assert why["key.bin"].startswith("under a secrets directory ('secrets')")
    # Withheld files are moved out of what is exported, never deleted.
    assert not (mount / "logs" / "run-1" / "exp_001" / "env.txt").exists()
    aside = mount / "rl_lustre" / "withheld" / "rl-lustre-run-1-0a1b2c3d" / "logs" / "run-1" / "exp_001" / "env.txt"
    assert SECRET in aside.read_text()
    assert (mount / "checkpoints" / "run-1" / "tmp_step_8" / "half").exists()
    # The run's records: the summary, and the driver log from the Ray job's log.
    assert json.loads((run_dir / rundir.SUMMARY).read_text())["status"] == "STOPPED"
    assert (run_dir / rundir.DRIVER_LOG).read_text() == logs["rl-lustre-run-1-0a1b2c3d"]
    assert sealed["newest"] == {"step": 6, "bytes": 611, "files": 2}
    assert sealed["checkpoints"] == 2
    records = sum(p.stat().st_size for p in run_dir.iterdir())
    assert sealed["bytes"] == 411 + 611 + 7 + records


def test_a_driver_log_already_there_is_kept_and_other_runs_on_the_volume_are_sealed(tmp_path: Path) -> None:
    mount = volume(tmp_path)
    mine = mount / rundir.RUNS / "rl-lustre-run-1-0a1b2c3d"
    mine.mkdir(parents=True)
    (mine / rundir.DRIVER_LOG).write_text("written by the supervisor\n")
    # A run whose Ray jobs are gone (the head was lost): known from its directory alone.
    other = mount / rundir.RUNS / "rl-lustre-old-11112222"
    other.mkdir(parents=True)
    meta = {CHECKPOINT_DIR: str(mount / "checkpoints" / "run-1"), LOG_DIR: str(mount / "nowhere")}
    (other / rundir.SUBMISSION).write_text(json.dumps({"metadata": meta}))
    sealed = seal_runs(str(mount), [run(mount, attempts=["x"])], volume_id="v", logs_of=lambda _: "from the dashboard")
    assert [s["run_id"] for s in sealed] == ["rl-lustre-old-11112222", "rl-lustre-run-1-0a1b2c3d"]
    assert (mine / rundir.DRIVER_LOG).read_text() == "written by the supervisor\n"
    old = json.loads((other / rundir.EXPORT).read_text())
    assert [u["to"] for u in old["units"]] == ["checkpoints/step_4", "checkpoints/step_6"]


def test_stop_markers_keep_a_users_stop_and_the_command_line_prints_its_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The one writer of the marker (oncluster.runrecords): the first one stays, none for a run never recorded.
    (tmp_path / "u").mkdir()
    (tmp_path / "w").mkdir()
    (tmp_path / "u" / rundir.STOPPED).write_text('{"by": "user"}')
    assert main(["stop", str(tmp_path / "u"), str(tmp_path / "w"), str(tmp_path / "never")]) == 0
    assert json.loads((tmp_path / "u" / rundir.STOPPED).read_text()) == {"by": "user"}
    assert json.loads((tmp_path / "w" / rundir.STOPPED).read_text())["by"] == "teardown"
    assert not (tmp_path / "never").exists()

    mount = volume(tmp_path)
    records = tmp_path / "records.json"
    records.write_text(json.dumps({"runs": [run(mount)]}))
    assert main(["seal", "--mount", str(mount), "--volume-id", "v", "--records", str(records)]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith(SEAL_MARK)]
    assert json.loads(line[len(SEAL_MARK) :])[0]["newest"]["step"] == 6


def test_a_run_id_that_could_escape_its_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="run id"):
        seal_runs(str(tmp_path), [{"run_id": "../x", "run_dir": str(tmp_path / "x")}], volume_id="v")


def test_a_run_the_head_knows_on_another_volume_is_left_to_that_volume(tmp_path: Path) -> None:
    # A head outlives volumes (a RayCluster reused, an attached cluster): a run whose directory was
    # on another volume is not sealed here, and nothing is written where its directory was.
    mount = volume(tmp_path)
    elsewhere = tmp_path / "other-lustre"
    foreign = {**run(elsewhere), "run_id": "rl-lustre-gone-33334444"}
    foreign["run_dir"] = str(elsewhere / rundir.RUNS / "rl-lustre-gone-33334444")
    sealed = seal_runs(str(mount), [run(mount), foreign], volume_id="v")
    assert [s["run_id"] for s in sealed] == ["rl-lustre-run-1-0a1b2c3d"]
    assert not elsewhere.exists()
    assert not (mount / rundir.RUNS / "rl-lustre-gone-33334444").exists()
