"""Specs: defaults equal the reference workflow, evolve works, and bad input is named."""

from __future__ import annotations

import pickle
from typing import Any

import attrs
import pytest
from helpers.specs import REFERENCE

import rl_lustre
from rl_lustre import Cluster, GRPOJob, LustreVolume
from rl_lustre.errors import ConfigError, RLLustreError


def test_cluster_defaults_are_the_reference_workflow() -> None:
    c = Cluster(**REFERENCE)
    assert (c.machine_type, c.accelerator_type, c.gpus_per_node, c.num_nodes, c.spot) == (
        "a4-highgpu-8g",
        "nvidia-b200",
        8,
        8,
        True,
    )
    assert c.image == "nvcr.io/nvidia/nemo-rl:v0.4.0"
    assert c.mount_path == "/lustre"
    # The image's Ray, not the reference workflow's mismatched 2.54.0.
    assert c.ray_version == "2.46.0"
    assert c.nemo_rl_version == "0.4.0"
    assert c.total_gpus == 64
    # The head is not on Spot unless asked.
    assert c.head_on_gpu_pool is False


def test_default_volume_follows_the_cluster() -> None:
    c = Cluster(**REFERENCE)
    assert c.volume is not None
    assert (c.volume.name, c.volume.project, c.volume.zone, c.volume.network) == (
        "ray-a4-gpu-spot-lustre",
        "my-project",
        "us-east1-b",
        "ray-a4-gpu-spot-net",
    )
    moved = attrs.evolve(c, name="other", zone="us-east1-c")
    assert moved.volume is not None
    assert (moved.volume.name, moved.volume.zone, moved.volume.network) == (
        "other-lustre",
        "us-east1-c",
        "other-net",
    )


def test_user_volume_keeps_its_settings_when_the_cluster_moves() -> None:
    vol = LustreVolume(name="shared-ckpt", throughput_mbps_per_tib=1000, capacity_gib=18_000)
    c = Cluster(**REFERENCE, volume=vol)
    moved = attrs.evolve(c, zone="us-east1-d")
    assert moved.volume is not None
    assert (moved.volume.name, moved.volume.capacity_gib, moved.volume.zone) == (
        "shared-ckpt",
        18_000,
        "us-east1-d",
    )


def test_specs_are_frozen_hashable_and_picklable() -> None:
    c = Cluster(**REFERENCE, labels={"team": "rl"})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        c.num_nodes = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        c.labels["team"] = "x"  # type: ignore[index]
    assert hash(c) == hash(attrs.evolve(c))
    assert pickle.loads(pickle.dumps(c)) == c
    job = GRPOJob(name="a", overrides={"grpo.val_period": 5})
    assert {job, attrs.evolve(job)} == {job}


def test_sweep_with_evolve() -> None:
    base = GRPOJob(name="base")
    sweep = [attrs.evolve(base, name=f"gens-{g}", num_generations_per_prompt=g) for g in (4, 8, 16)]
    assert [j.num_generations_per_prompt for j in sweep] == [4, 8, 16]
    assert len({j.name for j in sweep}) == 3
    with pytest.raises(ConfigError, match="num_generations_per_prompt"):
        attrs.evolve(base, num_generations_per_prompt=0)


def test_volume_capacity_defaults_to_tier_minimum() -> None:
    for tier, minimum in [(1000, 9_000), (500, 18_000), (250, 36_000), (125, 72_000)]:
        vol = LustreVolume(name="v", throughput_mbps_per_tib=tier)
        assert vol.capacity_gib == minimum
        assert vol.throughput_mbps == pytest.approx(tier * minimum / 1024)


def test_mount_point_is_not_ready_before_create() -> None:
    with pytest.raises(rl_lustre.errors.NotReadyError, match="create"):
        _ = LustreVolume(name="v").mount_point


def test_local_cluster() -> None:
    c = Cluster.local("demo", volume_dir="/tmp/rl-demo")
    assert (c.backend, c.mount_path, c.num_nodes, c.volume) == ("local", "/tmp/rl-demo", 1, None)


# Each entry: (constructor, kwargs, field named in the error, a fragment of the rule).
V = LustreVolume
INVALID: list[tuple[Any, dict[str, Any], str, str]] = [
    (Cluster, {**REFERENCE, "name": "Ray"}, "name", "lowercase"),
    (Cluster, {**REFERENCE, "name": "1ray"}, "name", "start with a letter"),
    (Cluster, {**REFERENCE, "name": "ray-"}, "name", "not end with"),
    (Cluster, {**REFERENCE, "name": "r" * 41}, "name", "1-40"),
    (Cluster, {**REFERENCE, "name": "ray_a4"}, "name", "hyphens"),
    (Cluster, {**REFERENCE, "project": "My-Project"}, "project", "project ID"),
    (Cluster, {**REFERENCE, "project": "abc"}, "project", "6-30"),
    (Cluster, {**REFERENCE, "project": None}, "project", "required"),
    (Cluster, {**REFERENCE, "region": "useast1"}, "region", "region like"),
    (Cluster, {**REFERENCE, "zone": "us-east1"}, "zone", "zone like"),
    (Cluster, {**REFERENCE, "zone": "us-west1-b"}, "zone", "zone of region 'us-east1'"),
    (Cluster, {**REFERENCE, "num_nodes": 0}, "num_nodes", "at least 1"),
    (Cluster, {**REFERENCE, "num_nodes": 2.5}, "num_nodes", "whole number"),
    (Cluster, {**REFERENCE, "num_nodes": True}, "num_nodes", "whole number"),
    (Cluster, {**REFERENCE, "gpus_per_node": 4}, "gpus_per_node", "exactly 8"),
    (Cluster, {**REFERENCE, "machine_type": "a3-highgpu-8g", "gpus_per_node": 2}, "gpus_per_node", "exactly 8"),
    (Cluster, {**REFERENCE, "accelerator_type": "nvidia-h100-80gb"}, "accelerator_type", "carries 'nvidia-b200'"),
    (Cluster, {**REFERENCE, "machine_type": "z9-custom-8g"}, "accelerator_type", "does not know"),
    (Cluster, {**REFERENCE, "machine_type": "A4 highgpu"}, "machine_type", "machine type"),
    (Cluster, {**REFERENCE, "reservation": "my-res", "spot": True}, "reservation", "Spot VMs cannot consume"),
    (Cluster, {**REFERENCE, "capacity": ("flex-start",), "spot": True}, "spot", "lists no 'spot'"),
    (
        Cluster,
        {**REFERENCE, "capacity": ("spot",), "reservation": "my-res"},
        "reservation",
        "must list this reservation",
    ),
    (Cluster, {**REFERENCE, "capacity": ("spot", "spot")}, "capacity", "listed once"),
    (Cluster, {**REFERENCE, "capacity": ("reservation",)}, "capacity", "reservation without a name"),
    (Cluster, {**REFERENCE, "capacity": ("gpus",)}, "capacity", "each entry must be one of"),
    (Cluster, {**REFERENCE, "capacity_zones": "anywhere"}, "capacity_zones", "'region'"),
    (Cluster, {**REFERENCE, "capacity_zones": ("us-east1-c",)}, "capacity_zones", "must start with the cluster's zone"),
    (Cluster, {**REFERENCE, "capacity_zones": ("us-east1-b", "europe-west4-a")}, "capacity_zones", "zone of region"),
    (Cluster, {**REFERENCE, "on_no_capacity": "gpus"}, "on_no_capacity", "must be one of"),
    (Cluster, {**REFERENCE, "spot": False, "reservation": "My_Res"}, "reservation", "reservation name"),
    (Cluster, {**REFERENCE, "spot": "yes"}, "spot", "True or False"),
    (Cluster, {**REFERENCE, "head_machine_type": "a4-highgpu-8g"}, "head_machine_type", "CPU pool"),
    (Cluster, {**REFERENCE, "mount_path": "lustre"}, "mount_path", "absolute"),
    (Cluster, {**REFERENCE, "mount_path": "/"}, "mount_path", "other than '/'"),
    (Cluster, {**REFERENCE, "mount_path": "/lustre/"}, "mount_path", "normalised"),
    (Cluster, {**REFERENCE, "mount_path": "/data/../etc"}, "mount_path", "normalised"),
    (Cluster, {**REFERENCE, "mount_path": "/dev/shm"}, "mount_path", "system directory"),
    (Cluster, {**REFERENCE, "mount_path": "/my lustre"}, "mount_path", "whitespace"),
    (Cluster, {**REFERENCE, "image": "my image:latest"}, "image", "without spaces"),
    (Cluster, {**REFERENCE, "image": "registry.example.com/custom:1"}, "ray_version", "must be given"),
    (Cluster, {**REFERENCE, "ray_version": "2.54.0"}, "ray_version", "contains Ray 2.46.0"),
    (Cluster, {**REFERENCE, "ray_version": "latest", "image": "x/y:1"}, "ray_version", "Ray version like"),
    (Cluster, {**REFERENCE, "namespace": "Team_A"}, "namespace", "DNS-1123"),
    (Cluster, {**REFERENCE, "authorized_networks": ["10.0.0.1/8"]}, "authorized_networks", "host bits"),
    (Cluster, {**REFERENCE, "authorized_networks": ["not-a-cidr"]}, "authorized_networks", "CIDR"),
    (Cluster, {**REFERENCE, "authorized_networks": ["0.0.0.0/0"]}, "authorized_networks", "whole internet"),
    (Cluster, {**REFERENCE, "secrets": ["HF-TOKEN"]}, "secrets", "environment variable names"),
    (Cluster, {**REFERENCE, "secrets": ["HF_TOKEN", "HF_TOKEN"]}, "secrets", "unique"),
    (Cluster, {**REFERENCE, "labels": {"Team": "rl"}}, "labels['Team']", "label keys"),
    (Cluster, {**REFERENCE, "labels": {"team": "R&D"}}, "labels['team']", "label values"),
    (Cluster, {**REFERENCE, "labels": {"managed-by": "me"}}, "labels['managed-by']", "set by rl_lustre"),
    (V, {"name": "v", "labels": {"rl-lustre-deployment": "x"}}, "labels['rl-lustre-deployment']", "set by rl_lustre"),
    (Cluster, {**REFERENCE, "network": "My_Net"}, "network", "VPC network name"),
    (Cluster, {**REFERENCE, "volume": "my-lustre"}, "volume", "must be a LustreVolume"),
    (Cluster, {**REFERENCE, "volume": V(name="v", zone="us-east1-c")}, "volume", "cluster's zone"),
    (Cluster, {**REFERENCE, "volume": V(name="v", project="other-proj")}, "volume", "cluster's project"),
    (Cluster, {**REFERENCE, "volume": V(name="v", network="elsewhere")}, "volume", "cluster's network"),
    (V, {"name": "Lustre1"}, "name", "lowercase"),
    (V, {"name": "l" * 64}, "name", "1-63"),
    (V, {"name": "v", "filesystem": "lustrefs9"}, "filesystem", "1-8"),
    (V, {"name": "v", "filesystem": "9lustre"}, "filesystem", "starting with a letter"),
    (V, {"name": "v", "filesystem": "lu-fs"}, "filesystem", "letters or digits"),
    (V, {"name": "v", "throughput_mbps_per_tib": 200}, "throughput_mbps_per_tib", "one of 125, 250, 500, 1000"),
    (V, {"name": "v", "throughput_mbps_per_tib": 500, "capacity_gib": 9_000}, "capacity_gib", "at least 18,000"),
    (V, {"name": "v", "throughput_mbps_per_tib": 1000, "capacity_gib": 10_000}, "capacity_gib", "steps of 9,000"),
    (V, {"name": "v", "capacity_gib": -1}, "capacity_gib", "at least 1"),
    (V, {"name": "v", "zone": "us-east1"}, "zone", "zone like"),
    (GRPOJob, {"name": "Run 1"}, "name", "lowercase"),
    (GRPOJob, {"name": "-run"}, "name", "starting and ending"),
    (GRPOJob, {"name": "r", "max_num_steps": 0}, "max_num_steps", "at least 1"),
    (GRPOJob, {"name": "r", "train_global_batch_size": "256"}, "train_global_batch_size", "whole number"),
    (GRPOJob, {"name": "r", "keep_top_k": 0}, "keep_top_k", "at least 1"),
    (GRPOJob, {"name": "r", "save_period": -2}, "save_period", "at least 1"),
    (GRPOJob, {"name": "r", "checkpoint_root": "/abs/path"}, "checkpoint_root", "relative path"),
    (GRPOJob, {"name": "r", "checkpoint_root": "ckpt/../../etc"}, "checkpoint_root", "no '..'"),
    (GRPOJob, {"name": "r", "model": "Qwen/Qwen 72B"}, "model", "without spaces"),
    (GRPOJob, {"name": "r", "nemo_rl_version": "v0.4"}, "nemo_rl_version", "version like"),
    (GRPOJob, {"name": "r", "nemo_rl_dir": "opt/nemo-rl"}, "nemo_rl_dir", "absolute path"),
    (GRPOJob, {"name": "r", "num_nodes": 0}, "num_nodes", "at least 1"),
    (GRPOJob, {"name": "r", "num_nodes": 2.0}, "num_nodes", "whole number"),
    (GRPOJob, {"name": "r", "priority": 1001}, "priority", "at most 1000"),
    (GRPOJob, {"name": "r", "backfill_window": -1}, "backfill_window", "at least 0"),
]


@pytest.mark.parametrize(
    ("factory", "kwargs", "field", "rule"),
    INVALID,
    ids=[f"{i:02d}-{f.__name__}.{fld}" for i, (f, _, fld, _) in enumerate(INVALID)],
)
def test_invalid_configuration_is_named(factory: Any, kwargs: dict[str, Any], field: str, rule: str) -> None:
    with pytest.raises(ConfigError) as info:
        factory(**kwargs)
    err = info.value
    assert isinstance(err, ValueError)
    assert isinstance(err, RLLustreError)
    assert err.field == field
    assert err.owner == factory.__name__
    assert rule in err.rule
    # The message names the field, the value and the rule.
    text = str(err)
    assert f"{factory.__name__}.{field}=" in text
    assert repr(err.value) in text
    assert err.rule in text


def test_catalogue_is_broad() -> None:
    distinct = {(f.__name__, fld, rule) for f, _, fld, rule in INVALID}
    assert len(distinct) >= 30


def test_config_error_pickles() -> None:
    err = ConfigError("Cluster", "zone", "x", "must be a zone")
    again = pickle.loads(pickle.dumps(err))
    assert (again.owner, again.field, again.value, again.rule) == ("Cluster", "zone", "x", "must be a zone")


class _RecordingBackend:
    """Cluster's own bookkeeping around a backend, without any remote side."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def up(self, *, keep_on_failure: bool = False, check: bool = True) -> None:
        self.calls.append(f"up(keep_on_failure={keep_on_failure})")

    def down(self, *, delete_preload_image: bool = False, discard_results: bool = False) -> None:
        self.calls.append("down")

    def cleanup_hint(self) -> str:
        return "call down() to remove it"

    def describe(self) -> str:
        return "a recording backend"

    def submit(self, job: Any, *, fresh: bool = False) -> Any:
        raise NotImplementedError("no jobs in these tests")

    submit_all = attach = queue = cluster_goodput = submit


@pytest.mark.parametrize(
    ("make", "torn_down_at_exit"),
    [
        (lambda: Cluster(**REFERENCE), False),  # other processes may attach to its jobs
        (lambda: Cluster.local("exit-demo", volume_dir="/tmp/rl-exit-demo"), True),
        (lambda: Cluster.local("exit-keep", volume_dir="/tmp/rl-exit-keep", keep=True), False),
    ],
)
def test_explicit_up_tears_down_at_exit_only_local_heads(
    monkeypatch: pytest.MonkeyPatch, make: Any, torn_down_at_exit: bool
) -> None:
    import rl_lustre.cluster as cluster_module

    registered: list[Any] = []
    monkeypatch.setattr(cluster_module.atexit, "register", registered.append)
    monkeypatch.setattr(cluster_module.atexit, "unregister", lambda f: None)
    cluster = make()
    backend = _RecordingBackend()
    cluster.use_backend(backend)
    cluster.up(keep_on_failure=True)
    assert backend.calls == ["up(keep_on_failure=True)"]
    assert bool(registered) is torn_down_at_exit
    with cluster:
        pass
    # A with block always tears down (unless keep), on every backend.
    assert backend.calls[-1] == ("up(keep_on_failure=False)" if cluster.keep else "down")


def test_use_backend_refuses_what_is_not_a_backend_for_this_cluster() -> None:
    from rl_lustre.backends.gke import GKEBackend

    cluster = Cluster(**REFERENCE)
    with pytest.raises(ConfigError, match=r"backend.*lacks attach, cluster_goodput, queue, submit, submit_all") as info:
        cluster.use_backend(_PartialBackend())  # type: ignore[arg-type]
    assert info.value.owner == "Cluster.use_backend"
    with pytest.raises(ConfigError, match=r"built for another cluster .'other'."):
        cluster.use_backend(GKEBackend(attrs.evolve(cluster, name="other")))
    # One built for an equal spec (another process's, say) is this cluster's.
    assert cluster.use_backend(GKEBackend(Cluster(**REFERENCE))) is cluster


def test_use_backend_does_not_swap_the_backend_of_a_cluster_that_is_up() -> None:
    cluster = Cluster(**REFERENCE)
    first = _RecordingBackend()
    cluster.use_backend(first).up(check=False)
    with pytest.raises(ConfigError, match="while it is up; call down"):
        cluster.use_backend(_RecordingBackend())
    cluster.down()
    second = _RecordingBackend()
    cluster.use_backend(second).up()
    assert (first.calls, second.calls) == (["up(keep_on_failure=False)", "down"], ["up(keep_on_failure=False)"])


class _PartialBackend:
    def up(self, *, keep_on_failure: bool = False, check: bool = True) -> None: ...
    def down(self, *, delete_preload_image: bool = False, discard_results: bool = False) -> None: ...
    def describe(self) -> str:
        return "partial"

    def cleanup_hint(self) -> str:
        return ""
