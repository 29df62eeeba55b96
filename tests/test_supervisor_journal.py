"""The supervisor's journal: NeMo-RL's lines stamped with the head's clock, and its own
attempts, waits and end, as records in the job's log."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.supervisor_run import supervised_log

from rl_lustre.oncluster import nemo_formats as formats
from rl_lustre.oncluster.records import MARK, read_journal
from rl_lustre.oncluster.stamps import Stamper
from rl_lustre.recovery import shipped_package

# The on-cluster package's tests: nox -s tests-oncluster runs them on the image's Python and Ray too.
pytestmark = pytest.mark.oncluster


def test_the_stamper_stamps_what_begins_something_and_nothing_else() -> None:
    s = Stamper()
    lines = {
        formats.step_header(1, 4): {"event": "step", "epoch": 1, "k": 1, "of": 4, "step": 1},
        "  " + formats.save_line(1): {"event": "save", "step": 1},
        "▶ Starting validation at step 1...": {"event": "validation", "step": 1},
        "📊 Training Results:": {"event": "results", "step": 1},
        " " * 18 + "SETUP COMPLETE": {"event": "setup_done"},
        "Timeout has been reached, stopping training early": {"event": "finished", "why": "timeout"},
        "Max number of steps has been reached, stopping training early": {"event": "finished", "why": "max_steps"},
    }
    for line, record in lines.items():
        assert s.feed(line) == record, line
    for lookalike in [
        "(DTensorPolicyWorker pid=12, ip=10.0.0.1) " + formats.step_header(2, 4),
        "echo " + formats.save_line(3),
        "Saving checkpoint for step x...",
        "",
        "SETUP COMPLETE!",
        "📊 Validation Results:",
        "========== Step 1/ ==========",
    ]:
        assert s.feed(lookalike) is None, lookalike


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> str:
    return supervised_log(str(tmp_path_factory.mktemp("journal")))


def test_a_supervised_run_journals_every_step_save_and_validation_right_after_its_line(log: str) -> None:
    records = read_journal(log)
    events = [r["event"] for r in records]
    assert events[:2] == ["start", "attempt"]
    assert events[-2:] == ["exit", "end"]
    assert [r["step"] for r in records if r["event"] == "step"] == [1, 2, 3, 4]
    assert [r["step"] for r in records if r["event"] == "save"] == [2, 4]
    assert [r["step"] for r in records if r["event"] == "validation"] == [3]
    assert [r["step"] for r in records if r["event"] == "results"] == [1, 2, 3, 4]
    assert events.count("setup_done") == 1
    assert events.count("finished") == 1
    assert records[-2]["code"] == 0
    assert records[-1]["status"] == 0
    assert all(r["v"] == 1 and r.get("attempt", 1) == 1 for r in records)
    stamps = [r["at"] for r in records]
    assert stamps == sorted(stamps)
    # Each NeMo-RL line that begins something is followed by its record, before any other line of NeMo-RL's.
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if formats.STEP_HEADER.fullmatch(line.strip()) or formats.SAVE_LINE.fullmatch(line.strip()):
            follower = next(
                x for x in lines[i + 1 :] if x.startswith(MARK) or not x.startswith("rl_lustre supervisor:")
            )
            assert follower.startswith(MARK), (line, follower)
    # Stamps come from the head's clock as lines arrive: four steps of 0.05 s take that long at least.
    step_at = [r["at"] for r in records if r["event"] == "step"]
    assert step_at[-1] - step_at[0] >= 3 * 0.05


def test_the_run_handle_hides_the_records_unless_asked() -> None:
    from rl_lustre.run import Run

    class Jobs:
        def logs(self, job_id: str) -> str:
            return "a\nRL_LUSTRE_EVENT {}\nRL_LUSTRE_RESTART {}\nb\n"

        def follow(self, job_id: str, **kw: object) -> list[str]:
            return ["a", "RL_LUSTRE_EVENT {}", "b"]

    run = Run(Jobs(), "j")  # type: ignore[arg-type]
    assert run.logs() == "a\nRL_LUSTRE_RESTART {}\nb\n"
    assert run.logs(records=True).count("RL_LUSTRE_EVENT") == 1
    assert list(run.logs(follow=True)) == ["a", "b"]
    with pytest.raises(Exception, match="records"):
        run.logs(records="yes")  # type: ignore[call-overload]


def test_the_journal_ships_with_the_supervisor() -> None:
    package = Path(shipped_package())
    assert (package / "records.py").is_file()
    assert (package / "stamps.py").is_file()
