"""The GKE teardown, results first, on the Google API fakes (the Google Cloud side only: the
runs are sealed on the volume as the helper job on the head seals them, and the teardown
finds them there, as a second ``down()`` does after the cluster is gone):

- with a destination: every run's records, complete checkpoints and logs reach the bucket,
  verified, then the volume goes; the run reads back from the bucket alone;
- without one, or when the export fails or is interrupted: the volume is kept (labelled,
  named by ``rl-lustre ls``, left alone by ``gc``) and everything else goes;
  ``discard_results=True`` (``--discard-results``) deletes it;
- an export left running by an interrupted ``down()`` is found and waited for.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from rl_lustre import Cluster, Run
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.catalog import LABEL_RESULTS, RESULTS_MANIFEST
from rl_lustre.cli._app import cli
from rl_lustre.errors import ResultsKeptWarning
from rl_lustre.garbage import collect_garbage
from rl_lustre.gcp import Backoff, RetryPolicy
from rl_lustre.inventory import find_deployments
from rl_lustre.oncluster import rundir
from rl_lustre.oncluster.seal import seal_runs
from rl_lustre.testing import FakeGCP

FAST = Backoff(initial=0.005, maximum=0.03)
RETRY = RetryPolicy(attempts=2, initial=0.001, maximum=0.002)
P = "my-project"
RUN = "rl-lustre-grpo-0a1b2c3d"
STORAGE = [
    "compute.firewalls projects/my-project/global/firewalls/demo-allow-lustre",
    "compute.globalAddresses projects/my-project/global/addresses/demo-psa",
    "compute.networks projects/my-project/global/networks/demo-net",
    "lustre.instances projects/my-project/locations/us-east1-b/instances/demo-lustre",
    "servicenetworking.connections projects/my-project/global/networks/demo-net/peerings/"
    "servicenetworking-googleapis-com",
]


def spec(mount: Path, **kw: object) -> Cluster:
    base: dict[str, object] = {
        "name": "demo",
        "project": P,
        "region": "us-east1",
        "zone": "us-east1-b",
        "num_nodes": 2,
        "fabric": "tcp",
        "preload_image": False,
        "prefetch_models": (),
        "mount_path": str(mount),
    }
    return Cluster(**{**base, **kw})  # type: ignore[arg-type]


def backend(c: Cluster) -> GKEBackend:
    return GKEBackend(c, gcp_only=True, backoff=FAST, retry=RETRY)


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP(latency={"lustre.create": 0.02, "lustre.delete": 0.02, "lustre.export_data": 0.02}) as fake:
        fake.seed_bucket("results")
        yield fake


def deployment_with_a_run(gcp: FakeGCP, mount: Path, *, sealed: bool = True, **kw: object) -> Cluster:
    """Up (Google Cloud side), a run's files on the volume, labelled and sealed as a
    submit and the teardown's helper job on the head leave them (a down() whose cluster
    was reachable; ``sealed=False``: jobs ran, and no down() saw them)."""
    c = spec(mount, **kw)
    name = c.volume.resource_name()  # type: ignore[union-attr]
    gcp.volume_dir(name, mount)
    backend(c).up()
    ckpt = mount / "checkpoints" / "grpo"
    for step in (2, 4, 6):
        (ckpt / f"step_{step}").mkdir(parents=True)
        (ckpt / f"step_{step}" / "training_info.json").write_text(json.dumps({"step": step}))
        (ckpt / f"step_{step}" / "weights.bin").write_bytes(b"w" * 1000 * step)
    (ckpt / "tmp_step_8").mkdir()
    (ckpt / "tmp_step_8" / "half.bin").write_bytes(b"h" * 10)
    (mount / "logs" / "grpo").mkdir(parents=True)
    (mount / "logs" / "grpo" / "train.log").write_text("loss 0.1\n")
    run_dir = mount / rundir.RUNS / RUN
    run_dir.mkdir(parents=True)
    (run_dir / rundir.DRIVER_LOG).write_text(
        "========================= Step 1/6 =========================\n"
        "📊 Training Results:\n  • Loss: 0.5000\n  • Avg Reward: 0.2500\n"
        "========================= Step 2/6 =========================\n"
    )
    lustre = backend(c).context().apis.lustre
    instance = lustre.get_or_none(name)
    assert instance is not None
    lustre.set_labels(name, {**instance.labels, LABEL_RESULTS: "sealed" if sealed else "on-volume"})
    if not sealed:
        return c
    attempt = {"submission_id": RUN, "status": "SUCCEEDED", "start_time": 0.0, "end_time": 36.0}
    summary = {"run_id": RUN, "status": "SUCCEEDED", "total_steps": 6, "usd_per_hour": 100.0, "attempts": [attempt]}
    record = {"run_id": RUN, "run_dir": str(run_dir), "checkpoint_dir": str(ckpt),
              "log_dir": str(mount / "logs" / "grpo"), "summary": summary}  # fmt: skip
    seal_runs(str(mount), [record], volume_id=str(instance.uid))
    return c


def kept_warning(seen: list[warnings.WarningMessage]) -> str:
    kept = [str(w.message) for w in seen if issubclass(w.category, ResultsKeptWarning)]
    assert len(kept) == 1, [str(w.message) for w in seen]
    return kept[0]


def test_exported_verified_then_deleted_and_read_back_from_the_bucket(gcp: FakeGCP, tmp_path: Path) -> None:
    c = deployment_with_a_run(gcp, tmp_path / "lustre", results="gs://results/rl")
    # An earlier export left a checkpoint keep_top_k has since deleted on the volume.
    gcp.seed_bucket("results", {f"rl/{RUN}/checkpoints/step_0/weights.bin": 5})
    report = backend(c).down()
    gcp.settle()
    assert gcp.leaked() == []
    objects = gcp.bucket_objects("results")
    steps = sorted({n.split("/")[3] for n in objects if n.startswith(f"rl/{RUN}/checkpoints/")})
    assert steps == ["step_2", "step_4", "step_6"]  # step_0 mirrored away, never tmp_step_8
    assert objects[f"rl/{RUN}/checkpoints/step_6/weights.bin"] == 6000
    assert f"rl/{RUN}/logs/train.log" in objects
    for name in (rundir.DRIVER_LOG, rundir.SUMMARY, rundir.EXPORT, RESULTS_MANIFEST):
        assert f"rl/{RUN}/{name}" in objects, name
    assert report.get("results-export").outcome == "kept"
    assert "exported 1 run(s)" in report.get("results-export").note
    assert report.get("lustre").outcome == "deleted"

    run = Run.from_results(f"gs://results/rl/{RUN}")
    assert run.status() == "SUCCEEDED"
    assert run.metrics() == {1: {"loss": 0.5, "avg_reward": 0.25}}
    assert [(c.step, c.size_bytes) for c in run.checkpoints()] == [(2, 2011), (4, 4011), (6, 6011)]
    assert run.checkpoints()[-1].uri == f"gs://results/rl/{RUN}/checkpoints/step_6"
    assert run.cost_so_far() == pytest.approx(1.0)
    out = CliRunner().invoke(cli, ["results", "ls", "gs://results/rl"], catch_exceptions=False).output
    assert RUN in out
    assert "SUCCEEDED" in out
    assert "step_6" in out


def test_without_a_destination_the_volume_is_kept_then_exported_by_the_next_down(gcp: FakeGCP, tmp_path: Path) -> None:
    c = deployment_with_a_run(gcp, tmp_path / "lustre")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report = backend(c).down()
    gcp.settle()
    message = kept_warning(seen)
    assert "KEPT the Lustre instance demo-lustre" in message
    assert "no results destination is set" in message
    assert "$7.40/hour" in message
    assert "results='gs://BUCKET/PREFIX'" in message
    assert "down(discard_results=True)" in message
    assert "--discard-results" in message
    assert sorted(gcp.leaked()) == STORAGE  # the GPU pools, the GKE cluster and the rest are gone
    assert report.get("lustre").outcome == "kept"
    assert gcp.resources()["lustre.instances"][c.volume.resource_name()][LABEL_RESULTS] == "not-exported"  # type: ignore[union-attr]
    # ls says so; gc leaves it alone unless told.
    [found] = find_deployments(P)
    assert found.state == "kept: results not exported"
    out = CliRunner().invoke(cli, ["ls", "--project", P], catch_exceptions=False).output
    assert "kept: results not exported" in out
    assert collect_garbage(P, delete=True, older_than=0) == []
    assert sorted(gcp.leaked()) == STORAGE
    # A destination, and down() again: exported from the records on the volume, then deleted.
    backend(attrs_evolve(c, results="gs://results/later")).down()
    gcp.settle()
    assert gcp.leaked() == []
    assert Run.from_results(f"gs://results/later/{RUN}").checkpoints()[-1].step == 6


def attrs_evolve(c: Cluster, **kw: object) -> Cluster:
    import attrs

    return attrs.evolve(c, **kw)


def test_a_failed_export_keeps_the_volume_and_discard_results_deletes_it(gcp: FakeGCP, tmp_path: Path) -> None:
    c = deployment_with_a_run(gcp, tmp_path / "lustre", results="gs://results/rl")
    gcp.faults.fail_operation("lustre.ExportData", message="transfer broke", after=1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        backend(c).down()
    gcp.settle()
    message = kept_warning(seen)
    assert "the export failed" in message
    assert "transfer broke" in message
    assert sorted(gcp.leaked()) == STORAGE
    assert gcp.files(c.volume.resource_name())  # type: ignore[union-attr]
    assert not any(n.endswith(RESULTS_MANIFEST) for n in gcp.bucket_objects("results"))
    # The explicit word deletes it, from the command line as from Python.
    out = CliRunner().invoke(cli, ["down", "demo", "--project", P, "--discard-results"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    gcp.settle()
    assert gcp.leaked() == []


def test_gc_collects_a_kept_volume_only_with_the_explicit_word(gcp: FakeGCP, tmp_path: Path) -> None:
    c = deployment_with_a_run(gcp, tmp_path / "lustre")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        backend(c).down()
    out = CliRunner().invoke(cli, ["gc", "--project", P, "--yes", "--older-than", "0"], catch_exceptions=False)
    assert "nothing to collect" in out.output
    assert sorted(gcp.leaked()) == STORAGE
    out = CliRunner().invoke(
        cli, ["gc", "--project", P, "--yes", "--older-than", "0", "--discard-results"], catch_exceptions=False
    )
    assert out.exit_code == 0, out.output
    gcp.settle()
    assert gcp.leaked() == []


def test_ctrl_c_twice_during_the_export_keeps_the_volume_and_the_next_down_waits_for_the_transfer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeGCP(latency={"lustre.create": 0.02, "lustre.delete": 0.02, "lustre.transfer_per_gb": 400.0}) as gcp:
        gcp.seed_bucket("results")
        c = deployment_with_a_run(gcp, tmp_path / "lustre", results="gs://results/rl")
        # 5 MB of records and checkpoints: about 2 s of copying at this rate.
        gcp.seed_files(c.volume.resource_name(), {f"{rundir.RUNS}/{RUN}/diagnostics/bundle.bin": 5_000_000})  # type: ignore[union-attr]

        def press_ctrl_c() -> None:
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGINT)

        presser = threading.Thread(target=press_ctrl_c)
        with warnings.catch_warnings(record=True) as seen, caplog.at_level("WARNING", "rl_lustre"):
            warnings.simplefilter("always")
            presser.start()
            backend(c).down()
            presser.join()
        said = caplog.text
        assert "one more signal gives it up" in said
        assert "is then KEPT, holding the results not yet exported" in said
        assert "the export was interrupted" in kept_warning(seen)
        assert "lustre.instances projects/my-project/locations/us-east1-b/instances/demo-lustre" in gcp.leaked()
        # The interrupted transfer goes on on the service; the next down() waits for it.
        with caplog.at_level("INFO", "rl_lustre"):
            backend(c).down()
        assert "an export left running by an interrupted down()" in caplog.text
        gcp.settle()
        assert gcp.leaked() == []
        assert any(n.endswith(RESULTS_MANIFEST) for n in gcp.bucket_objects("results"))


def test_runs_never_sealed_keep_the_volume_even_with_a_destination(gcp: FakeGCP, tmp_path: Path) -> None:
    c = deployment_with_a_run(gcp, tmp_path / "lustre", sealed=False, results="gs://results/rl")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        backend(c).down()
    gcp.settle()
    message = kept_warning(seen)
    assert "never sealed for export" in message
    assert "up() again and down() seals and exports them" in message
    assert sorted(gcp.leaked()) == STORAGE
    backend(c).down(discard_results=True)
    gcp.settle()
    assert gcp.leaked() == []
