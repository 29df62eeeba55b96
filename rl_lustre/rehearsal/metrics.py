"""The rehearsal's synthetic metrics, and the results GRPO prints after each step.

Metrics are a function of ``grpo.seed`` and the step only, so a resumed run prints what
an uninterrupted one would have; timings are the rehearsal's own (``--step-seconds``
spread over the phases, and the real time of each checkpoint write). The lines are
``grpo_train``'s (see :mod:`rl_lustre.rehearsal.driver`).
"""

from __future__ import annotations

import math
import random

__all__ = ["metric_problem", "print_results", "say", "train_metrics", "val_metrics"]


def say(line: str = "") -> None:
    """Print a line of the run's output at once (a log follower reads it as it comes)."""
    print(line, flush=True)


def metric_problem(name: str) -> str | None:
    """Why ``checkpointing.metric_name`` ``name`` is refused, as NeMo-RL words it, or None."""
    if not name.startswith(("train:", "val:")):
        return (
            f"metric_name={name} must start with 'val:' or 'train:', followed by the "
            'corresponding name in the "val" or "train" metrics dictionary.'
        )
    prefix, metric = name.split(":", 1)
    known = train_metrics(random.Random(0), 0, 1) if prefix == "train" else val_metrics(0, 1)
    if metric not in known:
        return (
            f"Metric {metric} not found in {prefix} metrics (checkpointing.metric_name={name}; "
            f"known {prefix} metrics: {', '.join(sorted(known))})"
        )
    return None


def train_metrics(rng: random.Random, step: int, samples: int) -> dict[str, float]:
    """Synthetic training metrics of one step: reward climbs, length grows, loss hovers at 0."""
    reward = min(1.0, max(0.0, 0.15 + 0.55 * (1 - math.exp(-step / 25)) + rng.gauss(0, 0.02)))
    length = 350 + 250 * (1 - math.exp(-step / 40)) + rng.gauss(0, 15)
    prompt = 120 + rng.gauss(0, 5)
    return {
        "loss": rng.uniform(-0.02, 0.02),
        "gen_kl_error": 0.001 + 0.0005 * rng.random(),
        "reward": reward,
        "grad_norm": 0.1 + 0.05 * rng.random(),
        "mean_gen_tokens_per_sample": length,
        "mean_prompt_length": prompt,
        "global_valid_toks": float(round(samples * length)),
        "token_mult_prob_error": 1.0 + 0.01 * rng.random(),
    }


def val_metrics(seed: int, step: int) -> dict[str, float]:
    """Synthetic validation metrics of step ``step``: accuracy climbs, length grows."""
    rng = random.Random(f"{seed}:val:{step}")
    return {
        "accuracy": min(1.0, max(0.0, 0.2 + 0.5 * (1 - math.exp(-step / 30)) + rng.gauss(0, 0.01))),
        "avg_length": 400 + 200 * (1 - math.exp(-step / 40)) + rng.gauss(0, 10),
    }


def print_results(train: dict[str, float], timings: dict[str, float], samples: int, gpus: int) -> None:
    """Print one step's results as ``grpo_train`` does: training results, timings longest
    first, performance metrics per GPU (``gpus`` of them) and per group."""
    say("\n📊 Training Results:")
    say(f"  • Loss: {train['loss']:.4f}")
    say(f"  • Generation KL Error: {train['gen_kl_error']:.4f}")
    say(f"  • Avg Reward: {train['reward']:.4f}")
    say(f"  • Mean Generation Length: {train['mean_gen_tokens_per_sample']:.4f}")
    say("\n⏱️  Timing:")
    total = timings["total_step_time"]
    say(f"  • Total step time: {total:.2f}s")
    for name, seconds in sorted(timings.items(), key=lambda kv: kv[1], reverse=True):
        if name != "total_step_time":
            say(f"  • {name}: {seconds:.2f}s ({seconds / total * 100 if total > 0 else 0:.1f}%)")
    tokens = train["mean_gen_tokens_per_sample"] + train["mean_prompt_length"]
    per_second = samples / max(total, 1e-9)
    say("\n🔍 Performance Metrics:")
    say(f"  • Mean Total Tokens per Sample: {tokens:.2f}")
    say("  • Throughputs (per GPU):")
    say(f"    - E2E (Samples/sec/gpu): {per_second / gpus:.2f}")
    say(f"    - E2E (Tokens/sec/gpu): {per_second * tokens / gpus:.2f}")
    say("  • Throughputs (per Group):")
    say(f"    - E2E (Samples/sec): {per_second:.2f}")
    say(f"    - E2E (Tokens/sec): {per_second * tokens:.2f}")
