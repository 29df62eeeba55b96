"""Start-up overlap on the fakes: the image pre-pull DaemonSet and the model prefetch Job
are created at their moment in the graph, report progress, fail with the pod's reason and
roll back, skip what is cached, and leave nothing after ``down()``. Also the prefetch
program itself, run as the Job runs it (``python -c``), against a real cache layout."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.specs import SMALL

from rl_lustre import Cluster, GRPOJob, naming
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.errors import ProvisioningError
from rl_lustre.kube.prefetch import prefetch_command, prefetch_job
from rl_lustre.oncluster.prefetch import MARK, repo_folder
from rl_lustre.provision.scaleup import PROBE_COMPONENT
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP
from rl_lustre.testing.kube import KubeFake, schema_validator

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
# Lustre is the long branch, as in a real deployment: the pre-pull must not wait for it
# (2 s leaves the GKE branch a wide margin on a loaded machine).
LATENCY = {"lustre.create": 2.0, "gke.create_cluster": 0.1, "gke.create_node_pool": 0.1}


# (kind, name) of every object the Kubernetes fake received from rl_lustre, in order.
RECEIVED: list[tuple[str, str]] = []


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeGCP, KubeFake]]:
    from rl_lustre.kube.client import ResourceClient

    # Every object is checked against the real schemas on arrival (strict: unknown fields fail).
    check = schema_validator()

    def validate(obj: dict[str, Any]) -> None:
        check(obj)
        RECEIVED.append((obj["kind"], obj["metadata"]["name"]))

    with KubeFake(validate=validate) as kube, FakeGCP(kube=kube, latency=LATENCY) as gcp:
        # Import the Kubernetes client now: its first import is not provisioning time.
        ResourceClient(kube.api_client(), "Job", "default")
        yield gcp, kube


@pytest.fixture
def world(fakes: tuple[FakeGCP, KubeFake], monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeGCP, KubeFake]]:
    gcp, kube = fakes
    monkeypatch.setenv("HF_TOKEN", "hf_startup_test_value")
    yield gcp, kube
    kube.faults.job_failure = None
    kube.timings.job_run = 0.15


def cluster(**kw: object) -> Cluster:
    # One NIC: these tests share one Kubernetes fake between deployments, and the fabric's
    # cluster-scoped network objects have fixed names (one GKE cluster per deployment).
    base: dict[str, object] = {
        **SMALL,
        "name": "boot",
        "secrets": ("HF_TOKEN",),
        "prefetch_models": (MODEL,),
    }  # the preload image: test_preload.py
    return Cluster(**{**base, **kw})  # type: ignore[arg-type]


def backend(c: Cluster) -> GKEBackend:
    return GKEBackend(c, backoff=FAST_BACKOFF, retry=FAST_RETRY)


def leftovers(gcp: FakeGCP, kube: KubeFake, name: str) -> tuple[list[str], list[str]]:
    """What of deployment ``name`` is still there, on the Google side and in Kubernetes."""
    gcp.settle()
    return gcp.leaked(name), [
        f"{o['kind']} {o['metadata']['name']}"
        for o in kube.objects()
        if o["metadata"].get("labels", {}).get("rl-lustre-deployment") == name
        or o["metadata"]["name"].startswith(f"{name}-")
    ]


def test_prepull_starts_with_the_gpu_pool_and_prefetch_with_the_claim_progress_shows_and_down_leaves_nothing(
    world: tuple[FakeGCP, KubeFake], caplog: pytest.LogCaptureFixture
) -> None:
    gcp, kube = world
    caplog.set_level(logging.INFO, logger="rl_lustre")
    kube.rejected.clear()
    kube.timings.job_run = 1.5
    c = cluster()
    progress = f"{MARK} {MODEL}: 0.4 of 1.0 GB (80 MB/s)\n"
    written: list[str] = []
    finished = threading.Event()

    def print_progress() -> None:  # what the prefetch program prints while it downloads
        while not finished.is_set() and not written:
            for pod in kube.objects("Pod"):
                if (
                    pod["metadata"]["name"].startswith("boot-model-prefetch")
                    and pod.get("status", {}).get("phase") == "Running"
                ):
                    kube.write_log(pod["metadata"]["name"], progress)
                    written.append(pod["metadata"]["name"])
            time.sleep(0.02)

    printer = threading.Thread(target=print_progress, daemon=True)
    printer.start()
    sent = len(RECEIVED)
    try:
        report = backend(c).up()
    finally:
        finished.set()
        printer.join(5)
    rec = report.records
    # cluster.manifests() is every Kubernetes object up() applied: no more, no fewer (but the
    # capacity probes up() may make and delete while it asks the autoscaler for GPU nodes).
    applied = {(kind, name) for kind, name in RECEIVED[sent:] if not name.startswith(f"{c.name}-{PROBE_COMPONENT}-")}
    assert sorted(applied) == sorted((m["kind"], m["metadata"]["name"]) for m in c.manifests())
    assert {"DaemonSet", "Job"} <= {kind for kind, _ in RECEIVED[sent:]}
    # The pre-pull starts once the GPU pool is there, long before Lustre is ready.
    assert rec["image-prepull"].started >= rec["gpu-pool"].finished
    assert rec["image-prepull"].started < rec["lustre"].finished - 0.5
    # The prefetch starts once the claim is bound, alongside the RayCluster, not after it.
    assert rec["model-prefetch"].started >= rec["pvc"].finished
    assert rec["model-prefetch"].started < rec["raycluster"].finished
    assert report.keys("created") == [r.key for r in c.plan() if r.action == "create"]
    assert kube.rejected == []
    # Its pod ran where the plan says, with the token from the Secret, never as a literal.
    job = kube.get("Job", "boot-model-prefetch")
    assert job is not None
    assert job["metadata"]["labels"]["rl-lustre-deployment"] == "boot"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == [MODEL]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "boot-job-secrets", "key": "HF_TOKEN", "optional": True}},
    } in container["env"]
    assert "hf_startup_test_value" not in json.dumps(job)
    # Progress reached the user: the live state and the report.
    assert written
    assert f"{MODEL}: 0.4 of 1.0 GB (80 MB/s)" in caplog.text
    assert rec["model-prefetch"].note == f"{MODEL}: 0.4 of 1.0 GB (80 MB/s)"
    # The pre-pull ran on the 2 GPU nodes and the head's CPU node, and is gone now that the
    # workers run; the workers landed on nodes that had pulled the image.
    posted = [r for r in kube.requests if r.method == "POST" and r.path.endswith("/daemonsets")]
    assert len(posted) == 1
    assert kube.get("DaemonSet", "boot-image-prepull") is None
    assert not [p for p in kube.objects("Pod") if "image-prepull" in p["metadata"]["name"]]
    assert rec["image-prepull"].note == "image pulled on 3 node(s); removed once the RayCluster's workers ran"
    workers = {p["spec"]["nodeName"] for p in kube.objects("Pod") if "worker" in p["metadata"]["name"]}
    # One per A4 node GKE registered (their taint tolerated, their allocatable enough).
    assert workers == {
        n["metadata"]["name"]
        for n in kube.objects("Node")
        if n["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == "gpu-pool"
    }
    assert len(workers) == 2

    # A second up() finds the model fetched and the workers running: nothing is redone.
    before = len(kube.requests)
    again = backend(c).up()
    assert again.get("model-prefetch").outcome == "adopted"
    assert again.get("model-prefetch").note == "models fetched by an earlier up()"
    assert again.get("image-prepull").outcome == "skipped"
    # (create-or-adopt answers 409 for what exists; nothing new is created)
    assert [r.path for r in kube.requests[before:] if r.method == "POST" and r.status != 409] == []

    backend(c).down()
    assert leftovers(gcp, kube, "boot") == ([], [])


def test_a_failed_prefetch_reports_the_pods_reason_and_rolls_back(world: tuple[FakeGCP, KubeFake]) -> None:
    gcp, kube = world
    kube.faults.job_failure = "401 Client Error: Unauthorized for url: https://huggingface.co/api/models/x"
    with pytest.raises(ProvisioningError) as err:
        backend(cluster(name="boot2")).up()
    text = str(err.value)
    assert "model-prefetch" in text
    assert "container prefetch exited 1 (Error): 401 Client Error: Unauthorized" in text
    assert "failed after 3 attempt(s)" in text
    assert err.value.report.get("model-prefetch").outcome == "failed"
    assert leftovers(gcp, kube, "boot2") == ([], [])


def test_a_running_prefetch_job_of_another_image_is_replaced_not_patched(world: tuple[FakeGCP, KubeFake]) -> None:
    """A Job's pod template is immutable while it runs (422 from a real API server, held to
    it in tests/test_kube_divergences.py): an earlier up() whose prefetch still runs on
    another image is replaced, not adopted."""
    import math

    from rl_lustre.kube.apply import apply_manifests

    gcp, kube = world
    old = cluster(name="boot3", image="nvcr.io/nvidia/nemo-rl:v0.3.0", ray_version="2.46.0")
    new = cluster(name="boot3")
    kube.timings.job_runs = {old.image: math.inf}
    try:
        apply_manifests(kube.api_client(), [prefetch_job(old)], deployment="boot3")
        first = kube.get("Job", naming.prefetch_name(old))["metadata"]["uid"]
        report = backend(new).up()
        assert report.get("model-prefetch").outcome == "created"
        job = kube.get("Job", naming.prefetch_name(new))
        assert job["metadata"]["uid"] != first
        assert job["spec"]["template"]["spec"]["containers"][0]["image"] == new.image
        assert job["status"]["succeeded"] == 1
    finally:
        kube.timings.job_runs = {}
    backend(new).down()
    assert leftovers(gcp, kube, "boot3") == ([], [])


def test_switched_off_there_is_neither_node() -> None:
    plan = cluster(prefetch_models=(), prepull_image=False).plan()
    assert "model-prefetch" not in plan
    assert "image-prepull" not in plan
    assert "image-prepull" not in Cluster.local("l", volume_dir="/tmp/rl-startup").plan()


def test_the_job_env_puts_every_nemo_rl_cache_on_the_volume() -> None:
    env = GRPOJob(name="r").runtime_env(cluster())["env_vars"]
    caches = {
        k: env[k]
        for k in (
            "HF_HOME",
            "HF_DATASETS_CACHE",
            "NRL_MEGATRON_CHECKPOINT_DIR",
            "TORCHINDUCTOR_CACHE_DIR",
            "TRITON_CACHE_DIR",
            "VLLM_CACHE_ROOT",
        )
    }
    assert all(v.startswith("/lustre/") for v in caches.values())
    # The prefetch fills the HF_HOME the job reads.
    job = prefetch_job(cluster())
    env_of_job = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env_of_job["HF_HOME"] == caches["HF_HOME"]


def _nemo_rl_vllm_seed(node_idx: int, local_bundle_indices: list[int]) -> int:
    # NVIDIA-NeMo/RL v0.4.0, nemo_rl/models/generation/vllm/vllm_worker.py, configure_worker.
    if len(local_bundle_indices) == 1:
        return node_idx * 1024 + local_bundle_indices[0]
    return node_idx * 1024 + local_bundle_indices[0] // len(local_bundle_indices)


def test_every_vllm_worker_compile_cache_nemo_rl_picks_lands_on_the_volume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rl_lustre.kube.manifests import build_manifests

    volume = tmp_path / "lustre"
    c = cluster(num_nodes=2, mount_path=str(volume))
    [rc] = [m for m in build_manifests(c) if m["kind"] == "RayCluster"]
    [worker] = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"]
    hook = worker["lifecycle"]["postStart"]["exec"]["command"]
    home = tmp_path / "home"
    (home / ".cache" / "uv").mkdir(parents=True)  # the image's own files stay where they are
    # The container starts: the kubelet runs the hook in it (twice: a restarted container).
    for _ in range(2):
        done = subprocess.run(hook, env={"HOME": str(home), "PATH": os.environ["PATH"]}, capture_output=True, text=True)
        assert (done.returncode, done.stderr) == (0, "")
    assert (home / ".cache" / "uv").is_dir()
    assert not (home / ".cache" / "uv").is_symlink()

    # NeMo-RL's vLLM workers, for every tensor-parallel size that fits a node, on both nodes.
    monkeypatch.setenv("HOME", str(home))
    seen = set()
    for tp in (1, 2, 4, 8):
        for node_idx in range(2):
            for first in range(0, 8, tp):
                seed = _nemo_rl_vllm_seed(node_idx, list(range(first, first + tp)))
                root = os.path.expanduser(f"~/.cache/vllm_{seed}")
                os.makedirs(root, exist_ok=True)  # what vLLM does with VLLM_CACHE_ROOT
                (Path(root) / f"graph-tp{tp}").write_text("compiled")
                assert Path(root).resolve() == (volume / "cache" / "vllm" / f"vllm_{seed}").resolve()
                seen.add(seed)
    assert len(seen) == 16
    assert (volume / "cache" / "vllm" / "vllm_1025" / "graph-tp1").read_text() == "compiled"
    # The cache root the job's environment names for vLLM is the same directory.
    assert GRPOJob(name="r").runtime_env(c)["env_vars"]["VLLM_CACHE_ROOT"] == str(volume / "cache" / "vllm")


def test_a_vllm_cache_that_cannot_be_linked_never_fails_the_worker_pod(tmp_path: Path) -> None:
    from rl_lustre.nemo_rl.caches import vllm_seed_links

    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    done = subprocess.run(
        ["/bin/sh", "-c", vllm_seed_links(str(blocked), 1, 8)],
        env={"HOME": str(tmp_path / "home"), "PATH": os.environ["PATH"]},
    )
    assert done.returncode == 0
    assert not list((tmp_path / "home" / ".cache").glob("vllm_*"))


# The prefetch program, run the way the Job runs it.

FAKE_HUB = """
import json, os, sys
CALLS = os.environ["FAKE_HUB_CALLS"]
def _log(*a):
    with open(CALLS, "a") as f:
        f.write(json.dumps(a) + "\\n")
class _Sibling:
    def __init__(self, size): self.size = size
class _Info:
    sha = "abc123"
    siblings = [_Sibling(3), _Sibling(4)]
class HfApi:
    def model_info(self, repo, files_metadata=False):
        _log("model_info", repo, os.environ.get("HF_TOKEN"))
        return _Info()
def snapshot_download(repo, revision=None):
    _log("snapshot_download", repo, revision)
    base = os.path.join(os.environ["HF_HOME"], "hub", "models--" + repo.replace("/", "--"))
    os.makedirs(os.path.join(base, "snapshots", revision), exist_ok=True)
    os.makedirs(os.path.join(base, "blobs"), exist_ok=True)
    with open(os.path.join(base, "blobs", "w"), "w") as f:
        f.write("1234567")
    return os.path.join(base, "snapshots", revision)
"""


def run_prefetch(tmp_path: Path, hub_module: str, *models: str) -> subprocess.CompletedProcess[str]:
    lib = tmp_path / "lib" / "huggingface_hub"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "__init__.py").write_text(hub_module)
    env = {
        "PATH": os.environ["PATH"],
        "HF_HOME": str(tmp_path / "hf"),
        "PYTHONPATH": str(tmp_path / "lib"),
        "FAKE_HUB_CALLS": str(tmp_path / "calls.jsonl"),
        "HF_TOKEN": "hf_secret_token_x",
        "RL_LUSTRE_PROGRESS_SECONDS": "0.01",
    }
    cmd = prefetch_command(sys.executable)
    return subprocess.run([*cmd, *models], env=env, capture_output=True, text=True, timeout=60)


def test_the_prefetch_program_downloads_once_then_skips_what_the_cache_holds(tmp_path: Path) -> None:
    first = run_prefetch(tmp_path, FAKE_HUB, MODEL)
    assert first.returncode == 0, first.stderr
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    # The token reaches huggingface_hub through the environment, and is never printed.
    assert calls == [["model_info", MODEL, "hf_secret_token_x"], ["snapshot_download", MODEL, "abc123"]]
    assert "hf_secret_token_x" not in first.stdout + first.stderr
    assert f"{MARK} {MODEL}: downloaded 0.0 GB in" in first.stdout
    marker = json.loads((tmp_path / "hf" / "rl_lustre_prefetch" / f"{repo_folder(MODEL)}.json").read_text())
    assert (marker["revision"], marker["bytes"]) == ("abc123", 7)

    # Cached: no hub call at all (importing huggingface_hub would fail loudly).
    second = run_prefetch(tmp_path, "raise ImportError('the cache should have been enough')\n", MODEL)
    assert second.returncode == 0, second.stderr
    assert f"{MARK} {MODEL}: already in the cache (revision abc123, 0.0 GB); download skipped" in second.stdout

    # A cut-short download (snapshot present, no marker) is fetched again.
    (tmp_path / "hf" / "rl_lustre_prefetch" / f"{repo_folder(MODEL)}.json").unlink()
    third = run_prefetch(tmp_path, FAKE_HUB, MODEL)
    assert third.returncode == 0
    assert "downloaded" in third.stdout
