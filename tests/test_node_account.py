"""The nodes' own service account (plan node ``node-sa``): derived offline from the
deployment's name, created with GKE's minimal node role before the cluster, run as by every
pool, taken back and deleted by ``down()``; through the real IAM Admin and Resource Manager
clients against :mod:`rl_lustre.testing`'s fakes."""

from __future__ import annotations

import re

import attrs
import grpc
import pytest
from helpers.specs import PROJECT, SMALL

from rl_lustre import Cluster
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.errors import ConfigError, OwnershipError, ProvisioningError, RollbackError
from rl_lustre.naming import node_service_account_id
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

EMAIL = "rl-demo-nodes@my-project.iam.gserviceaccount.com"
MEMBER = f"serviceAccount:{EMAIL}"
NODE_ROLE = "roles/container.defaultNodeServiceAccount"
ACCOUNT = f"projects/{PROJECT}/serviceAccounts/{EMAIL}"


def spec(**kw: object) -> Cluster:
    return Cluster(**{**SMALL, **kw})  # type: ignore[arg-type]


def backend(cluster: Cluster) -> GKEBackend:
    return GKEBackend(cluster, gcp_only=True, backoff=FAST_BACKOFF, retry=FAST_RETRY)


@pytest.fixture
def gcp():
    with FakeGCP() as fake:
        yield fake


# -- the plan, offline ---------------------------------------------------------------------


def test_the_plan_makes_the_account_before_the_cluster_and_every_pool_runs_as_it() -> None:
    from rl_lustre.gcp.container_requests import cluster_request, node_pool_request

    plan = spec(capacity=["spot", "flex-start"]).plan()
    node = plan.get("node-sa")
    assert (node.kind, node.name, node.action) == ("iam.v1.ServiceAccount", EMAIL, "create")
    assert node.settings["account_id"] == "rl-demo-nodes"
    assert list(node.settings["project_roles"]) == [NODE_ROLE]
    assert node.labels["rl-lustre-deployment"] == "demo"
    pools = [r.key for r in plan if r.kind == "container.v1.NodePool"]
    assert pools == ["cpu-pool", "gpu-pool"]  # gpu-pool: every GPU pool of the ComputeClass
    for key in ["gke-cluster", *pools]:
        assert "node-sa" in plan.get(key).depends_on, key
    for key in pools:
        assert plan.get(key).settings["service_account"] == EMAIL
        assert node_pool_request(plan, key).config.service_account == EMAIL
    assert cluster_request(plan).node_pools[0].config.service_account == EMAIL
    # It costs nothing, and the plan's cost says so.
    [item] = [i for i in plan.cost().items if i.key == "node-sa"]
    assert item.usd_per_hour == 0
    assert "rl-demo-nodes@my-project.iam.gserviceaccount.com" in str(plan)
    assert "node-sa" in [r["key"] for r in plan.to_dict()["resources"]]


def test_an_image_in_artifact_registry_adds_the_registry_reader_role_and_nothing_else_does() -> None:
    plain = spec().plan().get("node-sa").settings["project_roles"]
    registry = spec(image="us-docker.pkg.dev/my-project/rl/nemo-rl:v0.4.0", ray_version="2.46.0").plan()
    roles = registry.get("node-sa").settings["project_roles"]
    assert list(roles) == [NODE_ROLE, "roles/artifactregistry.reader"]
    assert "us-docker.pkg.dev/my-project/rl/nemo-rl:v0.4.0" in roles["roles/artifactregistry.reader"]
    assert list(plain) == [NODE_ROLE]


def test_the_users_own_account_makes_no_node_and_is_run_as_unchanged() -> None:
    mine = "rl-nodes@my-project.iam.gserviceaccount.com"
    plan = spec(node_service_account=mine).plan()
    assert "node-sa" not in plan
    assert plan.get("gke-cluster").depends_on == ("subnet",)
    assert plan.get("gpu-pool").settings["service_account"] == mine
    assert "never creates, changes or deletes" in plan.get("gpu-pool").settings["service_account_note"]
    assert not [i for i in plan.cost().items if i.key == "node-sa"]


@pytest.mark.parametrize(
    "name", ["d", "demo", "a" * 21, "a" * 22, "x" * 40, "a" * 19 + "-" + "b" * 20, "a" * 20 + "-tail", "z9"]
)
def test_account_ids_are_valid_short_enough_and_distinct(name: str) -> None:
    account = node_service_account_id(name)
    assert re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", account), account
    assert len(account) <= 30
    assert account == node_service_account_id(name)  # deterministic
    # Two long names that share their first 20 characters get two accounts.
    assert node_service_account_id(name + "-one") != node_service_account_id(name + "-two")


def test_a_name_iam_cannot_take_is_refused_offline_naming_the_field_and_rule() -> None:
    with pytest.raises(ConfigError) as info:
        node_service_account_id("Bad_Name")
    assert (info.value.owner, info.value.field, info.value.value) == ("Cluster", "name", "Bad_Name")
    assert "6-30 characters" in info.value.rule


def test_a_domain_scoped_project_gets_its_accounts_e_mail_form() -> None:
    plan = attrs.evolve(spec(), project="example.com:my-project").plan()
    assert plan.get("node-sa").name == "rl-demo-nodes@my-project.example.com.iam.gserviceaccount.com"


# -- up() and down() against the fakes -------------------------------------------------------


def test_up_creates_the_marked_account_with_its_role_and_down_removes_only_ours(gcp: FakeGCP) -> None:
    # Another administrator's members, in our role and in another: down() must keep them.
    gcp.iam.bind(PROJECT, NODE_ROLE, "serviceAccount:" + gcp.iam.seed_account(PROJECT, "others"))
    gcp.iam.bind(PROJECT, "roles/owner", "user:alice@example.com")
    report = backend(spec()).up()
    assert report.get("node-sa").outcome == "created"
    gcp.settle()
    assert gcp.resources()["iam.serviceAccounts"][ACCOUNT] == {
        "managed-by": "rl-lustre",
        "rl-lustre-deployment": "demo",
    }
    assert MEMBER in gcp.iam.bindings(PROJECT)[NODE_ROLE]
    cluster = "projects/my-project/locations/us-east1/clusters/demo"
    assert gcp.iam.users_of(EMAIL) == [f"{cluster}/nodePools/gpu-pool", f"{cluster}/nodePools/ray-head-pool"]
    assert f"iam.bindings projects/{PROJECT} {NODE_ROLE} {MEMBER}" in gcp.leaked("demo")

    # A second up() adopts the account and sends no grant: the role is there.
    before = gcp.request_counts("resourcemanager.SetIamPolicy")
    assert backend(spec()).up().get("node-sa").outcome == "adopted"
    assert gcp.request_counts("resourcemanager.SetIamPolicy") == before

    down = backend(spec()).down()
    assert down.get("node-sa").outcome == "deleted"
    assert gcp.leaked() == []
    assert gcp.iam.bindings(PROJECT) == {
        NODE_ROLE: ["serviceAccount:others@my-project.iam.gserviceaccount.com"],
        "roles/owner": ["user:alice@example.com"],
    }
    # The account went after what ran as it.
    order = [r.method for r in gcp.requests if r.method in ("gke.DeleteCluster", "iam.DeleteServiceAccount")]
    assert order == ["gke.DeleteCluster", "iam.DeleteServiceAccount"]


def test_a_concurrent_policy_change_is_read_again_and_kept(gcp: FakeGCP) -> None:
    gcp.iam.concurrent_change(PROJECT, NODE_ROLE, "user:bob@example.com")
    backend(spec()).up()
    assert [r.outcome for r in gcp.requests if r.method == "resourcemanager.SetIamPolicy"] == ["ABORTED", "ok"]
    assert sorted(gcp.iam.bindings(PROJECT)[NODE_ROLE]) == [MEMBER, "user:bob@example.com"]
    backend(spec()).down()
    assert gcp.iam.bindings(PROJECT) == {NODE_ROLE: ["user:bob@example.com"]}


def test_a_grant_iam_does_not_know_the_new_account_for_yet_is_retried() -> None:
    with FakeGCP(latency={"iam.create_service_account": 0.3}) as gcp:
        backend(spec()).up()
        outcomes = [r.outcome for r in gcp.requests if r.method == "resourcemanager.SetIamPolicy"]
        assert outcomes[0] == "INVALID_ARGUMENT"
        assert outcomes[-1] == "ok"
        assert MEMBER in gcp.iam.bindings(PROJECT)[NODE_ROLE]


def test_a_users_conditional_binding_of_our_role_is_kept_apart_and_whole(gcp: FakeGCP) -> None:
    # A binding of the same role with a condition is another binding: our member goes into
    # the unconditional one, and the conditional one is written back with its condition
    # (which needs the policy read, and written, as version 3).
    until = {"title": "until 2027", "expression": 'request.time < timestamp("2027-01-01T00:00:00Z")'}
    gcp.iam.bind(PROJECT, NODE_ROLE, "user:carol@example.com", condition=until)
    conditional = f"{NODE_ROLE} if {until['expression']}"
    backend(spec()).up()
    assert gcp.iam.bindings(PROJECT) == {NODE_ROLE: [MEMBER], conditional: ["user:carol@example.com"]}
    backend(spec()).down()
    assert gcp.iam.bindings(PROJECT) == {conditional: ["user:carol@example.com"]}
    assert gcp.leaked() == []


@pytest.mark.parametrize(
    ("method", "code"),
    [
        ("iam.CreateServiceAccount", grpc.StatusCode.PERMISSION_DENIED),
        ("resourcemanager.SetIamPolicy", grpc.StatusCode.PERMISSION_DENIED),
        ("resourcemanager.GetIamPolicy", grpc.StatusCode.INTERNAL),
    ],
)
def test_a_fault_at_the_account_or_its_grant_rolls_back_to_nothing(
    gcp: FakeGCP, method: str, code: grpc.StatusCode
) -> None:
    gcp.iam.bind(PROJECT, NODE_ROLE, "user:bob@example.com")
    gcp.faults.fail_call(method, code, message=f"boom in {method}")
    with pytest.raises(RollbackError) as info:
        backend(spec()).up()
    assert info.value.step == "node-sa"
    assert info.value.left == []
    gcp.settle()
    assert gcp.leaked() == []
    assert gcp.iam.bindings(PROJECT) == {NODE_ROLE: ["user:bob@example.com"]}
    if method == "iam.CreateServiceAccount":
        assert "roles/iam.serviceAccountAdmin" in str(info.value)
    elif method == "resourcemanager.SetIamPolicy":
        assert "roles/resourcemanager.projectIamAdmin" in str(info.value)


def test_a_failure_after_the_grant_rolls_the_account_and_its_role_back(gcp: FakeGCP) -> None:
    gcp.faults.fail_operation("gke.CreateCluster", message="boom")
    with pytest.raises(RollbackError) as info:
        backend(spec()).up()
    assert info.value.step == "gke-cluster"
    assert "node-sa" in info.value.rollback.keys("deleted")
    gcp.settle()
    assert gcp.leaked() == []
    assert gcp.iam.bindings(PROJECT) == {}


def test_a_foreign_account_of_that_name_is_refused_and_never_touched(gcp: FakeGCP) -> None:
    gcp.iam.seed_account(PROJECT, "rl-demo-nodes")
    gcp.iam.bind(PROJECT, NODE_ROLE, MEMBER)
    with pytest.raises(ProvisioningError) as info:
        backend(spec()).up()
    assert info.value.step == "node-sa"
    assert isinstance(info.value.cause, OwnershipError)
    assert "was not created by rl_lustre" in str(info.value)
    assert gcp.leaked() == []
    assert backend(spec()).down().get("node-sa").outcome == "not-ours"
    assert ACCOUNT in gcp.resources()["iam.serviceAccounts"]
    assert gcp.iam.bindings(PROJECT) == {NODE_ROLE: [MEMBER]}
    assert gcp.request_counts("iam.DeleteServiceAccount") == {}
    assert gcp.request_counts("resourcemanager.SetIamPolicy") == {}


def test_the_users_own_account_is_used_as_it_is(gcp: FakeGCP) -> None:
    mine = gcp.iam.seed_account(PROJECT, "rl-nodes")
    cluster = spec(node_service_account=mine)
    backend(cluster).up()
    assert len(gcp.iam.users_of(mine)) == 2
    backend(cluster).down()
    assert gcp.request_counts("iam.") == {}  # not even read
    assert gcp.request_counts("resourcemanager.") == {}
    assert list(gcp.resources()["iam.serviceAccounts"]) == [f"projects/{PROJECT}/serviceAccounts/{mine}"]


def test_ls_finds_the_account_and_gc_collects_one_left_behind(gcp: FakeGCP) -> None:
    from rl_lustre.garbage import collect_garbage
    from rl_lustre.inventory import find_deployments
    from rl_lustre.provision.context import Apis

    apis = Apis.from_env(backoff=FAST_BACKOFF, retry=FAST_RETRY)
    backend(spec()).up()
    [found] = find_deployments(PROJECT, apis=apis)
    assert found.get("node-sa").name == ACCOUNT
    # What a crash between the grant and the cluster would leave: the account and its role.
    backend(spec()).down(keys=[r.key for r in spec().plan() if r.key != "node-sa"])
    [left] = find_deployments(PROJECT, apis=apis)
    assert left.plan_keys() == ["node-sa"]
    [collected] = collect_garbage(PROJECT, delete=True, older_than=0, apis=apis)
    assert collected.report.keys("deleted") == ["node-sa"]
    assert gcp.leaked() == []


# -- faults in down(), and what ls / gc / `down NAME` see ------------------------------------


@pytest.mark.parametrize(
    ("method", "code"),
    [
        ("iam.GetServiceAccount", grpc.StatusCode.INTERNAL),
        ("resourcemanager.GetIamPolicy", grpc.StatusCode.INTERNAL),
        ("resourcemanager.SetIamPolicy", grpc.StatusCode.PERMISSION_DENIED),
        ("iam.DeleteServiceAccount", grpc.StatusCode.INTERNAL),
    ],
)
def test_a_fault_in_downs_unbinding_or_deletion_leaves_what_gc_finds_and_removes(
    gcp: FakeGCP, method: str, code: grpc.StatusCode
) -> None:
    from rl_lustre.errors import TeardownError
    from rl_lustre.garbage import collect_garbage
    from rl_lustre.inventory import find_deployments
    from rl_lustre.provision.context import Apis

    gcp.iam.bind(PROJECT, NODE_ROLE, "user:bob@example.com")
    gcp.iam.bind(PROJECT, "roles/owner", "user:alice@example.com")
    users = gcp.iam.bindings(PROJECT)
    backend(spec()).up()
    gcp.faults.fail_call(method, code, message=f"boom in {method}")
    with pytest.raises(TeardownError) as info:
        backend(spec()).down()
    assert list(info.value.errors) == ["node-sa"]
    assert f"boom in {method}" in str(info.value)
    gcp.settle()
    # Everything else went; the account never goes before its role: while the binding is
    # there, so is the account that ls and gc find it by (a binding of a deleted account,
    # deleted:serviceAccount:...?uid=N, is found by nothing).
    left = gcp.leaked("demo")
    assert f"iam.serviceAccounts {ACCOUNT}" in left
    assert set(left) <= {f"iam.serviceAccounts {ACCOUNT}", f"iam.bindings projects/{PROJECT} {NODE_ROLE} {MEMBER}"}
    apis = Apis.from_env(backoff=FAST_BACKOFF, retry=FAST_RETRY)
    [orphan] = find_deployments(PROJECT, apis=apis)
    assert orphan.plan_keys() == ["node-sa"]
    # gc removes the rest; the other members' bindings were never touched.
    [collected] = collect_garbage(PROJECT, delete=True, older_than=0, apis=apis)
    assert collected.report.keys("deleted") == ["node-sa"]
    assert gcp.leaked() == []
    assert gcp.iam.bindings(PROJECT) == users


def test_a_concurrent_policy_change_during_down_is_read_again_and_kept(gcp: FakeGCP) -> None:
    backend(spec()).up()
    gcp.iam.concurrent_change(PROJECT, NODE_ROLE, "user:bob@example.com")
    backend(spec()).down()
    assert [r.outcome for r in gcp.requests if r.method == "resourcemanager.SetIamPolicy"] == ["ok", "ABORTED", "ok"]
    assert gcp.iam.bindings(PROJECT) == {NODE_ROLE: ["user:bob@example.com"]}
    assert gcp.leaked() == []


def test_gc_leaves_a_young_account_alone_as_it_does_other_young_resources(gcp: FakeGCP) -> None:
    # What an up() under way shows before its cluster is requested (here: only the account,
    # as with your own network and an existing volume while the grant waits for IAM).
    from rl_lustre.garbage import collect_garbage
    from rl_lustre.inventory import find_deployments
    from rl_lustre.provision.context import Apis

    apis = Apis.from_env(backoff=FAST_BACKOFF, retry=FAST_RETRY)
    backend(spec()).up()
    backend(spec()).down(keys=[r.key for r in spec().plan() if r.key != "node-sa"])
    [young] = find_deployments(PROJECT, apis=apis)
    assert young.plan_keys() == ["node-sa"]
    age = young.age_seconds()
    assert age is not None
    assert 0 <= age < 60
    assert young.to_dict()["resources"][0]["created"] is not None
    assert collect_garbage(PROJECT, delete=True, apis=apis) == []  # older_than: 15 minutes
    assert gcp.request_counts("iam.DeleteServiceAccount") == {}
    assert f"iam.serviceAccounts {ACCOUNT}" in gcp.leaked("demo")
    [old] = collect_garbage(PROJECT, delete=True, older_than=0, apis=apis)
    assert old.report.keys("deleted") == ["node-sa"]
    assert gcp.leaked() == []


def test_down_by_name_of_a_deployment_on_the_users_account_leaves_iam_alone(gcp: FakeGCP) -> None:
    # `rl-lustre down NAME` rebuilds the spec from what it finds: the pools run as the
    # user's account, so there is no node-sa to delete, and IAM is not even read for one.
    from rl_lustre.inventory import find_deployment
    from rl_lustre.provision.context import Apis

    mine = gcp.iam.seed_account(PROJECT, "rl-nodes")
    gcp.iam.bind(PROJECT, NODE_ROLE, f"serviceAccount:{mine}")
    backend(spec(node_service_account=mine)).up()
    apis = Apis.from_env(backoff=FAST_BACKOFF, retry=FAST_RETRY)
    found = find_deployment("demo", project=PROJECT, apis=apis)
    assert found.get("gpu-pool").details["service_account"] == mine
    assert found.cluster().node_service_account == mine
    before = gcp.request_counts("iam.") + gcp.request_counts("resourcemanager.")
    report = found.down(apis=apis)
    assert "node-sa" not in report.records
    assert gcp.request_counts("iam.") + gcp.request_counts("resourcemanager.") == before
    assert gcp.leaked() == []
    assert gcp.iam.bindings(PROJECT) == {NODE_ROLE: [f"serviceAccount:{mine}"]}
    assert list(gcp.resources()["iam.serviceAccounts"]) == [f"projects/{PROJECT}/serviceAccounts/{mine}"]
