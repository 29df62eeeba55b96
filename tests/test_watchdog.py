"""The watchdog's rules (issue 33, point 1) and the summary of who is where (point 2), on their own:
lines fed with the clock given, a checkpoint directory written by the test, py-spy's dump format."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rl_lustre.oncluster import nemo_formats as formats
from rl_lustre.oncluster.diagnostics import Scrubber, list_bundles, write_json
from rl_lustre.oncluster.stacks import IDLE, Place, parse_dump, summarize, where
from rl_lustre.oncluster.stamps import Stamper
from rl_lustre.oncluster.watchdog import Watchdog

# The on-cluster package's tests: nox -s tests-oncluster runs them on the image's Python and Ray too.
pytestmark = pytest.mark.oncluster


class Run:
    """A watchdog fed NeMo-RL's lines at the times given."""

    def __init__(self, **kw: float | None) -> None:
        self.w = Watchdog(**kw)  # type: ignore[arg-type]
        self.w.start(now=0.0)
        self.stamper = Stamper()

    def say(self, t: float, *lines: str) -> None:
        for line in lines:
            self.w.feed(line, self.stamper.feed(line), now=t)

    def step(self, t: float, k: int, seconds: float, *, total: int = 100) -> None:
        self.say(t, formats.step_header(k, total), "▶ Generating responses for batch of size 8...")
        self.say(t + seconds, "📊 Training Results:", f"  • Total step time: {seconds:.2f}s")


def test_the_default_adapts_to_the_longest_step_save_or_validation_seen() -> None:
    r = Run(hang_timeout=None, startup_timeout=100.0, floor=10.0, factor=3.0)
    assert r.w.allowance()[0] == 100.0  # start-up
    r.step(50.0, 1, 40.0)  # the first step: slow by nature, left out of the rule
    assert r.w.allowance()[0] == 10.0  # nothing timed yet: the floor
    r.step(90.0, 2, 5.0)
    assert r.w.allowance()[0] == 15.0
    # A long validation raises it: a validation pass is never a stall.
    r.say(95.0, formats.step_header(3, 100), "▶ Starting validation at step 3...")
    r.say(115.0, "    • Total validation time: 20.00s")
    assert r.w.allowance()[0] == 60.0
    assert r.w.stall(now=115.0 + 59.0) is None
    stall = r.w.stall(now=115.0 + 61.0)
    assert stall is not None
    assert (stall.phase, stall.step, stall.since) == ("step", 3, 115.0)


def test_the_runs_first_save_and_first_validation_have_the_start_up_allowance() -> None:
    r = Run(hang_timeout=5.0, startup_timeout=30.0)
    r.step(0.0, 1, 1.0)
    r.step(1.0, 2, 1.0)
    r.say(2.0, formats.step_header(3, 10), "▶ Starting validation at step 3...")
    assert r.w.stall(now=20.0) is None  # nothing has timed a validation yet
    r.say(20.0, "    • Total validation time: 18.00s")
    r.say(21.0, formats.step_header(4, 10), formats.save_line(4))
    assert r.w.allowance() == (30.0, "startup_timeout=30s (the run's first save)")
    r.say(22.0, "📊 Training Results:")  # the save is timed: from now on the job's timeout holds
    r.say(23.0, formats.step_header(5, 10), formats.save_line(5))
    assert r.w.allowance()[0] == 5.0
    r.say(24.0, formats.step_header(6, 10), "▶ Starting validation at step 6...")
    assert r.w.allowance()[0] == 5.0


def test_a_fixed_hang_timeout_and_the_first_steps_own_allowance() -> None:
    r = Run(hang_timeout=5.0, startup_timeout=30.0)
    r.say(1.0, " " * 18 + formats.SETUP_DONE)
    r.say(2.0, formats.step_header(1, 10))
    # Still in the first step at 25 s of silence: within its allowance.
    assert r.w.stall(now=27.0) is None
    stall = r.w.stall(now=32.5)
    assert stall is not None
    assert stall.allowance == 30.0
    assert "startup_timeout" in stall.why
    r.say(33.0, "📊 Training Results:")
    assert r.w.allowance() == (5.0, "hang_timeout=5s")
    # A new attempt gets the start-up allowance again; the run's history is kept.
    r.w.start(now=100.0)
    assert r.w.allowance()[0] == 30.0


def test_only_nemo_rls_own_progress_counts_not_any_line() -> None:
    r = Run(hang_timeout=5.0, startup_timeout=5.0)
    r.step(0.0, 1, 1.0)
    r.say(1.5, formats.step_header(2, 10))
    for t in range(2, 12):  # a stuck process may keep printing: warnings, Ray workers' lines
        r.say(float(t), "(DTensorPolicyWorker pid=7, ip=10.0.0.3) NCCL WARN still waiting", "UserWarning: slow")
    stall = r.w.stall(now=11.0)
    assert stall is not None
    assert stall.since == 1.5
    # The phase lines inside a step are progress.
    r.say(11.5, "▶ Training policy...")
    assert r.w.stall(now=12.0) is None


def test_a_save_is_progress_while_it_grows_and_a_stall_while_its_tmp_step_stays(tmp_path: Path) -> None:
    r = Run(hang_timeout=5.0, startup_timeout=5.0)
    r.step(0.0, 1, 1.0)
    r.say(2.0, formats.step_header(2, 10), formats.save_line(2))
    r.w.look(str(tmp_path), now=2.0)
    saving = tmp_path / formats.checkpoint_name(2, formats.SAVING)
    saving.mkdir()
    shard = saving / "__0_0.distcp"
    for t in (4.0, 8.0, 12.0):  # writing, slowly: each write is progress, as of when it was written
        shard.write_bytes(b"x" * int(t))
        os.utime(shard, (time.time(), t))
        r.w.look(str(tmp_path), now=t + 0.5)
    assert r.w.stall(now=16.0) is None
    stall = r.w.stall(now=17.5)
    assert stall is not None
    assert (stall.phase, stall.step, stall.saving, stall.since) == ("save", 2, "tmp_step_2", 12.0)
    assert "in the save of step 2 (tmp_step_2 stays)" in stall.describe()
    # The rename is progress as of when it happened, however late it is seen.
    saving.rename(tmp_path / formats.checkpoint_name(2))
    renamed = os.stat(tmp_path / formats.checkpoint_name(2)).st_ctime
    r.w.look(str(tmp_path), now=renamed + 3.0)
    assert r.w.silence(now=renamed + 3.0) == pytest.approx(3.0, abs=0.01)


def test_nccls_watchdog_line_is_noticed_from_any_process() -> None:
    r = Run(hang_timeout=5.0)
    r.say(
        1.0,
        "(DTensorPolicyWorker pid=77) [rank3]:[E1218 20:27:21 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=64214, OpType=ALLGATHER) ran for 600000 milliseconds",
    )
    assert r.w.nccl_timeout is not None
    assert "OpType=ALLGATHER" in r.w.nccl_timeout


DUMP = """Process 501: ray::_NodeWorker.step
Python v3.12.3 (/usr/bin/python3.12)

Thread 501 (idle): "MainThread"
    wait (threading.py:359)
    get (ray/_private/worker.py:2882)
    all_reduce (rl_lustre/rehearsal/placement.py:60)
    step (rl_lustre/rehearsal/placement.py:70)
    main_loop (ray/_private/worker.py:946)
Thread 510 (idle): "ray_import_thread"
    wait (threading.py:359)
"""
IDLE_DUMP = """Process 502: ray::_NodeWorker
Python v3.12.3 (/usr/bin/python3.12)

Thread 502 (idle): "MainThread"
    main_loop (ray/_private/worker.py:946)
    <module> (ray/_private/workers/default_worker.py:297)
Thread 540 (idle): "rehearsal-flight-recorder"
    StandInRecorder._watch (rl_lustre/rehearsal/flight_recorder.py:84)
    Thread.run (threading.py:982)
"""
THREADED_DUMP = """Process 503: ray::VllmWorker
Python v3.12.3 (/usr/bin/python3.12)

Thread 503 (idle): "MainThread"
    main_loop (ray/_private/worker.py:946)
Thread 560 (active): "ThreadPoolExecutor-0_0"
    generate (vllm/engine/llm_engine.py:1200)
    actor_method_executor (ray/_private/function_manager.py:696)
"""


def test_where_a_process_is_is_its_innermost_frame_that_is_not_plumbing() -> None:
    assert where(parse_dump(DUMP)) == "all_reduce (rl_lustre/rehearsal/placement.py)"
    # A helper thread's frames say nothing of where a process is; a thread running a Ray task does.
    assert where(parse_dump(IDLE_DUMP)) == IDLE
    assert where(parse_dump(THREADED_DUMP)) == "generate (vllm/engine/llm_engine.py)"
    assert parse_dump("Error: Failed to find python version from target process") == []


def test_the_summary_names_the_many_in_one_place_and_every_other_by_its_node() -> None:
    c10d = "all_reduce (torch/distributed/c10d.py)"
    places = [Place(f"Policy{i}", 100 + i, f"node-{i // 2}", c10d) for i in range(7)]
    places.append(Place("Policy7", 107, "node-3", "__next__ (torch/utils/data/dataloader.py)"))
    places.append(Place("VllmWorker", 200, "node-3", None, state="T", error="py-spy: failed"))
    lines = summarize(places, step=143)
    assert lines[0].startswith("7 of 9 processes in all_reduce (torch/distributed/c10d.py) (step 143)")
    assert "VllmWorker pid 200 on node node-3: no stack (py-spy: failed); STOPPED (SIGSTOP)" in lines
    assert "Policy7 pid 107 on node node-3: in __next__ (torch/utils/data/dataloader.py)" in lines


def test_a_bundle_holds_no_secret_and_is_listed(tmp_path: Path) -> None:
    secret = "hf_" + "s3cr3t" * 6
    scrub = Scrubber({"HF_TOKEN": secret, "PATH": "/usr/bin"})
    bundle = tmp_path / "diagnostics" / "19700101T000000Z-attempt1-step3"
    write_json(str(bundle), "bundle.json", {"step": 3, "summary": [f"cmd --token {secret}"]}, scrub)
    text = (bundle / "bundle.json").read_text()
    assert secret not in text
    assert "REDACTED" in text
    assert [(b["step"], b["path"]) for b in list_bundles(str(tmp_path / "diagnostics"))] == [(3, str(bundle))]
