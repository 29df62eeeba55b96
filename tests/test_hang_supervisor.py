"""The supervisor's watchdog (issue 33): a stalled attempt is found, its evidence kept in the run's
directory before anything is stopped, and it is rerun from the newest checkpoint; a second stall at
the same step ends the run naming the evidence; a slow first step within its allowance is not a
stall; an attempt NeMo-RL's NCCL watchdog ended is a hang, not a failure of the run's own.

The shipped supervisor runs as on the cluster (``rl_lustre_oncluster``, in an isolated
interpreter) around a scripted stand-in for NeMo-RL (``helpers/scripted_nemo.py``) that prints
NeMo-RL's lines, writes its checkpoints and stalls where its plan says: really stalls, in a
process that sleeps for ever, whose stack the bundle must show. No Ray runs here (``--nodes 0``,
and the dashboard's address is a closed port), so the evidence of Ray's side is missing and
named as missing: the multi-node evidence is ``test_hang_local.py``'s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import scripted_nemo

from rl_lustre.oncluster import diagnostics as d
from rl_lustre.oncluster import rundir
from rl_lustre.oncluster.nccl import recorder_env
from rl_lustre.oncluster.records import HEAD_LOST, read_journal
from rl_lustre.oncluster.runview import RunView
from rl_lustre.recovery import parse_restarts, shipped_package

# The on-cluster package's tests: nox -s tests-oncluster runs them on the image's Python and Ray too.
pytestmark = pytest.mark.oncluster

HANG_TIMEOUT = 2.0


def _argv(tmp: Path, plan: Path, *options: str) -> list[str]:
    root = os.path.dirname(shipped_package())
    return [
        sys.executable,
        "-I",
        "-c",
        f"import sys, runpy; sys.path.insert(0, {root!r}); "
        "runpy.run_module('rl_lustre_oncluster.supervisor', run_name='__main__', alter_sys=True)",
        "--nodes",
        "0",
        "--poll",
        "0.2",
        "--checkpoint-dir",
        str(tmp / "ckpt"),
        "--run-dir",
        str(_run_dir(tmp)),
        *options,
        "--",
        f"{sys.executable} {scripted_nemo.__file__} {plan}",
    ]


def _env(tmp: Path, metadata: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **os.environ,
        # No Ray here: the evidence of Ray's side is missing, and named so.
        "RAY_DASHBOARD_ADDRESS": "http://127.0.0.1:9",
        **recorder_env(str(_run_dir(tmp)), _run_dir(tmp).name),
        # What Ray tells the entrypoint about its submission (a resubmission after a head loss says so).
        "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"metadata": metadata or {}}),
    }


def _run_dir(tmp: Path) -> Path:
    return tmp / "rl_lustre" / "runs" / "rl-lustre-hang-0a1b2c3d"


def _supervise(tmp: Path, plan: Path, *options: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_argv(tmp, plan, *options), capture_output=True, text=True, timeout=timeout, env=_env(tmp))


def _bundles(tmp: Path) -> list[Path]:
    found = d.list_bundles(str(_run_dir(tmp) / rundir.DIAGNOSTICS))
    return [Path(b["path"]) for b in found]


def test_a_save_that_never_completes_is_a_stall_kept_as_evidence_and_rerun_from_the_newest_checkpoint(
    tmp_path: Path,
) -> None:
    plan = scripted_nemo.plan(tmp_path, a1={"stall": "save", "at": 4})
    out = _supervise(tmp_path, plan, "--hang-timeout", str(HANG_TIMEOUT), "--max-restarts", "2")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    log = out.stdout

    [restart] = parse_restarts(log)
    assert restart.cause == "hung"
    assert restart.resumed_from_step == 2
    assert restart.first_step == 3
    [bundle] = _bundles(tmp_path)
    record = json.loads((bundle / d.BUNDLE_JSON).read_text())
    assert record["phase"] == "save"
    assert record["step"] == 4
    assert record["saving"] == "tmp_step_4"
    # Found within the timeout and a few polls of it.
    assert HANG_TIMEOUT <= record["silence"] <= HANG_TIMEOUT + 2.0
    summary = (bundle / d.SUMMARY).read_text()
    assert "stalled at step 4" in summary
    assert "in the save of step 4 (tmp_step_4 stays)" in summary
    # The stalled process's Python stack, taken before it was killed, shows where it was.
    stacks = list((bundle / d.STACKS).rglob("*.txt"))
    assert any("stuck_in_save" in s.read_text() for s in stacks), [s.name for s in stacks]
    assert "in stuck_in_save (" in summary
    driver_log = (bundle / d.LOGS / "driver.log").read_text()
    assert "Saving checkpoint for step 4..." in driver_log.splitlines()[-1]
    # Ray's side could not be read here, and the bundle says so rather than pretending.
    assert "ray-nodes" in record["errors"]
    # The journal announces the bundle; the restart names it, with the step and the silence.
    [announced] = [r for r in read_journal(log) if r["event"] == d.DIAGNOSTICS_MARK]
    assert announced["bundle"] == str(bundle)
    assert (restart.step, restart.bundle) == (4, str(bundle))
    assert restart.silence is not None
    assert restart.silence >= HANG_TIMEOUT
    # Then the run went on to its end, as without the stall.
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_2", "step_4", "step_6"]


def test_a_second_stall_at_the_same_step_ends_the_run_naming_the_evidence(tmp_path: Path) -> None:
    plan = scripted_nemo.plan(tmp_path, every={"stall": "step", "at": 3})
    # Step 3 is the rerun's first (it resumes from step 2): the start-up allowance applies to it.
    out = _supervise(
        tmp_path, plan, "--hang-timeout", str(HANG_TIMEOUT), "--startup-timeout", "4", "--max-restarts", "3"
    )
    assert out.returncode != 0
    first, second = _bundles(tmp_path)
    [restart] = parse_restarts(out.stdout)
    assert (restart.cause, restart.step, restart.bundle) == ("hung", 3, str(first))
    ends = [line for line in out.stdout.splitlines() if "stalled again at step 3" in line]
    assert ends, out.stdout[-2000:]
    assert str(second) in ends[0]
    assert str(first) in ends[0]
    assert "in stuck_in_step (" in (second / d.SUMMARY).read_text()


@pytest.mark.parametrize(
    ("attempt", "stalls"),
    [
        # Start-up and the first step may take startup_timeout; 3 s is within it.
        ({"first_step_seconds": 3.0}, False),
        # A step as slow later in the run is over the hang timeout: the watch does watch (the
        # step is long enough to be stopped while its evidence is taken).
        ({"slow_step": 4, "seconds": 15.0}, True),
    ],
    ids=["first-step", "later-step"],
)
def test_a_slow_first_step_within_its_allowance_is_not_a_stall(
    tmp_path: Path, attempt: dict[str, float], stalls: bool
) -> None:
    plan = scripted_nemo.plan(tmp_path, a1=attempt)
    started = time.monotonic()
    out = _supervise(tmp_path, plan, "--hang-timeout", "1.5", "--startup-timeout", "10", "--max-restarts", "1")
    assert out.returncode == 0, out.stdout[-3000:]
    assert bool(parse_restarts(out.stdout)) == stalls
    assert bool(_bundles(tmp_path)) == stalls
    assert time.monotonic() - started < 60


def test_a_hung_restart_and_a_head_lost_one_draw_on_one_max_restarts(tmp_path: Path) -> None:
    # Attempt 1 stalls at step 3 (restart 1: hung); the head is lost during attempt 2's long step 5
    # (restart 2: head-lost); attempt 3, on the new head, stalls at step 7: max_restarts=2 is used up.
    plan = scripted_nemo.plan(
        tmp_path,
        steps=8,
        a1={"stall": "step", "at": 3},
        a2={"slow_step": 5, "seconds": 60.0},
        a3={"stall": "step", "at": 7},
    )
    options = ("--hang-timeout", "5", "--startup-timeout", "8", "--max-restarts", "2")
    env = _env(tmp_path, {"job_submission_id": "rl-lustre-hang-0a1b2c3d"})
    head = subprocess.Popen(_argv(tmp_path, plan, *options), stdout=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 60
        while RunView(_run_dir(tmp_path)).attempts < 2 or not (tmp_path / "ckpt" / "step_4").is_dir():
            assert time.monotonic() < deadline
            assert head.poll() is None
            time.sleep(0.05)
    finally:
        head.kill()  # the head goes, its supervisor with it (the command follows it: procs.orphan_watcher)
        head.wait()
    lost = {"lost_at": time.time(), "head": "demo-head-abcde", "reason": "OOMKilled", "session": "s1"}
    metadata = {HEAD_LOST: json.dumps(lost), "job_submission_id": "rl-lustre-hang-0a1b2c3d-h1"}
    out = subprocess.run(
        _argv(tmp_path, plan, *options), capture_output=True, text=True, timeout=120, env=_env(tmp_path, metadata)
    )
    assert out.returncode != 0, out.stdout[-3000:]
    restarts = RunView(_run_dir(tmp_path)).restarts
    assert [(r["restart"], r["cause"]) for r in restarts] == [(1, "hung"), (2, "head-lost")]
    first, second = _bundles(tmp_path)
    assert restarts[0]["bundle"] == str(first)
    [used_up] = [line for line in out.stdout.splitlines() if "max_restarts=2 is used up: not restarted" in line]
    assert "stalled at step 3" in used_up
    assert "demo-head-abcde" in used_up
    assert f"The stall's evidence: {second}" in used_up
    assert "stalled at step 7" in (second / d.SUMMARY).read_text()


def test_an_attempt_ended_by_nccls_watchdog_is_a_hang_with_its_flight_recorder_dump(tmp_path: Path) -> None:
    plan = scripted_nemo.plan(tmp_path, a1={"nccl_timeout_at": 3})
    out = _supervise(tmp_path, plan, "--max-restarts", "1")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    [restart] = parse_restarts(out.stdout)
    assert (restart.cause, restart.step, restart.resumed_from_step) == ("hung", 3, 2)
    [bundle] = _bundles(tmp_path)
    record = json.loads((bundle / d.BUNDLE_JSON).read_text())
    assert "NCCL watchdog" in record["why"]
    assert "collective operation timeout" in record["why"]
    # The rank dumped its flight recorder on the way out (TORCH_NCCL_DUMP_ON_TIMEOUT): it is in the bundle.
    assert [p.name for p in (bundle / d.NCCL).iterdir()] == ["rank_0"]
    assert record["nccl_dumps"] == ["rank_0"]


def test_a_failure_of_the_runs_own_is_still_not_restarted(tmp_path: Path) -> None:
    plan = tmp_path / "broken.json"  # no such plan: the command fails at once, with no stall
    out = _supervise(tmp_path, plan, "--hang-timeout", "1", "--max-restarts", "2")
    assert out.returncode != 0
    assert parse_restarts(out.stdout) == []
    assert _bundles(tmp_path) == []
    assert "not restarted (the run failed for a reason of its own)" in out.stdout
