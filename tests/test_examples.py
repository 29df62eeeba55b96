"""The examples run as documented."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "RL_LUSTRE_GCP"))}
    env["RL_LUSTRE_OUTPUT"] = "0"
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_reference_workflow_dry_run_prints_plan_and_command() -> None:
    out = _run(str(EXAMPLES / "reference_workflow.py"), "--project", "my-project")
    # Every resource of the reference workflow is in the plan.
    for key in (
        "network",
        "psa-range",
        "psa-peering",
        "firewall-lustre",
        "gke-cluster",
        "cpu-pool",
        "gpu-pool",
        "lustre",
        "pv",
        "pvc",
        "secret",
        "raycluster",
    ):
        assert f" {key} " in out, key
    command = out.split("Job command:\n", 1)[1].splitlines()[0]
    argv = shlex.split(command)
    assert argv[:3] == ["cd", "/opt/nemo-rl", "&&"]
    assert "checkpointing.checkpoint_dir=/lustre/nemo_rl_qwen_72b_ds_cp/nemo-rl-grpo-test1" in argv
    assert "dry run" in out


def test_reference_workflow_manifests_are_json() -> None:
    out = _run(str(EXAMPLES / "reference_workflow.py"), "--manifests", "--num-nodes", "2")
    start = out.index("[\n")
    end = out.index("\n]\n", start) + 2
    kinds = [m["kind"] for m in json.loads(out[start:end])]
    # The reference workflow's four objects, in dependency order, after the A4 fabric's
    # (fabric="rdma" is the default on a4-highgpu-8g): 9 parameter sets, 9 networks, the
    # gIB installer.
    core = [k for k in kinds if k in {"PersistentVolume", "PersistentVolumeClaim", "Secret", "RayCluster"}]
    assert core == ["PersistentVolume", "PersistentVolumeClaim", "Secret", "RayCluster"]
    assert kinds.count("GKENetworkParamSet") == 9
    assert kinds.count("Network") == 9
    assert kinds.count("DaemonSet") >= 1


@pytest.mark.slow
def test_quickstart_prints_the_ledger_after_the_checkpoint_table(tmp_path: Path) -> None:
    import re

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "RL_LUSTRE_GCP"))}
    env["RL_LUSTRE_OUTPUT"] = "0"
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "quickstart.py"),
            "--steps",
            "2",
            "--volume-dir",
            str(tmp_path / "volume"),
            "--results",
            str(tmp_path / "results"),
            "--plot",
            str(tmp_path / "run.png"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    table, ledger = out.index("checkpoints"), out.index("goodput (where the GPU-node-seconds went):")
    assert table < ledger
    block = out[ledger:]
    for row in ("capacity", "startup", "training", "checkpoint", "validation", "lost", "idle", "unattributed", "total"):
        assert re.search(rf"^  {row} +\d", block, re.MULTILINE), row
    assert "attributed" in block
    price = re.search(
        r"at the A4 Spot list price \(\$37\.00 per node-hour, [\d-]+\) this run would have cost "
        r"\$([\d,.]+)",
        block,
    )
    assert price is not None
    assert float(price.group(1).replace(",", "")) > 0
    assert (tmp_path / "run.png").stat().st_size > 20_000
    # The run outlives the cluster: read back from the results, its checkpoints there.
    assert re.search(r"^rl-lustre-quickstart-grpo-[0-9a-f]{8}: SUCCEEDED, step 2/2, checkpoints kept at:$", out, re.M)
    assert f"  {tmp_path / 'results'}/rl-lustre-quickstart-grpo-" in out
