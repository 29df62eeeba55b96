"""The GKE backend end to end, in the default test run: nothing is mocked inside rl_lustre.

- The Google APIs are :class:`FakeGCP` (the real ``google-cloud-*`` clients over gRPC/REST).
- The GKE cluster's endpoint and CA are those of a :class:`KubeFake` served over TLS, which
  validates what it receives against the real schemas (core objects strictly through
  ``kubernetes-validate``; the RayCluster against the KubeRay CRD schema the package ships),
  simulates KubeRay, and carries the port-forward of the head service's port 8265 to the
  session's real local Ray head (token auth on).
- The job runs NeMo-RL's GKE entrypoint, ``cd <nemo_rl_dir> && uv run python
  examples/run_grpo_math.py --config examples/configs/<recipe>.yaml ...``, on that head: the
  ``nemo_rl_dir`` is a temporary "image" directory whose ``examples/run_grpo_math.py`` hands
  its command line to the rehearsal driver, and ``uv`` is the image-tooling test double the
  session head has on its PATH (``ray_fixtures.image_tools``). The cluster's mount path is
  a temporary directory, since the "pods" run on this machine.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers.nemo_image import nemo_rl_image
from helpers.ray_fixtures import FAKE_HF_TOKEN
from helpers.specs import GKE

import rl_lustre
from rl_lustre import Cluster, GRPOJob
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.nemo_rl.checkpoints import list_checkpoints
from rl_lustre.run import Progress
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, KubeFake, kube_schema_validator

# Whole GKE deployments on the fakes with a real Ray head: the slow set (nox -s tests-slow).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
STEP = re.compile(r"={3,} Step (\d+)/(\d+) ={3,}")
# Ray token auth needs Ray >= 2.52 in the image; rayVersion follows the image's tag.
IMAGE = "rayproject/ray:2.60.0"

# The image's examples/run_grpo_math.py: NeMo-RL's command line, handed to the rehearsal.
# It also lists the job's working_dir as uploaded, when there is one (found, not imported:
# an import would write bytecode there unless PYTHONDONTWRITEBYTECODE is set).
GRPO_SHIM = """\
import importlib.util
import os
import sys

probe = importlib.util.find_spec("workdir_probe")
if probe is not None:
    print("WORKING_DIR", " ".join(sorted(os.listdir(os.path.dirname(probe.origin)))), flush=True)

from rl_lustre.rehearsal import main

sys.exit(main(["--step-seconds", "0.25", *sys.argv[1:]]))
"""
WORKDIR_PROBE = "MARK = 1\n"

# A scaled-down reference job; the image directory is filled in per test.
BASE_JOB = GRPOJob(
    name="base",
    recipe="grpo_math_1B",
    model="Qwen/Qwen2.5-1.5B",
    dataset="OpenMathInstruct-2",
    num_prompts_per_step=4,
    num_generations_per_prompt=8,
    # A multiple of the data-parallel size (8 GPUs) times the micro batch (4).
    train_global_batch_size=32,
    save_period=2,
)


def _image(root: Path) -> Path:
    """A directory laid out like NeMo-RL in its container image (``/opt/nemo-rl``)."""
    return nemo_rl_image(root, GRPO_SHIM)


@attrs.frozen
class World:
    """The fakes, the cluster spec (as keyword arguments, for another process) and the head."""

    gcp: FakeGCP
    kube: KubeFake
    spec: dict[str, Any]
    image: Path
    head: Any
    validate: Callable[[dict[str, Any]], None]

    def cluster(self) -> Cluster:
        """A new ``Cluster`` equal to the spec, on a backend with fast polling."""
        cluster = Cluster(**self.spec)
        return cluster.use_backend(GKEBackend(cluster, backoff=FAST_BACKOFF, retry=FAST_RETRY))

    def leftovers(self) -> dict[str, Any]:
        self.gcp.settle()
        return {"gcp": self.gcp.leaked(self.spec["name"]), "kube": self.kube.objects()}


@pytest.fixture
def world(local_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    head = local_cluster._backend().head  # type: ignore[attr-defined]
    token = head.headers().get("Authorization", "").removeprefix("Bearer ")
    if not token:
        pytest.skip("the session's Ray head does not run in token mode")
    validate = kube_schema_validator()
    # The cluster's token: up() puts it into the Kubernetes Secret, clients send it.
    monkeypatch.setenv("RAY_AUTH_TOKEN", token)
    monkeypatch.setenv("HF_TOKEN", "hf_e2e_" + uuid.uuid4().hex)
    host, port = head.dashboard_url.removeprefix("http://").rsplit(":", 1)
    spec = {
        **GKE,
        "name": "rl-e2e",
        "num_nodes": 1,
        "image": IMAGE,
        "mount_path": str(tmp_path / "lustre"),
        "secrets": ["HF_TOKEN", "RAY_AUTH_TOKEN"],
        # The registry fake holds the catalog's images (the NeMo-RL image), not this Ray one.
        "preload_image": False,
        # Where the runs go at down() (the fake Lustre instance is the mount directory).
        "results": "gs://e2e-results/rl",
    }
    with KubeFake(validate=validate, head_target=(host, int(port))) as kube, FakeGCP(kube=kube) as gcp:
        gcp.seed_bucket("e2e-results")
        gcp.volume_dir(Cluster(**spec).volume.resource_name(), tmp_path / "lustre")  # type: ignore[union-attr]
        yield World(gcp=gcp, kube=kube, spec=spec, image=_image(tmp_path / "nemo-rl"), head=head, validate=validate)


def _raw_records(head: Any) -> list[dict[str, Any]]:
    """Every job record as Ray's own client returns it (what the dashboard shows)."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(head.dashboard_url, headers=head.headers())
    return [json.loads(details.model_dump_json()) for details in client.list_jobs()]


def _attach_elsewhere(world: World, job_id: str) -> dict[str, Any]:
    """``Cluster(...same spec...).attach(job_id)`` in a fresh process: status, log, checkpoints."""
    script = textwrap.dedent("""
        import json, sys
        from rl_lustre import Cluster

        run = Cluster(**json.loads(sys.argv[1])).attach(sys.argv[2])
        checkpoints = run.checkpoints()
        print(json.dumps({
            "status": run.status(),
            "progress": [run.progress.completed, run.progress.total],
            "last_header": "Step 6/6" in run.logs(),
            "checkpoints": [[c.step, c.size_bytes, c.save_seconds_from] for c in checkpoints],
        }))
    """)
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(world.gcp.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(world.spec), job_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_grpo_job_runs_end_to_end_on_the_gke_backend(
    world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="rl_lustre")
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    (workdir / "workdir_probe.py").write_text(WORKDIR_PROBE)
    (workdir / "kept.txt").write_text("uploaded")
    (workdir / "notes-excluded.txt").write_text("left out by the job's excludes")
    (workdir / "scratch.bin").write_text("left out by .rayignore")
    (workdir / ".rayignore").write_text("scratch.bin\n")
    # What a local run leaves behind; never uploaded.
    (workdir / "__pycache__").mkdir()
    (workdir / "__pycache__" / "workdir_probe.cpython-311.pyc").write_bytes(b"stale")
    (workdir / "old.pyc").write_bytes(b"stale")
    job = attrs.evolve(
        BASE_JOB,
        name="e2e-grpo",
        max_num_steps=6,
        keep_top_k=2,
        nemo_rl_dir=str(world.image),
        working_dir=str(workdir),
        excludes=("notes-*.txt",),
    )
    cluster = world.cluster()
    backend = cluster._backend()
    assert isinstance(backend, GKEBackend)
    secrets = {
        "HF_TOKEN": os.environ["HF_TOKEN"],
        "RAY_AUTH_TOKEN": os.environ["RAY_AUTH_TOKEN"],
        "the session head's HF_TOKEN": FAKE_HF_TOKEN,
    }

    with cluster:
        # Provisioned on the fakes, the RayCluster applied (validated on arrival) and ready.
        assert sorted(backend.last_report.keys("created")) == sorted(
            r.key for r in cluster.plan() if r.action == "create"
        )
        assert world.kube.rejected == []
        raycluster = world.kube.get("RayCluster", "rl-e2e")
        assert raycluster is not None
        world.validate({k: v for k, v in raycluster.items() if k != "status"})

        run = cluster.submit(job)
        assert run.job_id.startswith("rl-lustre-e2e-grpo-")
        # A second submit of the running job attaches to it: one copy only.
        again = cluster.submit(job)
        assert again.job_id == run.job_id
        assert [j.submission_id for j in backend.jobs.list() if j.submission_id.startswith("rl-lustre-e2e-grpo-")] == [
            run.job_id
        ]
        # The entrypoint is NeMo-RL's, run in the "image".
        # The Ray job is the recovery supervisor (on the head), running NeMo-RL's command in the "image".
        supervised = shlex.split(run.info().entrypoint)
        assert supervised[:3] == ["python", "-m", "rl_lustre_oncluster.supervisor"]
        assert supervised[-2:] == ["--", job.entrypoint(cluster)]
        assert job.entrypoint(cluster).startswith(f"cd {world.image} && uv run python examples/run_grpo_math.py")

        # Dropped port-forward streams cost nothing: the next request opens a new one.
        forward = backend._forward
        assert forward is not None
        opened = forward.connections
        world.kube.kill_portforwards()
        assert run.status() in ("PENDING", "RUNNING")
        assert forward.connections > opened

        followed = list(run.logs(follow=True))  # streams through the port-forward until the run ends
        assert run.wait(timeout=60) == "SUCCEEDED"
        assert [(int(m[1]), int(m[2])) for line in followed if (m := STEP.search(line))] == [
            (k, 6) for k in range(1, 7)
        ]
        probe = next(line for line in followed if line.startswith("WORKING_DIR "))
        assert probe.split()[1:] == [".rayignore", "kept.txt", "workdir_probe.py"]

        # Checkpoints, listed on the head: NeMo-RL's layout on the (temporary) volume.
        checkpoints = run.checkpoints()
        on_disk = list_checkpoints(job.checkpoint_dir(cluster))
        assert [c.step for c in checkpoints] == [c.step for c in on_disk] == [4, 6]
        assert [(c.path, c.size_bytes, c.finished_at) for c in checkpoints] == [
            (c.path, c.size_bytes, c.finished_at) for c in on_disk
        ]
        assert all(c.size_bytes > 0 and c.training_info for c in checkpoints)
        # Save times are NeMo-RL's own, from the log.
        timed = {s.step: s.timed_seconds for s in run.saves()}
        assert [(c.save_seconds_from, c.save_seconds) for c in checkpoints] == [("log", timed[4]), ("log", timed[6])]
        # The listing helper left nothing behind in the job list.
        assert not [j for j in backend.jobs.list() if j.submission_id.startswith("rl-lustre-ls-")]

        # Another process, knowing only the spec and the id, finds the run.
        elsewhere = _attach_elsewhere(world, run.job_id)
        assert elsewhere == {
            "status": "SUCCEEDED",
            "progress": [6, 6],
            "last_header": True,
            "checkpoints": [[c.step, c.size_bytes, "log"] for c in checkpoints],
        }

        # No secret in what Ray stores (runtime env, metadata, entrypoint), nor in our logs.
        records = json.dumps([r for r in _raw_records(world.head) if r["submission_id"] == run.job_id])
        assert run.job_id in records
        assert "RAY_OVERRIDE_JOB_RUNTIME_ENV" in records
        for what, value in secrets.items():
            assert value not in records, what
            assert value not in caplog.text, what
            assert value not in repr(cluster) + str(cluster.plan()), what
        # The Secret the pods read holds them, as it should.
        stored = world.kube.get("Secret", next(o["metadata"]["name"] for o in world.kube.objects("Secret")))
        assert stored is not None
        assert set(stored.get("data") or stored.get("stringData") or {}) >= {"HF_TOKEN", "RAY_AUTH_TOKEN"}

    # The with block exported the run, tore everything down, and closed the port-forward.
    assert world.leftovers() == {"gcp": [], "kube": []}
    assert backend._forward is None
    exported = world.gcp.bucket_objects("e2e-results")
    assert sorted({n.split("/")[3] for n in exported if "/checkpoints/" in n}) == ["step_4", "step_6"]


def test_a_sweep_runs_on_the_gke_backend_each_job_in_its_own_directories(world: World) -> None:
    base = attrs.evolve(BASE_JOB, max_num_steps=3, nemo_rl_dir=str(world.image))
    jobs = [attrs.evolve(base, name=f"gke-sweep-k{k}", keep_top_k=k) for k in (1, 2)]
    cluster = world.cluster()
    with cluster:
        result = rl_lustre.run_sweep(cluster, jobs, timeout=90, poll=0.3)
        by_name = {o.name: o for o in result}
        assert result.ok, str(result)
        # Saves at step 2 and the last step (3); keep_top_k decides how many stay on the volume.
        assert by_name["gke-sweep-k1"].checkpoints == (3,)
        assert by_name["gke-sweep-k2"].checkpoints == (2, 3)
        assert {(o.steps, o.total) for o in result} == {(3, 3)}
        for job in jobs:
            checkpoint_dir, log_dir = Path(job.checkpoint_dir(cluster)), Path(job.log_dir(cluster))
            assert sorted(p.name for p in checkpoint_dir.iterdir()) == [
                f"step_{s}" for s in by_name[job.name].checkpoints
            ]
            assert [p.name for p in log_dir.iterdir()] == ["exp_001"]
        assert len({job.checkpoint_dir(cluster) for job in jobs}) == len(jobs)
    # Teardown exported both runs (each under its own id, only what keep_top_k left) and deleted the volume.
    assert world.leftovers() == {"gcp": [], "kube": []}
    exported = world.gcp.bucket_objects("e2e-results")
    for outcome in result:
        steps = {n.split("/")[3] for n in exported if n.startswith(f"rl/{outcome.job_id}/checkpoints/")}
        assert sorted(steps) == [f"step_{s}" for s in outcome.checkpoints], outcome.name


def test_a_raycluster_we_did_not_create_is_reached_through_a_kubeconfig(
    local_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rl_lustre.errors import ConfigError, RayError
    from rl_lustre.kube.apply import apply_manifests, wait_ready
    from rl_lustre.kube.manifests import build_manifests

    head = local_cluster._backend().head  # type: ignore[attr-defined]
    token = head.headers().get("Authorization", "").removeprefix("Bearer ")
    if not token:
        pytest.skip("the session's Ray head does not run in token mode")
    host, port = head.dashboard_url.removeprefix("http://").rsplit(":", 1)
    spec = {
        **GKE,
        "name": "theirs",
        "num_nodes": 1,
        "image": IMAGE,
        "mount_path": str(tmp_path / "lustre"),
        "secrets": ["RAY_AUTH_TOKEN"],
    }
    cluster, wrong = Cluster(**spec), Cluster(**spec)
    job = attrs.evolve(BASE_JOB, name="via-kubeconfig", max_num_steps=2, nemo_rl_dir=str(_image(tmp_path / "img")))

    with pytest.raises(ConfigError, match="kubeconfig"):
        cluster.use_kubeconfig(tmp_path / "missing")
    with pytest.raises(ConfigError, match="kubeconfig"):
        Cluster.local("here", volume_dir=tmp_path / "v").use_kubeconfig(tmp_path / "missing")

    # No Google API at all: someone else made the cluster and applied the RayCluster.
    with KubeFake(head_target=(host, int(port))) as kube:
        cluster.volume._live.mount_point = "10.90.1.4@tcp:/lustrefs"
        manifests = build_manifests(cluster, secret_values={"RAY_AUTH_TOKEN": token}, redact=False)
        api = kube.api_client()
        apply_manifests(api, manifests, deployment="theirs")
        wait_ready(api, manifests, timeout=30)
        config = kube.write_kubeconfig(tmp_path / "kubeconfig", token="user-token", context="theirs-ctx")

        # Ray checks the bearer token: a wrong one is refused, as our error.
        monkeypatch.setenv("RAY_AUTH_TOKEN", "not-the-token")
        with pytest.raises(RayError) as refused:
            wrong.use_kubeconfig(config, "theirs-ctx").submit(job)
        assert "not-the-token" not in str(refused.value)

        monkeypatch.setenv("RAY_AUTH_TOKEN", token)
        run = cluster.use_kubeconfig(config, "theirs-ctx").submit(job)
        assert run.wait(timeout=60) == "SUCCEEDED"
        assert run.progress == Progress(step=2, completed=2, total=2)
        assert {r.token for r in kube.requests if r.path.endswith("/portforward")} == {"user-token"}
        for c in (cluster, wrong):
            c._backend().disconnect()  # type: ignore[attr-defined]
