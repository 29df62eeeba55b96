"""The rehearsal driver, run as NeMo-RL's entrypoint would be: a subprocess with NeMo-RL's command line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import rl_lustre.rehearsal.checkpoints as checkpoints
import rl_lustre.rehearsal.driver as driver
import rl_lustre.rehearsal.entrypoint as entrypoint
from rl_lustre.nemo_rl import resolve_config
from rl_lustre.nemo_rl.checkpoints import list_checkpoints
from rl_lustre.nemo_rl.logs import parse_log
from rl_lustre.sizing import CHECKPOINT_BYTES_PER_PARAM

REPO = Path(__file__).resolve().parents[1]
RECIPE = "grpo_math_1B"
# policy.model_name of grpo_math_1B is Qwen/Qwen2.5-1.5B: 1.5 billion parameters.
PARAMS_1B_RECIPE = 1_500_000_000


def _command(tmp: Path, *overrides: str, scale: float = 1e-5, step_seconds: float = 0.0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rl_lustre.rehearsal",
        "--checkpoint-scale",
        repr(scale),
        "--step-seconds",
        repr(step_seconds),
        "--config",
        RECIPE,
        f"checkpointing.checkpoint_dir={tmp / 'ckpt'}",
        f"logger.log_dir={tmp / 'logs'}",
        *overrides,
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def _run(tmp: Path, *overrides: str, **kw: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _command(tmp, *overrides, **kw), cwd=tmp, env=_env(), capture_output=True, text=True, timeout=120, check=False
    )


def _steps(tmp: Path) -> list[str]:
    return sorted((p.name for p in (tmp / "ckpt").iterdir()), key=lambda n: (len(n), n))


def _assert_rehearsal_banners(stdout: str) -> None:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert "REHEARSAL" in lines[0]
    assert "no model is trained" in lines[0]
    assert "REHEARSAL" in lines[-1]
    assert "no model was trained" in lines[-1]


KEEP_2_OF_5 = (
    "grpo.max_num_steps=5",
    "checkpointing.save_period=2",
    "checkpointing.keep_top_k=2",
    "checkpointing.metric_name=null",
)


def test_five_steps_save_every_two_keep_two(tmp_path: Path) -> None:
    r = _run(tmp_path, *KEEP_2_OF_5)
    assert r.returncode == 0, r.stderr
    _assert_rehearsal_banners(r.stdout)

    parsed = parse_log(r.stdout)
    assert [(s.step, s.total) for s in parsed.steps] == [(i, 5) for i in range(1, 6)]
    # NeMo-RL saves every save_period steps and always at the last step: 2, 4 and 5.
    assert [s.step for s in parsed.saves] == [2, 4, 5]
    assert f"Removing checkpoint {tmp_path / 'ckpt' / 'step_2'} due to being outside top-2" in r.stdout
    # keep_top_k=2 with metric_name=null keeps the newest two.
    assert _steps(tmp_path) == ["step_4", "step_5"]
    assert parsed.finished

    cfg = resolve_config(RECIPE, list(KEEP_2_OF_5))
    info = json.loads((tmp_path / "ckpt" / "step_5" / "training_info.json").read_text())
    assert info["total_steps"] == 5
    assert info["current_step"] == 5
    assert info["current_epoch"] == 0
    assert info["consumed_samples"] == 5 * cfg["grpo"]["num_prompts_per_step"]
    assert "val_reward" not in info  # no validation ran in step 5 (val_period 10)
    saved_cfg = yaml.safe_load((tmp_path / "ckpt" / "step_5" / "config.yaml").read_text())
    assert saved_cfg["grpo"] == cfg["grpo"]
    assert saved_cfg["logger"]["log_dir"] == str(tmp_path / "logs" / "exp_001")
    for name in ("policy/weights", "policy/optimizer", "policy/tokenizer", "train_dataloader.pt"):
        assert (tmp_path / "ckpt" / "step_5" / name).exists(), name


def test_checkpoint_size_is_the_scale_times_the_real_size(tmp_path: Path) -> None:
    scale = 1e-4
    r = _run(tmp_path, "grpo.max_num_steps=1", "checkpointing.metric_name=null", scale=scale)
    assert r.returncode == 0, r.stderr

    (ckpt,) = list_checkpoints(tmp_path / "ckpt")
    real = PARAMS_1B_RECIPE * CHECKPOINT_BYTES_PER_PARAM
    filler = sum(p.stat().st_size for p in ckpt.path.rglob("*.distcp"))
    assert filler == pytest.approx(real * scale, abs=1)
    # Everything else (training_info, config.yaml, tokenizer, dataloader) is small change.
    assert ckpt.size_bytes == pytest.approx(real * scale, rel=0.02)
    assert ckpt.save_seconds is not None
    assert ckpt.save_seconds >= 0


def test_resume_after_a_stop_continues_from_the_newest_step(tmp_path: Path) -> None:
    overrides = (
        "grpo.max_num_steps=6",
        "checkpointing.save_period=2",
        "checkpointing.keep_top_k=2",
        "checkpointing.metric_name=null",
    )
    proc = subprocess.Popen(
        _command(tmp_path, *overrides, step_seconds=0.2),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first_lines = []
    for line in proc.stdout:
        first_lines.append(line)
        if line.startswith("========================= Step 4/6"):
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=60)
    first_out = "".join(first_lines) + rest
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM during step 4" in first_out
    _assert_rehearsal_banners(first_out)
    assert _steps(tmp_path) == ["step_2"]

    r = _run(tmp_path, *overrides)
    assert r.returncode == 0, r.stderr
    assert f"resuming from {tmp_path / 'ckpt' / 'step_2'}" in r.stdout
    resumed = parse_log(r.stdout)
    assert [s.step for s in resumed.steps] == [3, 4, 5, 6]
    assert [s.step for s in resumed.saves] == [4, 6]
    assert _steps(tmp_path) == ["step_4", "step_6"]
    # Metrics depend on the seed and the step only: step 3 reads the same both times.
    (step3_before,) = [s for s in parse_log(first_out).steps if s.step == 3]
    assert step3_before.metrics == resumed.steps[0].metrics
    # Every start logs into a new exp_NNN, as NeMo-RL's get_next_experiment_dir does.
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["exp_001", "exp_002"]
    info = json.loads((tmp_path / "ckpt" / "step_6" / "training_info.json").read_text())
    assert info["total_steps"] == 6


def test_interrupted_save_leaves_only_a_tmp_dir_that_the_next_start_clears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [
        "--config",
        RECIPE,
        "--step-seconds",
        "0",
        "--checkpoint-scale",
        "1e-6",
        "grpo.max_num_steps=3",
        "checkpointing.save_period=1",
        "checkpointing.metric_name=null",
        f"checkpointing.checkpoint_dir={tmp_path / 'ckpt'}",
        f"logger.log_dir={tmp_path / 'logs'}",
    ]
    real_write = checkpoints.write_filler
    writes = []

    def interrupted_in_step_2(path: Path, size: int, block: bytes) -> None:
        if "tmp_step_2" in str(path) and writes:
            raise KeyboardInterrupt  # Ctrl-C between two shard writes of step 2
        writes.append(path)
        real_write(path, size, block)

    monkeypatch.setattr(checkpoints, "write_filler", interrupted_in_step_2)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert entrypoint.main(args) == 128 + signal.SIGINT
    assert "stopped by SIGINT during step 2" in out.getvalue()
    assert _steps(tmp_path) == ["step_1", "tmp_step_2"]
    assert [c.step for c in list_checkpoints(tmp_path / "ckpt")] == [1]

    monkeypatch.setattr(checkpoints, "write_filler", real_write)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert entrypoint.main(args) == 0
    assert "removed stale tmp_step_2" in out.getvalue()
    assert _steps(tmp_path) == ["step_1", "step_2", "step_3"]
    assert [s.step for s in parse_log(out.getvalue()).steps] == [2, 3]


def test_stale_tmp_and_half_deleted_dirs_are_cleared_at_start(tmp_path: Path) -> None:
    stale = tmp_path / "ckpt" / "tmp_step_9" / "policy" / "weights"
    stale.mkdir(parents=True)
    (stale / "__0_0.distcp").write_bytes(b"half a save")
    (tmp_path / "ckpt" / "old_step_3" / "policy").mkdir(parents=True)  # keep_top_k was deleting it

    r = _run(tmp_path, "grpo.max_num_steps=1", "checkpointing.metric_name=null")

    assert r.returncode == 0, r.stderr
    assert "removed stale tmp_step_9" in r.stdout
    assert "removed old_step_3" in r.stdout
    assert _steps(tmp_path) == ["step_1"]


def test_each_start_logs_into_the_next_exp_dir(tmp_path: Path) -> None:
    (tmp_path / "exp_007").mkdir()
    (tmp_path / "exp_notes").mkdir()
    assert driver.next_experiment_dir(tmp_path) == tmp_path / "exp_008"
    assert driver.next_experiment_dir(tmp_path / "fresh") == tmp_path / "fresh" / "exp_001"
    assert (tmp_path / "exp_008").is_dir()


def test_a_finished_run_exits_at_once(tmp_path: Path) -> None:
    assert _run(tmp_path, *KEEP_2_OF_5).returncode == 0
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "ckpt").rglob("*")}

    r = _run(tmp_path, *KEEP_2_OF_5)

    assert r.returncode == 0, r.stderr
    assert "nothing left to do" in r.stdout
    assert parse_log(r.stdout).steps == []
    assert "Saving checkpoint" not in r.stdout
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "ckpt").rglob("*")} == before
    _assert_rehearsal_banners(r.stdout)


def test_unknown_key_fails_as_nemo_rl_would(tmp_path: Path) -> None:
    r = _run(tmp_path, "grpo.max_num_stepz=5")

    assert r.returncode != 0
    assert "grpo.max_num_stepz" in r.stderr
    assert "+grpo.max_num_stepz" in r.stderr  # the '+key=' advice, as Hydra gives it
    assert not (tmp_path / "ckpt").exists()
    _assert_rehearsal_banners(r.stdout)


def test_unknown_checkpoint_metric_fails_before_training(tmp_path: Path) -> None:
    r = _run(tmp_path, "checkpointing.metric_name=val:no_such_metric")

    assert r.returncode == 1
    assert "Metric no_such_metric not found in val metrics" in r.stderr
    assert parse_log(r.stdout).steps == []


def test_keep_top_k_by_metric_never_deletes_the_newest(tmp_path: Path) -> None:
    # Validation every 2nd step, a save every step: odd steps are saved without the
    # metric, rank worst, and the saves after them still record it.
    r = _run(
        tmp_path,
        "grpo.max_num_steps=6",
        "grpo.val_period=2",
        "checkpointing.save_period=1",
        "checkpointing.keep_top_k=2",
        "checkpointing.metric_name=val:accuracy",
    )
    assert r.returncode == 0, r.stderr

    accuracy = {s.step: s.validation["accuracy"] for s in parse_log(r.stdout).steps if s.validation}
    assert sorted(accuracy) == [2, 4, 6]
    best_two = sorted(accuracy, key=lambda step: (accuracy[step], step), reverse=True)[:2]
    kept = {c.step for c in list_checkpoints(tmp_path / "ckpt")}
    assert kept == set(best_two) | {6}
    for c in list_checkpoints(tmp_path / "ckpt"):
        assert c.training_info["val:accuracy"] == pytest.approx(accuracy[c.step], abs=5e-5)
        assert c.training_info["val_reward"] == c.training_info["val:accuracy"]


def test_megatron_layout_keeps_the_optimizer_inside_the_weights(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rl_lustre.rehearsal",
            "--config",
            "grpo_math_70B_megatron",
            "--step-seconds",
            "0",
            "--checkpoint-scale",
            "1e-7",
            "grpo.max_num_steps=1",
            "checkpointing.enabled=true",
            "checkpointing.metric_name=null",
            f"checkpointing.checkpoint_dir={tmp_path / 'ckpt'}",
            f"logger.log_dir={tmp_path / 'logs'}",
        ],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    cfg = resolve_config("grpo_math_70B_megatron", [])
    gpus = cfg["cluster"]["num_nodes"] * cfg["cluster"]["gpus_per_node"]
    assert f"cluster.num_nodes={cfg['cluster']['num_nodes']}" in r.stdout
    step = tmp_path / "ckpt" / "step_1"
    shards = list((step / "policy" / "weights" / "iter_0000000").glob("*.distcp"))
    assert len(shards) == gpus
    assert not (step / "policy" / "optimizer").exists()
    # meta-llama/Llama-3.3-70B-Instruct: 70 billion parameters.
    assert sum(p.stat().st_size for p in shards) == pytest.approx(70e9 * CHECKPOINT_BYTES_PER_PARAM * 1e-7, abs=1)


def test_config_given_as_nemo_rl_path(tmp_path: Path) -> None:
    cmd = _command(tmp_path, "grpo.max_num_steps=2", "checkpointing.metric_name=null")
    cmd[cmd.index(RECIPE)] = f"examples/configs/{RECIPE}.yaml"
    r = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert f"Loaded configuration from: examples/configs/{RECIPE}.yaml" in r.stdout
    assert [s.step for s in parse_log(r.stdout).steps] == [1, 2]


def test_bad_scale_is_refused(tmp_path: Path) -> None:
    r = _run(tmp_path, "grpo.max_num_steps=1", scale=2.0)
    assert r.returncode == 2
    assert "--checkpoint-scale" in r.stderr


def test_keep_top_k_ranks_a_checkpoint_without_the_metric_worst_as_nemo_rl_0_4_0(tmp_path: Path) -> None:
    # nemo_rl/utils/checkpoint.py (v0.4.0) remove_old_checkpoints sorts by
    # info.get(metric, -inf) (higher is better) or +inf (lower is better): a checkpoint
    # saved without the metric ranks worst, and the ranking by metric goes on.
    infos = {1: {"val:accuracy": 0.9}, 2: {}, 3: {"val:accuracy": 0.1}, 4: {"val:accuracy": 0.5}, 5: {}}
    for higher, kept in ((True, {1, 4, 5}), (False, {3, 4, 5})):
        ckpt = tmp_path / f"higher-{higher}"
        for step, info in infos.items():
            (ckpt / f"step_{step}").mkdir(parents=True)
            (ckpt / f"step_{step}" / "training_info.json").write_text(json.dumps(info))
        cfg = resolve_config(
            RECIPE,
            [
                f"checkpointing.checkpoint_dir={ckpt}",
                "checkpointing.keep_top_k=2",
                "checkpointing.metric_name=val:accuracy",
                f"checkpointing.higher_is_better={higher}",
            ],
        )
        rehearsal = driver.Rehearsal(cfg, scale=1e-5, step_seconds=0, param_count=PARAMS_1B_RECIPE)
        with contextlib.redirect_stdout(io.StringIO()):
            checkpoints.remove_old_checkpoints(
                rehearsal.checkpoint_dir, rehearsal.keep_top_k, rehearsal.metric_name, rehearsal.higher_is_better
            )
        # The newest (5) is never deleted, even though it lacks the metric.
        assert {int(p.name.split("_")[1]) for p in ckpt.iterdir()} == kept
        assert rehearsal.metric_name == "val:accuracy"


def test_exp_numbering_is_nemo_rl_get_next_experiment_dir(tmp_path: Path) -> None:
    # v0.4.0 searches each globbed path, base directory included, for exp_(\d+), and
    # files count as well as directories.
    base = tmp_path / "exp_5-sweep"
    base.mkdir()
    assert driver.next_experiment_dir(base) == base / "exp_001"
    assert driver.next_experiment_dir(base) == base / "exp_006"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "exp_1000").mkdir()
    (plain / "exp_0042.txt").write_text("")
    assert driver.next_experiment_dir(plain) == plain / "exp_1001"
