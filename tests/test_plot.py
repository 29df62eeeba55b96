"""run.plot(): the figure's panels and series, and the PNG written (size, dimensions); the
CLI's job verbs and a real plot on the session's local Ray head."""

from __future__ import annotations

import datetime as dt
import json
import struct
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from rl_lustre import Cluster, GRPOJob
from rl_lustre.cli._app import cli
from rl_lustre.errors import ConfigError
from rl_lustre.metrics import ClusterMetrics, Series, VolumeMetrics
from rl_lustre.plot import (
    CATEGORY_COLORS,
    DPI,
    LEDGER_IN,
    ROW_IN,
    WIDTH_IN,
    RunData,
    SaveRecord,
    figure,
    save,
)
from rl_lustre.plot import collect as plot_collect

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def _cluster_metrics() -> ClusterMetrics:
    times = [T0 + dt.timedelta(minutes=k) for k in range(1, 6)]
    volume = VolumeMetrics(
        Series("Lustre read", "MB/s", tuple((t, 100.0 + k) for k, t in enumerate(times))),
        Series("Lustre write", "MB/s", tuple((t, 900.0 - k) for k, t in enumerate(times))),
        T0,
        times[-1],
        60,
    )
    pods = {
        p: Series(f"GPU utilisation {p}", "%", tuple((t, v) for t in times)) for p, v in (("w-0", 90.0), ("w-1", 70.0))
    }
    return ClusterMetrics(Series("GPU utilisation", "%", tuple((t, 80.0) for t in times)), pods, volume)


DATA = RunData(
    title="rl-lustre-demo-1",
    steps=(1, 2, 3, 4),
    reward=(0.1, 0.2, 0.35, 0.4),
    loss=(0.01, -0.01, 0.0, 0.005),
    saves=(SaveRecord(2, 0.5, 200.0, 100.0), SaveRecord(4, 0.25, 400.0, 100.0)),
)


def _lines(fig) -> dict[str, tuple[list, list]]:  # type: ignore[no-untyped-def]
    return {
        line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
        for ax in fig.axes
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


def test_the_figure_draws_every_series_of_the_run(tmp_path: Path) -> None:
    fig = figure(DATA)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["Training, per step", "Checkpoint saves", "GPU-node-hours by cause"]
    lines = _lines(fig)
    assert lines["reward"] == ([1, 2, 3, 4], [0.1, 0.2, 0.35, 0.4])
    assert lines["loss"] == ([1, 2, 3, 4], [0.01, -0.01, 0.0, 0.005])
    assert lines["write MB/s"] == ([2, 4], [200.0, 400.0])
    bars = [p for ax in fig.axes[:2] for c in ax.containers for p in c.patches]
    assert [(b.get_x() + b.get_width() / 2, b.get_height()) for b in bars] == [(2, 0.5), (4, 0.25)]
    assert "no goodput ledger for this run" in [t.get_text() for t in fig.axes[-1].texts]

    path = save(fig, tmp_path / "run.png")
    assert png_size(path) == (int(WIDTH_IN * DPI), int((ROW_IN + LEDGER_IN + 0.5) * DPI))
    assert path.stat().st_size > 20_000


def test_on_gke_lustre_throughput_and_gpu_utilisation_are_drawn_too(tmp_path: Path) -> None:
    fig = figure(attrs.evolve(DATA, cluster=_cluster_metrics()))
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == [
        "Training, per step",
        "Checkpoint saves",
        "Lustre throughput",
        "GPU utilisation",
        "GPU-node-hours by cause",
    ]
    lines = _lines(fig)
    assert lines["Lustre write MB/s"][1] == [900.0, 899.0, 898.0, 897.0, 896.0]
    assert lines["Lustre read MB/s"][1][0] == 100.0
    assert lines["GPU utilisation %"][1] == [80.0] * 5
    path = save(fig, tmp_path / "gke.png")
    assert png_size(path) == (int(WIDTH_IN * DPI), int((2 * ROW_IN + LEDGER_IN + 0.5) * DPI))


def test_the_ledger_is_one_stacked_bar_of_node_hours_per_category(tmp_path: Path) -> None:
    from helpers.goodput import preempted

    from rl_lustre.goodput.ledger import build

    ledger = build(preempted(), scope="run", run="r")
    fig = figure(attrs.evolve(DATA, ledger=ledger))
    ax = fig.axes[-1]
    assert ax.get_title().startswith(f"GPU-node-hours by cause (total {ledger.total_seconds / 3600:.3g} h, $")
    patches = [(c.get_label(), p.get_x(), p.get_width()) for c in ax.containers for p in c.patches]
    shown = [c for c in CATEGORY_COLORS if ledger.seconds[c] > 0]
    assert [label for label, _, _ in patches] == shown
    assert [w for _, _, w in patches] == pytest.approx([ledger.seconds[c] / 3600 for c in shown])
    # Stacked: each starts where the one before it ends.
    assert [x for _, x, _ in patches][1:] == pytest.approx([x + w for _, x, w in patches][:-1])
    assert f"{ledger.seconds['lost'] / ledger.total_seconds:.0%}" in "".join(t.get_text() for t in ax.texts)
    save(fig, tmp_path / "ledger.png")


def test_a_bad_path_is_refused_before_anything_is_drawn(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"must end in \.png"):
        save(figure(DATA), tmp_path / "run.jpg")
    with pytest.raises(ConfigError, match="does not exist"):
        save(figure(DATA), tmp_path / "missing" / "run.png")


@pytest.mark.slow
def test_run_data_draws_the_same_picture_without_a_run(tmp_path: Path) -> None:
    path = DATA.plot(tmp_path / "data.png")
    assert path == tmp_path / "data.png"
    assert png_size(path) == png_size(save(figure(DATA), tmp_path / "run.png"))
    with pytest.raises(ConfigError, match=r"RunData\.plot\.path=.*must end in \.png"):
        DATA.plot(tmp_path / "data.jpg")
    assert not (tmp_path / "data.jpg").exists()


def test_a_real_run_plotted_and_inspected_from_the_command_line(local_cluster: Cluster, tmp_path: Path) -> None:
    job = GRPOJob(name="plotted", recipe="grpo_math_1B", max_num_steps=4, save_period=2)
    run = local_cluster.submit(job)
    assert run.wait(timeout=120) == "SUCCEEDED"
    path = run.plot(tmp_path / "run.png")
    data = plot_collect(run)
    assert data.ledger is not None
    assert data.ledger.seconds["training"] > 0
    assert png_size(path) == (int(WIDTH_IN * DPI), int((ROW_IN + LEDGER_IN + 0.5) * DPI))
    assert path.stat().st_size > 20_000
    with pytest.raises(ConfigError):
        run.plot(tmp_path / "run.svg")

    # The same run from the command line, through a file that describes the same cluster.
    script = tmp_path / "local.py"
    script.write_text(
        "from rl_lustre import Cluster\n"
        f"c = Cluster.local({local_cluster.name!r}, volume_dir={local_cluster.mount_path!r}, "
        "secrets=('HF_TOKEN',))\n"
    )
    target = f"{script}:c"

    def run_cli(*args: str) -> str:
        result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        return result.stdout

    status = json.loads(run_cli("status", target, run.job_id, "--json"))
    assert (status["status"], status["completed_steps"], status["total_steps"]) == ("SUCCEEDED", 4, 4)
    assert status["cost_so_far_usd"] == 0.0
    saved = json.loads(run_cli("checkpoints", target, run.job_id, "--json"))
    assert [c["step"] for c in saved] == [c.step for c in run.checkpoints()] == [2, 4]
    assert run_cli("logs", target, run.job_id) == run.logs()
    assert "RL_LUSTRE_EVENT" not in run.logs()
    assert run_cli("logs", target, run.job_id, "--raw") == run.logs(records=True)
    assert "RL_LUSTRE_EVENT" in run.logs(records=True)
    assert "Step 4/4" in run_cli("logs", target, run.job_id, "--follow")
    assert json.loads(run_cli("stop", target, run.job_id, "--json")) == {"job_id": run.job_id, "status": "SUCCEEDED"}
    missing = CliRunner().invoke(cli, ["status", target, "no-such-job"])
    assert missing.exit_code == 8
    assert "no job 'no-such-job'" in missing.stderr


def test_the_picture_names_the_model_and_recipe_and_says_what_is_synthetic_or_missing() -> None:
    data = attrs.evolve(
        DATA,
        title="Qwen/Qwen2.5-1.5B · grpo_math_1B",
        subtitle="rl-lustre-demo-1",
        synthetic=True,
        saves=(SaveRecord(2, 0.5, None, None), SaveRecord(4, 0.25, 400.0, 100.0)),
    )
    fig = figure(data)
    assert fig.get_suptitle().splitlines() == [
        "Qwen/Qwen2.5-1.5B · grpo_math_1B",
        "rl-lustre-demo-1 · rehearsal: no model is trained, the metrics are synthetic",
    ]
    training, saves, _ = (ax for ax in fig.axes if ax.get_title())
    assert training.get_title() == "Training, per step (synthetic)"
    assert saves.get_xlabel().splitlines()[1] == (
        "no MB/s for step 2: keep_top_k deleted the checkpoint, so its size is unknown"
    )
    # A run that trains for real, every checkpoint still there: nothing to explain.
    plain = figure(attrs.evolve(DATA, title="m · r"))
    assert plain.get_suptitle() == "m · r"
    assert [ax.get_xlabel() for ax in plain.axes if ax.get_title() == "Checkpoint saves"] == ["step"]


def test_a_real_runs_picture_is_labelled_from_the_run_itself(local_cluster: Cluster) -> None:
    from rl_lustre.plot import collect

    job = GRPOJob(name="labelled", recipe="grpo_math_1B", max_num_steps=3, save_period=1, keep_top_k=1)
    run = local_cluster.submit(job, fresh=True)
    assert run.wait(timeout=120) == "SUCCEEDED"
    data = collect(run, cluster_metrics=False)
    assert data.title == f"{job.overrides(local_cluster)['policy.model_name']} · grpo_math_1B"
    assert data.subtitle == run.job_id
    assert data.synthetic
    # keep_top_k=1 kept step 3 only: the older saves have a time but no size, hence no MB/s.
    assert [(s.step, s.mb_per_second is None, s.size_mb is None) for s in data.saves] == [
        (1, True, True),
        (2, True, True),
        (3, False, False),
    ]
    saves = next(ax for ax in figure(data).axes if ax.get_title() == "Checkpoint saves")
    assert "no MB/s for steps 1, 2: keep_top_k deleted" in saves.get_xlabel()
