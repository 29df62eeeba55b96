"""A run's records on the volume (issue 31, point 1): written by its supervisor as things
happen, one writer at a time, and read back without the head that ran it."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl_lustre.oncluster import rundir
from rl_lustre.oncluster.records import HEAD_LOST, read_journal
from rl_lustre.oncluster.runrecords import Generation, RunWriter, current, mark_stopped
from rl_lustre.oncluster.runview import RunView, as_log, submission_log
from rl_lustre.recovery import parse_restarts, shipped_package

pytestmark = pytest.mark.oncluster

REHEARSAL = "--step-seconds 0.05 --checkpoint-scale 1e-6 grpo.max_num_steps=4 checkpointing.save_period=2"


def _claims(root: str, n: int, out: multiprocessing.Queue[list[int]]) -> None:
    out.put([Generation.claim(root, {"pid": os.getpid()}).n for _ in range(n)])


def test_two_writers_racing_for_a_run_directory_never_get_the_same_turn(tmp_path: Path) -> None:
    """Two processes claim 40 turns each at once: 80 distinct turns, the newest is the writer."""
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[list[int]] = ctx.Queue()
    procs = [ctx.Process(target=_claims, args=(str(tmp_path), 40, out)) for _ in range(2)]
    for p in procs:
        p.start()
    got = out.get(timeout=60) + out.get(timeout=60)
    for p in procs:
        p.join(timeout=30)
    assert sorted(got) == list(range(1, 81))
    assert current(tmp_path) == 80
    assert not Generation(tmp_path, 80).superseded()
    assert Generation(tmp_path, 79).superseded()


def test_a_superseded_writer_writes_nothing_more(tmp_path: Path) -> None:
    stale = RunWriter.open(tmp_path, submission="a", metadata={}, runtime_env={}, argv=["--nodes", "0"])
    stale.feed(b'RL_LUSTRE_EVENT {"at": 1.0, "event": "step", "step": 1}\nhello\n')
    fresh = RunWriter.open(tmp_path, submission="b", metadata={HEAD_LOST: "{}"}, runtime_env={}, argv=["--nodes", "0"])
    stale.feed(b'RL_LUSTRE_EVENT {"at": 2.0, "event": "step", "step": 99}\nstale line\n')
    stale.replace(rundir.SUBMISSION, {"submission": "a"})
    fresh.feed(b'RL_LUSTRE_EVENT {"at": 3.0, "event": "step", "step": 2}\n')
    assert stale.stale
    assert not fresh.stale
    view = RunView(tmp_path)
    assert [r.get("step") for r in view.records if r["event"] == "step"] == [1, 2]
    assert view.submissions == ["a", "b"]
    assert view.submission is not None
    assert view.submission["submission"] == "b"
    assert "stale line" not in view.log()
    assert "hello" in view.log()


def test_the_driver_log_rolls_and_keeps_at_most_twice_its_limit(tmp_path: Path) -> None:
    writer = RunWriter.open(tmp_path, submission="a", metadata={}, runtime_env={}, argv=[])
    writer.limit = 1000
    for i in range(100):
        writer.feed(f"line {i:04d} {'x' * 40}\n".encode())
    log, previous = tmp_path / rundir.DRIVER_LOG, tmp_path / rundir.DRIVER_LOG_PREVIOUS
    assert log.stat().st_size <= 1000
    assert previous.stat().st_size <= 1000
    text = RunView(tmp_path).log()
    assert text.endswith("line 0099 " + "x" * 40 + "\n")
    assert "line 0000" not in text  # rolled away
    lines = text.splitlines()
    assert lines == sorted(lines)  # in order, nothing torn


def test_the_stopped_marker_is_made_once_and_a_new_submission_clears_it(tmp_path: Path) -> None:
    RunWriter.open(tmp_path, submission="a", metadata={}, runtime_env={}, argv=[])
    assert mark_stopped(tmp_path, "run.stop()")
    assert not mark_stopped(tmp_path, "teardown")
    view = RunView(tmp_path)
    assert view.stopped is not None
    assert view.stopped["by"] == "run.stop()"
    assert not view.in_flight
    # The keeper's resubmission goes on from it: still stopped. The user's new submission begins again.
    RunWriter.open(tmp_path, submission="a-h1", metadata={HEAD_LOST: "{}"}, runtime_env={}, argv=[])
    assert RunView(tmp_path).stopped is not None
    RunWriter.open(tmp_path, submission="a-r2", metadata={}, runtime_env={}, argv=[])
    assert RunView(tmp_path).stopped is None
    assert RunView(tmp_path).in_flight
    assert not mark_stopped(tmp_path / "never-made", "teardown")


def _supervise(tmp_path: Path, run_dir: Path, *args: str, metadata: dict[str, str] | None = None, wait: bool = True):
    """The shipped supervisor running a 4-step rehearsal (no Ray: --nodes 0), its records in ``run_dir``."""
    command = (
        f"{sys.executable} -m rl_lustre.rehearsal {REHEARSAL} checkpointing.checkpoint_dir={tmp_path}/ckpt "
        f"logger.log_dir={tmp_path}/logs"
    )
    root = os.path.dirname(shipped_package())
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(
            {
                "runtime_env": {"env_vars": {"HF_HOME": "/lustre/hf"}, "py_modules": ["gcs://_ray_pkg_0.zip"]},
                "metadata": {
                    "job_submission_id": "rl-lustre-x-1",
                    "rl_lustre.run_id": "rl-lustre-x-1",
                    **(metadata or {}),
                },
            }
        ),
    }
    argv = [
        sys.executable,
        "-c",
        f"import sys, runpy; sys.path.insert(0, {root!r}); "
        "runpy.run_module('rl_lustre_oncluster.supervisor', run_name='__main__', alter_sys=True)",
        "--nodes",
        "0",
        "--checkpoint-dir",
        f"{tmp_path}/ckpt",
        "--run-dir",
        str(run_dir),
        *args,
        "--",
        command,
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if not wait:
        return proc
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def test_the_supervisor_records_its_run_on_the_volume_as_it_runs(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "rl-lustre-x-1"
    code, out, err = _supervise(tmp_path, run_dir)
    assert code == 0, out + err
    view = RunView(run_dir)
    # The journal holds every record the log holds, in the same order, and says who wrote it.
    logged = read_journal(out)
    assert [r for r in view.records if r["event"] != "owner"] == logged
    assert view.records[0]["event"] == "owner"
    assert view.records[0]["submission"] == "rl-lustre-x-1"
    assert [r["event"] for r in logged][:2] == ["start", "attempt"]
    assert logged[-1]["event"] == "end"
    assert view.ended == 0
    assert not view.in_flight
    assert view.last_step == 4
    # The log on the volume is the job's log (each submission's part headed by its id).
    assert submission_log(view.log(), "rl-lustre-x-1") == out.splitlines()
    # What a resubmission needs: the supervisor's own command line, metadata, runtime env, the package.
    submission = view.submission
    assert submission is not None
    assert submission["entrypoint"].split()[1:3] == ["-m", "rl_lustre_oncluster.supervisor"]
    assert "--run-dir" in submission["entrypoint"]
    assert "rl_lustre.rehearsal" in submission["entrypoint"]
    assert submission["metadata"] == {"rl_lustre.run_id": "rl-lustre-x-1"}
    assert submission["runtime_env"]["env_vars"] == {"HF_HOME": "/lustre/hf"}
    shipped = sorted(p.name for p in (run_dir / rundir.PACKAGES / "rl_lustre_oncluster").glob("*.py"))
    assert "supervisor.py" in shipped
    assert "runrecords.py" in shipped


def test_a_resubmission_after_a_head_loss_goes_on_from_the_records_and_counts_against_the_budget(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "runs" / "rl-lustre-x-1"
    code, out, _ = _supervise(tmp_path, run_dir, "--max-restarts", "1")
    assert code == 0
    lost = {"lost_at": time.time() - 5, "head": "demo-head-abcde", "reason": "OOMKilled", "session": "s1"}
    code, out, err = _supervise(
        tmp_path, run_dir, "--max-restarts", "1", metadata={HEAD_LOST: json.dumps(lost), "job_submission_id": "x-h1"}
    )
    assert code == 0, out + err
    [restart] = parse_restarts(out)
    assert restart.cause == "head-lost"
    assert restart.number == 1
    assert restart.resumed_from_step == 4
    assert restart.last_step == 4
    assert restart.nodes[0].name == "demo-head-abcde"
    assert restart.nodes[0].reason == "OOMKilled"
    assert restart.lost_at == pytest.approx(lost["lost_at"], abs=0.01)
    view = RunView(run_dir)
    assert view.submissions == ["rl-lustre-x-1", "x-h1"]
    assert [r["restart"] for r in view.restarts] == [1]
    # Attempts go on numbering across the submissions; the journal renders back as the log's records.
    assert [r["attempt"] for r in view.records if r["event"] == "attempt"] == [1, 2]
    assert parse_restarts(as_log(view.records))[0].cause == "head-lost"

    # A second loss: max_restarts=1 is used up, so the run ends at once.
    code, out, _ = _supervise(
        tmp_path, run_dir, "--max-restarts", "1", metadata={HEAD_LOST: json.dumps(lost), "job_submission_id": "x-h2"}
    )
    assert code == 1
    assert "max_restarts=1 is used up" in out
    assert "Loaded configuration" not in out  # nothing ran
    assert RunView(run_dir).ended == 1


def test_a_sigterm_marks_the_run_stopped_and_a_sigkill_does_not(tmp_path: Path) -> None:
    for sig, stopped in ((signal.SIGKILL, False), (signal.SIGTERM, True)):
        run_dir = tmp_path / f"run-{sig.name}"
        proc = _supervise(tmp_path / sig.name, run_dir, wait=False)
        deadline = time.monotonic() + 60
        while RunView(run_dir).last_step < 1:
            assert time.monotonic() < deadline
            assert proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(sig)
        proc.communicate(timeout=30)
        view = RunView(run_dir)
        assert (view.stopped is not None) is stopped
        assert view.in_flight is not stopped  # a head that dies takes its supervisor with SIGKILL
        if stopped:
            assert view.stopped is not None
            assert view.stopped["by"] == "SIGTERM"
