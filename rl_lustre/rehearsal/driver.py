"""The rehearsal driver: NeMo-RL's GRPO command line, step lines and checkpoint layout, without training.

It stands in for ``examples/run_grpo_math.py`` where NeMo-RL is not installed, so that
everything around a run (submission, log following, progress, checkpoint storage,
keep_top_k, resume after a stop) can be rehearsed on a laptop. No model is loaded or
trained; the metrics it prints are synthetic and it says so first and last.

What it reproduces, and where that comes from
----------------------------------------------

How the job's GPUs are held (``nemo_rl/distributed/virtual_cluster.py`` at the v0.4.0 tag,
commit c751f81) is in :mod:`rl_lustre.rehearsal.virtual_cluster`. The facts below come
from the closest stored versions of ``NVIDIA-NeMo/RL``: a v0.4.0-era
``nemo_rl/algorithms/grpo.py`` (GRPO loop with dynamic sampling, reward shaping and
scaling, ``TimeoutChecker``, ``print_performance_metrics`` and the Penguin rollouts
of autumn 2025 -- the same config keys as the v0.4.0 recipes in ``ref/nemo-rl``),
``nemo_rl/utils/checkpoint.py`` from the same period (metric_name ``None`` support,
``keep_top_k`` as ``NotRequired``), ``nemo_rl/utils/logger.py`` and the NeMo-RL sample
output quoted in public guides. Later versions (2026 ``main``) are noted where they differ.

``examples/run_grpo_math.py``
    ``--config`` (a YAML path; default ``examples/configs/grpo_math_1B.yaml``) plus Hydra
    overrides taken from ``parse_known_args``; prints ``Loaded configuration from: …``,
    ``Overrides: […]``, ``Applied CLI overrides``, then replaces ``logger.log_dir`` by
    ``get_next_experiment_dir(log_dir)`` and prints ``📊 Using log directory: …`` and,
    when checkpointing is enabled, ``📊 Using checkpoint directory: …``.

``nemo_rl/utils/logger.py`` ``get_next_experiment_dir(base_log_dir)``
    globs ``base_log_dir/exp_*``, searches each match's whole path for ``exp_(\\d+)``
    (so a number in ``base_log_dir`` itself is what it finds), takes the highest plus one
    (1 when none) and creates ``base_log_dir/exp_{n:03d}``: every start, including a
    resume, logs into a new ``exp_NNN``.

``nemo_rl/algorithms/grpo.py`` ``grpo_train``
    per epoch ``\\n`` + ``'=' * 25`` + `` Epoch e/E `` + ``'=' * 25``; per step
    ``\\n========================= Step k/N =========================`` (25 ``=`` on each
    side; ``k`` is ``current_step + 1`` within the epoch, ``N`` is
    ``min(len(dataloader), max_num_steps)``), then progress lines ``▶ Preparing batch...``,
    ``▶ Generating responses for batch of size B...``, ``▶ Processing rewards...,``,
    ``▶ Computing advantages...``, ``▶ Preparing for logprob inference...``,
    ``▶ Computing logprobs...``, ``▶ Preparing for training...``, ``▶ Training policy...``.
    With ``grpo.val_at_start`` and no step done yet, ``\n🔍 Running initial validation...``
    and a validation at step 0 come before the first epoch header.
    Validation every ``grpo.val_period`` steps prints ``▶ Starting validation at step k...``,
    ``\\n📊 Validation Results:`` with ``    • Accuracy: %.4f``,
    ``    • Average response length: %.1f tokens``, ``    • Samples processed: n`` and
    ``\\n  ⏱️  Validation Timing:`` / ``    • Total validation time: %.2fs``.
    A step saves when ``checkpointing.enabled`` and (``is_last_step`` or
    ``(total_steps + 1) % save_period == 0``, or the ``checkpoint_must_save_by`` timeout);
    ``is_last_step`` is ``total_steps + 1 >= max_num_steps`` or the last batch of the last
    epoch -- so the final step is always saved (max_num_steps 5, save_period 2 saves
    steps 2, 4 and 5). The save happens inside the step, before the results are printed,
    under the ``checkpointing`` timer: ``Saving checkpoint for step k...``, then
    ``init_tmp_checkpoint``, ``policy.save_checkpoint(weights_path=…/policy/weights,
    optimizer_path=…/policy/optimizer, tokenizer_path=…/policy/tokenizer)``,
    ``torch.save(dataloader.state_dict(), …/train_dataloader.pt)`` and
    ``finalize_checkpoint``. The training_info saved is ``grpo_save_state``:
    ``consumed_samples``, ``current_step``, ``current_epoch``, ``total_steps``,
    ``total_valid_tokens``, ``val_reward`` (validation accuracy, only when validation ran
    in that step) and, when ``checkpointing.metric_name`` is set, that full name
    (``"val:accuracy"``, ``"train:loss"``; the prefix is asserted) with its value -- or no
    such key, with a warning, when that step has no such metrics. Then::

        \\n📊 Training Results:
          • Loss: %.4f
          • Generation KL Error: %.4f
          • Avg Reward: %.4f                (Avg Filtered / Avg Total Reward with dynamic sampling)
          • Mean Generation Length: %.4f
        \\n⏱️  Timing:
          • Total step time: %.2fs
          • <timer>: %.2fs (%.1f%%)         every other timer, longest first

    with timers ``policy_training``, ``checkpointing``, ``generation``,
    ``policy_and_reference_logprobs``, ``prepare_for_generation/total``,
    ``logprob_inference_prep``, ``training_prep``, ``data_processing``,
    ``reward_calculation``, followed by ``print_performance_metrics``
    (``\\n🔍 Performance Metrics:``, ``  • Mean Total Tokens per Sample: %.2f``,
    ``  • Throughputs (per GPU):`` / ``    - E2E (Samples/sec/gpu): %.2f`` …). The loop
    ends with ``Max number of steps has been reached, stopping training early``.
    On start, ``setup`` resumes from ``checkpointer.get_latest_checkpoint_path()``
    whether or not checkpointing is enabled, loading ``training_info.json`` as the save
    state and ``train_dataloader.pt``; GRPO prints no resume message of its own (the
    step header then starts at the saved step + 1), so the rehearsal prints one,
    prefixed ``rl_lustre rehearsal:``.

The checkpoint side (``nemo_rl/utils/checkpoint.py``, the on-disk layout, what the
rehearsal writes) is in :mod:`rl_lustre.rehearsal.checkpoints`; the synthetic metrics and
the results printed after each step in :mod:`rl_lustre.rehearsal.metrics`.
"""

from __future__ import annotations

import glob
import json
import os
import random
import re
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..oncluster import nemo_formats as formats
from . import checkpoints
from .metrics import metric_problem, print_results, say, train_metrics, val_metrics
from .timeout import SaveBy

if TYPE_CHECKING:
    from .placement import NodeWorkers
    from .virtual_cluster import VirtualCluster

__all__ = ["PREFIX", "Rehearsal", "RehearsalError", "next_experiment_dir"]

PREFIX = "rl_lustre rehearsal:"
DEFAULT_RECIPE = "examples/configs/grpo_math_1B.yaml"
DEFAULT_SCALE = 1e-5
DEFAULT_STEP_SECONDS = 0.5
# Shares of --step-seconds per NeMo-RL timer (the rest is loop overhead).
_PHASES: list[tuple[str, str, float]] = [
    ("data_processing", "▶ Preparing batch...", 0.01),
    ("prepare_for_generation/total", "▶ Generating responses for batch of size {batch}...", 0.07),
    ("generation", "", 0.35),
    ("reward_calculation", "▶ Processing rewards...,", 0.01),
    ("logprob_inference_prep", "▶ Computing advantages...\n▶ Preparing for logprob inference...", 0.03),
    ("policy_and_reference_logprobs", "▶ Computing logprobs...", 0.10),
    ("training_prep", "▶ Preparing for training...", 0.03),
    ("policy_training", "▶ Training policy...", 0.30),
]


class RehearsalError(Exception):
    """The run cannot go on, with NeMo-RL's reason; the driver exits 1."""


def next_experiment_dir(base_log_dir: str | os.PathLike[str]) -> Path:
    """Create and return ``base_log_dir/exp_NNN``, one past the highest that exists.

    Mirrors NeMo-RL's ``get_next_experiment_dir``: every start logs into a new folder.

    Examples:
        >>> import tempfile
        >>> base = tempfile.mkdtemp()
        >>> next_experiment_dir(base).name, next_experiment_dir(base).name
        ('exp_001', 'exp_002')
    """
    base = os.fspath(base_log_dir)
    pattern = re.compile(r"exp_(\d+)")
    numbers = [int(m.group(1)) for p in glob.glob(os.path.join(base, "exp_*")) if (m := pattern.search(p))]
    path = Path(base) / f"exp_{max(numbers, default=0) + 1:03d}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def get(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise RehearsalError(f"the resolved config has no {dotted!r}, which GRPO needs")
        node = node[part]
    return node


class Rehearsal:
    """One start of the driver: resume, step, save, exit."""

    def __init__(
        self,
        cfg: dict[str, Any],
        *,
        scale: float,
        step_seconds: float,
        param_count: int,
        place_workers: bool = False,
        reserve: bool = False,
    ) -> None:
        from .._sizing import checkpoint_bytes

        self.cfg = cfg
        self.scale = scale
        self.step_seconds = step_seconds
        self.param_count = param_count
        self.real_bytes = checkpoint_bytes(param_count)
        self.grpo = get(cfg, "grpo")
        self.ckpt = get(cfg, "checkpointing")
        self.max_steps = int(get(cfg, "grpo.max_num_steps"))
        self.max_epochs = int(self.grpo.get("max_num_epochs", 1))
        self.seed = int(self.grpo.get("seed", 42))
        self.num_nodes = int(get(cfg, "cluster.num_nodes"))
        self.gpus_per_node = int(get(cfg, "cluster.gpus_per_node"))
        self.checkpoint_dir = Path(str(self.ckpt.get("checkpoint_dir", "results/grpo")))
        self.keep_top_k: int | None = self.ckpt.get("keep_top_k")
        self.metric_name: str | None = self.ckpt.get("metric_name")
        self.higher_is_better = bool(self.ckpt.get("higher_is_better", True))
        self.save_period = int(self.ckpt.get("save_period", 1))
        self.megatron = bool((cfg["policy"].get("megatron_cfg") or {}).get("enabled"))
        self.state: dict[str, Any] = {
            "consumed_samples": 0,
            "current_step": 0,
            "current_epoch": 0,
            "total_steps": 0,
            "total_valid_tokens": 0,
            "val_reward": -99999999.0,
        }
        self.metrics_log: TextIO | None = None
        self.step = 0
        self.save_by = SaveBy(None)
        self.place_workers = place_workers
        self.reserve = reserve or place_workers
        self.workers: NodeWorkers | None = None
        self.clusters: list[VirtualCluster] = []
        self._check_metric_name()

    def _check_metric_name(self) -> None:
        problem = None if self.metric_name is None else metric_problem(self.metric_name)
        if problem is not None:
            raise RehearsalError(problem)

    # -- start-up ---------------------------------------------------------------------

    def setup(self) -> None:
        log_dir = next_experiment_dir(str(get(self.cfg, "logger.log_dir")))
        self.cfg["logger"]["log_dir"] = str(log_dir)
        say(f"📊 Using log directory: {log_dir}")
        if self.ckpt.get("enabled"):
            say(f"📊 Using checkpoint directory: {self.checkpoint_dir}")
        self.metrics_log = open(log_dir / "rehearsal_metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        say("\n▶ Setting up compute cluster...")
        from .virtual_cluster import shapes

        for shape in shapes(self.cfg):
            nodes = len(shape.bundles_per_node)
            if shape.name == "grpo_policy_cluster":
                say(f"  ✓ Ray cluster for policy initialized with {nodes} nodes")
            else:
                kind = "train" if shape.name == "grpo_train_cluster" else "inference"
                say(
                    f"  ✓ Ray {kind} cluster initialized with {nodes} nodes with "
                    f"{shape.bundles_per_node[0] if nodes else 0} GPUs per node"
                )
        say("\n▶ Setting up model and training...")
        if self.reserve:
            self._reserve()
        else:
            say(
                f"{PREFIX} cluster.num_nodes={self.num_nodes} x cluster.gpus_per_node={self.gpus_per_node} "
                f"({self.num_nodes * self.gpus_per_node} GPUs) are shown, not used: nothing runs on a GPU."
            )
        model = self.cfg["policy"].get("model_name")
        say(
            f"{PREFIX} {model} ({self.param_count / 1e9:.3g}B parameters) is not loaded; each checkpoint "
            f"is {self.scale:g} x its real size of {self.real_bytes / 1e9:.3g} GB "
            f"= {self.real_bytes * self.scale / 1e6:.3g} MB of filler."
        )
        self.resume()
        say("\n" + "=" * 60)
        say(" " * 18 + "SETUP COMPLETE")
        say("=" * 60 + "\n")

    def _reserve(self) -> None:
        """Hold the job's GPUs in Ray placement groups as NeMo-RL's RayVirtualCluster does
        (when vLLM sets up its workers), failing as it fails."""
        import logging

        import ray

        from . import virtual_cluster as vc

        retries, timeout = vc.max_retries(), vc.ready_timeout()
        if timeout != vc.NEMO_RL_READY_TIMEOUT:
            say(
                f"{PREFIX} waiting up to {timeout:g}s for placement groups ({vc.READY_TIMEOUT_ENV}); "
                f"NeMo-RL v0.4.0 waits {vc.NEMO_RL_READY_TIMEOUT:g}s"
            )
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), logging_level=logging.WARNING, log_to_driver=False)
        for shape in vc.shapes(self.cfg):
            cluster = vc.VirtualCluster(shape, retries=retries, timeout=timeout, say=say)
            self.clusters.append(cluster)
            cluster.reserve()
        held = ", ".join(
            f"{c.shape.name}: {len(c.groups)} {c.shape.strategy} group(s), {c.shape.gpus} GPU(s)" for c in self.clusters
        )
        if self.place_workers:
            from .placement import NodeWorkers

            first = self.clusters[0]
            self.workers = NodeWorkers(
                first.groups, unified=first.shape.unified, bundles_per_node=first.shape.bundles_per_node[0]
            )
            say(
                f"{PREFIX} the job's GPUs are held in Ray placement groups as NeMo-RL holds them ({held}); one "
                f"worker per node, on nodes {', '.join(self.workers.nodes)}; each step waits on all of them, "
                "nothing runs on a GPU."
            )
        else:
            say(
                f"{PREFIX} the job's GPUs are held in Ray placement groups as NeMo-RL holds them ({held}); "
                "nothing runs on a GPU."
            )

    def resume(self) -> None:
        root = self.checkpoint_dir
        for name, why in checkpoints.clear_interrupted(root):
            say(f"{PREFIX} removed {name} ({why})")
        steps = checkpoints.step_dirs(root, formats.COMPLETE)
        if not steps:
            return
        latest = steps[max(steps)]
        try:
            info = json.loads((latest / formats.TRAINING_INFO).read_text())
        except (OSError, ValueError) as exc:
            raise RehearsalError(f"cannot resume from {latest}: {formats.TRAINING_INFO}: {exc}") from exc
        self.state = dict(info)
        say(
            f"{PREFIX} resuming from {latest} (NeMo-RL resumes from the highest step_N): "
            f"total_steps={info.get('total_steps')}, consumed_samples={info.get('consumed_samples')}"
        )

    # -- the loop ---------------------------------------------------------------------

    def run(self) -> int:
        total_steps = int(self.state.get("total_steps", 0))
        if total_steps >= self.max_steps:
            say(
                f"{PREFIX} the newest checkpoint is at step {total_steps}, grpo.max_num_steps is "
                f"{self.max_steps}: nothing left to do."
            )
            return 0
        current_epoch = int(self.state.get("current_epoch", 0))
        current_step = int(self.state.get("current_step", 0))
        self.save_by = SaveBy(self.ckpt.get("checkpoint_must_save_by"))
        if self.grpo.get("val_at_start") and total_steps == 0:
            say("\n🔍 Running initial validation...")
            self._validate(0)
        while current_epoch < self.max_epochs and total_steps < self.max_steps:
            say(f"\n{'=' * 25} Epoch {current_epoch + 1}/{self.max_epochs} {'=' * 25}")
            # The dataset is taken to outlast max_num_steps: one epoch of max_num_steps batches.
            steps_in_epoch = self.max_steps
            while current_step < steps_in_epoch and total_steps < self.max_steps:
                self.step = total_steps + 1
                is_last = self.step >= self.max_steps or (
                    current_epoch + 1 == self.max_epochs and current_step + 1 == steps_in_epoch
                )
                timed_out = self._train_step(current_step + 1, steps_in_epoch, current_epoch, is_last)
                current_step += 1
                total_steps += 1
                if timed_out:
                    say("Timeout has been reached, stopping training early")
                    return 0
            current_epoch += 1
            current_step = 0
        say("Max number of steps has been reached, stopping training early")
        return 0

    def _train_step(self, step_in_epoch: int, steps_in_epoch: int, epoch: int, is_last: bool) -> bool:
        """One step; True when ``checkpoint_must_save_by`` is (nearly) up: it saved, the loop ends."""
        k = self.step
        rng = random.Random(f"{self.seed}:{k}")
        say("\n" + formats.step_header(step_in_epoch, min(steps_in_epoch, self.max_steps)))
        prompts = int(self.grpo.get("num_prompts_per_step", 1))
        gens = int(self.grpo.get("num_generations_per_prompt", 1))
        t_step = time.perf_counter()
        timings: dict[str, float] = {}
        for timer, message, share in _PHASES:
            if message:
                for line in message.format(batch=prompts * gens).splitlines():
                    say(line)
            t0 = time.perf_counter()
            time.sleep(self.step_seconds * share * rng.uniform(0.9, 1.1))
            if timer == "policy_training" and self.workers is not None:
                self.workers.step(k)
            timings[timer] = time.perf_counter() - t0
        train = train_metrics(rng, k, prompts * gens)
        val: dict[str, float] = {}
        val_period = int(self.grpo.get("val_period", 0) or 0)
        if val_period > 0 and k % val_period == 0:
            val = self._validate(k)

        self.state["consumed_samples"] = int(self.state.get("consumed_samples", 0)) + prompts
        self.state["total_valid_tokens"] = int(self.state.get("total_valid_tokens", 0)) + int(
            train["global_valid_toks"]
        )
        self.save_by.mark()
        timed_out = self.save_by.due()
        if self.ckpt.get("enabled") and (is_last or k % self.save_period == 0 or timed_out):
            self.state.update(current_step=step_in_epoch, total_steps=k, current_epoch=epoch)
            if val:
                self.state["val_reward"] = val["accuracy"]
            else:
                self.state.pop("val_reward", None)
            if self.metric_name is not None:
                prefix, metric = self.metric_name.split(":", 1)
                source = train if prefix == "train" else val
                if not source:
                    warnings.warn(
                        f"You asked to save checkpoints based on {metric} but no {prefix} metrics were "
                        "collected. This checkpoint will not be saved as top-k.",
                        stacklevel=1,
                    )
                    self.state.pop(self.metric_name, None)
                else:
                    self.state[self.metric_name] = source[metric]
            t0 = time.perf_counter()
            self._save(k)
            timings["checkpointing"] = time.perf_counter() - t0
        timings["total_step_time"] = time.perf_counter() - t_step
        self._report(k, train, timings, prompts * gens)
        return timed_out

    def _validate(self, k: int) -> dict[str, float]:
        say(f"▶ Starting validation at step {k}...")
        t0 = time.perf_counter()
        time.sleep(self.step_seconds * 0.1)
        val = val_metrics(self.seed, k)
        samples = int(self.grpo.get("max_val_samples", 256) or 256)
        say("\n📊 Validation Results:")
        say(f"    • Accuracy: {val['accuracy']:.4f}")
        say(f"    • Average response length: {val['avg_length']:.1f} tokens")
        say(f"    • Samples processed: {samples}")
        say("\n  ⏱️  Validation Timing:")
        say(f"    • Total validation time: {time.perf_counter() - t0:.2f}s")
        return val

    def _report(self, k: int, train: dict[str, float], timings: dict[str, float], samples: int) -> None:
        print_results(train, timings, samples, self.num_nodes * self.gpus_per_node)
        if self.metrics_log is not None:
            self.metrics_log.write(json.dumps({"step": k, "train": train, "timing": timings}) + "\n")
            self.metrics_log.flush()

    # -- checkpoints ------------------------------------------------------------------

    def _save(self, k: int) -> None:
        total = max(1, round(self.real_bytes * self.scale))
        shards = max(1, min(checkpoints.MAX_SHARDS, self.num_nodes * self.gpus_per_node))
        checkpoints.save_checkpoint(
            self.checkpoint_dir,
            k,
            self.state,
            self.cfg,
            checkpoints.shard_layout(total, shards, megatron=self.megatron),
            megatron=self.megatron,
            seed=self.seed,
        )
        checkpoints.remove_old_checkpoints(
            self.checkpoint_dir, self.keep_top_k, self.metric_name, self.higher_is_better
        )

    def close(self) -> None:
        if self.metrics_log is not None:
            self.metrics_log.close()
        for cluster in self.clusters:
            cluster.release()
        if self.clusters:
            import ray

            ray.shutdown()
