"""``rl-lustre`` end to end on the GKE backend's fakes: plan, up, ls, gc (a leftover planted
in the fake, and resources that are not ours next to it), down by name, down by file.

The fakes are :class:`FakeGCP` (the real Google clients over gRPC/REST) and a
:class:`KubeFake` whose KubeRay simulation makes the RayCluster ready; every verb runs
in-process through click's runner, as the console script runs it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers.specs import GKE

from rl_lustre import Cluster, LustreVolume
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.catalog import PRICES
from rl_lustre.cli._app import cli
from rl_lustre.gcp import LustreInstances, _wait
from rl_lustre.gcp.lustre import instance_request
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, KubeFake

SCRIPT = """\
from rl_lustre import Cluster

cluster = Cluster(name="cli-e2e", project="my-project", region="us-east1", zone="us-east1-b",
                  num_nodes=2, secrets=[], fabric="tcp")
"""


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGCP]:
    # The CLI builds its adapters from the environment; only their polling is sped up.
    monkeypatch.setattr(_wait, "DEFAULT_BACKOFF", FAST_BACKOFF)
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        yield gcp


def run(*args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.stderr + result.stdout
    return json.loads(result.stdout) if "--json" in args else result.stdout


def _plant_leftover(gcp: FakeGCP) -> Cluster:
    """What a crash leaves: a deployment's network, PSA range, firewall, Lustre and node account, no GKE cluster."""
    crashed = Cluster(
        **{**GKE, "name": "crashed"},
        fabric="tcp",
        volume=LustreVolume(name="crashed-lustre", capacity_gib=9_000, throughput_mbps_per_tib=1000),
    )
    backend = GKEBackend(crashed, gcp_only=True, backoff=FAST_BACKOFF, retry=FAST_RETRY)
    backend.up()
    backend.down(keys=["gpu-pool", "cpu-pool", "gke-cluster"])
    # Next to it, resources that are not ours: a network, and a Lustre instance on it.
    gcp.seed_network("my-project", "byhand", psa_range="10.92.0.0/22")
    mine = LustreVolume(name="byhand-lustre", project="my-project", zone="us-east1-b", network="byhand")
    request = instance_request(mine, deployment="x")
    request.labels.clear()
    LustreInstances(backoff=FAST_BACKOFF).client.create_instance(
        parent="projects/my-project/locations/us-east1-b", instance_id="byhand-lustre", instance=request
    )
    gcp.settle()
    return crashed


def test_plan_up_ls_gc_down_on_the_fakes(fakes: FakeGCP, tmp_path: Path) -> None:
    script = tmp_path / "deploy.py"
    script.write_text(SCRIPT)
    target = f"{script}:cluster"

    plan = run("plan", target, "--json")
    spec = Cluster(
        **{**GKE, "name": "cli-e2e"},
        num_nodes=2,
        secrets=[],
        fabric="tcp",
    )
    assert plan == json.loads(json.dumps(spec.plan().to_dict()))
    # Nothing was asked of the fakes to make the plan.
    assert fakes.requests == []

    up = run("up", target, "--json")
    created = sorted(r["key"] for r in up["report"]["resources"] if r["outcome"] == "created")
    # The preload image too: built once for the project, kept for the next deployment.
    assert created == sorted(r.key for r in spec.plan() if r.action in ("create", "cache"))

    crashed = _plant_leftover(fakes)
    listing = run("ls", "--project", "my-project", "--json")
    by_name = {d["name"]: d for d in listing["deployments"]}
    assert sorted(by_name) == ["cli-e2e", "crashed"]
    live = by_name["cli-e2e"]
    assert (live["state"], live["whole"], live["zone"]) == ("RUNNING", True, "us-east1-b")
    assert [r["key"] for r in live["resources"]] == [
        "network",
        "subnet",
        "psa-range",
        "firewall-lustre",
        "lustre",
        "node-sa",
        "gke-cluster",
        "cpu-pool",
        "gpu-pool",
    ]
    # What it costs is what its plan said it would, its GPU nodes' secondary boot disks
    # included; the preload image they boot from is shared, priced per month on its own.
    planned = spec.plan().cost()
    assert live["usd_per_hour"] == pytest.approx(
        planned.total_usd_per_hour - planned.get("preload-image").usd_per_hour, abs=1e-3
    )
    [image] = listing["shared"]["preload_images"]
    assert image["name"].startswith("projects/my-project/global/images/" + spec.plan().get("preload-image").name)
    assert (image["image"], image["status"], image["used_by"]) == (spec.image, "READY", ["cli-e2e/gpu-pool"])
    assert image["digest"] == fakes.registry.digest(spec.image)
    assert image["usd_per_month"] == pytest.approx(image["disk_gb"] * PRICES.image_gib_month)
    assert listing["shared"]["preload_builders"] == []
    partial = by_name["crashed"]
    assert (partial["state"], partial["whole"]) == ("PARTIAL", False)
    assert [r["key"] for r in partial["resources"]] == [
        "network",
        "subnet",
        "psa-range",
        "firewall-lustre",
        "lustre",
        "node-sa",
    ]
    assert partial["usd_per_hour"] == pytest.approx(crashed.plan().cost().get("lustre").usd_per_hour, abs=1e-3)
    assert listing["usd_per_hour"] == pytest.approx(live["usd_per_hour"] + partial["usd_per_hour"], abs=1e-3)
    text = run("ls", "--project", "my-project")
    assert "crashed  PARTIAL" in text
    assert "SHARED (kept between deployments" in text
    assert f"preload-image  {image['name'].rsplit('/', 1)[1]}" in text
    assert "used by cli-e2e/gpu-pool" in text
    # The script's cluster names the project just as well.
    by_target = run("ls", target, "--json")
    assert by_target["project"] == "my-project"
    assert [(d["name"], d["state"], d["resources"]) for d in by_target["deployments"]] == [
        (d["name"], d["state"], d["resources"]) for d in listing["deployments"]
    ]
    assert "byhand" not in text

    # Fresh leftovers may be an up() under way: left alone unless asked.
    assert run("gc", "--project", "my-project", "--json")["partial"] == []
    listed = run("gc", "--project", "my-project", "--older-than", "0", "--json")
    assert [d["name"] for d in listed["partial"]] == ["crashed"]
    assert listed["deleted"] is False
    assert fakes.leaked("crashed") != []
    assert "run again with --yes" in run("gc", "--project", "my-project", "--older-than", "0")

    collected = run("gc", "--project", "my-project", "--older-than", "0", "--yes", "--json")
    report = collected["partial"][0]["report"]
    assert sorted(r["key"] for r in report["resources"] if r["outcome"] == "deleted") == [
        "firewall-lustre",
        "lustre",
        "network",
        "node-sa",
        "psa-peering",
        "psa-range",
        "subnet",
    ]
    assert collected["partial"][0]["left"] == []
    fakes.settle()
    assert fakes.leaked("crashed") == []
    # The live deployment and what is not ours are untouched.
    resources = fakes.resources()
    assert "projects/my-project/global/networks/byhand" in resources["compute.networks"]
    assert "projects/my-project/locations/us-east1-b/instances/byhand-lustre" in resources["lustre.instances"]
    assert [d["name"] for d in run("ls", "--project", "my-project", "--json")["deployments"]] == ["cli-e2e"]

    # down by name, from the labels alone; then by file, which finds nothing left.
    # gc does not take a preload image a node pool boots from, even when asked.
    kept = run("gc", "--project", "my-project", "--preload-images", "--yes", "--json")["shared"]
    assert (kept["preload_images"], [i["name"] for i in kept["in_use"]]) == ([], [image["name"]])
    down = run("down", "cli-e2e", "--project", "my-project", "--zone", "us-east1-b", "--json")
    assert {r["outcome"] for r in down["report"]["resources"] if r["key"] != "preload-image"} <= {"deleted", "absent"}
    # The preload image is kept for the next deployment of the image.
    assert [r["outcome"] for r in down["report"]["resources"] if r["key"] == "preload-image"] == ["kept"]
    fakes.settle()
    assert fakes.leaked("cli-e2e") == []
    again = run("down", target, "--json")
    assert {r["outcome"] for r in again["report"]["resources"] if r["key"] != "preload-image"} == {"absent"}
    assert run("ls", "--project", "my-project", "--json")["deployments"] == []
    # Kept for the next deployment, listed unused; gc lists it, deletes it with --yes.
    assert run("ls", "--project", "my-project", "--json")["shared"]["preload_images"][0]["used_by"] == []
    assert "unused preload image" in run("gc", "--project", "my-project", "--preload-images")
    assert fakes.resources()["compute.images"]
    gone = run("gc", "--project", "my-project", "--preload-images", "--yes", "--json")["shared"]
    assert [i["name"] for i in gone["preload_images"]] == [image["name"]]
    fakes.settle()
    assert not fakes.resources()["compute.images"]
    assert "projects/my-project/global/networks/byhand" in fakes.resources()["compute.networks"]


def test_bad_arguments_give_the_librarys_errors(fakes: FakeGCP, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["ls", "--project", "My_Project"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: rl-lustre.project='My_Project': ")
    # Refused before any request.
    assert fakes.requests == []
    result = CliRunner().invoke(cli, ["down", "nobody", "--project", "my-project"])
    assert result.exit_code == 4
    assert "carries the label rl-lustre-deployment=nobody" in result.stderr
    result = CliRunner().invoke(cli, ["down", "nobody"])
    assert result.exit_code == 2
    assert "--project" in result.stderr
    asked = len(fakes.requests)
    result = CliRunner().invoke(cli, ["ls"])
    assert result.exit_code == 2
    assert "error: give the project: `rl-lustre ls --project P`, or a script's cluster" in result.stderr
    local = tmp_path / "local.py"
    local.write_text("from rl_lustre import Cluster\nc = Cluster.local('here')\n")
    result = CliRunner().invoke(cli, ["gc", f"{local}:c"])
    assert result.exit_code == 2
    assert "is a local cluster" in result.stderr
    script = tmp_path / "deploy.py"
    script.write_text(SCRIPT)
    result = CliRunner().invoke(cli, ["ls", f"{script}:cluster", "--project", "other-project"])
    assert result.exit_code == 2
    assert "error: --project other-project is not the project of" in result.stderr
    assert len(fakes.requests) == asked  # refused before any request
