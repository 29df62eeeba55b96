"""The reference workflow (Cluster Toolkit + kubectl + ray CLI), expressed with rl_lustre.

Without credentials it prints the deployment plan, the Kubernetes objects and the job's
command, and stops there. With ``--up`` and Application Default Credentials it runs the
whole workflow: provision, submit, follow, list checkpoints, destroy.

    python examples/reference_workflow.py --project my-project
"""

from __future__ import annotations

import argparse
import json
import os

import rl_lustre


def build(project: str, region: str, zone: str, num_nodes: int) -> tuple[rl_lustre.Cluster, rl_lustre.GRPOJob]:
    # Steps 1-4 of the codelab: VPC + PSA + firewall, GKE with the Lustre CSI and Ray
    # add-ons, a Spot a4-highgpu-8g pool, Managed Lustre + PV/PVC, and the RayCluster.
    cluster = rl_lustre.Cluster(
        name="ray-a4-gpu-spot",
        project=project,
        region=region,
        zone=zone,
        num_nodes=num_nodes,
        authorized_networks=tuple(filter(None, [os.environ.get("AUTHORIZED_CIDR")])),
    )
    # Step 5: the NeMo-RL GRPO job on Qwen2.5-72B with DeepScaler.
    job = rl_lustre.GRPOJob(
        name="nemo-rl-grpo-test1",
        recipe="grpo_math_70B_megatron",
        model="Qwen/Qwen2.5-72B-Instruct",
        converter_type="Qwen2ForCausalLM",
        dataset="DeepScaler",
        max_num_steps=20,
        num_generations_per_prompt=8,
        num_prompts_per_step=32,
        train_global_batch_size=256,
        save_period=2,
        keep_top_k=2,
        metric_name=None,
        checkpoint_root="nemo_rl_qwen_72b_ds_cp",
    )
    return cluster, job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", default=os.environ.get("PROJECT_ID", "my-project"))
    parser.add_argument("--region", default="us-east1")
    parser.add_argument("--zone", default="us-east1-b")
    parser.add_argument("--num-nodes", type=int, default=8)
    parser.add_argument("--manifests", action="store_true", help="also print the Kubernetes objects")
    parser.add_argument("--up", action="store_true", help="really provision, run and destroy (needs credentials)")
    args = parser.parse_args()

    cluster, job = build(args.project, args.region, args.zone, args.num_nodes)
    warnings = job.preflight(cluster)

    print(cluster.plan())
    print()
    if args.manifests:
        print(json.dumps(cluster.manifests(), indent=2))
        print()
    print("Job command:")
    print(job.entrypoint(cluster))
    for w in warnings:
        print(f"preflight warning: {w}")

    if not args.up:
        print("\n(dry run: pass --up with Application Default Credentials to run it for real)")
        return
    with cluster:  # Step 7, destroy, happens on exit, also on errors and Ctrl-C.
        run = cluster.submit(job)
        for line in run.logs(follow=True):  # Step 6: watch the checkpoint saves.
            print(line)
        run.wait()
        for ckpt in run.checkpoints():
            print(ckpt)


if __name__ == "__main__":
    main()
