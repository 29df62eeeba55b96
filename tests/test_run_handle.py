"""The run handle on rehearsal runs, against the session's real Ray head:
progress, metrics, checkpoints, failures, timeouts, stop, attach and resume."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl_lustre import Cluster, GRPOJob
from rl_lustre._output import enable_output
from rl_lustre.errors import JobFailedError, WaitTimeoutError
from rl_lustre.oncluster.records import REHEARSAL_NOTE
from rl_lustre.run import Progress, Run

STEP = re.compile(r"={3,} Step (\d+)/(\d+) ={3,}")


def _printed(log: str, label: str) -> list[float]:
    """The values of ``  • <label>: X`` lines, in order (read here with a plain regex)."""
    return [float(m.group(1)) for m in re.finditer(rf"^\s*• {re.escape(label)}: (\S+)$", log, re.M)]


def _on_disk(checkpoint_dir: Path) -> dict[str, int]:
    """``{dir name: bytes of its files}`` for every entry of the checkpoint dir."""
    out = {}
    for entry in sorted(checkpoint_dir.iterdir()):
        out[entry.name] = sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
    return out


def test_a_rehearsal_run_reports_steps_metrics_and_checkpoints(
    local_cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    job = GRPOJob(name="handle", recipe="grpo_math_1B", max_num_steps=6, save_period=2, keep_top_k=2)
    run = local_cluster.submit(job)
    followed = list(run.logs(follow=True))  # ends when the run does
    assert run.wait(timeout=60) == "SUCCEEDED"

    headers = [(int(m.group(1)), int(m.group(2))) for line in followed if (m := STEP.search(line))]
    assert headers == [(k, 6) for k in range(1, 7)]
    log = run.logs()
    assert all(line in log for line in followed if line.startswith(("=====", "Saving checkpoint")))

    assert run.progress == Progress(step=6, completed=6, total=6)
    assert run.progress.fraction == 1.0
    metrics = run.metrics()
    assert sorted(metrics) == [1, 2, 3, 4, 5, 6]
    assert [metrics[k]["avg_reward"] for k in range(1, 7)] == _printed(log, "Avg Reward")
    assert [metrics[k]["loss"] for k in range(1, 7)] == _printed(log, "Loss")

    checkpoint_dir = Path(local_cluster.mount_path) / "checkpoints" / "handle"
    checkpoints = run.checkpoints()
    # save_period=2 saves 2, 4, 6; keep_top_k=2 keeps the newest two.
    assert [c.step for c in checkpoints] == [4, 6]
    assert {c.path.name: c.size_bytes for c in checkpoints} == _on_disk(checkpoint_dir)
    assert all(c.size_bytes > 0 and c.save_seconds is not None for c in checkpoints)
    assert [s.step for s in run.saves()] == [2, 4, 6]
    assert all(s.seconds is not None and s.seconds >= 0 for s in run.saves())
    # The save times are NeMo-RL's own checkpointing timer, from the log.
    timed = {s.step: s.timed_seconds for s in run.saves()}
    assert [(c.save_seconds_from, c.save_seconds) for c in checkpoints] == [("log", timed[4]), ("log", timed[6])]

    attached = local_cluster.attach(run.job_id)
    assert attached.status() == "SUCCEEDED"
    assert [c.step for c in attached.checkpoints()] == [4, 6]
    assert attached.progress == run.progress

    capsys.readouterr()
    with enable_output():
        run.wait(timeout=10)
    shown = capsys.readouterr().out
    assert run.job_id in shown
    assert "6/6" in shown
    with enable_output(False):
        run.wait(timeout=10)
    assert capsys.readouterr().out == ""

    # Once Ray has forgotten the run, the run's records on the volume still time its saves
    # (issue 31: the head's copies are caches); without those, its files still list the checkpoints.
    assert local_cluster._backend().jobs.delete(run.job_id)  # type: ignore[attr-defined]
    assert [(c.step, c.save_seconds_from) for c in run.checkpoints()] == [(4, "log"), (6, "log")]
    assert run.status() == "SUCCEEDED"  # told by its records
    shutil.rmtree(Path(local_cluster.mount_path) / "rl_lustre" / "runs" / run.run_id)
    assert [(c.step, c.save_seconds_from) for c in run.checkpoints()] == [(4, "files"), (6, "files")]


def test_a_failed_run_raises_with_its_last_log_lines(local_cluster: Cluster) -> None:
    job = GRPOJob(name="fails", recipe="grpo_math_1B", max_num_steps=4, save_period=1)
    # The checkpoint directory cannot be created: a file is in the way.
    blocker = Path(local_cluster.mount_path) / "checkpoints" / "fails"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory")
    run = local_cluster.submit(job)
    with pytest.raises(JobFailedError) as err:
        run.wait(timeout=60)
    assert err.value.job_id == run.job_id
    assert err.value.status == "FAILED"
    assert err.value.last_lines
    assert err.value.last_lines == run.logs().splitlines()[-len(err.value.last_lines) :]
    assert str(blocker) in "\n".join(err.value.last_lines)


def test_a_run_stopped_from_another_process_ends_the_owners_wait_with_stopped(local_cluster: Cluster) -> None:
    import warnings

    from rl_lustre.errors import NothingToDoWarning

    job = GRPOJob(name="stopped-elsewhere", recipe="grpo_math_1B", max_num_steps=200, save_period=100)
    run = local_cluster.submit(job, fresh=True)
    deadline = time.monotonic() + 90
    while run.progress.step < 1:
        assert time.monotonic() < deadline, f"no step yet: {run.status()}"
        time.sleep(0.2)
    # Another process knows only the cluster spec and the id, as `rl-lustre stop` does.
    stop = (
        "import sys\n"
        "from rl_lustre import Cluster\n"
        "print(Cluster.local(sys.argv[1], volume_dir=sys.argv[2]).attach(sys.argv[3]).stop(wait=False))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(
        [sys.executable, "-c", stop, local_cluster.name, local_cluster.mount_path, run.job_id],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", NothingToDoWarning)  # stopped is not "nothing to do" either
        assert run.wait(timeout=60) == "STOPPED"
    assert 1 <= run.progress.completed < 200
    assert run.notes() == [REHEARSAL_NOTE]


def test_a_run_that_failed_still_raises_and_one_that_stopped_does_not() -> None:
    from rl_lustre.ray.jobs import JobInfo

    class Jobs:
        def __init__(self, status: str) -> None:
            self.status = status

        def info(self, job_id: str) -> JobInfo:
            return JobInfo(job_id, self.status, metadata={"rl_lustre.job": "x"})

        def logs(self, job_id: str) -> str:
            return "the last line\n"

    assert Run(Jobs("STOPPED"), "s").wait(timeout=1) == "STOPPED"  # type: ignore[arg-type]
    with pytest.raises(JobFailedError, match="ended FAILED") as failed:
        Run(Jobs("FAILED"), "f").wait(timeout=1)  # type: ignore[arg-type]
    assert failed.value.last_lines == ["the last line"]


@pytest.mark.slow
def test_a_stopped_run_resumes_from_its_newest_checkpoint_when_submitted_again(
    local_cluster: Cluster,
) -> None:
    # Slower steps so that the run is surely stopped half-way; same head (adopted).
    slow = Cluster.local(
        local_cluster.name,
        volume_dir=local_cluster.mount_path,
        secrets=local_cluster.secrets,
        rehearsal_step_seconds=0.6,
        keep=True,
    )
    slow.up()
    job = GRPOJob(name="resume", recipe="grpo_math_1B", max_num_steps=12, save_period=2, keep_top_k=2)
    first = slow.submit(job)

    deadline = time.monotonic() + 90
    while not (first.checkpoints() and first.progress.step >= 4):
        assert time.monotonic() < deadline, f"no checkpoint yet: {first.status()} {first.progress}"
        time.sleep(0.2)
    with pytest.raises(WaitTimeoutError) as timed_out:
        first.wait(timeout=0.3)
    assert "RUNNING" in str(timed_out.value.last_state)
    assert first.stop() == "STOPPED"
    assert first.wait() == "STOPPED"  # a stop asked for is not a failure
    newest = first.checkpoints()[-1].step
    assert 2 <= newest < 12

    second = slow.submit(job)
    assert second.job_id == f"{first.job_id}-r2"
    assert second.wait(timeout=90) == "SUCCEEDED"
    steps = [int(m.group(1)) for m in STEP.finditer(second.logs())]
    assert steps == list(range(newest + 1, 13))
    assert min(second.metrics()) == newest + 1
    assert second.progress == Progress(step=12, completed=12, total=12)
    assert [c.step for c in second.checkpoints()] == [10, 12]
    checkpoint_dir = Path(local_cluster.mount_path) / "checkpoints" / "resume"
    assert sorted(p.name for p in checkpoint_dir.iterdir()) == ["step_10", "step_12"]


def test_output_is_off_by_default_and_rich_loads_only_when_it_is_on() -> None:
    code = (
        "import sys, rl_lustre._output as out\n"
        "with out.progress('x', total=2) as update:\n"
        "    update(completed=1)\n"
        "out.echo('hidden')\n"
        "print('rich' in sys.modules, out.output_enabled())\n"
        "with out.enable_output():\n"
        "    with out.progress('bar', total=2) as update:\n"
        "        update(completed=2)\n"
        "print('rich' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RL_LUSTRE_OUTPUT"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "False False"  # stdout is a pipe here, not a terminal
    assert lines[-1] == "True"
    assert "hidden" not in out
    assert "bar" in out
    on = subprocess.run(
        [sys.executable, "-c", "import rl_lustre._output as out; print(out.output_enabled())"],
        env={**env, "RL_LUSTRE_OUTPUT": "1"}, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert on.strip() == "True"


def test_an_unreachable_jobs_api_raises_our_error_not_rays() -> None:
    # The handle needs only a Jobs API address (a port-forward on GKE); failures there
    # surface as RayError, chained to what Ray's client raised.
    from rl_lustre.errors import RayError
    from rl_lustre.ray.jobs import JobsClient
    from rl_lustre.ray.ports import free_ports

    (port,) = free_ports(1)  # nothing listens there
    run = Run(JobsClient(f"http://127.0.0.1:{port}"), "some-id")
    with pytest.raises(RayError, match=f"127.0.0.1:{port}") as err:
        run.status()
    assert err.value.__cause__ is not None
    with pytest.raises(NotImplementedError):
        run.checkpoints()


@pytest.mark.slow
def test_after_a_new_head_the_next_attempt_has_the_first_id_again_and_still_resumes(tmp_path: Path) -> None:
    """What docs/stop-resume.md says of run ids: ``-rN`` counts the attempts the head knows of."""
    cluster = Cluster.local("ids-across-heads", volume_dir=tmp_path / "volume", rehearsal_step_seconds=0.3)
    job = GRPOJob(name="across", recipe="grpo_math_1B", max_num_steps=40, save_period=1, keep_top_k=2)
    with cluster:
        first = cluster.submit(job)
        deadline = time.monotonic() + 90
        while not first.checkpoints():
            assert time.monotonic() < deadline, f"no checkpoint yet: {first.status()}"
            time.sleep(0.2)
        assert first.stop() == "STOPPED"
        newest = first.checkpoints()[-1].step
    with cluster:  # a new head: it knows of no attempt
        again = cluster.submit(job)
        assert again.job_id == first.job_id
        deadline = time.monotonic() + 90
        while again.progress.step <= newest:
            assert time.monotonic() < deadline, f"no step yet: {again.status()}"
            time.sleep(0.2)
        assert again.stop() == "STOPPED"
        # It resumed: its first step is the one after the newest checkpoint.
        assert int(next(STEP.finditer(again.logs())).group(1)) == newest + 1
