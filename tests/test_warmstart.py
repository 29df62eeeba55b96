"""Warm starts from Cloud Storage (``Cluster.warm_start``) on the fakes, over the real wire
(Lustre ImportData / ExportData over gRPC, the Cloud Storage JSON API over HTTP): the first
deployment exports what the prefetch and the jobs left on the volume (never a credential),
with a manifest of every object and its size; the next one imports it into its new volume;
every failure on the way leaves the bucket as it was and nothing of ours behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.specs import PROJECT, SMALL

from rl_lustre import Cluster
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.catalog import WARM_FORMAT
from rl_lustre.errors import CapacityError, ConfigError, ProvisioningError
from rl_lustre.shared import find_warm_start
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

BUCKET = "warm-bucket"
MANIFEST = "qwen/rl-lustre-manifest.json"
HUB = "huggingface_cache/hub/models--Qwen--Qwen2.5-72B-Instruct"
# What the prefetch (and huggingface_hub's login) leave on the volume.
DOWNLOADED = {
    f"{HUB}/blobs/aa01": 4_000_000_000,
    f"{HUB}/blobs/aa02": 3_500_000_000,
    f"{HUB}/snapshots/rev1/config.json": 700,
    "huggingface_cache/rl_lustre_prefetch/models--Qwen--Qwen2.5-72B-Instruct.json": 120,
    "huggingface_cache/token": 37,
    "huggingface_cache/stored_tokens": 80,
    "huggingface_cache/hub/secrets/hf_api_key": 40,
}
CONVERTED = {
    "huggingface_cache/nemo_rl/Qwen/Qwen2.5-72B-Instruct/iter_0000000/model.pt": 9_000_000_000,
    "cache/triton/abc/kernel.cubin": 50_000,
}


def spec(**kw: object) -> Cluster:
    base: dict[str, object] = {
        **SMALL,
        "warm_start": f"gs://{BUCKET}/qwen",
    }
    return Cluster(**{**base, **kw})  # type: ignore[arg-type]


def backend(c: Cluster) -> GKEBackend:
    return GKEBackend(c, gcp_only=True, backoff=FAST_BACKOFF, retry=FAST_RETRY)


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP() as fake:
        fake.seed_bucket(BUCKET, {"elsewhere/user-file": 5})
        yield fake


def exported(gcp: FakeGCP) -> dict[str, int]:
    return {
        k.removeprefix("qwen/volume/"): v for k, v in gcp.bucket_objects(BUCKET).items() if k.startswith("qwen/volume/")
    }


def first_deployment(gcp: FakeGCP, c: Cluster) -> None:
    # The files the prefetch and the first job write (the GKE side runs in gcp_only mode).
    gcp.seed_files(c.volume.resource_name(), DOWNLOADED)
    backend(c).up()


def test_the_field_is_validated_before_any_remote_call() -> None:
    with pytest.raises(ConfigError, match=r"Cluster\.warm_start='s3://x'.*gs://BUCKET"):
        spec(warm_start="s3://x")
    with pytest.raises(ConfigError, match=r"warm_start='gs://bucket/x/'"):
        spec(warm_start="gs://bucket/x/")
    with pytest.raises(ConfigError, match=r"warm_start='gs://bucket/a/\.\./b'"):
        spec(warm_start="gs://bucket/a/../b")
    from rl_lustre import LustreVolume

    with pytest.raises(ConfigError, match="existing=True"):
        spec(volume=LustreVolume(name="mine", existing=True, capacity_gib=18000))
    with pytest.raises(ConfigError, match="is for GKE clusters"):
        Cluster.local("demo", volume_dir="/tmp/rl-warm", warm_start="gs://bucket/p")
    with pytest.raises(ConfigError, match=r"find_warm_start\.uri='s3://x'"):
        find_warm_start("s3://x")


def test_plan_shows_the_import_and_the_export_and_the_cost_prices_the_bucket() -> None:
    plan = spec().plan()
    assert plan.get("warm-import").depends_on == ("lustre",)
    assert "warm-import" in plan.get("model-prefetch").depends_on
    assert plan.get("warm-export").depends_on == ("model-prefetch", "warm-import")
    assert plan.get("warm-export").name == "gs://warm-bucket/qwen/volume/"
    item = plan.cost().get("warm-export")
    assert item.unit == "GB"
    assert item.quantity > 200
    assert round(item.usd_per_hour * 730, 2) == round(item.quantity * 0.020, 2)
    assert "warm-import" not in spec(warm_start=None).plan()


def test_exported_once_never_a_secret_listed_with_sizes_then_imported_in_place_of_the_download(gcp: FakeGCP) -> None:
    c = spec()
    first_deployment(gcp, c)
    got = exported(gcp)
    assert set(got) == {p for p in DOWNLOADED if "token" not in p and "secrets" not in p}
    manifest = gcp.bucket_content(BUCKET, MANIFEST)
    assert manifest["format"] == WARM_FORMAT
    assert {o["path"]: o["bytes"] for o in manifest["objects"]} == got
    assert manifest["total_bytes"] == sum(got.values())
    assert manifest["secrets_removed"] == ["huggingface_cache/hub/secrets/hf_api_key"]
    assert manifest["models"] == ["Qwen/Qwen2.5-72B-Instruct"]
    listed = find_warm_start(f"gs://{BUCKET}/qwen")
    assert listed is not None
    assert dict(listed.objects) == got
    assert listed.to_dict()["usd_per_month"] == round(sum(got.values()) / 1e9 * 0.020, 2)
    assert find_warm_start(f"gs://{BUCKET}/elsewhere") is None
    # rl-lustre ls --warm-start lists it, file by file with sizes.
    from click.testing import CliRunner

    from rl_lustre.cli._app import cli

    out = (
        CliRunner()
        .invoke(cli, ["ls", "--project", PROJECT, "--warm-start", f"gs://{BUCKET}/qwen"], catch_exceptions=False)
        .output
    )
    assert f"WARM START gs://{BUCKET}/qwen: 4 file(s), 7.5 GB" in out
    assert f"{HUB}/blobs/aa01" in out
    assert "token" not in out
    # The first job converts; down() exports that too before the volume goes.
    gcp.seed_files(c.volume.resource_name(), CONVERTED)
    backend(c).down()
    assert set(exported(gcp)) == set(got) | set(CONVERTED)
    assert gcp.leaked() == []
    assert gcp.bucket_objects(BUCKET)["elsewhere/user-file"] == 5
    # The next deployment: a new volume, filled from the bucket; nothing downloaded, nothing exported.
    report = backend(c).up()
    assert report.records["warm-import"].outcome == "created"
    assert report.records["warm-export"].outcome == "skipped"
    assert gcp.files(c.volume.resource_name()) == {**got, **CONVERTED}
    assert gcp.request_counts("lustre.ExportData")["lustre.ExportData"] == 2 + 5


def test_a_failed_import_leaves_no_volume_and_the_bucket_as_it_was(gcp: FakeGCP) -> None:
    c = spec()
    first_deployment(gcp, c)
    backend(c).down()
    before = gcp.bucket_objects(BUCKET)
    gcp.faults.fail_operation("lustre.ImportData", message="internal error")
    with pytest.raises(ProvisioningError, match="warm-import"):
        backend(c).up()
    gcp.settle()
    assert gcp.leaked() == []
    assert gcp.files(c.volume.resource_name()) == {}
    assert gcp.bucket_objects(BUCKET) == before


@pytest.mark.parametrize("fault", ["export-operation", "manifest-write", "bucket-listing"])
def test_a_failed_export_deletes_what_it_added_and_writes_no_manifest(gcp: FakeGCP, fault: str) -> None:
    c = spec()
    if fault == "export-operation":
        gcp.faults.fail_operation("lustre.ExportData", message="internal error", times=1)
    elif fault == "manifest-write":
        gcp.faults.fail_call("storage.objects.insert", code=403, times=5)
    else:
        gcp.faults.fail_call("storage.objects.list", code=403, times=1, after=1)
    with pytest.raises(ProvisioningError):
        first_deployment(gcp, c)
    gcp.settle()
    assert gcp.leaked() == []
    if fault != "bucket-listing":
        assert gcp.bucket_objects(BUCKET) == {"elsewhere/user-file": 5}


def test_a_rollback_after_a_finished_export_takes_it_back() -> None:
    # The GPU pool fails well after the export has finished.
    with FakeGCP(latency={"gke.create_node_pool": 1.5}) as gcp:
        gcp.seed_bucket(BUCKET, {"elsewhere/user-file": 5})
        gcp.faults.fail_operation("gke.CreateNodePool", message="internal error")
        c = spec()
        with pytest.raises(ProvisioningError) as info:
            first_deployment(gcp, c)
        assert info.value.report.records["warm-export"].outcome == "created"
        gcp.settle()
        assert gcp.leaked() == []
        assert gcp.bucket_objects(BUCKET) == {"elsewhere/user-file": 5}


def test_a_missing_bucket_is_said_and_rolled_back(gcp: FakeGCP) -> None:
    c = spec(warm_start="gs://no-such-bucket/x")
    # The check before up() asks first: nothing is created.
    with pytest.raises(CapacityError, match=r"bucket gs://no-such-bucket \(warm_start=.*\) exists"):
        backend(c).up()
    assert gcp.leaked() == []
    with pytest.raises(ProvisioningError, match=r"no-such-bucket.*never creates or deletes it"):
        backend(c).up(check=False)
    gcp.settle()
    assert gcp.leaked() == []


def test_a_failed_export_at_down_cleans_up_and_keeps_the_volume_until_discarded(gcp: FakeGCP) -> None:
    import warnings

    from rl_lustre.errors import ResultsKeptWarning

    c = spec()
    first_deployment(gcp, c)
    before = gcp.bucket_objects(BUCKET)
    manifest = gcp.bucket_content(BUCKET, MANIFEST)
    gcp.seed_files(c.volume.resource_name(), CONVERTED)
    gcp.faults.fail_operation("lustre.ExportData", message="internal error", after=3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report = backend(c).down()
    assert "failed" in report.records["warm-export"].note
    assert any("the warm-start export failed" in str(w.message) for w in seen if w.category is ResultsKeptWarning)
    gcp.settle()
    # The volume (and the network it needs) stays until its export verifies, or it is discarded.
    assert [r for r in gcp.leaked() if r.startswith("lustre.")] == [
        f"lustre.instances {c.volume.resource_name()}"  # type: ignore[union-attr]
    ]
    assert gcp.bucket_objects(BUCKET) == before
    assert gcp.bucket_content(BUCKET, MANIFEST) == manifest
    backend(c).down(discard_results=True)
    gcp.settle()
    assert gcp.leaked() == []


def test_an_import_that_brought_every_model_whole_runs_no_prefetch_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from rl_lustre import naming
    from rl_lustre.testing.kube import KubeFake

    monkeypatch.setenv("HF_TOKEN", "hf_warm_test_value")
    c = spec(secrets=("HF_TOKEN",))
    job = naming.prefetch_name(c)
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        gcp.seed_bucket(BUCKET)
        gcp.seed_files(c.volume.resource_name(), DOWNLOADED)
        full = GKEBackend(c, backoff=FAST_BACKOFF, retry=FAST_RETRY)
        # The first deployment fetches (its Job runs), exports, and goes.
        assert full.up().records["model-prefetch"].outcome == "created"
        full.down()
        # The next one: the import brought the model, its marker and its snapshot; no Job at all.
        report = GKEBackend(c, backoff=FAST_BACKOFF, retry=FAST_RETRY).up()
        assert report.records["warm-import"].outcome == "created"
        assert report.records["model-prefetch"].outcome == "skipped"
        assert "the warm-start import brought Qwen/Qwen2.5-72B-Instruct" in report.records["model-prefetch"].note
        assert [j for j in kube.objects("Job") if j["metadata"]["name"] == job] == []
        GKEBackend(c, backoff=FAST_BACKOFF, retry=FAST_RETRY).down()
        assert gcp.leaked() == []


def test_a_model_the_import_did_not_bring_whole_is_left_to_the_prefetch_job() -> None:
    from rl_lustre.provision.warmstart import imported_models

    c = spec()
    marker = "huggingface_cache/rl_lustre_prefetch/models--Qwen--Qwen2.5-72B-Instruct.json"
    snapshot = f"{HUB}/snapshots/rev1/config.json"
    manifest = {
        "models": ["Qwen/Qwen2.5-72B-Instruct"],
        "objects": [{"path": marker, "bytes": 120}, {"path": snapshot, "bytes": 700}],
    }
    assert imported_models(c, {"manifest": manifest, "failed": 0}) == ["Qwen/Qwen2.5-72B-Instruct"]
    assert imported_models(c, {"manifest": manifest, "failed": 2}) == []  # an object failed to copy
    assert imported_models(c, {"manifest": None}) == []  # nothing exported yet
    assert imported_models(c, None) == []
    for kept in ([marker], [snapshot]):  # no snapshot, or no marker (a prefetch cut short)
        partial = {**manifest, "objects": [{"path": p, "bytes": 1} for p in kept]}
        assert imported_models(c, {"manifest": partial, "failed": 0}) == []
    # Exported before that model's prefetch finished: not named in the manifest.
    assert imported_models(c, {"manifest": {**manifest, "models": []}, "failed": 0}) == []
