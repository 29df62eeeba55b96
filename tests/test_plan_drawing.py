"""Plan.graph(): the dependency graph drawn from the plan, every edge shown once, and the
copy in the docs is the drawing of today's default plan."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.specs import GKE

from rl_lustre import Cluster, LustreVolume
from rl_lustre.plan import Plan, PlannedResource

ROOT = Path(__file__).resolve().parents[1]
SPECS = {
    "default": GKE,
    "tcp": {**GKE, "fabric": "tcp"},
    "user network": {**GKE, "network": "corp-vpc"},
    "existing volume": {
        **GKE,
        "fabric": "tcp",
        "volume": LustreVolume(name="team-ckpt", existing=True, capacity_gib=9000, throughput_mbps_per_tib=1000),
    },
    "warm start, standby pool, no secrets": {
        **GKE,
        "fabric": "tcp",
        "warm_start": "gs://bucket/qwen",
        "capacity": ("spot", "flex-start"),
        "secrets": (),
    },
    "own node account, no preload": {
        **GKE,
        "node_service_account": "rl-nodes@my-project.iam.gserviceaccount.com",
        "preload_image": False,
    },
}
_LINE = re.compile(r"(?P<tree>(?:[│ ]  )*(?:[├└]─ )?)(?P<label>\S+)(?: \[(?P<action>\w+)\])?(?:  \+ (?P<also>.*))?")
_RANGE = re.compile(r"(.*?)(\d+)\.\.(\d+)")
_SET = re.compile(r"(.*?)\{([\d,]+)\}")


def _members(label: str) -> list[str]:
    if m := _RANGE.fullmatch(label):
        return [f"{m[1]}{i}" for i in range(int(m[2]), int(m[3]) + 1)]
    if m := _SET.fullmatch(label):
        return [f"{m[1]}{i}" for i in m[2].split(",")]
    return [label]


def _edges(dep: str, node: str) -> set[tuple[str, str]]:
    """What ``node`` (a line) waiting for ``dep`` (a label) means, read as the docs say."""
    deps, nodes = _members(dep), _members(node)
    if len(deps) > 1 and len(nodes) > 1:
        assert len(deps) == len(nodes), f"{node} under {dep}: families of different sizes"
        return set(zip(deps, nodes, strict=True))
    return {(d, n) for d in deps for n in nodes}


def read_back(drawing: str) -> tuple[dict[str, str], set[tuple[str, str]]]:
    """The keys a drawing shows (with their action) and its edges ``(dependency, node)``."""
    actions: dict[str, str] = {}
    edges: set[tuple[str, str]] = set()
    path: list[str] = []
    lines: list[str] = []
    for line in drawing.splitlines():  # a long line goes on under its tree, after a comma
        if lines and lines[-1].endswith(","):
            lines[-1] += " " + line.lstrip(" │")
        else:
            lines.append(line)
    for line in lines:
        m = _LINE.fullmatch(line)
        assert m, f"not a line of the drawing: {line!r}"
        depth = len(m["tree"]) // 3
        del path[depth:]
        if path:
            edges |= _edges(path[-1], m["label"])
        for also in (m["also"] or "").split(", ") if m["also"] else []:
            edges |= _edges(also, m["label"])
        for key in _members(m["label"]):
            assert key not in actions, f"{key} drawn twice"
            actions[key] = m["action"] or "create"
        path.append(m["label"])
    return actions, edges


def _truth(plan: Plan) -> tuple[dict[str, str], set[tuple[str, str]]]:
    return {r.key: r.action for r in plan}, {(d, r.key) for r in plan for d in r.depends_on}


@pytest.mark.parametrize("spec", SPECS.values(), ids=list(SPECS))
def test_the_drawing_shows_every_node_and_every_edge_of_the_plan_once(spec: dict) -> None:
    plan = Cluster(**spec).plan()
    drawing = plan.graph()
    assert read_back(drawing) == _truth(plan)
    assert max(len(line) for line in drawing.splitlines()) <= 120


def test_the_default_plan_folds_its_families_into_one_line_each() -> None:
    plan = Cluster(**GKE).plan()
    lines = plan.graph().splitlines()
    # The ComputeClass: one more node, one more line; the head's ClusterRole and its binding: two
    # more of each, and the RayCluster's line, waiting for that binding too, goes on on another.
    assert (len(plan), len(lines)) == (54, 34)
    nodes = [line for before, line in zip(["", *lines[:-1]], lines, strict=True) if not before.endswith(",")]
    assert [line.split("─ ")[-1].split()[0] for line in nodes if ".." in line.split("  +")[0]] == [
        "netparams-rdma-0..7",
        "podnet-rdma-0..7",
        "rdma-subnet-0..7",
    ]
    # Each node under the dependency it waits for longest: Lustre's branch apart from GKE's.
    assert "│  └─ lustre  + firewall-lustre" in plan.graph()
    assert Cluster.local("demo", volume_dir="/tmp/v").plan().graph() == "volume-dir [use]\n└─ ray-head"


def _node(key: str, *deps: str) -> PlannedResource:
    return PlannedResource(key=key, kind="k", name=key, depends_on=deps)


def test_a_family_folds_only_where_one_line_reads_one_way() -> None:
    """Numbered nodes fold only when each member is wired like the others and every line
    can be read back: member by member, or all of them."""
    base = [_node("net"), *(_node(f"sub-{i}", "net") for i in range(4))]
    alike = Plan(cluster_name="t", backend="t", resources=[*base, *(_node(f"par-{i}", f"sub-{i}") for i in range(4))])
    assert alike.graph() == "net\n└─ sub-0..3\n   └─ par-0..3"
    cases = {
        # One member waits for another subnet than its namesake: nothing of the family folds.
        "unlike": [*base, _node("par-0", "sub-1"), *(_node(f"par-{i}", f"sub-{i}") for i in range(1, 4))],
        # A node waits for some members only: it names them one by one.
        "some": [*base, _node("ray", "sub-0", "sub-2")],
        # Every member waits for the same member of another family.
        "fixed": [*base, *(_node(f"par-{i}", "sub-0") for i in range(4))],
        # Families of different numbers.
        "sizes": [*base, *(_node(f"par-{i}", f"sub-{i}") for i in range(3))],
        # Numbers with a gap.
        "gap": [_node("net"), *(_node(f"sub-{i}", "net") for i in (0, 2, 3))],
    }
    for name, resources in cases.items():
        plan = Plan(cluster_name="t", backend="t", resources=resources)
        assert read_back(plan.graph()) == _truth(plan), name
    assert Plan(cluster_name="t", backend="t", resources=cases["gap"]).graph() == "net\n└─ sub-{0,2,3}"
    assert "└─ ray  + sub-2" in Plan(cluster_name="t", backend="t", resources=cases["some"]).graph()


def test_a_long_line_wraps_under_its_node_within_120_columns() -> None:
    deps = [f"a-rather-long-dependency-name-{c}" for c in "abcdefgh"]
    plan = Plan(cluster_name="t", backend="t", resources=[*(_node(d) for d in deps), _node("wide", *deps)])
    lines = plan.graph().splitlines()
    assert max(len(line) for line in lines) <= 120
    at = next(i for i, line in enumerate(lines) if line.startswith("└─ wide  + "))
    # The rest of the line goes on under the node, clear of its children's column.
    assert lines[at + 1].startswith(" " * 10 + "a-rather-long")


def test_the_docs_show_the_drawing_of_todays_default_plan() -> None:
    """docs/concepts.md shows the output of its own python block: kept current here."""
    text = (ROOT / "docs" / "concepts.md").read_text()
    call = 'print(Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b").plan().graph())'
    assert call in text
    shown = re.search(
        r"```python\n[^`]*" + re.escape(call) + r"\n```\n\n<!--[^\n]*-->\n```text\n(.*?)\n```", text, re.S
    )
    assert shown, "docs/concepts.md: the python block and the text block of its output"
    expected = Cluster(**GKE).plan().graph()
    assert shown[1] == expected, "docs/concepts.md's drawing is stale; the current one:\n" + expected
