"""Results outlive a GKE deployment, end to end on FakeGKE (the Google API fakes, the
Kubernetes fake playing KubeRay, a real Ray head, the rehearsal image), where the fake Lustre
instance is the directory the jobs write to:

- a with block that ends normally, and one that raises, leave the runs' checkpoints in the
  bucket and no Lustre instance; the run read back from the bucket in a fresh process equals
  the run read from the cluster (steps, checkpoints, restarts, goodput totals);
- without a destination the volume is kept, with a message naming the run and its newest
  checkpoint; ``discard_results=True`` deletes it;
- ``run.export_model(..., format="hf")`` runs the image's converter (rehearsed) as a job and
  copies its output (config, weight shards, tokenizer files) to the bucket.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings

import attrs
import pytest

import rl_lustre
from rl_lustre.catalog import RESULTS_MANIFEST
from rl_lustre.errors import ResultsKeptWarning
from rl_lustre.testing import FakeGKE

pytestmark = pytest.mark.slow

READ_BACK = """
import json, sys
from rl_lustre import Run
run = Run.from_results(sys.argv[1])
ledger = run.goodput()
print(json.dumps({
    "steps": [s.step for s in run.steps()],
    "checkpoints": [[c.step, c.size_bytes] for c in run.checkpoints()],
    "uris": [c.uri for c in run.checkpoints()],
    "restarts": len(run.restarts()),
    "goodput": [ledger.total_seconds, ledger.seconds["training"]],
}))
"""


def test_results_outlive_the_deployment_and_the_model_comes_out() -> None:
    spec = rl_lustre.Cluster(
        name="res-gke", project="my-project", region="us-east1", zone="us-east1-b", num_nodes=1,
        results="gs://my-results/rl",
    )  # fmt: skip
    job = rl_lustre.GRPOJob(
        name="res", recipe="grpo_math_1B_megatron", model="Qwen/Qwen2.5-1.5B", max_num_steps=4, save_period=2,
        num_prompts_per_step=4, num_generations_per_prompt=8, train_global_batch_size=32,
    )  # fmt: skip
    with FakeGKE() as gke:
        assert gke.gcp is not None
        gke.gcp.seed_bucket("my-results")
        cluster, fake_job = gke.cluster(spec), gke.job(job)
        with cluster:
            run = cluster.submit(fake_job)
            assert run.wait(timeout=300) == "SUCCEEDED"
            ledger = run.goodput()
            live = {
                "steps": [s.step for s in run.steps()],
                "checkpoints": [[c.step, c.size_bytes] for c in run.checkpoints()],
                "restarts": len(run.restarts()),
                "goodput": [ledger.total_seconds, ledger.seconds["training"]],
            }
            # The model out, converted by the image's own converter on a node with the memory.
            planned = run.export_model("gs://my-results/models/res", format="hf", dry_run=True)
            assert "uv run --extra mcore python examples/converters/convert_megatron_to_hf.py" in planned.command
            assert f"--megatron-ckpt-path {run.checkpoints()[-1].path}/policy/weights/iter_0000000" in planned.command
            model = run.export_model("gs://my-results/models/res", format="hf")
            assert model.step == 4
        assert gke.leftovers(spec.name) == {"gcp": [], "kube": []}
        objects = gke.gcp.bucket_objects("my-results")
        files = sorted(n.removeprefix("models/res/") for n in objects if n.startswith("models/res/"))
        assert files[:3] == ["config.json", "model-00001-of-00001.safetensors", "model.safetensors.index.json"]
        assert "tokenizer_config.json" in files
        # The run, read back from the bucket alone by a fresh process.
        out = subprocess.run(
            [sys.executable, "-c", READ_BACK, f"gs://my-results/rl/{run.run_id}"],
            capture_output=True, text=True, timeout=120, env={**os.environ, **gke.gcp.env},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        stored = json.loads(out.stdout.splitlines()[-1])
        uris = stored.pop("uris")
        assert stored == live
        assert uris == [f"gs://my-results/rl/{run.run_id}/checkpoints/step_{s}" for s, _ in live["checkpoints"]]

        # A block that raises: the run is stopped by teardown, its checkpoints exported.
        started: list[rl_lustre.Run] = []

        def script_that_breaks() -> None:
            with cluster:
                started.append(cluster.submit(attrs.evolve(fake_job, name="res-broken", max_num_steps=400)))
                deadline = time.monotonic() + 180
                while not started[0].checkpoints():
                    assert time.monotonic() < deadline
                    time.sleep(1)
                raise RuntimeError("the script broke")

        with pytest.raises(RuntimeError, match="broke"):
            script_that_breaks()
        run = started[0]
        assert gke.leftovers(spec.name) == {"gcp": [], "kube": []}
        manifest = gke.gcp.bucket_content("my-results", f"rl/{run.run_id}/{RESULTS_MANIFEST}")
        assert manifest["checkpoints"]
        assert rl_lustre.Run.from_results(f"gs://my-results/rl/{run.run_id}").status() == "STOPPED"
        # Recorded stopped by teardown (the keeper gone first): no later keeper brings it back.
        marker = gke.gcp.bucket_content("my-results", f"rl/{run.run_id}/stopped")
        assert (marker if isinstance(marker, dict) else json.loads(marker))["by"] == "teardown"

        # No destination: the volume is kept, and said so; the explicit word deletes it.
        keeping = attrs.evolve(cluster, results=None)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with keeping:
                run = keeping.submit(attrs.evolve(fake_job, name="res-kept", max_num_steps=2))
                run.wait(timeout=300)
        [message] = [str(w.message) for w in seen if issubclass(w.category, ResultsKeptWarning)]
        assert run.run_id in message
        assert "newest checkpoint step_2" in message
        left = gke.leftovers(spec.name)
        assert left["kube"] == []
        assert any(r.startswith("lustre.instances") for r in left["gcp"])
        keeping.down(discard_results=True)
        assert gke.leftovers(spec.name) == {"gcp": [], "kube": []}
