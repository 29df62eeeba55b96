"""Quickstart: the reference GRPO job, scaled down, on this machine.

Starts a local cluster (a real Ray head on 127.0.0.1 and a directory as the volume),
submits the reference workflow's job with fewer steps, shows progress, prints a table
of the checkpoints it wrote and where its GPU-node-hours went (the goodput ledger: start-up,
training, checkpoint stalls, validation, idle; and what they would cost on A4 Spot nodes),
draws a PNG of the run and tears everything down: the run's records, logs and
checkpoints are copied to ``--results`` first, and read back from there.

Without a NeMo-RL installation the job runs in *rehearsal* mode: NeMo-RL's command
line, config rules, log lines and checkpoint layout at a small fraction of the real
checkpoint size. It rehearses orchestration and storage; it does not train a model.

    uv run examples/quickstart.py [--steps 8] [--volume-dir DIR] [--results DIR] [--nemo-rl PATH] [--plot FILE.png]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import rl_lustre


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="training steps (the reference runs 20)")
    parser.add_argument("--volume-dir", default=".rl_lustre/quickstart/volume", help="the directory that plays Lustre")
    parser.add_argument(
        "--results", default=".rl_lustre/quickstart/results", help="where down() copies every run (Cluster.results)"
    )
    parser.add_argument("--nemo-rl", default=None, help="a NeMo-RL checkout: run the real entrypoint instead")
    parser.add_argument("--scale", type=float, default=2e-5, help="rehearsal checkpoint size / real size")
    parser.add_argument("--plot", default=".rl_lustre/quickstart/run.png", help="where to write the run's PNG")
    args = parser.parse_args()

    rl_lustre.enable_output()
    # The reference shape (8 nodes x 8 GPUs) is what the job is told it has; locally that
    # only shapes the config and the checkpoint layout.
    cluster = rl_lustre.Cluster.local(
        "quickstart",
        volume_dir=args.volume_dir,
        results=args.results,
        nemo_rl_path=args.nemo_rl,
        num_nodes=8,
        gpus_per_node=8,
        rehearsal_scale=args.scale,
        rehearsal_step_seconds=0.5,
    )
    # The reference workflow's job (grpo_math_70B_megatron, Qwen2.5-72B, DeepScaler,
    # 32 prompts x 8 generations, batch 256, save every 2 steps keeping 2), fewer steps.
    job = rl_lustre.GRPOJob(name="quickstart-grpo", max_num_steps=args.steps)

    # Start from scratch: a rerun with the same checkpoint directory would resume instead.
    for stale in (job.checkpoint_dir(cluster), job.log_dir(cluster)):
        shutil.rmtree(stale, ignore_errors=True)

    print(cluster.plan())
    print()
    for warning in job.preflight(cluster):
        print(f"preflight: {warning}")

    started = time.monotonic()
    with cluster:
        run = cluster.submit(job)
        print(f"submitted {run.job_id}; command:\n  {job.entrypoint(cluster)}\n")
        run.wait(timeout=600)
        checkpoints = run.checkpoints()
        last = run.metrics().get(args.steps, {})
        # Reward and loss per step, checkpoint write time and MB/s per save.
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        picture = run.plot(args.plot)
        # Where the GPU-node-seconds went: the ledger reads the head's job log and node table.
        ledger = run.goodput()

    _print_table(checkpoints)
    _print_ledger(ledger)
    if last:
        print("last step: " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(last.items())))
    print(f"plot of the run: {picture}")
    # The cluster is gone; the run is not: read back from its results, with no cluster.
    kept = rl_lustre.Run.from_results(f"{Path(args.results).absolute()}/{run.run_id}")
    print(f"{kept.run_id}: {kept.status()}, {kept.progress}, checkpoints kept at:")
    for c in kept.checkpoints():
        print(f"  {c.uri} ({c.size_bytes / 1e6:.1f} MB)")
    print(f"done in {time.monotonic() - started:.1f}s")


def _print_table(checkpoints: list[rl_lustre.Checkpoint]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="checkpoints")
    for column in ("step", "size (MB)", "seconds", "MB/s"):
        table.add_column(column, justify="right")
    for c in checkpoints:
        table.add_row(
            str(c.step),
            f"{c.size_bytes / 1e6:.1f}",
            "-" if c.save_seconds is None else f"{c.save_seconds:.3f}",
            "-" if c.mb_per_second is None else f"{c.mb_per_second:.0f}",
        )
    Console().print(table)


def _print_ledger(ledger: rl_lustre.GoodputLedger) -> None:
    prices = rl_lustre.Prices()
    print()
    print("goodput (where the GPU-node-seconds went):")
    print(ledger)
    rate, _ = prices.machine_rate("a4-highgpu-8g", "Spot", None)
    if rate is not None:
        at = ledger.priced(rate)
        print(
            f"at the A4 Spot list price (${rate:.2f} per node-hour, {prices.table.as_of}) this run would have cost "
            f"${at.total_usd:,.2f}, of which ${at.usd['training']:,.2f} trained"
        )


if __name__ == "__main__":
    main()
