"""The capacity policy as a GKE ComputeClass, built offline from the spec, and the schema it is
checked against (written from Google's field reference, vendored in rl_lustre/kube/crds)."""

from __future__ import annotations

from typing import Any

import pytest

from rl_lustre import Capacity, Cluster
from rl_lustre.errors import ConfigError
from rl_lustre.kube.computeclass import compute_class_manifest, compute_class_rules, pod_selector, pod_tolerations
from rl_lustre.kube.schema import compute_class_crd, validate_compute_class

REFERENCE = "https://cloud.google.com/kubernetes-engine/docs/reference/crds/computeclass"
BASE: dict[str, Any] = {
    "name": "demo",
    "project": "my-project",
    "region": "us-east1",
    "zone": "us-east1-b",
    "fabric": "tcp",
}


def spec(**kw: Any) -> Cluster:
    return Cluster(**{**BASE, **kw})


def test_the_rules_follow_the_policy_kind_first_the_clusters_zone_first() -> None:
    c = spec(
        capacity=("reservation", "spot", Capacity("flex-start", wait=1200), "on-demand"),
        reservation="my-res",
        capacity_zones=("us-east1-b", "us-east1-c", "us-east1-d"),
    )
    rules = compute_class_rules(c)
    assert [r["nodepools"] for r in rules] == [
        ["gpu-pool"],  # a specific reservation is zonal: the cluster's zone only
        ["gpu-spot-b"],
        ["gpu-spot-c"],
        ["gpu-spot-d"],
        ["gpu-flex-b"],
        ["gpu-flex-c"],
        ["gpu-flex-d"],
        ["gpu-ondemand-b"],
        ["gpu-ondemand-c"],
        ["gpu-ondemand-d"],
    ]
    # Only flex-start waits in GKE's queue: its wait is GKE's, the others fall back at once.
    assert {r.get("capacityCheckWaitTimeSeconds") for r in rules if r["nodepools"][0].startswith("gpu-flex")} == {1200}
    assert all("capacityCheckWaitTimeSeconds" not in r for r in rules if not r["nodepools"][0].startswith("gpu-flex"))


def test_zones_found_at_up_and_a_subset_of_the_kinds() -> None:
    c = spec(capacity=("spot", "flex-start", "on-demand"), capacity_zones="region")
    assert [r["nodepools"][0] for r in compute_class_rules(c)] == ["gpu-pool", "gpu-flex-b", "gpu-ondemand-b"]
    found = ("us-east1-b", "us-east1-d")
    assert [r["nodepools"][0] for r in compute_class_rules(c, found)] == [
        "gpu-pool",
        "gpu-spot-d",
        "gpu-flex-b",
        "gpu-flex-d",
        "gpu-ondemand-b",
        "gpu-ondemand-d",
    ]
    assert [r["nodepools"][0] for r in compute_class_rules(c, found, kinds=[0])] == ["gpu-pool", "gpu-spot-d"]


def test_the_decisions_the_object_states() -> None:
    cc = compute_class_manifest(spec(capacity=("spot", "on-demand"), labels={"team": "rl"}))
    assert cc["apiVersion"] == "cloud.google.com/v1"
    assert cc["kind"] == "ComputeClass"
    assert "namespace" not in cc["metadata"]  # cluster-scoped
    assert cc["metadata"]["labels"] == {"team": "rl", "managed-by": "rl-lustre", "rl-lustre-deployment": "demo"}
    s = cc["spec"]
    assert s["whenUnsatisfiable"] == "DoNotScaleUp"
    assert s["activeMigration"] == {"optimizeRulePriority": False}
    assert s["autoscalingPolicy"] == {"consolidationDelayMinutes": 1}
    assert s["nodePoolAutoCreation"] == {"enabled": False}
    # What a pod needs to land on the class's nodes, whichever pool they are in.
    assert pod_selector(spec()) == {"cloud.google.com/compute-class": "demo-gpus"}
    assert {t["key"] for t in pod_tolerations(spec())} == {"cloud.google.com/compute-class", "nvidia.com/gpu"}


def _good() -> dict[str, Any]:
    return compute_class_manifest(spec(capacity=("spot", "flex-start")))


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda o: o["spec"].update(whenUnsatisfiable="ScaleUp"), "spec.whenUnsatisfiable", "is not one of"),
        (
            lambda o: o["spec"]["autoscalingPolicy"].update(consolidationDelayMinutes=1441),
            "spec.autoscalingPolicy.consolidationDelayMinutes",
            "greater than the maximum of 1440",
        ),
        (lambda o: o["spec"]["priorities"][0].update(nodePools=["x"]), "spec.priorities.0", "nodePools"),
        (lambda o: o["spec"]["activeMigration"].update(optimizeRulePriority="no"), "", "is not of type 'boolean'"),
        (
            lambda o: o["spec"]["priorities"][0].update(reservations={"affinity": "Any"}),
            "spec.priorities.0.reservations.affinity",
            "AnyBestEffort",
        ),
        (lambda o: o["spec"].update(priorityScore=3), "spec", "priorityScore"),
    ],
)
def test_the_schema_names_the_field_the_value_and_the_rule(change: Any, field: str, words: str) -> None:
    obj = _good()
    change(obj)
    with pytest.raises(ConfigError) as info:
        validate_compute_class(obj)
    assert f"ComputeClass.{field}" in str(info.value)
    assert words in str(info.value)


def test_every_field_of_the_schema_cites_the_reference() -> None:
    crd = compute_class_crd()
    assert (crd["group"], crd["version"], crd["plural"], crd["scope"]) == (
        "cloud.google.com",
        "v1",
        "computeclasses",
        "Cluster",
    )
    seen = []

    def walk(node: Any, path: str) -> None:
        for name, sub in (node.get("properties") or {}).items():
            here = f"{path}.{name}" if path else name
            if here.split(".")[0] in ("apiVersion", "kind", "metadata"):
                continue
            if here.startswith("spec.nodePoolConfig.resourceManagerTags") or ".taints" in here:
                continue  # the items of a list of plain key/value pairs
            assert str(sub.get("description", "")).startswith(REFERENCE), here
            seen.append(here)
            walk(sub, here)
        if isinstance(node.get("items"), dict):
            walk(node["items"], path + "[]")

    walk(crd["openAPIV3Schema"], "")
    for field in (
        "spec.priorities",
        "spec.priorities[].nodepools",
        "spec.priorities[].flexStart.enabled",
        "spec.priorities[].capacityCheckWaitTimeSeconds",
        "spec.priorities[].reservations.specific[].name",
        "spec.whenUnsatisfiable",
        "spec.activeMigration.optimizeRulePriority",
        "spec.autoscalingPolicy.consolidationDelayMinutes",
        "spec.nodePoolAutoCreation.enabled",
    ):
        assert field in seen, field
