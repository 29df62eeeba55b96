"""``Cluster.results``: validated offline (field, value, rule), shown in the plan with its
monthly storage cost, and asked about by ``check()`` (the bucket exists, Lustre's service
agent may write to it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rl_lustre import Cluster
from rl_lustre.catalog import LUSTRE_SERVICE_AGENT, PRICES
from rl_lustre.check import bucket_items
from rl_lustre.errors import ConfigError
from rl_lustre.testing import FakeGCP, project_number

GKE = {"name": "demo", "project": "my-project", "region": "us-east1", "zone": "us-east1-b"}


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("s3://bucket/rl", "'gs://BUCKET' or 'gs://BUCKET/PREFIX' on GKE"),
        ("/data/rl", "'gs://BUCKET' or 'gs://BUCKET/PREFIX' on GKE"),
        ("gs://Not_A_Bucket", "a bucket name of 3-63 lowercase letters"),
        ("gs://bucket/rl/", "no trailing '/'"),
        ("gs://goog-bucket/rl", "not starting with 'goog'"),
        ("gs://bucket/warm/results", "must not be inside warm_start 'gs://bucket/warm'"),
        ("gs://bucket", "must not be inside warm_start 'gs://bucket/warm' (nor hold it)"),
        ("", "must say where the runs' results go"),
        ("gs://bucket/a\nb", "must say where the runs' results go"),
    ],
)
def test_a_bad_destination_names_field_value_and_rule(value: str, rule: str) -> None:
    with pytest.raises(ConfigError) as err:
        Cluster(**GKE, warm_start="gs://bucket/warm", results=value)
    assert err.value.field == "results"
    assert err.value.value == value
    assert rule in str(err.value)


def test_the_same_bucket_as_the_warm_start_under_another_prefix_is_fine() -> None:
    c = Cluster(**GKE, warm_start="gs://bucket/warm", results="gs://bucket/results")
    assert c.results == "gs://bucket/results"


@pytest.mark.parametrize("value", ["gs://bucket/rl", "s3://b/x", "{vol}/out", "{vol}", "/"])
def test_a_local_destination_is_a_directory_outside_the_volume(tmp_path: Path, value: str) -> None:
    vol = tmp_path / "vol"
    with pytest.raises(ConfigError) as err:
        Cluster.local("d", volume_dir=vol, results=value.format(vol=vol))
    assert err.value.field == "results"


def test_a_local_destination_may_be_a_path_or_a_file_uri(tmp_path: Path) -> None:
    for value in (str(tmp_path / "out"), f"file://{tmp_path}/out"):
        c = Cluster.local("d", volume_dir=tmp_path / "vol", results=value)
        assert c.plan().get("results-export").name == str(tmp_path / "out")


def test_the_plan_shows_where_results_go_and_what_they_cost_per_month() -> None:
    plan = Cluster(**GKE, results="gs://bucket/rl").plan()
    node = plan.get("results-export")
    assert (node.kind, node.action, node.name) == ("lustre.v1.ExportData", "use", "gs://bucket/rl")
    assert node.settings["destination"] == "gs://bucket/rl/<run id>/"
    assert "never a tmp_step_N" in node.settings["layout"]["checkpoints"]
    # Two checkpoints (keep_top_k) of the default 72B model, 16 bytes a parameter.
    assert node.settings["estimated_gb_per_run"] == 2304.0
    item = plan.cost().get("results-export")
    assert not item.counted
    assert item.usd_per_hour is not None
    month = item.usd_per_hour * PRICES.hours_per_month
    assert month == pytest.approx(2304.0 * PRICES.gcs_gb_month)
    assert f"${month:,.2f}/month per run kept" in item.note
    assert "cloud_storage" in plan.cost().sources
    assert "results-export" in str(plan)
    assert "results-export" not in Cluster(**GKE).plan()


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP() as fake:
        yield fake


def test_check_finds_a_missing_bucket_and_one_lustre_cannot_write(gcp: FakeGCP) -> None:
    agent = LUSTRE_SERVICE_AGENT.format(number=project_number("my-project"))
    gcp.seed_bucket("readonly", iam={"roles/storage.objectViewer": [f"serviceAccount:{agent}"]})
    gcp.seed_bucket("granted", iam={"roles/storage.objectUser": [f"serviceAccount:{agent}"]})
    before = len(gcp.requests)

    items = bucket_items(Cluster(**GKE, results="gs://missing/rl", warm_start="gs://readonly/warm"))
    verdicts = {i.what: i for i in items}
    missing = verdicts["bucket gs://missing (results='gs://missing/rl') exists"]
    assert missing.verdict == "problem"
    assert "gcloud storage buckets create gs://missing --location=us-east1" in missing.fix
    cannot = verdicts["Managed Lustre's service agent may write to gs://readonly"]
    assert cannot.verdict == "problem"
    assert agent in cannot.detail
    assert f"--member=serviceAccount:{agent} --role=roles/storage.objectUser" in cannot.fix
    # Read-only questions.
    assert all(r.method.endswith((".get", ".getIamPolicy", "GetIamPolicy")) for r in gcp.requests[before:])

    ok = bucket_items(Cluster(**GKE, results="gs://granted/rl"))
    assert [i.verdict for i in ok] == ["ok", "ok"]
    assert "roles/storage.objectUser on the bucket" in ok[1].detail

    report = Cluster(**GKE, num_nodes=2, results="gs://missing/rl").check()
    assert [p.what for p in report.problems] == ["bucket gs://missing (results='gs://missing/rl') exists"]


def test_the_converted_copy_is_sized_and_priced() -> None:
    from rl_lustre import size_lustre

    plain, with_copy = size_lustre("Qwen/Qwen2.5-72B-Instruct"), size_lustre("Qwen/Qwen2.5-72B-Instruct", hf_copies=1)
    assert with_copy.hf_copy_bytes == 72_000_000_000 * 4
    assert with_copy.required_gib == pytest.approx(plain.required_gib + 288e9 / 1024**3)
    assert "288 GB of Hugging Face copies" in str(with_copy)
    with pytest.raises(ConfigError) as err:
        size_lustre("Qwen/Qwen2.5-72B-Instruct", hf_copies=-1)
    assert err.value.field == "hf_copies"
    item = Cluster(**GKE, results="gs://bucket/rl").plan().cost().get("model-export")
    assert item.quantity == 288.0
    assert item.usd_per_hour is not None
    assert f"${288 * PRICES.gcs_gb_month:,.2f}/month" in item.note


def test_the_converter_command_is_nemo_rls_own_for_the_checkpoints_backend(tmp_path: Path) -> None:
    from rl_lustre.nemo_rl.converters import conversion

    gke = Cluster(**GKE)
    dcp = conversion(gke, "/opt/nemo-rl", "dtensor", "/lustre/c/step_4", "/lustre/m/step_4-hf", "Qwen/Qwen2.5-72B")
    assert dcp.command == (
        "cd /opt/nemo-rl && uv run python examples/converters/convert_dcp_to_hf.py --config "
        "/lustre/c/step_4/config.yaml --dcp-ckpt-path /lustre/c/step_4/policy/weights --hf-ckpt-path "
        "/lustre/m/step_4-hf"
    )
    # The whole model in memory: a 72B model's fp32 weights, 1.25 times, and 16 GiB more.
    assert dcp.memory_bytes == int(288e9 * 1.25) + 16 * 1024**3
    local = conversion(Cluster.local("d", volume_dir=tmp_path), "/opt/nemo-rl", "megatron", "/v/step_4", "/v/o", None)
    assert "-m rl_lustre.rehearsal.converter --backend megatron" in local.command
    assert "--megatron-ckpt-path /v/step_4/policy/weights/iter_0000000" in local.command


def test_which_checkpoint_final_best_or_a_step() -> None:
    from rl_lustre.backends.model_export import pick_checkpoint
    from rl_lustre.nemo_rl.checkpoints import Checkpoint

    cs = [
        Checkpoint(step=s, path=Path(f"/c/step_{s}"), size_bytes=1, finished_at=0.0, save_seconds=None,
                   training_info={"val_loss": v})
        for s, v in ((2, 0.9), (4, 0.4), (6, 0.6))
    ]  # fmt: skip
    assert pick_checkpoint(cs, "final", None).step == 6
    assert pick_checkpoint(cs, "best", "-val_loss").step == 4
    assert pick_checkpoint(cs, "best", "val_loss").step == 2
    for bad, metric, rule in (
        (8, None, "is not a checkpoint"),
        ("best", None, "needs the metric"),
        ("last", None, "must be"),
    ):
        with pytest.raises(ConfigError, match=rule) as err:
            pick_checkpoint(cs, bad, metric)
        assert err.value.field == "step"


@pytest.mark.parametrize(
    ("uri", "rule"),
    [
        ("s3://bucket/rl/rl-lustre-x-0a1b2c3d", "must be 'gs://...' or a path"),
        ("gs://bucket-only", "must name a run under a bucket"),
        ("gs://bucket/rl/..", "must end with the run's id"),
        ("", "must be a run's results"),
    ],
)
def test_reading_a_run_back_refuses_what_is_not_a_runs_place(uri: str, rule: str) -> None:
    from rl_lustre import Run

    with pytest.raises(ConfigError, match=rule) as err:
        Run.from_results(uri)
    assert err.value.field == "uri"


def test_a_run_whose_export_did_not_finish_is_not_read_back(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rl_lustre import Run
    from rl_lustre.cli._app import cli
    from rl_lustre.errors import NotFoundError

    (tmp_path / "rl-lustre-half-0a1b2c3d").mkdir()
    (tmp_path / "rl-lustre-half-0a1b2c3d" / "export.json").write_text("{}")
    with pytest.raises(NotFoundError, match="the export did not finish"):
        Run.from_results(f"file://{tmp_path}/rl-lustre-half-0a1b2c3d")
    out = CliRunner().invoke(cli, ["results", "ls", str(tmp_path)], catch_exceptions=False).output
    assert "rl-lustre-half-0a1b2c3d  INCOMPLETE" in out
