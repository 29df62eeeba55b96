"""rl_lustre.nemo_rl.checkpoints: which step_N exist, their size, and when and how fast they were written."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rl_lustre.nemo_rl.checkpoints import (
    latest_checkpoint,
    list_checkpoints,
    listing_command,
    parse_listing,
)

T0 = 1_700_000_000.0


def _checkpoint(root: Path, name: str, *, weights: int, info: dict | None, written: float, seconds: float) -> Path:
    """A checkpoint written the way NeMo-RL writes one: training_info first, weights last."""
    d = root / name
    (d / "policy" / "weights").mkdir(parents=True)
    if info is not None:
        (d / "training_info.json").write_text(json.dumps(info))
        os.utime(d / "training_info.json", (written, written))
    shard = d / "policy" / "weights" / "__0_0.distcp"
    shard.write_bytes(b"\0" * weights)
    os.utime(shard, (written + seconds, written + seconds))
    for sub in (d / "policy" / "weights", d / "policy", d):
        os.utime(sub, (written, written))
    return d


def test_only_complete_step_dirs_count_in_numeric_order(tmp_path: Path) -> None:
    _checkpoint(tmp_path, "step_10", weights=100, info={"total_steps": 10}, written=T0, seconds=1)
    _checkpoint(tmp_path, "step_2", weights=100, info={"total_steps": 2}, written=T0, seconds=1)
    _checkpoint(tmp_path, "tmp_step_12", weights=100, info={"total_steps": 12}, written=T0, seconds=1)
    _checkpoint(tmp_path, "old_step_4", weights=100, info={"total_steps": 4}, written=T0, seconds=1)
    _checkpoint(tmp_path, "step_x", weights=100, info={}, written=T0, seconds=1)
    (tmp_path / "step_7").write_text("a file, not a checkpoint directory")

    found = list_checkpoints(tmp_path)

    assert [c.step for c in found] == [2, 10]
    assert [c.path.name for c in found] == ["step_2", "step_10"]
    # "10" sorts before "2" as text; NeMo-RL resumes from the highest number.
    latest = latest_checkpoint(tmp_path)
    assert latest is not None
    assert latest.step == 10
    assert latest.training_info == {"total_steps": 10}


def test_size_and_write_time_come_from_the_files(tmp_path: Path) -> None:
    info = {"consumed_samples": 64, "total_steps": 2}
    _checkpoint(tmp_path, "step_2", weights=5_000_000, info=info, written=T0, seconds=2.5)

    (c,) = list_checkpoints(tmp_path)

    assert c.size_bytes == 5_000_000 + len(json.dumps(info))
    assert c.finished_at == pytest.approx(T0 + 2.5)
    assert c.save_seconds == pytest.approx(2.5)
    assert c.mb_per_second == pytest.approx(c.size_bytes / 1e6 / 2.5)


def test_without_training_info_the_save_time_is_unknown(tmp_path: Path) -> None:
    _checkpoint(tmp_path, "step_3", weights=10, info=None, written=T0, seconds=4)

    (c,) = list_checkpoints(tmp_path)

    assert c.step == 3
    assert c.size_bytes == 10
    assert c.save_seconds is None
    assert c.mb_per_second is None
    assert c.training_info == {}


def test_missing_or_empty_directory_has_no_checkpoints(tmp_path: Path) -> None:
    assert list_checkpoints(tmp_path / "never-created") == []
    assert latest_checkpoint(tmp_path) is None


def test_the_listing_command_sees_what_the_local_listing_sees_using_only_the_standard_library(tmp_path: Path) -> None:
    root = tmp_path / "run dir"  # a space: the command must quote it
    _checkpoint(root, "step_2", weights=1000, info={"total_steps": 2}, written=T0, seconds=1.5)
    _checkpoint(root, "step_10", weights=3000, info={"total_steps": 10, "val_reward": 0.5}, written=T0 + 60, seconds=3)
    _checkpoint(root, "step_3", weights=10, info=None, written=T0, seconds=4)
    _checkpoint(root, "tmp_step_12", weights=100, info={"total_steps": 12}, written=T0, seconds=1)
    _checkpoint(root, "old_step_4", weights=100, info={"total_steps": 4}, written=T0, seconds=1)
    (root / "step_7").write_text("a file, not a checkpoint directory")

    # As on the Ray head: a shell, whatever python3 is on PATH, and no rl_lustre to import.
    done = subprocess.run(
        listing_command(str(root)),
        shell=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    remote = parse_listing("Running entrypoint for job rl-lustre-ls-1\n" + done.stdout)

    local = list_checkpoints(root)
    assert [c.step for c in local] == [2, 3, 10]
    assert remote == local
    assert [c.training_info for c in remote] == [c.training_info for c in local]
    assert [c.save_seconds_from for c in remote] == ["files", None, "files"]


def test_output_without_a_listing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no checkpoint listing"):
        parse_listing("python3: command not found\n")
    with pytest.raises(ValueError, match="malformed"):
        parse_listing('RL_LUSTRE_CHECKPOINTS [{"step": 1}]')
