"""Hostile and careless input: every kind is refused with a ConfigError that names the
parameter, shows what it got (never a secret) and says what it needs."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from helpers.specs import GKE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rl_lustre
from rl_lustre import Cluster, GRPOJob, LustreVolume, nemo_rl, run_sweep, size_lustre, wait_all
from rl_lustre.catalog import LUSTRE_TIERS
from rl_lustre.errors import ConfigError, RLLustreError
from rl_lustre.ray.jobs import JobsClient
from rl_lustre.run import Run

# Shaped like the real thing (documented prefixes and lengths); none is a live credential.
TOKENS = {
    "huggingface": "hf_" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3h",
    "wandb": "0123456789abcdef0123456789abcdef01234567",
    "github": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "github-fine-grained": "github_pat_" + "11ABCDEFG0" + "x" * 72,
    "google-api-key": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "private-key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow...\n-----END RSA PRIVATE KEY-----",
    "openai": "sk-proj-" + "abcDEF123456ghiJKL789012",
}


def _local(**kw: Any) -> Cluster:
    return Cluster.local("t", volume_dir="/tmp/rl-lustre-validation", **kw)


def _raises(call: Callable[[], Any], field: str, *fragments: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        call()
    err = info.value
    assert field in err.field, (err.field, str(err))
    for fragment in fragments:
        assert fragment in str(err), (fragment, str(err))
    return err


# (id, call, field named, fragments of the message)
BAD: list[tuple[str, Callable[[], Any], str, tuple[str, ...]]] = [
    # wrong types, at construction and at every public method
    ("secrets=None", lambda: Cluster(**GKE, secrets=None), "secrets", ("got None",)),
    ("secrets=one string", lambda: Cluster(**GKE, secrets="HF_TOKEN"), "secrets", ("not one string", "('HF_TOKEN',)")),
    ("secrets=[5]", lambda: Cluster(**GKE, secrets=[5]), "secrets", ("got an int",)),
    ("excludes=one string", lambda: GRPOJob(name="j", excludes="*.pt"), "excludes", ("not one string",)),
    ("volume_dir=5", lambda: Cluster.local(volume_dir=5), "volume_dir", ("got an int",)),
    ("volume_dir=''", lambda: Cluster.local(volume_dir=""), "volume_dir", ("not empty",)),
    ("volume_dir='/'", lambda: Cluster.local(volume_dir="/"), "volume_dir", ("other than '/'",)),
    ("volume_dir NUL", lambda: Cluster.local(volume_dir="/tmp/a\x00b"), "volume_dir", ("control characters",)),
    ("volume_dir ~nobody-here", lambda: Cluster.local(volume_dir="~no-such-user-0/v"), "volume_dir", ("'~user'",)),
    ("local name=5", lambda: Cluster.local(5), "name", ("got an int",)),
    ("submit('name')", lambda: _local().submit("name"), "job", ("must be a GRPOJob", "got a str")),
    ("attach(5)", lambda: Cluster(**GKE).attach(5), "job_id", ("got an int",)),
    (
        "up(keep_on_failure='yes')",
        lambda: Cluster(**GKE).up(keep_on_failure="yes"),
        "keep_on_failure",
        ("True or False",),
    ),
    ("use_kubeconfig(5)", lambda: Cluster(**GKE).use_kubeconfig(5), "path", ("got an int",)),
    ("entrypoint('x')", lambda: GRPOJob(name="j").entrypoint("x"), "cluster", ("must be a Cluster",)),
    ("overrides(None)", lambda: GRPOJob(name="j").overrides(None), "cluster", ("got None",)),
    ("runtime_env(5)", lambda: GRPOJob(name="j").runtime_env(5), "cluster", ("got an int",)),
    ("preflight('c')", lambda: GRPOJob(name="j").preflight("c"), "cluster", ("got a str",)),
    ("run_sweep(c, ['x'])", lambda: run_sweep(_local(), ["x"]), "jobs", ("item 0", "got a str")),
    ("run_sweep(c, job)", lambda: run_sweep(_local(), GRPOJob(name="j")), "jobs", ("must be a list",)),
    ("run_sweep('c', [])", lambda: run_sweep("c", []), "cluster", ("must be a Cluster",)),
    ("wait_all('abc')", lambda: wait_all("abc"), "runs", ("must be a list",)),
    ("wait_all([], poll=0)", lambda: wait_all([], poll=0), "poll", ("positive",)),
    ("overrides=list", lambda: GRPOJob(name="j", overrides=["a=1"]), "overrides", ("got a list",)),
    ("num_nodes='8'", lambda: Cluster(**GKE, num_nodes="8"), "num_nodes", ("whole number",)),
    # CIDRs: parsed, never compared as text
    (
        "cidr 0.0.0.0/0.0.0.0",
        lambda: Cluster(**GKE, authorized_networks=["0.0.0.0/0.0.0.0"]),
        "authorized_networks",
        ("whole internet",),
    ),
    ("cidr ::0/0", lambda: Cluster(**GKE, authorized_networks=["::0/0"]), "authorized_networks", ("whole internet",)),
    (
        "cidr two halves",
        lambda: Cluster(**GKE, authorized_networks=["0.0.0.0/1", "128.0.0.0/1"]),
        "authorized_networks",
        ("whole internet",),
    ),
    (
        "cidr v4-mapped",
        lambda: Cluster(**GKE, authorized_networks=["::ffff:0:0/96"]),
        "authorized_networks",
        ("whole internet",),
    ),
    (
        "cidr host bits",
        lambda: Cluster(**GKE, authorized_networks=["10.0.0.1/8"]),
        "authorized_networks",
        ("host bits", "10.0.0.0/8"),
    ),
    (
        "cidr bare ip",
        lambda: Cluster(**GKE, authorized_networks=["203.0.113.7"]),
        "authorized_networks",
        ("'203.0.113.7/32'",),
    ),
    ("cidr int", lambda: Cluster(**GKE, authorized_networks=[5]), "authorized_networks", ("got an int",)),
    (
        "cidr one string",
        lambda: Cluster(**GKE, authorized_networks="10.0.0.0/8"),
        "authorized_networks",
        ("got a str",),
    ),
    ("cidr leading zeros", lambda: Cluster(**GKE, authorized_networks=["010.0.0.0/8"]), "authorized_networks", ()),
    # control characters in paths, names and override values
    ("mount_path NUL", lambda: Cluster(**GKE, mount_path="/lus\x00tre"), "mount_path", ("control characters",)),
    ("job name newline", lambda: GRPOJob(name="a\nb"), "name", ("'a\\nb'",)),
    ("model NUL", lambda: GRPOJob(name="j", model="Qwen/Qwen\x00"), "model", ("control characters",)),
    (
        "override value NUL",
        lambda: GRPOJob(name="j", overrides={"logger.wandb.name": "a\x00b"}),
        "overrides['logger.wandb.name']",
        ("U+0000",),
    ),
    (
        "override value ESC",
        lambda: GRPOJob(name="j", overrides={"+x.y": ["ok", "\x1b[31m"]}),
        "overrides['+x.y']",
        ("U+001B",),
    ),
    ("env value newline", lambda: GRPOJob(name="j", env={"MODE": "a\nb"}), "env['MODE']", ("U+000A",)),
    ("excludes NUL", lambda: GRPOJob(name="j", excludes=["*.pt\x00"]), "excludes", ("control characters",)),
    # Lustre capacity limits per tier (Managed Lustre docs)
    (
        "capacity above 500 tier max",
        lambda: LustreVolume(name="v", capacity_gib=20_160_000),
        "capacity_gib",
        ("at most 20,016,000 GiB",),
    ),
    (
        "capacity above 125 tier max",
        lambda: LustreVolume(name="v", throughput_mbps_per_tib=125, capacity_gib=12_312_000),
        "capacity_gib",
        ("at most 12,240,000 GiB",),
    ),
    (
        "capacity off the large step",
        lambda: LustreVolume(name="v", throughput_mbps_per_tib=1000, capacity_gib=1_539_000),
        "capacity_gib",
        ("72,000 GiB above", "nearest valid: 1,530,000 or 1,584,000"),
    ),
    # numbers through overrides= follow the field's rule
    (
        "overrides negative steps",
        lambda: GRPOJob(name="j", overrides={"grpo.max_num_steps": -5}),
        "grpo.max_num_steps",
        ("at least 1",),
    ),
    (
        "overrides keep_top_k=0",
        lambda: GRPOJob(name="j", overrides={"checkpointing.keep_top_k": 0}),
        "checkpointing.keep_top_k",
        ("at least 1 or None",),
    ),
    (
        "overrides steps as text",
        lambda: GRPOJob(name="j", overrides={"grpo.max_num_steps": "20"}),
        "grpo.max_num_steps",
        ("whole number",),
    ),
    (
        "overrides nested",
        lambda: GRPOJob(name="j", overrides={"++grpo": {"val_period": -1}}),
        "grpo.val_period",
        ("at least 0",),
    ),
    (
        "overrides lr nan",
        lambda: GRPOJob(name="j", overrides={"policy.megatron_cfg.optimizer.lr": math.nan}),
        "optimizer.lr",
        ("not NaN",),
    ),
    (
        "overrides lr inf",
        lambda: GRPOJob(name="j", overrides={"policy.optimizer.kwargs.lr": math.inf}),
        "kwargs.lr",
        ("finite",),
    ),
    (
        "overrides lr negative",
        lambda: GRPOJob(name="j", overrides={"+policy.megatron_cfg.scheduler.min_lr": -1e-6}),
        "min_lr",
        ("at least 0",),
    ),
    (
        "overrides enabled=1",
        lambda: GRPOJob(name="j", overrides={"checkpointing.enabled": 1}),
        "checkpointing.enabled",
        ("True or False",),
    ),
    # calls that do not fit the signature
    ("misspelt keyword", lambda: Cluster(**GKE, nmu_nodes=2), "nmu_nodes", ("did you mean 'num_nodes'",)),
    ("misspelt local keyword", lambda: Cluster.local(volume_dir="/tmp/v", secret=()), "secret", ("'secrets'",)),
    ("missing name", lambda: GRPOJob(), "name", ("is required",)),
    ("positional", lambda: LustreVolume("v"), "arguments", ("keyword arguments only",)),
    # messages
    ("look-alike name", lambda: Cluster(**{**GKE, "name": "d\u0435mo"}), "name", ("U+0435 CYRILLIC SMALL LETTER IE",)),
    ("look-alike zone", lambda: Cluster(**{**GKE, "zone": "us-east1-\u0432"}), "zone", ("U+0432",)),
    (
        "preload_image=bad path",
        lambda: Cluster(**GKE, preload_image="images/nemo"),
        "preload_image",
        ("'projects/PROJECT/global/images/NAME'",),
    ),
    ("preload_image=5", lambda: Cluster(**GKE, preload_image=5), "preload_image", ("must be True",)),
    (
        "preload_image on a local cluster",
        lambda: _local(preload_image="global/images/nemo"),
        "preload_image",
        ("is for GKE clusters",),
    ),
    (
        "rl-lustre-role label",
        lambda: Cluster(**GKE, labels={"rl-lustre-role": "x"}),
        "labels",
        ("set by rl_lustre itself",),
    ),
]


def test_preload_image_values_in_force() -> None:
    import warnings

    import attrs

    assert Cluster(**GKE).preload_image is True
    assert (
        Cluster(**GKE, preload_image="global/images/nemo-040").preload_image
        == "projects/my-project/global/images/nemo-040"
    )
    assert attrs.evolve(Cluster(**GKE), preload_image=False).preload_image is False
    assert _local().preload_image is False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Cluster(**GKE, preload_image="global/images/" + "n" * 40)
    assert "longer than 39" in str(caught[0].message)
    assert caught[0].filename == __file__


@pytest.mark.parametrize(("call", "field", "fragments"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_a_config_error_naming_the_parameter(
    call: Callable[[], Any], field: str, fragments: tuple[str, ...]
) -> None:
    _raises(call, field, *fragments)


def test_every_missing_required_field_is_reported_at_once() -> None:
    err = _raises(lambda: Cluster(name="demo"), "project")
    assert err.field == "project, region, zone"
    err = _raises(lambda: Cluster(name="demo", region="us-east1"), "project")
    assert err.field == "project, zone"


def test_the_whole_internet_is_allowed_only_when_asked_for() -> None:
    c = Cluster(**GKE, authorized_networks=["0.0.0.0/0.0.0.0"], public_control_plane=True)
    assert c.authorized_networks == ("0.0.0.0/0.0.0.0",)
    ok = Cluster(**GKE, authorized_networks=["203.0.113.0/24", "2001:db8::/32", "203.0.113.7/32"])
    assert len(ok.authorized_networks) == 3


def test_lustre_capacities_follow_each_tier_up_to_its_maximum() -> None:
    for tier in LUSTRE_TIERS.values():
        top = LustreVolume(name="v", throughput_mbps_per_tib=tier.mbps_per_tib, capacity_gib=tier.max_gib)
        assert top.capacity_gib == tier.max_gib
        assert tier.valid(tier.threshold_gib)
        assert tier.round_up(tier.max_gib + 1) is None
    # Above the threshold only multiples of the larger step exist.
    assert LustreVolume(name="v", capacity_gib=3_168_000).capacity_gib == 3_168_000
    # size_lustre never proposes what the service refuses, and says when nothing fits.
    sized = size_lustre(params=200e9, checkpoints_kept=600)
    assert LUSTRE_TIERS[sized.throughput_mbps_per_tib].valid(sized.capacity_gib)
    _raises(lambda: size_lustre(params=2e12, checkpoints_kept=10_000), "checkpoints_kept", "more than any")


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_secret_shaped_values_are_refused_with_advice_and_never_echoed(kind: str) -> None:
    token = TOKENS[kind]
    attempts: list[Callable[[], Any]] = [
        lambda: GRPOJob(name="j", overrides={"logger.wandb.name": token}),
        lambda: GRPOJob(name="j", overrides={"+policy.generation.vllm_kwargs": {"extra": [token]}}),
        lambda: GRPOJob(name="j", env={"MY_SETTING": token}),
        lambda: Cluster(**GKE, secrets=[token]),
        lambda: GRPOJob(name="j", model=token),
        lambda: GRPOJob(name=token),
        lambda: Cluster(**{**GKE, "name": token}),
        lambda: LustreVolume(name="v", description=token),
    ]
    for attempt in attempts:
        with pytest.raises(ConfigError) as info:
            attempt()
        err = info.value
        for shown in (str(err), repr(err), repr(err.value), str(err.args)):
            assert token not in shown
            for line in token.splitlines():
                assert len(line) < 20 or line not in shown
    err = _raises(lambda: GRPOJob(name="j", overrides={"logger.wandb.name": token}), "logger.wandb.name")
    assert "Cluster(secrets=" in str(err)


def test_secret_key_names_and_secret_env_reads_in_overrides_are_refused() -> None:
    err = _raises(
        lambda: GRPOJob(name="j", overrides={"+policy.hf_token": "anything-at-all"}),
        "policy.hf_token",
        "names a secret",
        "secrets=",
    )
    assert "anything-at-all" not in str(err)
    _raises(
        lambda: GRPOJob(name="j", overrides={"+logger.wandb.key": "${oc.env:WANDB_API_KEY}"}),
        "logger.wandb.key",
        "WANDB_API_KEY",
        "prints in full",
    )
    # Key names that only look alike are NeMo-RL settings, not secrets.
    GRPOJob(name="j", overrides={"+policy.tokenizer.pad_token": "<pad>", "+data.input_key": "question"})
    # A git commit has a W&B key's shape; under a revision key it is what it says.
    GRPOJob(name="j", overrides={"+policy.model_revision": TOKENS["wandb"]})


def test_a_secret_anywhere_in_any_library_error_is_redacted() -> None:
    token = TOKENS["huggingface"]
    for err in (
        ConfigError("X", "f", token, f"rule mentioning {token}"),
        rl_lustre.errors.RayError(f"remote said: Authorization: Bearer {token}"),
        rl_lustre.errors.JobFailedError("id", "FAILED", [f"HF_TOKEN={token}"]),
    ):
        assert token not in str(err)
        assert token not in repr(err)
        assert "<redacted>" in str(err)


def test_no_public_call_raises_a_foreign_error_for_wrongly_typed_input() -> None:
    """A sweep across the public entry points: each parameter given values of the wrong
    type; the answer is a library error or success, never TypeError/AttributeError."""
    local = _local()
    gke = Cluster(**GKE)
    job = GRPOJob(name="j", recipe="grpo_math_1B")
    run = Run(JobsClient("http://127.0.0.1:9"), "rl-lustre-j-0")
    wrong = [None, 5, 2.5, True, "x", b"x", ["x"], {"x": 1}, object(), float("nan"), ("a", 1)]
    # Methods that would go on to a remote call with a right value get only wrong ones.
    not_str = [v for v in wrong if not isinstance(v, str) and v is not None]
    not_bool = [v for v in wrong if not isinstance(v, bool)]
    not_number = [v for v in wrong if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v]
    remote: dict[str, list[Any]] = {
        "Cluster.metrics.start": [v for v in not_number if v is not None],
        "Cluster.metrics.monitoring": [v for v in wrong if v is not None],
        "LustreVolume.metrics.end": [v for v in not_number if v is not None],
        "Run.logs": not_bool,
        "Run.wait.timeout": [v for v in not_number if v is not None],
        "Run.wait.poll": not_number,
        "Run.stop.wait": not_bool,
        "Run.stop.timeout": not_number,
        "Cluster.attach": not_str,
        "Cluster.up": not_bool,
        "Cluster.use_kubeconfig.path": not_str,
        "Cluster.use_kubeconfig.context": not_str,
    }
    entry_points: list[tuple[str, Callable[[Any], Any]]] = [
        ("Cluster.name", lambda x: Cluster(**{**GKE, "name": x})),
        ("Cluster.project", lambda x: Cluster(**{**GKE, "project": x})),
        ("Cluster.zone", lambda x: Cluster(**{**GKE, "zone": x})),
        ("Cluster.volume", lambda x: Cluster(**GKE, volume=x)),
        ("Cluster.num_nodes", lambda x: Cluster(**GKE, num_nodes=x)),
        ("Cluster.spot", lambda x: Cluster(**GKE, spot=x)),
        ("Cluster.image", lambda x: Cluster(**GKE, image=x)),
        ("Cluster.mount_path", lambda x: Cluster(**GKE, mount_path=x)),
        ("Cluster.authorized_networks", lambda x: Cluster(**GKE, authorized_networks=x)),
        ("Cluster.secrets", lambda x: Cluster(**GKE, secrets=x)),
        ("Cluster.labels", lambda x: Cluster(**GKE, labels=x)),
        ("Cluster.keep", lambda x: Cluster(**GKE, keep=x)),
        ("Cluster.local.name", lambda x: Cluster.local(x, volume_dir="/tmp/v")),
        ("Cluster.local.volume_dir", lambda x: Cluster.local(volume_dir=x)),
        ("Cluster.local.nemo_rl_path", lambda x: Cluster.local(volume_dir="/tmp/v", nemo_rl_path=x)),
        ("Cluster.local.num_nodes", lambda x: Cluster.local(volume_dir="/tmp/v", num_nodes=x)),
        ("Cluster.local.rehearsal_scale", lambda x: Cluster.local(volume_dir="/tmp/v", rehearsal_scale=x)),
        ("Cluster.submit", lambda x: local.submit(x)),
        ("Cluster.attach", lambda x: gke.attach(x)),
        ("Cluster.up", lambda x: gke.up(keep_on_failure=x)),
        ("Cluster.use_kubeconfig.path", lambda x: gke.use_kubeconfig(x)),
        ("Cluster.use_kubeconfig.context", lambda x: gke.use_kubeconfig("/nonexistent", x)),
        ("LustreVolume.name", lambda x: LustreVolume(name=x)),
        ("LustreVolume.capacity_gib", lambda x: LustreVolume(name="v", capacity_gib=x)),
        ("LustreVolume.throughput", lambda x: LustreVolume(name="v", throughput_mbps_per_tib=x)),
        ("LustreVolume.labels", lambda x: LustreVolume(name="v", labels=x)),
        ("LustreVolume.description", lambda x: LustreVolume(name="v", description=x)),
        ("LustreVolume.existing", lambda x: LustreVolume(name="v", existing=x)),
        ("LustreVolume.import_data", lambda x: LustreVolume(name="v").import_data(x)),
        ("LustreVolume.export_data", lambda x: LustreVolume(name="v").export_data(x, "gs://b/p")),
        ("GRPOJob.name", lambda x: GRPOJob(name=x)),
        ("GRPOJob.recipe", lambda x: GRPOJob(name="j", recipe=x)),
        ("GRPOJob.model", lambda x: GRPOJob(name="j", model=x)),
        ("GRPOJob.max_num_steps", lambda x: GRPOJob(name="j", max_num_steps=x)),
        ("GRPOJob.keep_top_k", lambda x: GRPOJob(name="j", keep_top_k=x)),
        ("GRPOJob.metric_name", lambda x: GRPOJob(name="j", metric_name=x)),
        ("GRPOJob.overrides", lambda x: GRPOJob(name="j", overrides=x)),
        ("GRPOJob.overrides value", lambda x: GRPOJob(name="j", overrides={"grpo.seed": x})),
        ("GRPOJob.env", lambda x: GRPOJob(name="j", env=x)),
        ("GRPOJob.env value", lambda x: GRPOJob(name="j", env={"A": x})),
        ("GRPOJob.excludes", lambda x: GRPOJob(name="j", excludes=x)),
        ("GRPOJob.working_dir", lambda x: GRPOJob(name="j", working_dir=x)),
        ("GRPOJob.wandb", lambda x: GRPOJob(name="j", wandb=x)),
        ("GRPOJob.checkpoint_dir", lambda x: job.checkpoint_dir(x)),
        ("GRPOJob.log_dir", lambda x: job.log_dir(x)),
        ("GRPOJob.entrypoint", lambda x: job.entrypoint(x)),
        ("GRPOJob.override_args", lambda x: job.override_args(x)),
        ("GRPOJob.runtime_env", lambda x: job.runtime_env(x)),
        ("GRPOJob.preflight", lambda x: job.preflight(x)),
        ("run_sweep.cluster", lambda x: run_sweep(x, [job])),
        ("run_sweep.jobs", lambda x: run_sweep(local, x)),
        ("run_sweep.timeout", lambda x: run_sweep(local, [], timeout=x)),
        ("wait_all.runs", lambda x: wait_all(x)),
        ("wait_all.names", lambda x: wait_all([], names=x)),
        ("size_lustre.model", lambda x: size_lustre(x)),
        ("size_lustre.params", lambda x: size_lustre(params=x)),
        ("size_lustre.checkpoints_kept", lambda x: size_lustre("Qwen2.5-7B", checkpoints_kept=x)),
        ("size_lustre.headroom", lambda x: size_lustre("Qwen2.5-7B", headroom=x)),
        ("size_lustre.extra_gib", lambda x: size_lustre("Qwen2.5-7B", extra_gib=x)),
        ("LustreSizing.volume", lambda x: size_lustre("Qwen2.5-7B").volume(x)),
        ("Plan.cost", lambda x: gke.plan().cost(x)),
        ("enable_output", lambda x: rl_lustre.enable_output(x)),
        ("nemo_rl.render_override.key", lambda x: nemo_rl.render_override(x, 1)),
        ("nemo_rl.render_override.value", lambda x: nemo_rl.render_override("a.b", x)),
        ("nemo_rl.parse_override", lambda x: nemo_rl.parse_override(x)),
        ("nemo_rl.resolve_config.recipe", lambda x: nemo_rl.resolve_config(x)),
        ("nemo_rl.resolve_config.overrides", lambda x: nemo_rl.resolve_config("grpo_math_1B", x)),
        ("nemo_rl.resolve_config.version", lambda x: nemo_rl.resolve_config("grpo_math_1B", [], x)),
        ("nemo_rl.load_recipe", lambda x: nemo_rl.load_recipe(x)),
        ("nemo_rl.flatten", lambda x: nemo_rl.flatten(x)),
        ("nemo_rl.nemo_rl_version", lambda x: nemo_rl.nemo_rl_version(x)),
        ("nemo_rl.version_for", lambda x: nemo_rl.version_for(x, gke)),
        ("attrs.evolve", lambda x: attrs.evolve(job, max_num_steps=x)),
        ("Cluster.metrics.start", lambda x: gke.metrics(start=x)),
        ("Cluster.metrics.monitoring", lambda x: gke.metrics(start=0, end=60, monitoring=x)),
        ("LustreVolume.metrics.end", lambda x: gke.volume.metrics(end=x)),
        # A run handle on a closed port: its arguments are checked before any request.
        ("Run.logs", lambda x: run.logs(follow=x)),
        ("Run.wait.timeout", lambda x: run.wait(timeout=x)),
        ("Run.wait.poll", lambda x: run.wait(timeout=0, poll=x)),
        ("Run.stop.wait", lambda x: run.stop(wait=x)),
        ("Run.stop.timeout", lambda x: run.stop(timeout=x)),
    ]
    foreign: list[str] = []
    for where, call in entry_points:
        for value in remote.get(where, wrong):
            try:
                call(value)
            except RLLustreError:
                pass
            except Exception as exc:  # anything foreign is the failure
                foreign.append(f"{where}({value!r}): {type(exc).__name__}: {exc}")
    assert not foreign, "\n".join(foreign)


def test_volume_dir_errors_name_volume_dir() -> None:
    err = _raises(lambda: Cluster.local(volume_dir="/tmp/with space"), "volume_dir")
    assert err.owner == "Cluster.local"
    assert os.sep in str(err)


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.binary(max_size=8)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
_KEYS = st.sampled_from(
    [
        "grpo.max_num_steps",
        "+logger.wandb.tags",
        "~policy.dynamic_batching",
        "checkpointing.keep_top_k",
        "policy.optimizer.kwargs.lr",
        "++grpo",
    ]
) | st.text(max_size=20)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=_KEYS, value=_VALUES, text=st.text(max_size=30))
def test_any_input_is_refused_with_a_config_error_or_renders_exactly(key: str, value: Any, text: str) -> None:
    """Arbitrary overrides and strings: refused at construction with a ConfigError, or
    written in Hydra syntax that parses back to the same value; never a foreign exception."""
    for build in (
        lambda: GRPOJob(name="j", overrides={key: value}),
        lambda: GRPOJob(name="j", model=text, metric_name=text or None),
        lambda: Cluster(**GKE, authorized_networks=[text]),
        lambda: Cluster.local(volume_dir=text or None, secrets=(text,)),
    ):
        try:
            built = build()
        except RLLustreError:
            continue
        if not isinstance(built, GRPOJob):
            continue
        for k, v in built.extra_overrides.items():
            try:
                arg = nemo_rl.render_override(k, v)
            except RLLustreError:
                continue
            parsed = nemo_rl.parse_override(arg)
            if parsed.kind != "delete":
                assert nemo_rl.overrides.same_value(parsed.value, nemo_rl.overrides._normalise(v)), (k, v, arg)
