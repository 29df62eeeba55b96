"""The client's side of hangs (issue 33): the job's knobs, validated before anything is sent; what
a submission tells the supervisor and sets in the run's environment (the NCCL flight recorder);
what the RayCluster grants the head (SYS_PTRACE, read-only access to its pods' events), and the
head reading those events through the Kubernetes API (the KubeFake, over TLS with a token)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from rl_lustre import Cluster, GRPOJob
from rl_lustre.backends.submission import prepare
from rl_lustre.errors import ConfigError
from rl_lustre.kube.keeper import keeper_manifests
from rl_lustre.kube.manifests import build_manifests
from rl_lustre.oncluster.jobargs import parser
from rl_lustre.oncluster.kubeevents import pod_events
from rl_lustre.oncluster.nccl import DUMP_FILE, PIPE_FILE, TRACE_BUFFER_SIZE
from rl_lustre.oncluster.rundir import run_dir
from rl_lustre.testing import KubeFake

JOB = {"name": "hangs", "recipe": "grpo_math_1B", "model": "Qwen/Qwen2.5-1.5B", "max_num_steps": 4}


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("hang_timeout", 0, "must be greater than 0"),
        ("hang_timeout", -5.0, "must be greater than 0"),
        ("hang_timeout", "10m", "must be a number"),
        ("hang_timeout", 8 * 24 * 3600, "must be at most 604800"),
        ("startup_timeout", 0, "must be greater than 0"),
        ("startup_timeout", None, "must be a number"),
    ],
)
def test_the_timeouts_are_validated_naming_the_field_value_and_rule(field: str, value: object, rule: str) -> None:
    with pytest.raises(ConfigError) as e:
        GRPOJob(**JOB, **{field: value})  # type: ignore[arg-type]
    assert f"GRPOJob.{field}={value!r}" in str(e.value)
    assert rule in str(e.value)


def test_the_job_shows_its_timeouts() -> None:
    assert "hang_timeout=None" in repr(GRPOJob(**JOB))
    assert "hang_timeout=900" in repr(GRPOJob(**JOB, hang_timeout=900))
    assert "startup_timeout=3600.0" in repr(GRPOJob(**JOB))


def _supervisor_args(entrypoint: str) -> object:
    words = shlex.split(entrypoint)
    start = words.index("-m") + 2
    return parser().parse_args(words[start:])


def test_a_submission_tells_the_supervisor_its_timeouts_and_the_run_its_flight_recorder(tmp_path: Path) -> None:
    cluster = Cluster.local("hang-demo", volume_dir=tmp_path)
    s = prepare(cluster, GRPOJob(**JOB, hang_timeout=120, startup_timeout=1800))
    args = _supervisor_args(s.entrypoint)
    assert (args.hang_timeout, args.startup_timeout) == (120.0, 1800.0)  # type: ignore[attr-defined]
    assert args.kube_raycluster == ""  # type: ignore[attr-defined]
    adaptive = _supervisor_args(prepare(cluster, GRPOJob(**JOB)).entrypoint)
    assert adaptive.hang_timeout is None  # type: ignore[attr-defined]
    env = s.runtime_env["env_vars"]
    where = run_dir(cluster.mount_path, s.base_id)
    assert env[TRACE_BUFFER_SIZE] == "2000"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env[DUMP_FILE] == f"{where}/diagnostics/nccl/rank_"
    # The trigger's pipes are on each node's own /tmp, named after the run.
    assert env[PIPE_FILE] == f"/tmp/rl_lustre_nccl_{s.base_id}_rank_"
    # The run's identity is the job's: the recorder's settings do not change it.
    assert prepare(cluster, GRPOJob(**JOB, hang_timeout=120, startup_timeout=1800)).base_id == s.base_id


def test_on_gke_the_supervisor_reads_the_events_of_its_raycluster() -> None:
    cluster = Cluster(
        name="hang-gke", project="my-project", region="us-east1", zone="us-east1-b", fabric="tcp", namespace="rl"
    )
    args = _supervisor_args(prepare(cluster, GRPOJob(**JOB, num_nodes=1)).entrypoint)
    assert (args.kube_raycluster, args.kube_namespace) == ("hang-gke", "rl")  # type: ignore[attr-defined]


def test_the_rayclusters_containers_may_ptrace_and_the_head_reads_only_pods_and_events() -> None:
    cluster = Cluster(name="hang-gke", project="my-project", region="us-east1", zone="us-east1-b", fabric="tcp")
    objs = {m["kind"]: m for m in build_manifests(cluster)}
    rc = objs["RayCluster"]["spec"]
    pods = [rc["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in rc["workerGroupSpecs"])]
    for pod in pods:
        for container in pod["containers"]:
            assert container["securityContext"]["capabilities"]["add"] == ["SYS_PTRACE"]
    assert rc["headGroupSpec"]["template"]["spec"]["serviceAccountName"] == "hang-gke-ray-head"
    assert "serviceAccountName" not in rc["workerGroupSpecs"][0]["template"]["spec"]
    assert objs["Role"]["rules"] == [{"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list"]}]
    binding = objs["RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hang-gke-ray-head", "namespace": "default"}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hang-gke-ray-head"}
    # The keeper's account and Role (issue 31) are others, of another name: neither grants the other's rights.
    rbac = ("ServiceAccount", "Role", "RoleBinding")
    head = {(m["kind"], m["metadata"]["name"]) for m in build_manifests(cluster) if m["kind"] in rbac}
    keeper = {(m["kind"], m["metadata"]["name"]) for m in keeper_manifests(cluster) if m["kind"] in rbac}
    assert len(head) == len(keeper) == 3
    assert not head & keeper
    planned = cluster.plan().keys()
    assert {"head-account", "head-role", "head-role-binding", "keeper"} <= set(planned)


def test_the_head_reads_its_pods_events_through_the_kubernetes_api() -> None:
    with KubeFake() as kube:
        for name, cluster in (("rc-head-x", "rc"), ("rc-worker-y", "rc"), ("other-worker-z", "other")):
            kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": "default", "labels": {"ray.io/cluster": cluster}},
                    "spec": {"containers": [{"name": "c", "image": "i"}], "nodeName": f"node-{name}"},
                }
            )
        for i, (obj, reason) in enumerate([("rc-worker-y", "OOMKilling"), ("other-worker-z", "Pulled")]):
            kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"e{i}", "namespace": "default"},
                    "involvedObject": {"kind": "Pod", "name": obj, "namespace": "default"},
                    "reason": reason,
                    "message": f"{reason} on {obj}",
                    "type": "Warning",
                    "lastTimestamp": f"2026-01-01T00:00:0{i}Z",
                }
            )
        found = pod_events("rc", "default", api=kube.url, token="kube-fake-token", ca_pem=kube.ca_pem.decode())
    assert sorted(p["name"] for p in found["pods"]) == ["rc-head-x", "rc-worker-y"]
    assert [(e["object"], e["reason"]) for e in found["events"]] == [("Pod/rc-worker-y", "OOMKilling")]
