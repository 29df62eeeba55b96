"""The Kubernetes API fake behaves like an API server where rl_lustre relies on it.

Requests go through the real kubernetes client (via ``ResourceClient``), so what is
checked here is what our code sees.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from helpers.rayclusters import raycluster
from kubernetes.client.exceptions import ApiException

from rl_lustre.kube.client import ResourceClient, WatchExpired
from rl_lustre.testing.kube import KubeFake, schema_validator


@pytest.fixture(scope="module")
def fake() -> Iterator[KubeFake]:
    with KubeFake(watch_timeout=5) as server:
        yield server


@pytest.fixture(autouse=True)
def _clean(fake: KubeFake) -> None:
    fake.reset()


@pytest.fixture
def api(fake: KubeFake):
    return fake.api_client()


def secret(name: str, **labels: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": labels},
        "stringData": {"KEY": "value"},
    }


def wait_for(predicate, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_create_returns_201_with_server_fields(fake: KubeFake, api) -> None:
    created = ResourceClient(api, "Secret", "team").create(secret("s"))
    meta = created["metadata"]
    assert meta["namespace"] == "team"
    assert meta["uid"]
    assert meta["resourceVersion"]
    assert meta["creationTimestamp"].endswith("Z")
    assert "stringData" not in created, "stringData is write-only"
    assert created["data"] == {"KEY": "dmFsdWU="}, "stringData folds into data"
    assert fake.requests[-1].status == 201


def test_conflict_not_found_and_namespace_mismatch(api) -> None:
    secrets = ResourceClient(api, "Secret", "default")
    secrets.create(secret("s"))
    with pytest.raises(ApiException) as info:
        secrets.create(secret("s"))
    assert info.value.status == 409
    assert "already exists" in str(info.value.body)
    with pytest.raises(ApiException) as info:
        secrets.patch("nope", {"metadata": {"labels": {"a": "b"}}})
    assert info.value.status == 404
    assert secrets.delete("nope") is False
    body = secret("t")
    body["metadata"]["namespace"] = "elsewhere"
    with pytest.raises(ApiException) as info:
        secrets.create(body)
    assert info.value.status == 400


def test_label_and_field_selectors(api) -> None:
    secrets = ResourceClient(api, "Secret", "default")
    secrets.create(secret("a", app="x", tier="1"))
    secrets.create(secret("b", app="x", tier="2"))
    secrets.create(secret("c", app="y"))

    def names(**kw: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in secrets.list(**kw)[0])

    assert names(label_selector="app=x") == ["a", "b"]
    assert names(label_selector="app=x,tier!=1") == ["b"]
    assert names(label_selector="tier in (1, 2)") == ["a", "b"]
    assert names(label_selector="!tier") == ["c"]
    assert names(label_selector="tier") == ["a", "b"]
    assert names(field_selector="metadata.name=c") == ["c"]
    assert names(label_selector="app notin (x)") == ["c"]


def test_watch_replays_from_resource_version_and_ends_at_timeout(api) -> None:
    secrets = ResourceClient(api, "Secret", "default")
    secrets.create(secret("a"))
    _, version = secrets.list()
    secrets.patch("a", {"metadata": {"labels": {"x": "1"}}})
    secrets.create(secret("b"))
    started = time.monotonic()
    events = [(typ, obj["metadata"]["name"]) for typ, obj in secrets.watch(resource_version=version, timeout=1)]
    elapsed = time.monotonic() - started
    assert events == [("MODIFIED", "a"), ("ADDED", "b")], "only changes after the version, in order"
    assert 0.9 <= elapsed < 3, f"the server ends the watch at timeoutSeconds (took {elapsed:.2f}s)"


def test_watch_streams_live_changes_with_selector(fake: KubeFake, api) -> None:
    secrets = ResourceClient(api, "Secret", "default")
    _, version = secrets.list()
    writer = ResourceClient(fake.api_client(), "Secret", "default")

    def later() -> None:
        time.sleep(0.2)
        writer.create(secret("other"))
        writer.create(secret("target"))
        writer.delete("target")

    thread = threading.Thread(target=later)
    thread.start()
    seen = []
    for typ, obj in secrets.watch(resource_version=version, timeout=5, field_selector="metadata.name=target"):
        seen.append((typ, obj["metadata"]["name"]))
        if typ == "DELETED":
            break
    thread.join()
    assert seen[0] == ("ADDED", "target")
    assert seen[-1] == ("DELETED", "target")
    assert all(name == "target" for _, name in seen)


def test_watch_from_compacted_version_is_410_gone(fake: KubeFake, api) -> None:
    secrets = ResourceClient(api, "Secret", "default")
    secrets.create(secret("a"))
    _, version = secrets.list()
    secrets.create(secret("b"))
    fake.compact()
    with pytest.raises(WatchExpired):
        list(secrets.watch(resource_version=version, timeout=1))
    _, fresh = secrets.list()
    assert list(secrets.watch(resource_version=fresh, timeout=1)) == []


def test_merge_patch_keeps_server_fields_and_enforces_immutability(api) -> None:
    pvcs = ResourceClient(api, "PersistentVolumeClaim", "default")
    pvc = pvcs.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "c"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "standard-rwx",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    # A statically provisioned claim is not resized (as a real API server refuses it, 403).
    pvcs.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "static"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": "v",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    with pytest.raises(ApiException) as refused:
        pvcs.patch("static", {"spec": {"resources": {"requests": {"storage": "2Gi"}}}})
    assert refused.value.status == 403
    assert "only dynamically provisioned pvc can be resized" in str(refused.value.body)
    grown = pvcs.patch(
        "c", {"spec": {"resources": {"requests": {"storage": "2Gi"}}}, "metadata": {"labels": {"a": "b"}}}
    )
    assert grown["metadata"]["uid"] == pvc["metadata"]["uid"]
    assert int(grown["metadata"]["resourceVersion"]) > int(pvc["metadata"]["resourceVersion"])
    assert grown["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert grown["metadata"]["labels"] == {"a": "b"}
    with pytest.raises(ApiException) as info:
        pvcs.patch("c", {"spec": {"accessModes": ["ReadWriteOnce"]}})
    assert info.value.status == 422
    assert "immutable" in str(info.value.body)
    removed = pvcs.patch("c", {"metadata": {"labels": {"a": None}}})
    assert removed["metadata"].get("labels") == {}


def test_status_is_not_writable_through_the_main_resource(api) -> None:
    clusters = ResourceClient(api, "RayCluster", "default")
    body = raycluster("rc")
    body["status"] = {"state": "ready"}
    created = clusters.create(body)
    assert "status" not in created, "status is a subresource: a client's create cannot set it"


def test_requires_a_bearer_token(fake: KubeFake) -> None:
    import ssl
    import urllib.error
    import urllib.request

    ctx = ssl.create_default_context(cadata=fake.ca_pem.decode())
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{fake.url}/api/v1/namespaces/default/secrets", context=ctx, timeout=5)
    info.value.close()
    assert info.value.code == 401


def test_unimplemented_requests_fail_loudly(fake: KubeFake, api) -> None:
    from kubernetes import client

    with pytest.raises(ApiException) as info:
        client.CoreV1Api(api).list_namespaced_limit_range("default")
    assert info.value.status == 404
    assert "does not implement" in str(info.value.body)
    assert fake.unhandled == ["GET /api/v1/namespaces/default/limitranges"]


def test_operator_brings_a_raycluster_up(fake: KubeFake, api) -> None:
    ResourceClient(api, "RayCluster", "default").create(raycluster("rc", replicas=2))
    rc = wait_for(lambda: (o := fake.get("RayCluster", "rc")) and (o.get("status") or {}).get("state") == "ready" and o)
    conditions = {c["type"]: c["status"] for c in rc["status"]["conditions"]}
    # As KubeRay v1.5 reports them (tests/test_kube_real.py holds the fake to the real one).
    assert conditions == {
        "HeadPodReady": "True",
        "RayClusterProvisioned": "True",
        "RayClusterSuspended": "False",
        "RayClusterSuspending": "False",
    }
    assert rc["status"]["readyWorkerReplicas"] == 2
    pods = fake.objects("Pod")
    assert sorted(p["metadata"]["labels"]["ray.io/node-type"] for p in pods) == ["head", "worker", "worker"]
    assert all(p["status"]["phase"] == "Running" for p in pods)
    svc = fake.get("Service", "rc-head-svc")
    assert svc is not None
    # As KubeRay v1.x makes it: headless, its identity labels, the head's ports plus metrics.
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {
        "ray.io/cluster": "rc",
        "ray.io/node-type": "head",
        "ray.io/identifier": "rc-head",
    }
    assert svc["metadata"]["labels"]["app.kubernetes.io/created-by"] == "kuberay-operator"
    assert {(p["name"], p["port"], p["appProtocol"]) for p in svc["spec"]["ports"]} == {
        ("dashboard", 8265, "tcp"),
        ("metrics", 8080, "tcp"),
    }


def test_objects_the_fake_creates_pass_the_real_schemas(fake: KubeFake, api) -> None:
    check = schema_validator()
    ResourceClient(api, "RayCluster", "default").create(raycluster("rc", replicas=1))
    wait_for(lambda: (fake.get("RayCluster", "rc") or {}).get("status", {}).get("state") == "ready")
    made = fake.objects(include_events=True)
    assert {o["kind"] for o in made} >= {"RayCluster", "Pod", "Service", "Event"}
    for obj in made:
        check(obj)


def test_schema_validator_rejects_what_the_schema_forbids(fake: KubeFake, api) -> None:
    # (An unknown field never gets this far: the server's field validation refuses it,
    # tests/test_kube_real.py holds that to a real API server.)
    fake.validate = schema_validator()
    try:
        bad = raycluster("rc")
        bad["spec"]["headGroupSpec"]["rayStartParams"] = {"num-cpus": 0}
        with pytest.raises(ApiException) as info:
            ResourceClient(api, "RayCluster", "default").create(bad)
        assert info.value.status == 422
        assert fake.rejected
        assert "num-cpus" in fake.rejected[0]
        assert fake.objects() == []
    finally:
        fake.validate = None


def test_foreground_deletion_waits_for_dependents_and_finalizers(fake: KubeFake, api) -> None:
    clusters = ResourceClient(api, "RayCluster", "default")
    clusters.create(raycluster("rc", replicas=1))
    wait_for(lambda: len(fake.objects("Pod")) == 2)
    clusters.delete("rc", propagation="Foreground")
    terminating = fake.get("RayCluster", "rc")
    assert terminating is not None
    assert terminating["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in terminating["metadata"]["finalizers"]
    wait_for(lambda: fake.get("RayCluster", "rc") is None)
    assert fake.objects() == [], "pods and the head service went with their owner"


def test_claim_protection_holds_deletion_while_a_pod_uses_it(fake: KubeFake, api) -> None:
    pvcs = ResourceClient(api, "PersistentVolumeClaim", "default")
    pvcs.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "c"},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        }
    )
    fake.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "user", "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}],
            },
        }
    )
    pvcs.delete("c")
    time.sleep(fake.timings.deletion * 3)
    assert fake.get("PersistentVolumeClaim", "c") is not None, "pvc-protection keeps a claim in use"
    fake.delete("Pod", "user")
    wait_for(lambda: fake.get("PersistentVolumeClaim", "c") is None)


def _request(
    fake: KubeFake, method: str, path: str, body: object = None, content_type: str = "application/json"
) -> tuple[int, dict]:
    """A raw HTTPS request with the fake's token: (status, JSON body)."""
    import json
    import ssl
    import urllib.error
    import urllib.request

    context = ssl.create_default_context(cadata=fake.ca_pem.decode())
    request = urllib.request.Request(
        fake.url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer kube-fake-token", "Content-Type": content_type},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_delete_answers_with_a_status_unless_the_object_lingers(fake: KubeFake, api) -> None:
    ResourceClient(api, "Secret", "default").create(secret("s"))
    code, body = _request(fake, "DELETE", "/api/v1/namespaces/default/secrets/s")
    assert (code, body["kind"], body["status"], body["details"]["name"]) == (200, "Status", "Success", "s")
    assert fake.get("Secret", "s") is None, "no finalizers: gone at once"
    ResourceClient(api, "PersistentVolumeClaim", "default").create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "c"},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        }
    )
    code, body = _request(fake, "DELETE", "/api/v1/namespaces/default/persistentvolumeclaims/c")
    assert (code, body["kind"]) == (200, "PersistentVolumeClaim")  # held by pvc-protection: the object
    assert body["metadata"]["deletionTimestamp"]


def test_put_replaces_with_optimistic_concurrency(fake: KubeFake, api) -> None:
    created = ResourceClient(api, "Secret", "default").create(secret("s"))
    created["metadata"]["labels"] = {"new": "label"}
    code, body = _request(fake, "PUT", "/api/v1/namespaces/default/secrets/s", created)
    assert (code, body["metadata"]["labels"]) == (200, {"new": "label"})
    code, body = _request(fake, "PUT", "/api/v1/namespaces/default/secrets/s", created)  # stale resourceVersion
    assert (code, body["reason"]) == (409, "Conflict")


def test_strategic_merge_patch_merges_lists_by_key_for_builtin_kinds_only(fake: KubeFake, api) -> None:
    fake.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "containers": [
                    {"name": "a", "image": "x", "env": [{"name": "A", "value": "1"}]},
                    {"name": "b", "image": "y"},
                ]
            },
        }
    )
    patch = {"spec": {"containers": [{"name": "a", "env": [{"name": "B", "value": "2"}]}]}}
    path = "/api/v1/namespaces/default/pods/p"
    code, body = _request(fake, "PATCH", path, patch, "application/strategic-merge-patch+json")
    assert code == 200
    a, b = body["spec"]["containers"]
    assert (a["image"], [e["name"] for e in a["env"]], b["name"]) == ("x", ["A", "B"], "b")
    code, body = _request(fake, "PATCH", path, patch, "application/merge-patch+json")
    assert [c["name"] for c in body["spec"]["containers"]] == ["a"], "a merge patch replaces lists"
    ResourceClient(api, "RayCluster", "default").create(raycluster("rc"))
    code, _ = _request(
        fake,
        "PATCH",
        "/apis/ray.io/v1/namespaces/default/rayclusters/rc",
        {"metadata": {}},
        "application/strategic-merge-patch+json",
    )
    assert code == 415, "custom resources take no strategic merge patches"


def test_unsupported_field_selector_is_a_400(api) -> None:
    with pytest.raises(ApiException) as info:
        ResourceClient(api, "Secret", "default").list(field_selector="data.KEY=x")
    assert info.value.status == 400
    assert "field label not supported: data.KEY" in info.value.body
    assert ResourceClient(api, "Secret", "default").list(field_selector="type=Opaque")[0] == []


def test_selector_watch_sees_objects_enter_and_leave(fake: KubeFake, api) -> None:
    secrets = ResourceClient(api, "Secret", "default")
    _, version = secrets.list()
    secrets.create(secret("s", team="a"))
    secrets.patch("s", {"metadata": {"labels": {"team": "b"}}})
    secrets.patch("s", {"metadata": {"labels": {"team": "a", "x": "y"}}})
    secrets.patch("s", {"metadata": {"labels": {"x": "z"}}})
    events = [
        (t, o["metadata"]["labels"])
        for t, o in secrets.watch(resource_version=version, timeout=1, label_selector="team=a")
    ]
    assert events == [
        ("ADDED", {"team": "a"}),
        ("DELETED", {"team": "b"}),
        ("ADDED", {"team": "a", "x": "y"}),
        ("MODIFIED", {"team": "a", "x": "z"}),
    ]


def test_builtin_kinds_drop_empty_omitempty_strings(fake: KubeFake, api) -> None:
    pv = ResourceClient(api, "PersistentVolume").create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "v", "labels": {"empty": ""}},
            "spec": {
                "storageClassName": "",
                "capacity": {"storage": "1Ti"},
                "accessModes": ["ReadWriteMany"],
                "csi": {"driver": "d", "volumeHandle": "h"},
            },
        }
    )
    assert "storageClassName" not in pv["spec"]
    assert pv["metadata"]["labels"] == {"empty": ""}, "map values are values, not omitted fields"
    pvc = ResourceClient(api, "PersistentVolumeClaim", "default").create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "c"},
            "spec": {
                "storageClassName": "",
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "1Ti"}},
            },
        }
    )
    assert pvc["spec"]["storageClassName"] == "", "a pointer in the Go types: kept"
