"""The IAM Admin and Resource Manager fakes, through Google's own clients (gRPC on loopback):
what they keep of the real services' rules, so that rl_lustre's adapter is held to them."""

from __future__ import annotations

import grpc
import pytest
from google.api_core import exceptions as gexc
from google.cloud import container_v1

from rl_lustre.gcp import _clients
from rl_lustre.testing import FakeGCP

PROJECT = "my-project"


@pytest.fixture
def gcp():
    with FakeGCP() as fake:
        yield fake


def test_accounts_are_created_read_listed_and_deleted_under_iams_rules(gcp: FakeGCP) -> None:
    iam = _clients.iam_admin()
    made = iam.create_service_account(
        request={
            "name": f"projects/{PROJECT}",
            "account_id": "rl-demo-nodes",
            "service_account": {"display_name": "d", "description": "mine"},
        }
    )
    assert made.email == "rl-demo-nodes@my-project.iam.gserviceaccount.com"
    assert made.name == f"projects/{PROJECT}/serviceAccounts/{made.email}"
    assert iam.get_service_account(name=f"projects/-/serviceAccounts/{made.email}").unique_id == made.unique_id
    with pytest.raises(gexc.AlreadyExists):
        iam.create_service_account(request={"name": f"projects/{PROJECT}", "account_id": "rl-demo-nodes"})
    for bad in ("short", "Upper-case", "x" * 31, "ends-with-"):
        with pytest.raises(gexc.InvalidArgument):
            iam.create_service_account(request={"name": f"projects/{PROJECT}", "account_id": bad})
    for i in range(3):
        gcp.iam.seed_account(PROJECT, f"more-{i:03d}")
    # Paged as the API pages: the client's pager follows next_page_token.
    listed = [
        a.email.split("@")[0]
        for a in iam.list_service_accounts(request={"name": f"projects/{PROJECT}", "page_size": 2})
    ]
    assert listed == ["more-000", "more-001", "more-002", "rl-demo-nodes"]
    iam.delete_service_account(name=made.name)
    with pytest.raises(gexc.NotFound):
        iam.get_service_account(name=made.name)


def test_a_stale_etag_is_aborted_and_a_deleted_accounts_members_are_kept_as_deleted(gcp: FakeGCP) -> None:
    projects = _clients.projects()
    email = gcp.iam.seed_account(PROJECT, "rl-demo-nodes")
    policy = projects.get_iam_policy(request={"resource": f"projects/{PROJECT}"})
    policy.bindings.add(role="roles/viewer", members=[f"serviceAccount:{email}"])
    gcp.iam.bind(PROJECT, "roles/owner", "user:alice@example.com")  # someone else, in between
    with pytest.raises(gexc.Aborted):
        projects.set_iam_policy(request={"resource": f"projects/{PROJECT}", "policy": policy})
    fresh = projects.get_iam_policy(request={"resource": f"projects/{PROJECT}"})
    fresh.bindings.add(role="roles/viewer", members=[f"serviceAccount:{email}"])
    projects.set_iam_policy(request={"resource": f"projects/{PROJECT}", "policy": fresh})
    assert gcp.iam.bindings(PROJECT) == {
        "roles/owner": ["user:alice@example.com"],
        "roles/viewer": [f"serviceAccount:{email}"],
    }
    # A member whose account does not exist is refused.
    again = projects.get_iam_policy(request={"resource": f"projects/{PROJECT}"})
    again.bindings.add(role="roles/viewer", members=["serviceAccount:nobody-here@my-project.iam.gserviceaccount.com"])
    with pytest.raises(gexc.InvalidArgument, match="does not exist"):
        projects.set_iam_policy(request={"resource": f"projects/{PROJECT}", "policy": again})
    _clients.iam_admin().delete_service_account(name=f"projects/{PROJECT}/serviceAccounts/{email}")
    [member] = gcp.iam.bindings(PROJECT)["roles/viewer"]
    assert member.startswith(f"deleted:serviceAccount:{email}?uid=")


def test_leaked_lists_our_accounts_and_their_bindings_even_after_the_account_is_gone(gcp: FakeGCP) -> None:
    from rl_lustre.gcp._ownership import describe_ownership

    ours = gcp.iam.seed_account(PROJECT, "rl-demo-nodes", description=describe_ownership("demo", "nodes"))
    theirs = gcp.iam.seed_account(PROJECT, "by-hand")
    gcp.iam.bind(PROJECT, "roles/viewer", f"serviceAccount:{ours}")
    gcp.iam.bind(PROJECT, "roles/viewer", f"serviceAccount:{theirs}")
    assert gcp.leaked("demo") == [
        f"iam.bindings projects/{PROJECT} roles/viewer serviceAccount:{ours}",
        f"iam.serviceAccounts projects/{PROJECT}/serviceAccounts/{ours}",
    ]
    _clients.iam_admin().delete_service_account(name=f"projects/{PROJECT}/serviceAccounts/{ours}")
    [left] = gcp.leaked()
    assert left.startswith(f"iam.bindings projects/{PROJECT} roles/viewer deleted:serviceAccount:{ours}?uid=")


def test_gke_refuses_a_pool_that_runs_as_an_account_that_does_not_exist(gcp: FakeGCP) -> None:
    gcp.seed_network(PROJECT, "demo-net", subnet="demo-subnet")
    cm = _clients.cluster_manager()
    pool = container_v1.NodePool(
        name="p",
        initial_node_count=1,
        config=container_v1.NodeConfig(
            machine_type="n2-standard-8", service_account="missing-one@my-project.iam.gserviceaccount.com"
        ),
    )
    cluster = container_v1.Cluster(name="demo", network="demo-net", subnetwork="demo-subnet", node_pools=[pool])
    with pytest.raises(gexc.InvalidArgument, match=r"missing-one@my-project\.iam\.gserviceaccount\.com"):
        cm.create_cluster(parent=f"projects/{PROJECT}/locations/us-east1", cluster=cluster)
    assert [r.outcome for r in gcp.requests if r.method == "gke.CreateCluster"] == [
        grpc.StatusCode.INVALID_ARGUMENT.name
    ]
    gcp.iam.seed_account(PROJECT, "missing-one")
    cm.create_cluster(parent=f"projects/{PROJECT}/locations/us-east1", cluster=cluster)
    gcp.settle()
    assert gcp.iam.users_of("missing-one@my-project.iam.gserviceaccount.com") == [
        f"projects/{PROJECT}/locations/us-east1/clusters/demo/nodePools/p"
    ]


def test_conditional_bindings_keep_their_condition_and_need_policy_version_3(gcp: FakeGCP) -> None:
    projects = _clients.projects()
    resource = f"projects/{PROJECT}"
    until = {"title": "until 2027", "expression": 'request.time < timestamp("2027-01-01T00:00:00Z")'}
    gcp.iam.bind(PROJECT, "roles/viewer", "user:carol@example.com", condition=until)
    gcp.iam.bind(PROJECT, "roles/viewer", "user:alice@example.com")
    # Version 3: the conditional binding whole, apart from the role's unconditional one.
    v3 = projects.get_iam_policy(request={"resource": resource, "options": {"requested_policy_version": 3}})
    assert v3.version == 3
    assert [(b.role, list(b.members), b.condition.title) for b in v3.bindings] == [
        ("roles/viewer", ["user:alice@example.com"], ""),
        ("roles/viewer", ["user:carol@example.com"], "until 2027"),
    ]
    projects.set_iam_policy(request={"resource": resource, "policy": v3})
    assert gcp.iam.bindings(PROJECT) == {
        "roles/viewer": ["user:alice@example.com"],
        f"roles/viewer if {until['expression']}": ["user:carol@example.com"],
    }
    # Below version 3 (the default), IAM shows it as a role of its own, without its
    # condition, and refuses that role when it is written back.
    v1 = projects.get_iam_policy(request={"resource": resource})
    assert v1.version == 1
    [shown] = [b for b in v1.bindings if "carol" in b.members[0]]
    assert shown.role.startswith("roles/viewer_withcond_")
    assert not shown.HasField("condition")
    with pytest.raises(gexc.InvalidArgument, match="_withcond_"):
        projects.set_iam_policy(request={"resource": resource, "policy": v1})
    # A conditional binding in a policy below version 3 is refused too.
    v3 = projects.get_iam_policy(request={"resource": resource, "options": {"requested_policy_version": 3}})
    v3.version = 1
    with pytest.raises(gexc.InvalidArgument, match="version 3"):
        projects.set_iam_policy(request={"resource": resource, "policy": v3})
    assert len(gcp.iam.bindings(PROJECT)) == 2
