"""What is derived from a frozen spec is computed once: the plan per spec, the manifests per
``up()``, the supervisor's package per process; a GKE submit makes a third of the package
calls it used to; and the plan's settings are the requests actually sent.

Package calls are counted with ``sys.setprofile`` in the calling thread: every ``call``
event whose code lives in ``rl_lustre`` but not in ``rl_lustre.testing`` (the fakes serve
from threads of their own, so they are not counted anyway). A generator counts once per
resumption, as ``sys.setprofile`` reports it. On main before issue 19 (commit 4ffaefb) a
second job's ``submit`` on the GKE fakes made 1,674 such calls and the first on a new
``Cluster`` 3,347 (half of them building the whole plan to find the GKE cluster's path).
"""

from __future__ import annotations

import collections
import os
import pickle
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers.specs import GKE

import rl_lustre
from rl_lustre import Cluster, GRPOJob
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.backends.submission import prepare
from rl_lustre.gcp.lustre import instance_request
from rl_lustre.kube import manifests as kube_manifests
from rl_lustre.plan import build_plan
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, KubeFake

SPEC: dict[str, Any] = {
    **GKE,
    "name": "once",
    "num_nodes": 1,
    "image": "rayproject/ray:2.60.0",
    "prefetch_models": (),
    "prepull_image": False,
    "preload_image": False,
}
JOB = {
    "recipe": "grpo_math_1B",
    "model": "Qwen/Qwen2.5-1.5B",
    "dataset": "OpenMathInstruct-2",
    "num_prompts_per_step": 4,
    "num_generations_per_prompt": 8,
    "train_global_batch_size": 32,
    "max_num_steps": 2,
}
# Before issue 19 (see the module docstring).
BEFORE_SECOND_SUBMIT, BEFORE_FIRST_SUBMIT = 1674, 3347
PACKAGE = os.path.dirname(rl_lustre.__file__) + os.sep
FAKES = PACKAGE + "testing" + os.sep


def package_calls(fn: Callable[[], Any]) -> tuple[Any, collections.Counter[str]]:
    """``fn()`` and the calls it made into rl_lustre (outside the fakes), by function."""
    calls: collections.Counter[str] = collections.Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            path = frame.f_code.co_filename
            if path.startswith(PACKAGE) and not path.startswith(FAKES):
                calls[f"{path[len(PACKAGE) :]}:{frame.f_code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return out, calls


@pytest.fixture
def gke_plans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the clusters whose GKE plan was built, one entry per build."""
    import rl_lustre.plan as plan_module

    built: list[str] = []
    real = plan_module.gke_plan

    def counting(cluster: Any) -> Any:
        built.append(cluster.name)
        return real(cluster)

    monkeypatch.setattr(plan_module, "gke_plan", counting)
    return built


def test_the_plan_is_built_once_per_spec_and_again_for_an_evolved_one(gke_plans: list[str]) -> None:
    cluster = Cluster(**SPEC)
    plan = cluster.plan()
    assert cluster.plan() is plan
    assert build_plan(cluster) is plan
    assert GKEBackend(cluster).plan is plan
    assert gke_plans == ["once"]

    bigger = attrs.evolve(cluster, num_nodes=4)
    assert bigger.plan() is not plan
    assert bigger.plan().get("gpu-pool").settings["nodes"] == 4
    assert plan.get("gpu-pool").settings["nodes"] == 1
    assert gke_plans == ["once", "once"]

    # A pickled spec carries no plan: the copy builds its own, equal to the original's.
    copy = pickle.loads(pickle.dumps(cluster))
    assert copy.plan() == plan
    assert copy.plan() is not plan


def test_the_cost_per_hour_of_a_run_is_computed_once(gke_plans: list[str]) -> None:
    from rl_lustre.backends.handles import usd_per_hour

    cluster = Cluster(**SPEC)
    with pytest.MonkeyPatch.context() as mp:
        computed = []
        real = type(cluster.plan()).cost
        mp.setattr(type(cluster.plan()), "cost", lambda self, prices=None: computed.append(1) or real(self, prices))
        first = [usd_per_hour(cluster) for _ in range(5)]
    assert first == [cluster.plan().cost().total_usd_per_hour] * 5
    assert computed == [1]
    assert gke_plans == ["once"]


def test_the_oncluster_package_is_read_and_hashed_once_per_process() -> None:
    from rl_lustre.recovery import shipping

    cluster = Cluster(**SPEC)
    shipping.shipped_files.cache_clear()
    for name in ("a", "b", "c"):
        prepare(cluster, GRPOJob(name=name, **JOB))
    info = shipping.shipped_files.cache_info()
    assert (info.misses, info.hits) == (1, 2)


def test_the_lustre_nodes_settings_are_the_request_sent() -> None:
    cluster = Cluster(**{**SPEC, "labels": {"team": "rl"}})
    node = cluster.plan().get("lustre")
    assert cluster.volume is not None
    request = instance_request(cluster.volume, deployment=cluster.name, labels=cluster.labels)
    s = node.settings
    assert request.name.endswith(f"/locations/{s['location']}/instances/{node.name}")
    for field in ("capacity_gib", "per_unit_storage_throughput", "filesystem", "network", "gke_support_enabled"):
        assert getattr(request, field) == s[field], field
    assert dict(request.labels) == dict(node.labels)


def test_every_kubernetes_node_of_the_plan_has_its_manifest_under_its_key() -> None:
    from rl_lustre.provision.kube_drivers import kube_keys

    for fabric in ("rdma", "tcp"):
        cluster = Cluster(**{**SPEC, "fabric": fabric, "secrets": ("HF_TOKEN",)})
        plan = cluster.plan()
        keyed = kube_manifests.keyed_manifests(cluster)
        # The start-up nodes and the keeper have drivers (and objects) of their own.
        startup = {"image-prepull", "model-prefetch", "keeper"}
        keys = [k for k in kube_keys(plan) if k not in startup]
        assert sorted(keys) == sorted(keyed)
        for key in keys:
            node, manifest = plan.get(key), keyed[key]
            assert (node.kind, node.name) == (
                f"{manifest['apiVersion']}/{manifest['kind']}",
                manifest["metadata"]["name"],
            ), key


@pytest.fixture
def counted_builds(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """How often each Kubernetes object builder ran."""
    from rl_lustre.kube import persistent_volume

    builds: collections.Counter[str] = collections.Counter()

    def wrap(module: Any, name: str) -> None:
        real = getattr(module, name)

        def counting(*args: Any, **kwargs: Any) -> Any:
            builds[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)

    wrap(kube_manifests, "keyed_manifests")
    wrap(kube_manifests, "raycluster_manifest")
    wrap(kube_manifests, "pv_manifest")
    monkeypatch.setattr(persistent_volume, "pv_manifest", kube_manifests.pv_manifest)
    return builds


def test_up_builds_the_manifests_once_and_the_plan_not_again(
    counted_builds: collections.Counter[str], gke_plans: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test_value_123")
    with KubeFake() as kube, FakeGCP(kube=kube):
        cluster = Cluster(**{**SPEC, "secrets": ("HF_TOKEN",)})
        backend = GKEBackend(cluster, backoff=FAST_BACKOFF, retry=FAST_RETRY)
        cluster = cluster.use_backend(backend)
        cluster.plan()
        cluster.up()
        assert backend.last_report is not None
        assert "raycluster" in backend.last_report.keys("created")
        assert kube.get("RayCluster", "once") is not None
        # The objects applied are the ones built once, before any remote call.
        assert counted_builds["keyed_manifests"] == 1
        assert counted_builds["raycluster_manifest"] == 1
        # The PV, built before the Lustre instance had an address, is built again once it has one.
        assert counted_builds["pv_manifest"] == 2
        pv = next(o for o in kube.objects() if o["kind"] == "PersistentVolume")
        assert pv["spec"]["csi"]["volumeAttributes"]["ip"] != "<pending>"
        assert gke_plans == ["once"]
        cluster.down()


@pytest.fixture
def gke_world(local_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Cluster]:
    """A GKE deployment up on the fakes whose head service forwards to the session's Ray head."""
    head = local_cluster._backend().head  # type: ignore[attr-defined]
    token = head.headers().get("Authorization", "").removeprefix("Bearer ")
    if not token:
        pytest.skip("the session's Ray head does not run in token mode")
    monkeypatch.setenv("RAY_AUTH_TOKEN", token)
    monkeypatch.setenv("HF_TOKEN", "hf_once_" + uuid.uuid4().hex)
    host, port = head.dashboard_url.removeprefix("http://").rsplit(":", 1)
    spec = {**SPEC, "mount_path": str(tmp_path / "lustre"), "secrets": ("HF_TOKEN", "RAY_AUTH_TOKEN")}
    with KubeFake(head_target=(host, int(port))) as kube, FakeGCP(kube=kube):
        cluster = Cluster(**spec)
        cluster.use_backend(GKEBackend(cluster, backoff=FAST_BACKOFF, retry=FAST_RETRY)).up()
        yield Cluster(**spec)  # a new process's view of it: nothing computed yet


# A deployment on the fakes plus the session's Ray head: the slow set (nox -s tests-slow).
@pytest.mark.slow
def test_a_gke_submit_makes_a_third_of_the_package_calls_it_used_to(gke_world: Cluster) -> None:
    cluster = gke_world.use_backend(GKEBackend(gke_world, backoff=FAST_BACKOFF, retry=FAST_RETRY))
    first, first_calls = package_calls(lambda: cluster.submit(GRPOJob(name="once-a", **JOB)))
    second, second_calls = package_calls(lambda: cluster.submit(GRPOJob(name="once-b", **JOB)))
    try:
        top = second_calls.most_common(8)
        assert sum(second_calls.values()) <= BEFORE_SECOND_SUBMIT / 3, top
        # The first also parses the recipe once per process (its two walks are ~460 calls).
        assert sum(first_calls.values()) <= BEFORE_FIRST_SUBMIT * 0.4, first_calls.most_common(8)
        # Finding the GKE cluster takes its name, not a plan.
        assert not any(name.startswith("plan/") for name in first_calls), first_calls
    finally:
        for run in (first, second):
            run.stop(wait=True, timeout=60)
