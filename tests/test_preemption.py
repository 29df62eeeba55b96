"""Spot preemption and recovery, with real Ray worker nodes taken away and brought back.

Local: ``Cluster.local(..., worker_nodes=2)`` runs two real worker raylets next to its
head; the rehearsal driver places one actor per node on them (``--place-workers``), as
NeMo-RL places its workers, so killing a raylet's process group fails the run the way a
lost node fails NeMo-RL. Fake GKE (``spot_gke``): the KubeFake backs each worker pod of the
RayCluster with a real raylet, sized as the pod, joined to a head that offers no CPU or GPU
(as a RayCluster head), and preempts its node as GKE does.

Every recovery's lost time (from the loss to the rerun's first step) is reported at the
end of the test session (``preemption_report``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers.preemption_job import JOB_ARGS, STEP, STEP_SECONDS, attempts_in, two_worker_cluster, wait_done
from helpers.spot_gke import SpotHead, nemo_rl_dir, spot_gke, spot_spec

from rl_lustre import Cluster, GRPOJob
from rl_lustre.errors import JobFailedError
from rl_lustre.testing import preempt

# Real Ray worker nodes started, killed and replaced: the slow set (nox -s tests-slow).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
JOB = GRPOJob(**JOB_ARGS)


@pytest.fixture(scope="module")
def workers_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A local cluster with two real worker nodes of one GPU each, for this module."""
    volume = tmp_path_factory.mktemp("preempt-volume")
    with two_worker_cluster("rll-preempt", volume, step_seconds=STEP_SECONDS) as cluster:
        yield cluster


@pytest.fixture
def cluster(workers_cluster: Cluster) -> Cluster:
    """The module's cluster with both worker nodes running (a test may leave one down)."""
    workers_cluster._backend().start_workers()  # type: ignore[attr-defined]
    return workers_cluster


def _steps_done(job: GRPOJob, cluster: Cluster) -> list[int]:
    """The steps whose results every attempt has printed so far, from the run's metrics files."""
    done = []
    for path in sorted(Path(job.log_dir(cluster)).glob("exp_*/rehearsal_metrics.jsonl")):
        done += [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]
    return done


def test_a_run_preempted_after_step_5_resumes_from_step_4_and_ends_as_without_preemption(
    cluster: Cluster, preemption_report: list[str]
) -> None:
    job = attrs.evolve(JOB, name=f"pre-one-{uuid.uuid4().hex[:6]}")
    run = cluster.submit(job)
    assert run.info().metadata["rl_lustre.max_restarts"] == "3"
    wait_done(job, cluster, 5)
    gone = preempt(cluster, nodes=1, back_after=1.0)
    assert run.wait(timeout=240) == "SUCCEEDED"

    [restart] = run.restarts()
    assert restart.number == 1
    assert restart.cause == "preempted"
    assert restart.resumed_from_step == 4
    assert restart.first_step == 5
    assert restart.last_step == 6
    assert len(restart.nodes) == 1
    assert restart.nodes[0].reason
    # Ray declares the node dead a moment after its raylet vanished.
    assert gone.at - 1 <= restart.lost_at <= gone.at + 30
    assert restart.seconds_lost is not None
    assert 0 < restart.seconds_lost < 200
    assert restart.capacity_seconds is not None
    assert restart.capacity_seconds <= restart.seconds_lost
    preemption_report.append(
        f"local, 1 node: lost {restart.seconds_lost:.1f}s (waited {restart.capacity_seconds:.1f}s "
        f"for capacity), redid {restart.steps_redone} step(s)"
    )

    # The same checkpoints as an uninterrupted run: keep_top_k=2 of saves 2, 4, 6, 8, 10.
    checkpoints = run.checkpoints()
    assert [c.step for c in checkpoints] == [8, 10]
    assert [c.training_info["consumed_samples"] for c in checkpoints] == [8 * 4, 10 * 4]
    assert not [p.name for p in Path(job.checkpoint_dir(cluster)).iterdir() if not p.name.startswith("step_")]
    # One job id, one log: both attempts and the recovery line in it.
    log = run.logs()
    assert attempts_in(log) == 2
    assert "rl_lustre supervisor: recovery 1 of at most 3" in log
    assert f"resuming from {job.checkpoint_dir(cluster)}/step_4" in log
    assert [int(m[1]) for m in STEP.finditer(log)] == [1, 2, 3, 4, 5, 6, 5, 6, 7, 8, 9, 10]


def test_two_preemptions_while_the_users_process_is_gone_are_recovered_and_seen_by_a_later_attach(
    cluster: Cluster, preemption_report: list[str]
) -> None:
    job = attrs.evolve(JOB, name=f"pre-two-{uuid.uuid4().hex[:6]}")
    spec = {
        "name": cluster.name,
        "volume_dir": cluster.mount_path,
        "num_nodes": 2,
        "gpus_per_node": 1,
        "worker_nodes": 2,
        "rehearsal_step_seconds": STEP_SECONDS,
    }
    # The user's script submits and exits; nothing of it is left to recover anything.
    submitted = _python(
        f"""
        run = Cluster.local(**spec).submit(attrs.evolve(JOB, name={job.name!r}))
        print(run.job_id)
    """,
        spec,
    )
    job_id = submitted.strip().splitlines()[-1]

    wait_done(job, cluster, 3, attempt=1)
    preempt(cluster, nodes=1, back_after=0.5)
    wait_done(job, cluster, 5, attempt=2)
    preempt(cluster, nodes=2, back_after=0.5)

    # Later, another process attaches and finds the run recovered, with both restarts.
    seen = json.loads(
        _python(
            f"""
        run = Cluster.local(**spec).attach({job_id!r})
        run.wait(timeout=300)
        print(json.dumps({{"status": run.status(), "checkpoints": [c.step for c in run.checkpoints()],
                          "restarts": [[r.number, r.resumed_from_step, len(r.nodes), r.seconds_lost]
                                       for r in run.restarts()]}}))
    """,
            spec,
        )
        .strip()
        .splitlines()[-1]
    )
    assert seen["status"] == "SUCCEEDED"
    assert seen["checkpoints"] == [8, 10]
    assert [r[:3] for r in seen["restarts"]] == [[1, 2, 1], [2, 4, 2]]
    for number, _, nodes, lost in seen["restarts"]:
        assert lost is not None
        assert lost > 0
        preemption_report.append(
            f"local, {nodes} node(s), restart {number} of a run with no user process: lost {lost:.1f}s"
        )


def test_a_run_that_fails_with_every_node_alive_is_not_restarted(cluster: Cluster) -> None:
    job = attrs.evolve(JOB, name=f"pre-bug-{uuid.uuid4().hex[:6]}", max_num_steps=4)
    # A file where the checkpoint directory should be: the first save fails, a bug of the run's own.
    Path(job.checkpoint_dir(cluster)).parent.mkdir(parents=True, exist_ok=True)
    Path(job.checkpoint_dir(cluster)).write_text("not a directory")
    run = cluster.submit(job)
    with pytest.raises(JobFailedError):
        run.wait(timeout=120)
    log = run.logs()
    assert run.restarts() == []
    assert attempts_in(log) == 1
    assert "while every worker node was alive: not restarted" in log


def test_max_restarts_0_turns_recovery_off(cluster: Cluster) -> None:
    job = attrs.evolve(JOB, name=f"pre-off-{uuid.uuid4().hex[:6]}", max_restarts=0)
    run = cluster.submit(job)
    wait_done(job, cluster, 2)
    preempt(cluster, nodes=1, back_after=0.5)
    with pytest.raises(JobFailedError) as failed:
        run.wait(timeout=120)
    assert failed.value.status == "FAILED"
    assert run.restarts() == []
    assert attempts_in(run.logs()) == 1
    assert "recovery is off (max_restarts=0): not restarted" in run.logs()


def test_a_loss_after_max_restarts_is_used_up_fails_the_run_listing_its_restarts(cluster: Cluster) -> None:
    job = attrs.evolve(JOB, name=f"pre-max-{uuid.uuid4().hex[:6]}", max_restarts=1)
    run = cluster.submit(job)
    wait_done(job, cluster, 3, attempt=1)
    preempt(cluster, nodes=1, back_after=0.5).wait(timeout=120)
    wait_done(job, cluster, 5, attempt=2)
    preempt(cluster, nodes=1, back_after=0.5)
    with pytest.raises(JobFailedError) as failed:
        run.wait(timeout=240)
    assert failed.value.status == "FAILED"
    [restart] = run.restarts()
    assert (restart.number, restart.resumed_from_step) == (1, 2)
    used_up = next(line for line in run.logs().splitlines() if "max_restarts=1 is used up: not restarted" in line)
    assert "#1 at " in used_up.split("Restarts:", 1)[1]
    assert "resumed from step 2" in used_up
    assert attempts_in(run.logs()) == 2


def _stranded(job: GRPOJob, cluster: Cluster) -> None:
    """Preempt a run of ``job`` (capacity_timeout=2) for good: it ends FAILED after the timeout."""
    job = attrs.evolve(job, capacity_timeout=2.0)
    run = cluster.submit(job)
    wait_done(job, cluster, 2)
    preempt(cluster, nodes=1, back_after=None)
    with pytest.raises(JobFailedError) as failed:
        run.wait(timeout=120)
    assert "did not come back within capacity_timeout=2s: giving up" in "\n".join(failed.value.last_lines)
    [restart] = run.restarts()
    assert restart.first_step is None
    assert restart.seconds_lost is None
    assert attempts_in(run.logs()) == 1


def test_capacity_that_never_returns_fails_the_run_after_the_timeout(cluster: Cluster) -> None:
    _stranded(attrs.evolve(JOB, name=f"pre-gone-{uuid.uuid4().hex[:6]}"), cluster)


def test_stopping_a_run_stops_supervisor_and_driver_and_nothing_reruns(cluster: Cluster) -> None:
    job = attrs.evolve(JOB, name=f"pre-stop-{uuid.uuid4().hex[:6]}", max_num_steps=50)
    run = cluster.submit(job)
    wait_done(job, cluster, 1)
    assert run.stop(timeout=60) == "STOPPED"
    log = run.logs()
    assert "SIGTERM received: stopping the run; no rerun follows" in log
    assert attempts_in(log) == 1
    time.sleep(1.0)
    assert not [p for p in _cmdlines() if job.name in p], "a driver of the stopped run still runs"


def _cmdlines() -> list[str]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    out.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                pass
    return out


def _python(body: str, spec: dict[str, Any]) -> str:
    script = "\n".join(
        [
            "import json, sys",
            "import attrs",
            "from rl_lustre import Cluster, GRPOJob",
            f"JOB = GRPOJob(**{JOB_ARGS!r})",
            f"spec = {spec!r}",
            textwrap.dedent(body),
        ]
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_kube_fake_preempts_a_spot_node_the_way_gke_does() -> None:
    from rl_lustre.kube.client import ResourceClient
    from rl_lustre.testing import KubeFake, KubeTimings

    selector = {"cloud.google.com/gke-accelerator": "nvidia-b200"}
    worker = {
        "name": "ray-worker",
        "image": "rayproject/ray:2.46.0",
        "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}},
    }
    rc = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "default"},
        "spec": {
            "rayVersion": "2.46.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": 2,
                    "minReplicas": 2,
                    "maxReplicas": 2,
                    "rayStartParams": {},
                    "template": {"spec": {"nodeSelector": selector, "containers": [worker]}},
                }
            ],
        },
    }
    # Terminating pods linger a while, so that the preempted pod's last status can be read.
    with KubeFake(timings=KubeTimings(deletion=1.5)) as fake:
        fake.add_nodes("gpu-pool", 2, {**selector, "cloud.google.com/gke-spot": "true"})
        ResourceClient(fake.api_client(), "RayCluster", "default").create(rc)
        _until(lambda: (fake.get("RayCluster", "rc") or {}).get("status", {}).get("readyWorkerReplicas") == 2)
        before = {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in fake.objects("Pod")
            if p["metadata"]["labels"]["ray.io/node-type"] == "worker"
        }
        assert sorted(before.values()) == ["gke-gpu-pool-0000", "gke-gpu-pool-0001"]

        # Capacity comes back after the Failed pod is gone (it lingers 1.5 s), as KubeRay replaces it only then.
        gone = fake.preempt("rc", nodes=1, back_after=4.0)
        [victim] = gone.nodes
        pod = fake.get("Pod", victim)
        assert pod is not None
        assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "Terminated")
        assert pod["status"]["message"] == "Pod was terminated in response to imminent node shutdown."
        disruption = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
        assert (disruption["status"], disruption["reason"]) == ("True", "TerminationByKubelet")
        # The VM is gone, and with it its Node; KubeRay replaces the Failed pod, which waits for Spot capacity.
        assert fake.get("Node", before[victim], namespace=None) is None
        events = fake.objects("Event", include_events=True)
        reasons = {(e["involvedObject"]["name"], e["reason"]) for e in events}
        assert (before[victim], "PreemptionNotice") in reasons
        # The node lifecycle controller's record of the VM going away (the goodput ledger's end of its bill).
        assert (before[victim], "RemovingNode") in reasons
        assert (victim, "TerminationByKubelet") in reasons
        _until(
            lambda: any(
                r == "FailedScaleUp"
                for _, r in {
                    (e["involvedObject"]["name"], e["reason"]) for e in fake.objects("Event", include_events=True)
                }
            )
        )
        assert ("rc", "DeletedWorkerPod") in {
            (e["involvedObject"]["name"], e["reason"]) for e in fake.objects("Event", include_events=True)
        }
        [replacement] = gone.wait(timeout=120)
        assert replacement not in before
        nodes = {n["metadata"]["name"]: n for n in fake.objects("Node")}
        assert fake.get("Pod", replacement)["spec"]["nodeName"] in nodes
        assert len(nodes) == 2
        assert all(n["metadata"]["labels"]["cloud.google.com/gke-spot"] == "true" for n in nodes.values())


def _until(predicate: Any, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_on_the_gke_fakes_a_preempted_spot_node_is_recovered_on_the_cluster(
    spot_head: SpotHead, tmp_path: Path, preemption_report: list[str]
) -> None:
    spec = spot_spec("rl-spot", tmp_path, num_nodes=1)
    job = GRPOJob(
        **{
            **JOB_ARGS,
            "name": "spot",
            "num_generations_per_prompt": 8,
            "train_global_batch_size": 32,
            "nemo_rl_dir": str(nemo_rl_dir(tmp_path, STEP_SECONDS)),
        }
    )
    with spot_gke(spot_head, spec) as (cluster, kube):
        run = cluster.submit(job)
        wait_done(job, cluster, 5)
        gone = preempt(cluster, nodes=1, back_after=1.0)
        victim = kube.get("Pod", gone.nodes[0])
        assert victim is not None
        assert any(c["type"] == "DisruptionTarget" for c in victim["status"]["conditions"])
        assert run.wait(timeout=300) == "SUCCEEDED"
        [restart] = run.restarts()
        assert restart.resumed_from_step == 4
        assert restart.first_step == 5
        assert [c.step for c in run.checkpoints()] == [8, 10]
        assert restart.seconds_lost is not None
        preemption_report.append(
            f"fake GKE, 1 Spot node: lost {restart.seconds_lost:.1f}s "
            f"(waited {restart.capacity_seconds:.1f}s for capacity)"
        )
        gone.wait(timeout=120)

        # Two preemptions of one run: two restarts, each from the newest complete save.
        twice = attrs.evolve(job, name="spot-twice")
        run = cluster.submit(twice)
        wait_done(twice, cluster, 3, attempt=1)
        preempt(cluster, nodes=1, back_after=0.5).wait(timeout=120)
        wait_done(twice, cluster, 5, attempt=2)
        preempt(cluster, nodes=1, back_after=0.5).wait(timeout=120)
        assert run.wait(timeout=300) == "SUCCEEDED"
        assert [(r.number, r.resumed_from_step) for r in run.restarts()] == [(1, 2), (2, 4)]
        assert [c.step for c in run.checkpoints()] == [8, 10]
        for r in run.restarts():
            assert r.seconds_lost is not None
            preemption_report.append(f"fake GKE, restart {r.number} of 2: lost {r.seconds_lost:.1f}s")

        # A failure of the run's own, with every node alive: not restarted.
        bug = attrs.evolve(job, name="spot-bug", max_num_steps=4)
        Path(bug.checkpoint_dir(cluster)).parent.mkdir(parents=True, exist_ok=True)
        Path(bug.checkpoint_dir(cluster)).write_text("not a directory")
        run = cluster.submit(bug)
        with pytest.raises(JobFailedError):
            run.wait(timeout=120)
        assert run.restarts() == []
        assert "while every worker node was alive: not restarted" in run.logs()

        # Recovery off: a preemption ends the run.
        off = attrs.evolve(job, name="spot-off", max_restarts=0)
        run = cluster.submit(off)
        wait_done(off, cluster, 2)
        gone = preempt(cluster, nodes=1, back_after=0.5)
        with pytest.raises(JobFailedError):
            run.wait(timeout=120)
        assert run.restarts() == []
        assert "recovery is off (max_restarts=0): not restarted" in run.logs()
        gone.wait(timeout=120)

        # Spot capacity that never comes back: FAILED once capacity_timeout has passed.
        _stranded(attrs.evolve(job, name="spot-stranded"), cluster)
