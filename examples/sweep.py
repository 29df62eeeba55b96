"""A small sweep on the local backend, built with ``attrs.evolve``.

Three GRPO runs that differ in generations per prompt share one local cluster; each
gets its own checkpoint and log directory. The script waits for all of them and prints
a table of outcomes.

    uv run examples/sweep.py
"""

from __future__ import annotations

import shutil

import attrs

import rl_lustre
from rl_lustre import run_sweep


def main() -> None:
    rl_lustre.enable_output()
    cluster = rl_lustre.Cluster.local("sweep", volume_dir=".rl_lustre/sweep/volume", rehearsal_step_seconds=0.3)
    base = rl_lustre.GRPOJob(
        name="base",
        recipe="grpo_math_1B",
        model="Qwen/Qwen2.5-1.5B",
        dataset="OpenMathInstruct-2",
        max_num_steps=4,
        num_prompts_per_step=8,
        save_period=2,
    )
    jobs = [
        attrs.evolve(
            base,
            name=f"gens-{g}",
            num_generations_per_prompt=g,
            train_global_batch_size=8 * g,
        )
        for g in (2, 4, 8)
    ]
    for job in jobs:  # a fresh start for each run, not a resume of the last sweep
        shutil.rmtree(job.checkpoint_dir(cluster), ignore_errors=True)
        shutil.rmtree(job.log_dir(cluster), ignore_errors=True)

    with cluster:
        result = run_sweep(cluster, jobs, timeout=600)
    print(result)
    if cluster.nemo_rl_path is None:
        print("(rehearsal: metrics are synthetic and depend only on the seed and the step)")
    raise SystemExit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
