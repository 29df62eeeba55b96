"""The keeper's parts (issue 31, point 2): what it resubmits and in which order, and how it
learns why a head went, from the head pods' status and events through its service account."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from rl_lustre.oncluster.headpods import KubeHead
from rl_lustre.oncluster.records import HEAD_LOST, PRIORITY, RUN_ID, SEQ, SUBMITTED_AT
from rl_lustre.oncluster.resubmit import order, resubmission, submission_id
from rl_lustre.oncluster.runrecords import RunWriter
from rl_lustre.oncluster.runview import RunView


def _run(root: Path, name: str, meta: dict[str, str], runtime_env: dict[str, Any], *records: str) -> RunView:
    writer = RunWriter.open(
        root / name,
        submission=name,
        metadata={RUN_ID: name, **meta},
        runtime_env=runtime_env,
        argv=["--nodes", "1", "--", "train"],
    )
    for line in records:
        writer.feed(f"RL_LUSTRE_EVENT {line}\n".encode())
    return RunView(root / name)


@pytest.mark.oncluster
def test_a_resubmission_is_the_recorded_one_with_the_lost_heads_packages_uploaded_again(tmp_path: Path) -> None:
    env = {
        "env_vars": {"HF_HOME": "/lustre/hf"},
        "py_modules": ["gcs://_ray_pkg_0123.zip"],
        "working_dir": "gcs://_ray_pkg_4567.zip",
        "excludes": ["*.pyc"],
    }
    view = _run(tmp_path, "rl-lustre-a-1", {SUBMITTED_AT: "5.0", SEQ: "0"}, env)
    lost = {"lost_at": 12.0, "head": "demo-head-x", "reason": "OOMKilled", "session": "s1"}
    item = resubmission(view, "session-2", lost)
    assert item is not None
    assert item.entrypoint == (view.submission or {})["entrypoint"]
    assert item.entrypoint.endswith("-m rl_lustre_oncluster.supervisor --nodes 1 -- train")
    assert item.runtime_env == {
        "env_vars": {"HF_HOME": "/lustre/hf"},
        "py_modules": [str(tmp_path / "rl-lustre-a-1" / "packages" / "rl_lustre_oncluster")],
        "working_dir": str(tmp_path / "rl-lustre-a-1" / "packages" / "working_dir"),
    }
    assert json.loads(item.metadata[HEAD_LOST]) == lost
    assert (item.metadata[RUN_ID], item.metadata[SUBMITTED_AT], item.metadata[SEQ]) == ("rl-lustre-a-1", "5.0", "0")
    # The same head gets the same id (a keeper restarted half-way cannot start the run twice); another head another.
    assert item.submission_id == submission_id("rl-lustre-a-1", "session-2")
    assert item.submission_id.startswith("rl-lustre-a-1-h")
    assert submission_id("rl-lustre-a-1", "session-3") != item.submission_id
    # The supervisor kept the package it ran from, whole, for exactly this.
    assert (tmp_path / "rl-lustre-a-1" / "packages" / "rl_lustre_oncluster" / "keeper.py").is_file()


@pytest.mark.oncluster
def test_the_runs_go_back_in_their_queue_order_those_that_held_their_nodes_first(tmp_path: Path) -> None:
    granted = '{"at": 1.0, "event": "granted", "need": 1}'
    runs = [
        _run(tmp_path, "late", {PRIORITY: "0", SUBMITTED_AT: "3.0", SEQ: "0"}, {}),
        _run(tmp_path, "urgent", {PRIORITY: "5", SUBMITTED_AT: "9.0", SEQ: "0"}, {}),
        _run(tmp_path, "holder", {PRIORITY: "0", SUBMITTED_AT: "8.0", SEQ: "0"}, {}, granted),
        _run(tmp_path, "early-2", {PRIORITY: "0", SUBMITTED_AT: "1.0", SEQ: "1"}, {}),
        _run(tmp_path, "early-1", {PRIORITY: "0", SUBMITTED_AT: "1.0", SEQ: "0"}, {}),
    ]
    assert [v.path.name for v in sorted(runs, key=order)] == ["holder", "urgent", "early-1", "early-2", "late"]


def _head_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"ray.io/cluster": "demo", "ray.io/node-type": "head"},
        },
        "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.46.0"}]},
    }


def _running(o: dict[str, Any], restarts: int = 0, last: str | None = None) -> None:
    status: dict[str, Any] = {"phase": "Running", "containerStatuses": [{"name": "ray-head", "restartCount": restarts}]}
    if last is not None:
        status["containerStatuses"][0]["lastState"] = {
            "terminated": {"reason": last, "exitCode": 137, "finishedAt": "2026-01-01T00:00:05Z"}
        }
    o["status"] = status


@pytest.mark.parametrize("how", ["OOMKilled", "Evicted", "deleted"])
def test_the_keeper_tells_why_the_head_went_from_what_kubernetes_says_of_its_pod(how: str, tmp_path: Path) -> None:
    from rl_lustre.testing import KubeFake
    from rl_lustre.testing.kube import DEFAULT_TOKEN

    with KubeFake() as fake:
        fake._controllers.operator.reconcile = lambda: None  # type: ignore[method-assign]  # pods made by hand
        creds = tmp_path / "serviceaccount"
        creds.mkdir()
        (creds / "token").write_text(DEFAULT_TOKEN)
        (creds / "ca.crt").write_bytes(fake.ca_pem)
        host, port = fake.endpoint.rsplit(":", 1)
        saved = {k: os.environ.get(k) for k in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
        os.environ.update(KUBERNETES_SERVICE_HOST=host, KUBERNETES_SERVICE_PORT=port)
        try:
            store = fake._store
            fake._on_loop(lambda: store.create(_head_pod("demo-head-a")))
            fake._on_loop(lambda: store.update("Pod", "default", "demo-head-a", _running))
            head = KubeHead("demo", "default", credentials=str(creds))
            head.look()
            head.healthy()
            if how == "OOMKilled":
                fake._on_loop(
                    lambda: store.update("Pod", "default", "demo-head-a", lambda o: _running(o, 1, "OOMKilled"))
                )
            elif how == "Evicted":

                def evicted(o: dict[str, Any]) -> None:
                    o["status"] = {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}

                fake._on_loop(lambda: store.update("Pod", "default", "demo-head-a", evicted))
                head.look()
                fake._on_loop(lambda: store.remove(store.get("Pod", "default", "demo-head-a")))
            else:
                pod = fake._on_loop(lambda: store.get("Pod", "default", "demo-head-a"))
                fake._on_loop(lambda: fake._controllers.event(pod, "Killing", "Stopping container ray-head"))
                fake._on_loop(lambda: store.remove(store.get("Pod", "default", "demo-head-a")))
            fake._on_loop(lambda: store.create(_head_pod("demo-head-b")))
            why = head.why()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    assert why["head"] == "demo-head-a"
    assert why["reason"] == {"OOMKilled": "OOMKilled", "Evicted": "Evicted", "deleted": "Killing"}[how]


def test_the_keepers_objects_hold_the_whole_package_with_the_least_rbac_and_no_secret() -> None:
    """Issue 31, point 2: the keeper's Deployment and what it needs, as Kubernetes' schemas accept them."""
    from rl_lustre import Cluster, naming
    from rl_lustre.kube.keeper import CONFIGMAP_LIMIT, keeper_manifests, teardown_job
    from rl_lustre.recovery import shipped_package
    from rl_lustre.testing import kube_schema_validator

    cluster = Cluster(
        name="demo", project="my-project", region="us-east1", zone="us-east1-b", secrets=["HF_TOKEN", "RAY_AUTH_TOKEN"]
    )
    manifests = keeper_manifests(cluster)
    validate = kube_schema_validator()
    for manifest in [*manifests, teardown_job(cluster)]:
        validate(manifest)
    account, role, binding, code, deployment = manifests
    assert account["automountServiceAccountToken"] is False
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list", "watch"]}]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": naming.keeper_name(cluster), "namespace": "default"}
    ]
    # The whole on-cluster package, well inside a ConfigMap's limit (about 280 KB with the watchdog
    # and the seal: at half the limit, a package twice today's size would need another carrier).
    shipped = sorted(p.relative_to(shipped_package()).as_posix() for p in Path(shipped_package()).rglob("*.py"))
    pod = deployment["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if "configMap" in v]
    assert sorted(i["path"] for i in volume["configMap"]["items"]) == shipped
    assert sum(len(k) + len(v.encode()) for k, v in code["data"].items()) < CONFIGMAP_LIMIT / 2
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["spec"]["replicas"] == 1
    assert pod["serviceAccountName"] == naming.keeper_name(cluster)
    assert pod["automountServiceAccountToken"] is True
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": naming.cpu_pool_name(cluster)}
    [container] = pod["containers"]
    assert container["command"][:3] == ["python", "-m", "rl_lustre_oncluster.keeper"]
    # Ray's token from the Secret, and no other secret: the keeper needs none.
    refs = [e["name"] for e in container["env"] if "valueFrom" in e]
    assert refs == ["RAY_AUTH_TOKEN"]
    assert all("value" not in e for e in container["env"] if e["name"] == "RAY_AUTH_TOKEN")
    # The teardown Job needs no API access at all.
    job_pod = teardown_job(cluster)["spec"]["template"]["spec"]
    assert job_pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in job_pod


def test_a_keeper_that_cannot_read_the_head_pods_says_so_once_and_when_it_can_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without its pods the keeper cannot tell why a head went (it says "lost"): the log must show
    why it could not read them (an empty CA, a wrong port), once, not at every look."""
    from rl_lustre.testing import KubeFake
    from rl_lustre.testing.kube import DEFAULT_TOKEN

    with KubeFake() as fake:
        creds = tmp_path / "serviceaccount"
        creds.mkdir()
        (creds / "token").write_text(DEFAULT_TOKEN)
        (creds / "ca.crt").write_bytes(b"")
        host, port = fake.endpoint.rsplit(":", 1)
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
        said: list[str] = []
        head = KubeHead("demo", "default", credentials=str(creds), say=said.append)
        head.look()
        head.look()
        assert len(said) == 1
        assert said[0].startswith("cannot read the head pods (a lost head's reason will be unknown): SSLError")
        (creds / "ca.crt").write_bytes(fake.ca_pem)
        head.look()
        assert said[1:] == ["reading the head pods again"]
        assert head.failed is None
