"""``rl_lustre.testing.FakeGKE``: a user's GKE script end to end on the fakes (docs/testing.md
runs one in the slow set); here what it refuses, and that it leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import specs

import rl_lustre
from rl_lustre.errors import ConfigError
from rl_lustre.testing import FakeGKE

GKE = {**specs.GKE, "name": "my-grpo"}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gpus_per_node": 0}, "gpus_per_node"),
        ({"gpus_per_node": True}, "gpus_per_node"),
        ({"step_seconds": -1}, "step_seconds"),
        ({"checkpoint_scale": "small"}, "checkpoint_scale"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        FakeGKE(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_clusters_it_cannot_play_are_refused_naming_the_field_and_the_way_out() -> None:
    gke = FakeGKE()
    with pytest.raises(ConfigError, match=r"num_nodes.*attrs.evolve\(cluster, num_nodes=1\)") as err:
        gke.cluster(rl_lustre.Cluster(**GKE))  # 8 nodes by default
    assert err.value.field == "num_nodes"
    with pytest.raises(ConfigError, match="RAY_AUTH_TOKEN") as err:
        gke.cluster(rl_lustre.Cluster(**GKE, num_nodes=1, secrets=["RAY_AUTH_TOKEN"]))
    assert err.value.field == "secrets"
    with pytest.raises(ConfigError, match=r"Cluster\.local runs a real Ray head") as err:
        gke.cluster(rl_lustre.Cluster.local("here", volume_dir="/tmp/rl-fake-gke-unused"))
    assert err.value.field == "backend"
    # Not running: said so, rather than specs pointing at directories that do not exist.
    with pytest.raises(RuntimeError, match="with FakeGKE"):
        gke.cluster(rl_lustre.Cluster(**GKE, num_nodes=1))
    with pytest.raises(RuntimeError, match="with FakeGKE"):
        gke.job(rl_lustre.GRPOJob(name="j"))


@pytest.mark.slow
def test_it_changes_only_the_mount_and_the_image_and_leaves_nothing_behind() -> None:
    cluster = rl_lustre.Cluster(**GKE, num_nodes=1)
    job = rl_lustre.GRPOJob(name="j", max_num_steps=2)
    before = {k: os.environ.get(k) for k in ("RL_LUSTRE_GCP_EMULATOR_HOST", "RL_LUSTRE_GCP_REST_EMULATOR", "PATH")}
    with FakeGKE() as gke:
        root = gke.root
        assert root is not None
        assert gke.head is not None
        pid = gke.head.pid
        fake_cluster, fake_job = gke.cluster(cluster), gke.job(job)
        assert fake_cluster.mount_path == str(gke.mount_path)
        assert gke.mount_path.is_dir()
        assert fake_job.nemo_rl_dir == str(gke.image)
        assert (gke.image / "examples" / "run_grpo_math.py").is_file()
        assert (gke.image / "examples" / "configs" / f"{job.recipe}.yaml").is_file()
        assert fake_job.entrypoint(fake_cluster).startswith(
            f"cd {gke.image} && uv run python examples/run_grpo_math.py"
        )
        # Everything else is the user's spec as given.
        for field in ("name", "project", "zone", "image", "ray_version", "machine_type", "secrets"):
            assert getattr(fake_cluster, field) == getattr(cluster, field), field
        assert (fake_job.name, fake_job.max_num_steps) == (job.name, job.max_num_steps)
        assert os.environ["RL_LUSTRE_GCP_EMULATOR_HOST"] == gke.gcp.grpc_address  # type: ignore[union-attr]
    assert not Path(root).exists()
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    assert {k: os.environ.get(k) for k in before} == before
    assert gke.gcp is None
    assert gke.kube is None
    assert gke.head is None
