"""Apply, adopt, wait (watched), diagnose and delete a deployment's manifests on the fake.

The manifests are the real ones from ``build_manifests``; the fake validates every
object it receives against the Kubernetes schemas (strict) and the RayCluster against
the KubeRay CRD schema shipped in the package.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Iterator

import attrs
import pytest
from helpers.specs import GKE

from rl_lustre import Cluster
from rl_lustre.errors import KubernetesError, NotReadyError, OwnershipError, WaitTimeoutError
from rl_lustre.kube.apply import apply_manifests, delete_deployment, delete_manifests, wait_ready
from rl_lustre.kube.manifests import build_manifests
from rl_lustre.testing.kube import KubeFake, KubeTimings, schema_validator

DEPLOYMENT = "rl-demo"
HEAD_ACCESS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")


@pytest.fixture(scope="module")
def fake() -> Iterator[KubeFake]:
    with KubeFake(validate=schema_validator()) as server:
        yield server


@pytest.fixture(autouse=True)
def _clean(fake: KubeFake) -> Iterator[None]:
    fake.reset()
    yield
    assert fake.rejected == [], "an object we sent does not match the real schema"
    assert fake.unhandled == []


@pytest.fixture
def api(fake: KubeFake):
    return fake.api_client()


def make_cluster(**changes: object) -> Cluster:
    cluster = Cluster(**{**GKE, "name": DEPLOYMENT}, num_nodes=2, fabric="tcp")
    if changes:
        cluster = attrs.evolve(cluster, **changes)
    cluster.volume._live.mount_point = "10.90.1.4@tcp:/lustrefs"  # as LustreVolume.refresh() would
    return cluster


def manifests(cluster: Cluster | None = None, hf_token: str = "hf_first_value") -> list[dict]:
    """The deployment's objects but its ComputeClass and the head's access (ServiceAccount, Role,
    RoleBinding, ClusterRole, ClusterRoleBinding): how objects are applied, adopted and deleted is
    this module's; those (applied the same way) are test_capacity_fallback's, test_computeclass's
    and, for the head's, :func:`head_access`'s tests below."""
    built = build_manifests(cluster or make_cluster(), secret_values={"HF_TOKEN": hf_token}, redact=False)
    return [m for m in built if m["kind"] != "ComputeClass" and m["kind"] not in HEAD_ACCESS]


def raycluster_reads(fake: KubeFake) -> tuple[int, int]:
    """(plain reads, watches) of RayClusters the fake answered."""
    reads = [r for r in fake.requests if r.method == "GET" and "/rayclusters" in r.path]
    watches = [r for r in reads if "watch=true" in r.query]
    return len(reads) - len(watches), len(watches)


def test_apply_creates_and_the_raycluster_becomes_ready_through_watches(fake: KubeFake, api, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="rl_lustre")
    fake.timings.start = 1.0  # pods take a while, so the RayCluster is not ready when first read
    ms = manifests()
    try:
        applied = apply_manifests(api, ms, deployment=DEPLOYMENT)
        rc = wait_ready(api, ms, timeout=20)
    finally:
        fake.timings.start = KubeTimings().start
    assert [(a.kind, a.action) for a in applied] == [
        ("PersistentVolume", "created"),
        ("PersistentVolumeClaim", "created"),
        ("Secret", "created"),
        ("RayCluster", "created"),
    ]
    assert rc is not None
    conditions = {c["type"]: c["status"] for c in rc["status"]["conditions"]}
    assert conditions["HeadPodReady"] == conditions["RayClusterProvisioned"] == "True"
    assert fake.get("PersistentVolumeClaim", "rl-demo-lustre-pvc")["status"]["phase"] == "Bound"
    reads, watches = raycluster_reads(fake)
    assert watches >= 1, f"readiness must be watched ({reads} reads, {watches} watches)"
    assert reads <= 2, f"readiness must not be polled ({reads} reads, {watches} watches)"
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and r.name == "rl_lustre.kube.apply"]
    assert info == [
        f"created {a}"
        for a in (
            "PersistentVolume rl-demo-lustre-pv",
            "PersistentVolumeClaim default/rl-demo-lustre-pvc",
            "Secret default/rl-demo-job-secrets",
            "RayCluster default/rl-demo",
        )
    ]
    assert any(r.levelno == logging.DEBUG and "watch RayCluster" in r.getMessage() for r in caplog.records)
    assert "hf_first_value" not in caplog.text


def test_reapply_adopts_changes_and_leaves_the_rest(fake: KubeFake, api, caplog) -> None:
    ms = manifests()
    apply_manifests(api, ms, deployment=DEPLOYMENT)
    wait_ready(api, ms, timeout=20)
    uid = fake.get("RayCluster", DEPLOYMENT)["metadata"]["uid"]

    caplog.set_level(logging.INFO, logger="rl_lustre")
    caplog.clear()
    again = apply_manifests(api, ms, deployment=DEPLOYMENT)
    assert {a.action for a in again} == {"unchanged"}
    assert not [r for r in caplog.records if r.levelno >= logging.INFO], "nothing changed, nothing logged"

    bigger = manifests(make_cluster(num_nodes=3), hf_token="hf_second_value")
    adopted = {a.kind: a.action for a in apply_manifests(api, bigger, deployment=DEPLOYMENT)}
    assert adopted == {
        "PersistentVolume": "unchanged",
        "PersistentVolumeClaim": "unchanged",
        "Secret": "adopted",
        "RayCluster": "adopted",
    }
    stored = fake.get("RayCluster", DEPLOYMENT)
    assert stored["metadata"]["uid"] == uid, "adopted in place, not recreated"
    assert stored["spec"]["workerGroupSpecs"][0]["replicas"] == 3
    secret = fake.get("Secret", f"{DEPLOYMENT}-job-secrets")
    assert base64.b64decode(secret["data"]["HF_TOKEN"]).decode() == "hf_second_value"
    rc = wait_ready(api, bigger, timeout=20)
    assert rc["status"]["readyWorkerReplicas"] == 3, "ready only once the new generation is observed"
    assert "hf_second_value" not in caplog.text
    assert "hf_first_value" not in caplog.text


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_a_released_volume_of_ours_binds_the_new_claim(fake: KubeFake, api, caplog) -> None:
    """Teardown stopped after the claim was deleted and before the volume: the volume is
    Released, naming the old claim's uid. The next apply makes it bindable again."""
    ms = manifests()
    apply_manifests(api, ms, deployment=DEPLOYMENT)
    wait_ready(api, ms, timeout=20)
    old_uid = fake.get("PersistentVolumeClaim", f"{DEPLOYMENT}-lustre-pvc")["metadata"]["uid"]
    delete_manifests(api, ms[1:], deployment=DEPLOYMENT, timeout=20)  # claim, secret, RayCluster; not the volume
    wait_for(lambda: fake.get("PersistentVolume", f"{DEPLOYMENT}-lustre-pv", None)["status"]["phase"] == "Released")
    assert fake.get("PersistentVolume", f"{DEPLOYMENT}-lustre-pv", None)["spec"]["claimRef"]["uid"] == old_uid

    caplog.set_level(logging.INFO, logger="rl_lustre")
    applied = {a.kind: a.action for a in apply_manifests(api, ms, deployment=DEPLOYMENT)}
    assert applied["PersistentVolume"] == "adopted"
    wait_ready(api, ms, timeout=20)
    pv = fake.get("PersistentVolume", f"{DEPLOYMENT}-lustre-pv", None)
    claim = fake.get("PersistentVolumeClaim", f"{DEPLOYMENT}-lustre-pvc")
    assert pv["status"]["phase"] == "Bound"
    assert pv["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"] != old_uid
    assert any("is Released" in r.getMessage() and old_uid in r.getMessage() for r in caplog.records)


def test_reapply_of_an_unchanged_deployment_sends_no_change(fake: KubeFake, api) -> None:
    """The PersistentVolume goes out with storageClassName "", which the server drops."""
    ms = manifests()
    assert ms[0]["spec"]["storageClassName"] == ""
    apply_manifests(api, ms, deployment=DEPLOYMENT)
    assert "storageClassName" not in fake.get("PersistentVolume", f"{DEPLOYMENT}-lustre-pv", None)["spec"]
    assert {a.action for a in apply_manifests(api, ms, deployment=DEPLOYMENT)} == {"unchanged"}


def test_two_deployments_share_a_namespace(fake: KubeFake, api) -> None:
    """A shared cluster reached with use_kubeconfig: each deployment has its own claim."""
    first, second = make_cluster(), make_cluster(name="rl-other")
    second.volume._live.mount_point = "10.90.1.5@tcp:/lustrefs"
    for cluster in (first, second):
        ms = manifests(cluster)
        apply_manifests(api, ms, deployment=cluster.name)
        wait_ready(api, ms, timeout=20)
    claims = {c["metadata"]["name"]: c["spec"]["volumeName"] for c in fake.objects("PersistentVolumeClaim")}
    assert claims == {"rl-demo-lustre-pvc": "rl-demo-lustre-pv", "rl-other-lustre-pvc": "rl-other-lustre-pv"}
    delete_deployment(api, "rl-other", timeout=20)
    assert fake.get("PersistentVolumeClaim", "rl-demo-lustre-pvc")["status"]["phase"] == "Bound"


def test_same_named_object_without_our_labels_is_never_touched(fake: KubeFake, api) -> None:
    theirs = fake.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{DEPLOYMENT}-job-secrets", "namespace": "default", "labels": {"team": "other"}},
            "data": {"HF_TOKEN": base64.b64encode(b"theirs").decode()},
        }
    )
    with pytest.raises(OwnershipError, match=f"Secret default/{DEPLOYMENT}-job-secrets"):
        apply_manifests(api, manifests(), deployment=DEPLOYMENT)
    after = fake.get("Secret", f"{DEPLOYMENT}-job-secrets")
    assert after == theirs
    assert fake.get("RayCluster", DEPLOYMENT) is None, "nothing after the conflict is applied"

    deleted = delete_manifests(api, manifests(), deployment=DEPLOYMENT, timeout=10)
    assert f"Secret default/{DEPLOYMENT}-job-secrets" not in deleted
    assert fake.get("Secret", f"{DEPLOYMENT}-job-secrets") == theirs
    assert {o["kind"] for o in fake.objects()} == {"Secret"}


def test_object_of_another_deployment_is_not_adopted(fake: KubeFake, api) -> None:
    pv = dict(manifests()[0])
    pv["metadata"] = dict(pv["metadata"], labels={"managed-by": "rl-lustre", "rl-lustre-deployment": "other-run"})
    fake.create(pv)
    with pytest.raises(OwnershipError, match="'rl-lustre-deployment': 'other-run'"):
        apply_manifests(api, manifests(), deployment=DEPLOYMENT)
    assert (
        fake.get("PersistentVolume", f"{DEPLOYMENT}-lustre-pv", None)["metadata"]["labels"]["rl-lustre-deployment"]
        == "other-run"
    )


def test_immutable_difference_is_reported_not_patched(fake: KubeFake, api) -> None:
    apply_manifests(api, manifests(), deployment=DEPLOYMENT)
    moved = make_cluster()
    moved.volume._live.mount_point = "10.90.9.9@tcp:/lustrefs"
    with pytest.raises(KubernetesError, match=r"PersistentVolume rl-demo-lustre-pv .*spec\.csi"):
        apply_manifests(api, manifests(moved), deployment=DEPLOYMENT)
    assert (
        fake.get("PersistentVolume", f"{DEPLOYMENT}-lustre-pv", None)["spec"]["csi"]["volumeAttributes"]["ip"]
        == "10.90.1.4"
    )


def test_pv_without_a_lustre_address_is_refused_before_any_request(fake: KubeFake, api) -> None:
    cluster = Cluster(**{**GKE, "name": DEPLOYMENT}, fabric="tcp")
    with pytest.raises(NotReadyError, match="no Lustre address"):
        apply_manifests(api, build_manifests(cluster), deployment=DEPLOYMENT)
    assert fake.requests == []


def test_apply_waits_for_a_terminating_object_then_creates_it_again(fake: KubeFake, api) -> None:
    ms = manifests()
    apply_manifests(api, ms, deployment=DEPLOYMENT)
    old_uid = fake.get("Secret", f"{DEPLOYMENT}-job-secrets")["metadata"]["uid"]
    fake.delete("Secret", f"{DEPLOYMENT}-job-secrets")
    result = {a.kind: a for a in apply_manifests(api, ms, deployment=DEPLOYMENT, timeout=10)}
    assert result["Secret"].action == "created"
    assert fake.get("Secret", f"{DEPLOYMENT}-job-secrets")["metadata"]["uid"] != old_uid


def test_wait_lists_again_after_410_gone(fake: KubeFake, api) -> None:
    fake.faults.no_operator = True
    ms = manifests()
    apply_manifests(api, ms, deployment=DEPLOYMENT)
    outcome: dict[str, object] = {}

    def wait() -> None:
        try:
            outcome["rc"] = wait_ready(api, ms, timeout=20)
        except Exception as exc:
            outcome["error"] = exc

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 10
    while raycluster_reads(fake)[1] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    lists_before = raycluster_reads(fake)[0]
    fake.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "unrelated", "namespace": "default"}})
    fake.compact()  # ends the open watch; watching again from its version is 410 Gone
    time.sleep(0.3)
    fake.faults.no_operator = False
    waiter.join(30)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["rc"]["status"]["state"] == "ready"
    assert raycluster_reads(fake)[0] > lists_before, "after 410 the object is listed again"


def test_older_kuberay_ready_state_without_conditions(fake: KubeFake, api) -> None:
    fake.faults.legacy_status = True
    ms = manifests()
    apply_manifests(api, ms, deployment=DEPLOYMENT)
    rc = wait_ready(api, ms, timeout=20)
    assert rc["status"]["state"] == "ready"
    assert "conditions" not in rc["status"]


FAULTS = [
    pytest.param(
        {"image_pull": True},
        "ImagePull",
        ["cannot pull image 'nvcr.io/nvidia/nemo-rl:v0.4.0'", "not found"],
        id="image-pull",
    ),
    pytest.param(
        {"unschedulable": "insufficient-gpu"},
        "InsufficientGPU",
        ["no node has a free nvidia.com/gpu", "Insufficient nvidia.com/gpu"],
        id="insufficient-gpu",
    ),
    pytest.param(
        {"unschedulable": "spot-stockout"}, "SpotCapacity", ["GCE out of resources", "Spot"], id="spot-stockout"
    ),
    pytest.param(
        {"unschedulable": "node-selector"},
        "NodeSelector",
        ["cloud.google.com/gke-accelerator=nvidia-b200", "didn't match Pod's node affinity/selector"],
        id="node-selector",
    ),
    pytest.param(
        {"pvc_never_binds": True},
        "ClaimUnbound",
        [
            "PersistentVolumeClaim default/rl-demo-lustre-pvc",
            "is Pending, not Bound",
            "storageClassName does not match",
        ],
        id="pvc-unbound",
    ),
    pytest.param(
        {"crash_loop": "ModuleNotFoundError: No module named 'nemo_rl'"},
        "CrashLoop",
        ["keeps crashing (CrashLoopBackOff", "exit code 1", "No module named 'nemo_rl'"],
        id="crash-loop",
    ),
    pytest.param({"no_operator": True}, "NoPods", ["KubeRay operator"], id="no-operator"),
]


@pytest.mark.parametrize(("faults", "reason", "phrases"), FAULTS)
def test_timeout_says_why_pods_do_not_come_up(
    fake: KubeFake, api, faults: dict, reason: str, phrases: list[str]
) -> None:
    for knob, value in faults.items():
        setattr(fake.faults, knob, value)
    ms = manifests()
    apply_manifests(api, ms, deployment=DEPLOYMENT)
    started = time.monotonic()
    with pytest.raises(WaitTimeoutError) as info:
        wait_ready(api, ms, timeout=1.0)
    assert time.monotonic() - started < 5
    err = info.value
    assert isinstance(err, TimeoutError)
    assert reason in err.last_state.reasons()
    text = str(err)
    for phrase in phrases:
        assert phrase in text, f"{phrase!r} missing from:\n{text}"
    assert "hf_first_value" not in text


def test_healthy_cluster_has_no_problems_in_diagnosis(fake: KubeFake, api) -> None:
    from rl_lustre.kube.diagnose import diagnose

    ms = manifests()
    apply_manifests(api, ms, deployment=DEPLOYMENT)
    wait_ready(api, ms, timeout=20)
    found = diagnose(api, namespace="default", raycluster=DEPLOYMENT, claims=["rl-demo-lustre-pvc"])
    assert found.problems == ()
    assert "3/3 pods ready" in found.summary


def test_delete_waits_until_everything_is_gone(fake: KubeFake, api) -> None:
    ms = manifests()
    apply_manifests(api, ms, deployment=DEPLOYMENT)
    wait_ready(api, ms, timeout=20)
    assert len(fake.objects("Pod")) == 3
    deleted = delete_manifests(api, ms, deployment=DEPLOYMENT, timeout=20)
    assert deleted == [
        "RayCluster default/rl-demo",
        "Secret default/rl-demo-job-secrets",
        "PersistentVolumeClaim default/rl-demo-lustre-pvc",
        "PersistentVolume rl-demo-lustre-pv",
    ]
    assert fake.objects() == [], "delete returns only once the objects (and their pods) are gone"
    assert delete_manifests(api, ms, deployment=DEPLOYMENT) == [], "deleting again is a no-op"


def test_delete_deployment_collects_by_labels_only(fake: KubeFake, api) -> None:
    ms = manifests()
    apply_manifests(api, ms, deployment=DEPLOYMENT)
    other = manifests(make_cluster(name="other-run"))
    apply_manifests(api, other[2:3], deployment="other-run")  # another deployment's Secret
    deleted = delete_deployment(api, DEPLOYMENT, timeout=20)
    assert len(deleted) == 4
    assert [o["metadata"]["name"] for o in fake.objects()] == ["other-run-job-secrets"]


def test_delete_timeout_names_what_is_stuck(fake: KubeFake, api) -> None:
    ms = manifests()
    apply_manifests(api, ms, deployment=DEPLOYMENT)
    fake.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "user", "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "rl-demo-lustre-pvc"}}],
            },
        }
    )
    with pytest.raises(
        WaitTimeoutError, match="PersistentVolumeClaim default/rl-demo-lustre-pvc to be deleted"
    ) as info:
        delete_manifests(api, ms[1:2], deployment=DEPLOYMENT, timeout=1)
    assert "kubernetes.io/pvc-protection" in str(info.value.last_state)


def test_missing_kuberay_crd_is_explained_and_cleanup_still_works(fake: KubeFake, api) -> None:
    fake.faults.no_crd = True
    with pytest.raises(KubernetesError, match="KubeRay operator installed"):
        apply_manifests(api, manifests(), deployment=DEPLOYMENT)
    assert {o["kind"] for o in fake.objects()} == {"PersistentVolume", "PersistentVolumeClaim", "Secret"}
    assert len(delete_deployment(api, DEPLOYMENT, timeout=20)) == 3
    assert fake.objects() == []


def head_access(cluster: Cluster | None = None) -> list[dict]:
    """The head's ServiceAccount, Role, RoleBinding, ClusterRole and ClusterRoleBinding."""
    return [m for m in build_manifests(cluster or make_cluster()) if m["kind"] in HEAD_ACCESS]


def test_the_heads_cluster_role_is_applied_adopted_and_deleted_like_the_rest(fake: KubeFake, api) -> None:
    ms = head_access()
    assert [a.action for a in apply_manifests(api, ms, deployment=DEPLOYMENT)] == ["created"] * 5
    name = f"{DEPLOYMENT}-ray-head.default"
    role = fake.get("ClusterRole", name, None)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    assert fake.get("ClusterRoleBinding", name, None)["roleRef"]["name"] == name
    assert {a.action for a in apply_manifests(api, ms, deployment=DEPLOYMENT)} == {"unchanged"}
    # Rules widened by hand are set back to ours on the next up().
    from kubernetes import client

    wider = {"rules": [{"apiGroups": [""], "resources": ["*"], "verbs": ["*"]}]}
    client.RbacAuthorizationV1Api(api).patch_cluster_role(name, wider)
    actions = {a.kind: a.action for a in apply_manifests(api, ms, deployment=DEPLOYMENT)}
    assert actions["ClusterRole"] == "adopted"
    assert fake.get("ClusterRole", name, None)["rules"] == role["rules"]
    # Another namespace's deployment of the same name has its own; deleting ours leaves it.
    other = head_access(make_cluster(namespace="team-b"))
    fake.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
    apply_manifests(api, other, deployment=DEPLOYMENT)
    deleted = delete_manifests(api, ms, deployment=DEPLOYMENT, timeout=20)
    assert deleted[:2] == [f"ClusterRoleBinding {name}", f"ClusterRole {name}"]
    assert fake.get("ClusterRole", name, None) is None
    assert fake.get("ClusterRole", f"{DEPLOYMENT}-ray-head.team-b", None) is not None


def test_a_cluster_role_we_did_not_make_is_never_adopted_nor_deleted(fake: KubeFake, api) -> None:
    name = f"{DEPLOYMENT}-ray-head.default"
    theirs = fake.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"team": "other"}},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
        }
    )
    with pytest.raises(OwnershipError, match=f"ClusterRole {name}"):
        apply_manifests(api, head_access(), deployment=DEPLOYMENT)
    assert fake.get("ClusterRoleBinding", name, None) is None, "nothing binds our account to their role"
    assert f"ClusterRole {name}" not in delete_manifests(api, head_access(), deployment=DEPLOYMENT, timeout=20)
    assert delete_deployment(api, DEPLOYMENT, timeout=20) == []
    assert fake.get("ClusterRole", name, None) == theirs
