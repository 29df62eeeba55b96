"""Jobs on a GKE deployment that is not (or not fully) there: clear errors, before any
request that could not succeed. The working path is in ``test_e2e_gke.py``."""

from __future__ import annotations

import pytest
from helpers.specs import GKE

from rl_lustre import Cluster, GRPOJob
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.errors import ConfigError, NotReadyError
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

JOB = GRPOJob(name="tiny", recipe="grpo_math_8B_megatron", model="meta-llama/Llama-3.1-8B-Instruct")


def spec(**kw: object) -> Cluster:
    base: dict[str, object] = {
        **GKE,
        "name": "jobs-demo",
        "num_nodes": 1,
    }
    return Cluster(**{**base, **kw})  # type: ignore[arg-type]


@pytest.fixture
def gcp():
    with FakeGCP() as fake:
        yield fake


def test_submitting_before_up_says_the_gke_cluster_does_not_exist(gcp: FakeGCP) -> None:
    cluster = spec()
    with pytest.raises(
        NotReadyError, match=r"projects/my-project/locations/us-east1/clusters/jobs-demo does not exist"
    ):
        cluster.submit(JOB)
    with pytest.raises(NotReadyError, match="does not exist"):
        cluster.attach("rl-lustre-tiny-0123abcd")
    # One look at the GKE API each time, and nothing else.
    assert [r.method for r in gcp.requests] == ["gke.GetCluster", "gke.GetCluster"]


def test_a_job_that_fails_preflight_is_refused_before_any_request(gcp: FakeGCP) -> None:
    with pytest.raises(ConfigError, match="train_global_batch_size"):
        spec().submit(GRPOJob(name="bad", recipe="grpo_math_1B", model="Qwen/Qwen2.5-1.5B", train_global_batch_size=7))
    assert gcp.requests == []


def test_token_auth_without_the_token_in_this_process_is_refused_before_any_request(
    gcp: FakeGCP, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    cluster = spec(image="rayproject/ray:2.60.0", secrets=["RAY_AUTH_TOKEN"])
    with pytest.raises(ConfigError, match=r"\$RAY_AUTH_TOKEN must hold the cluster's token"):
        cluster.attach("rl-lustre-tiny-0123abcd")
    assert gcp.requests == []


def test_a_backend_without_the_kubernetes_part_has_no_jobs(gcp: FakeGCP) -> None:
    backend = GKEBackend(spec(), gcp_only=True, backoff=FAST_BACKOFF, retry=FAST_RETRY)
    with pytest.raises(NotReadyError, match="gcp_only"):
        backend.submit(JOB)
    assert gcp.requests == []


def test_a_cluster_still_provisioning_is_not_reachable_yet() -> None:
    from rl_lustre.gcp import _clients
    from rl_lustre.gcp.container import parent_of
    from rl_lustre.gcp.container_requests import cluster_path, cluster_request

    cluster = spec()
    plan = cluster.plan()
    with FakeGCP(latency={"gke.create_cluster": 30.0}) as gcp:
        gcp.seed_network("my-project", cluster.network_name, subnet=plan.get("subnet").name, deployment="jobs-demo")
        gcp.iam.seed_account("my-project", plan.get("node-sa").settings["account_id"])  # as node-sa makes it
        _clients.cluster_manager().create_cluster(parent=parent_of(cluster_path(plan)), cluster=cluster_request(plan))
        with pytest.raises(NotReadyError, match="is PROVISIONING, not RUNNING"):
            cluster.attach("rl-lustre-tiny-0123abcd")
