"""Fields derived from others follow them through ``attrs.evolve``; a value the user set stays.

One test per derived field: ``Cluster.{ray_version, accelerator_type, gpus_per_node,
fabric, mount_path, volume}``, ``LustreVolume.{capacity_gib, project, zone, network}``
and what ``GRPOJob`` derives when it is rendered (``nemo_rl_version``, ``converter_type``).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import attrs
import pytest
from helpers.specs import GKE

from rl_lustre import Cluster, GRPOJob, LustreVolume
from rl_lustre.errors import ConfigError


def test_ray_version_follows_the_image() -> None:
    c = Cluster(**GKE)
    assert c.ray_version == "2.46.0"
    moved = attrs.evolve(c, image="rayproject/ray:2.60.0")
    assert moved.ray_version == "2.60.0"
    assert type(moved) is Cluster
    assert attrs.evolve(moved, image=c.image).ray_version == "2.46.0"


def test_a_ray_version_you_set_stays_and_is_still_checked() -> None:
    custom = Cluster(**GKE, image="us-docker.pkg.dev/p/r/trainer:1", ray_version="2.46.0")
    assert attrs.evolve(custom, num_nodes=2).ray_version == "2.46.0"
    with pytest.raises(ConfigError, match=r"ray_version.*contains Ray 2\.60\.0"):
        attrs.evolve(custom, image="rayproject/ray:2.60.0")
    with pytest.raises(ConfigError, match="ray_version"):
        attrs.evolve(Cluster(**GKE), image="us-docker.pkg.dev/p/r/trainer:1")


def test_accelerator_type_follows_the_machine_type() -> None:
    c = Cluster(**GKE)
    assert c.accelerator_type == "nvidia-b200"
    assert attrs.evolve(c, machine_type="a3-highgpu-8g").accelerator_type == "nvidia-h100-80gb"
    pinned = Cluster(**GKE, accelerator_type="nvidia-b200")
    with pytest.raises(ConfigError, match=r"accelerator_type.*a3-highgpu-8g carries 'nvidia-h100-80gb'"):
        attrs.evolve(pinned, machine_type="a3-highgpu-8g")


def test_gpus_per_node_follows_the_machine_type() -> None:
    c = Cluster(**GKE)
    assert c.gpus_per_node == 8
    smaller = attrs.evolve(c, machine_type="a3-highgpu-4g")
    assert (smaller.gpus_per_node, smaller.total_gpus) == (4, 32)
    with pytest.raises(ConfigError, match=r"gpus_per_node.*exactly 2 GPU"):
        attrs.evolve(Cluster(**GKE, gpus_per_node=8), machine_type="a3-highgpu-2g")
    # A machine type rl_lustre does not know needs both given, and then they stay.
    own = attrs.evolve(c, machine_type="x9-custom-8", accelerator_type="nvidia-x9", gpus_per_node=2)
    assert (own.accelerator_type, own.gpus_per_node) == ("nvidia-x9", 2)
    assert attrs.evolve(own, num_nodes=1).gpus_per_node == 2


def test_fabric_follows_the_machine_type() -> None:
    c = Cluster(**GKE)
    assert c.fabric == "rdma"
    assert attrs.evolve(c, machine_type="a3-highgpu-8g").fabric == "tcp"  # no RDMA NICs
    assert attrs.evolve(attrs.evolve(c, machine_type="a3-highgpu-8g"), machine_type="a4-highgpu-8g").fabric == "rdma"
    tcp = Cluster(**GKE, fabric="tcp")
    assert attrs.evolve(tcp, num_nodes=2).fabric == "tcp"
    with pytest.raises(ConfigError, match=r"fabric.*no RDMA NICs"):
        attrs.evolve(Cluster(**GKE, fabric="rdma"), machine_type="a3-highgpu-8g")


def test_local_volume_directory_follows_the_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    c = Cluster.local("first")
    assert c.mount_path == str(tmp_path / "rl_lustre" / "first" / "volume")
    assert attrs.evolve(c, name="second").mount_path == str(tmp_path / "rl_lustre" / "second" / "volume")
    given = Cluster.local("first", volume_dir=tmp_path / "mine")
    assert attrs.evolve(given, name="second").mount_path == str(tmp_path / "mine")
    assert Cluster(**GKE).mount_path == "/lustre"
    assert attrs.evolve(Cluster(**GKE, mount_path="/data"), name="other").mount_path == "/data"


def test_default_volume_follows_the_cluster_name_and_place() -> None:
    c = Cluster(**GKE)
    moved = attrs.evolve(c, name="other", zone="us-east1-c", network="shared-net")
    assert moved.volume is not None
    assert (moved.volume.name, moved.volume.zone, moved.volume.network) == ("other-lustre", "us-east1-c", "shared-net")
    assert isinstance(moved.volume, LustreVolume)


def test_capacity_follows_the_tier() -> None:
    vol = LustreVolume(name="v")
    assert vol.capacity_gib == 18_000  # the 500 MB/s/TiB tier's minimum
    assert type(attrs.evolve(vol, throughput_mbps_per_tib=250)) is LustreVolume
    assert attrs.evolve(vol, throughput_mbps_per_tib=250).capacity_gib == 36_000
    assert attrs.evolve(vol, throughput_mbps_per_tib=1000).capacity_gib == 9_000
    sized = LustreVolume(name="v", capacity_gib=72_000)
    assert attrs.evolve(sized, throughput_mbps_per_tib=250).capacity_gib == 72_000
    with pytest.raises(ConfigError, match=r"capacity_gib.*grows in steps"):
        attrs.evolve(LustreVolume(name="v", capacity_gib=18_000), throughput_mbps_per_tib=250, capacity_gib=40_000)


@pytest.mark.parametrize(
    ("field", "change", "expected"),
    [
        ("project", {"project": "other-project"}, "other-project"),
        ("zone", {"zone": "us-east1-c"}, "us-east1-c"),
        ("network", {"network": "shared-net"}, "shared-net"),
    ],
)
def test_a_volume_filled_by_its_cluster_follows_the_cluster(field: str, change: dict[str, str], expected: str) -> None:
    c = Cluster(**GKE, volume=LustreVolume(name="ckpt", capacity_gib=9_000, throughput_mbps_per_tib=1000))
    assert getattr(attrs.evolve(c, **change).volume, field) == expected


def test_a_volume_place_you_set_stays() -> None:
    vol = LustreVolume(name="ckpt", zone="us-east1-b")
    with pytest.raises(ConfigError, match=r"volume.*cluster's zone 'us-east1-c'"):
        attrs.evolve(Cluster(**GKE, volume=vol), zone="us-east1-c")


def test_the_jobs_nemo_rl_version_follows_the_cluster_image() -> None:
    job = GRPOJob(name="run-1")
    c = Cluster(**GKE)
    assert job.nemo_rl_version_for(c) == "0.4.0"
    newer = attrs.evolve(c, image="nvcr.io/nvidia/nemo-rl:v0.6.0", ray_version="2.49.2")
    assert job.nemo_rl_version_for(newer) == "0.6.0"
    assert attrs.evolve(job, nemo_rl_version="0.4.0").nemo_rl_version_for(newer) == "0.4.0"


def test_the_jobs_converter_type_follows_the_model() -> None:
    c = Cluster(**GKE)
    job = GRPOJob(name="run-1")
    assert job.overrides(c)["policy.megatron_cfg.converter_type"] == "Qwen2ForCausalLM"
    llama = attrs.evolve(job, model="meta-llama/Llama-3.1-70B-Instruct")
    assert type(llama) is GRPOJob
    assert llama.overrides(c)["policy.megatron_cfg.converter_type"] == "LlamaForCausalLM"
    pinned = attrs.evolve(job, converter_type="Qwen2ForCausalLM")
    assert (
        attrs.evolve(pinned, model="meta-llama/Llama-3.1-70B-Instruct").overrides(c)[
            "policy.megatron_cfg.converter_type"
        ]
        == "Qwen2ForCausalLM"
    )


def test_a_preload_image_by_name_follows_the_project() -> None:
    assert Cluster(**GKE).preload_image is True
    named = Cluster(**GKE, preload_image="global/images/my-preload")
    assert named.preload_image == f"projects/{GKE['project']}/global/images/my-preload"
    moved = attrs.evolve(named, project="other-project")
    assert moved.preload_image == "projects/other-project/global/images/my-preload"
    off = attrs.evolve(named, preload_image=False)
    assert off.preload_image is False


def test_derived_and_given_values_are_the_same_spec() -> None:
    """Equality, hashing, the repr and pickling see the value in force, as before."""
    derived = Cluster(**GKE)
    given = Cluster(
        **GKE,
        ray_version="2.46.0",
        accelerator_type="nvidia-b200",
        gpus_per_node=8,
        fabric="rdma",
        mount_path="/lustre",
    )
    assert derived == given
    assert hash(derived) == hash(given)
    assert repr(derived) == repr(given)
    assert "ray_version='2.46.0'" in repr(derived)
    assert "given" not in repr(derived)
    again = pickle.loads(pickle.dumps(derived))
    assert again == derived
    assert attrs.evolve(again, image="rayproject/ray:2.60.0").ray_version == "2.60.0"
    assert [a.name for a in attrs.fields(Cluster) if a.init and a.name.startswith("_")] == [
        "_given_accelerator_type",
        "_given_gpus_per_node",
        "_given_spot",
        "_given_capacity",
        "_given_ray_version",
        "_given_mount_path",
        "_given_fabric",
        "_given_preload_image",
    ]


def test_a_bad_value_of_a_derived_field_names_the_parameter() -> None:
    with pytest.raises(ConfigError) as info:
        Cluster(**GKE, ray_version="latest")
    assert (info.value.owner, info.value.field) == ("Cluster", "ray_version")
    with pytest.raises(ConfigError) as info:
        LustreVolume(name="v", capacity_gib=0)
    assert info.value.field == "capacity_gib"
