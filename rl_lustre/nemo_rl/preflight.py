"""Offline checks that NeMo-RL will accept a job and that the job fits its cluster.

Nothing here needs NeMo-RL installed or makes a remote call. The job's overrides are
applied to its recipe exactly as NeMo-RL applies them (see :mod:`.config`), and the
resolved config is then checked against what NeMo-RL v0.4.0 asserts at start-up or
fails on later: batch arithmetic, parallelism, checkpoint metric, dataset, and space
for checkpoints on the volume.
"""

from __future__ import annotations

import difflib
import math
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._secrets import REDACTED, looks_secret
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..spec import ClusterSpec, JobSpec
    from .versions import NemoRLVersion

OWNER = "GRPOJob"

# Datasets examples/run_grpo_math.py can train on in v0.4.0 (nemo_rl/data/datasets/
# response_datasets: load_response_dataset); "ResponseDataset" reads your own files.
MATH_DATASETS = ("OpenMathInstruct-2", "DeepScaler", "DAPOMath17K")
# Names that loader also knows, meant for SFT or vision-language runs rather than math GRPO.
OTHER_DATASETS = (
    "open_assistant",
    "squad",
    "openmathinstruct2",
    "clevr_cogent",
    "openai_format",
    "clevr-cogent",
    "refcoco",
    "geometry3k",
)
# Preference (chosen/rejected) datasets of v0.4.0 (nemo_rl/data/datasets/preference_datasets:
# load_preference_dataset), for DPO and reward models; GRPO's loader refuses them.
PREFERENCE_DATASETS = ("HelpSteer3", "Tulu3Preference", "BinaryPreferenceDataset", "PreferenceDataset")

_MISSING: Any = object()


class _Findings:
    def __init__(self) -> None:
        self.problems: list[ConfigError] = []
        self.warnings: list[str] = []

    def problem(self, key: str, value: Any, rule: str) -> None:
        self.problems.append(ConfigError(OWNER, key, value, rule))


def check_config(
    job: JobSpec,
    cluster: ClusterSpec,
    version: NemoRLVersion,
    overrides: Mapping[str, Any],
    flat: Mapping[str, Any] | None,
) -> _Findings:
    """The checks that follow from the specs alone, on the resolved config ``flat``
    (None when it did not resolve: only the checks without it then run)."""
    found = _Findings()
    _check_secrets(job, cluster, overrides, found)
    _check_versions(cluster, version, found)
    _check_nodes(job, cluster, overrides, flat, found)
    _check_capacity_lifetime(job, cluster, flat, found)
    if flat is not None:
        _check_disabled_sections(job, flat, found)
        _check_converter(job, flat, found)
        _check_batches(flat, found)
        _check_parallelism(flat, cluster, found)
        _check_metric(flat, found)
        _check_dataset(flat, version.key("data.dataset_name"), version.has_recipes, found)
    return found


def disabled_sections(flat: Mapping[str, Any]) -> list[str]:
    """The sections the resolved config ``flat`` switches off (``<section>.enabled: false``).

    Examples:
        >>> disabled_sections({"policy.megatron_cfg.enabled": False, "policy.dtensor_cfg.enabled": True,
        ...                    "policy.megatron_cfg.optimizer.lr": 1e-6})
        ['policy.megatron_cfg']
    """
    return sorted(
        [k.removesuffix(".enabled") for k, value in flat.items() if k.endswith(".enabled") and value is False]
    )


def _check_disabled_sections(job: JobSpec, flat: Mapping[str, Any], found: _Findings) -> None:
    """A job override under a section the recipe (as overridden) disables changes nothing
    NeMo-RL runs: the classic is a Megatron optimizer key on a DTensor recipe."""
    from .config import nearest_keys

    disabled = disabled_sections(flat)
    if not disabled:
        return
    prefixes = tuple(d + "." for d in disabled)
    for raw, value in job.extra_overrides.items():
        key = raw.lstrip("+~")
        section = next((d for d in disabled if key.startswith(d + ".")), None)
        if section is None or key == f"{section}.enabled":  # switching the section off is no mistake
            continue
        live = [k for k in flat if not k.startswith(prefixes)]
        near = [k for k in nearest_keys(key, live) if k.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1]]
        hint = f"did you mean {near[0]!r}? " if near else ""
        found.problem(
            key,
            shown_value(key, value),
            f"is under {section}, which the recipe {job.recipe!r} disables ({section}.enabled=false), "
            f"so it would have no effect; {hint}To use that section, also set "
            f"overrides={{{section + '.enabled'!r}: True}}",
        )


def check_storage(flat: Mapping[str, Any], cluster: ClusterSpec) -> tuple[list[ConfigError], list[str]]:
    """Whether the checkpoints of the resolved config ``flat`` fit the volume, as it is now:
    the problems and the warnings."""
    found = _Findings()
    _check_storage(flat, cluster, found)
    return found.problems, found.warnings


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _check_secrets(job: JobSpec, cluster: ClusterSpec, overrides: Mapping[str, Any], found: _Findings) -> None:
    if job.wandb and "WANDB_API_KEY" not in cluster.secrets:
        found.problem(
            "logger.wandb_enabled",
            True,
            "W&B logging needs WANDB_API_KEY among Cluster.secrets (it reaches the pods through the Kubernetes Secret)",
        )
    for key, value in overrides.items():
        if "env_vars" not in key:  # the only keys that set one (see secret_names)
            continue
        for name in secret_names(key, value):
            found.problem(
                key.lstrip("+"),
                shown_value(key, value),
                f"{name!r} looks like a secret, and overrides are stored in plain text "
                "in the job's command line; list it in Cluster.secrets instead",
            )


def secret_names(key: str, value: Any) -> list[str]:
    """Secret-looking environment variable names an override sets (``...env_vars.HF_TOKEN``)."""
    parts = key.lstrip("+").split(".")
    if "env_vars" not in parts:
        return []
    names = parts[parts.index("env_vars") + 1 :]
    if isinstance(value, Mapping):
        names += [str(k) for k in value]
    return [n for n in names if looks_secret(n)]


def shown_value(key: str, value: Any) -> Any:
    """The value as errors may show it: never the value of a secret."""
    return REDACTED if secret_names(key, value) else value


def _check_versions(cluster: ClusterSpec, version: NemoRLVersion, found: _Findings) -> None:
    pinned = version.ray_version
    if pinned is None:
        return
    if cluster.backend == "gke":
        ours = cluster.ray_version
    elif cluster.nemo_rl_path is not None:
        from importlib import metadata

        try:
            ours = metadata.version("ray")
        except metadata.PackageNotFoundError:
            return
    else:
        return
    if ours != pinned:
        found.warnings.append(
            f"NeMo-RL {version.version} pins Ray {pinned} (and Python {version.python_version}), but "
            f"the cluster runs Ray {ours}; Ray clients and workers of different versions may not talk"
        )


def _check_capacity_lifetime(
    job: JobSpec, cluster: ClusterSpec, flat: Mapping[str, Any] | None, found: _Findings
) -> None:
    """Capacity that ends (flex-start): a run that cannot save cannot outlive it."""
    ends = [c for c in getattr(cluster, "capacity", ()) if c.kind == "flex-start" and c.max_run_duration]
    if not ends:
        return
    shortest = min(float(c.max_run_duration) for c in ends)
    enabled = flat.get("checkpointing.enabled") if flat is not None else job.checkpointing
    if enabled is False or not job.checkpointing:
        found.warnings.append(
            f"the capacity policy has flex-start nodes, which live at most {shortest / 3600:g} h, and checkpointing "
            "is off: a run longer than that cannot finish inside the capacity's lifetime (it cannot save before "
            "the nodes go, so it starts over); turn checkpointing on (CapacityDeadlineWarning)"
        )


def _check_converter(job: JobSpec, flat: Mapping[str, Any], found: _Findings) -> None:
    from .config import recipe_name
    from .models import converter_for

    megatron = flat.get("policy.megatron_cfg.enabled", _MISSING) is True
    if megatron and job.converter_type is None and converter_for(job.model) is None:
        found.warnings.append(
            f"cannot tell the model family of {job.model!r}; the recipe's "
            f"policy.megatron_cfg.converter_type={flat.get('policy.megatron_cfg.converter_type', _MISSING)!r} "
            "is kept (set GRPOJob.converter_type if that is wrong)"
        )
    if not megatron and job.converter_type is not None:
        found.warnings.append(
            f"converter_type={job.converter_type!r} is ignored: recipe {recipe_name(job.recipe)!r} "
            "does not train with Megatron"
        )


def _check_batches(flat: Mapping[str, Any], found: _Findings) -> None:
    prompts = _int(flat.get("grpo.num_prompts_per_step", _MISSING))
    gens = _int(flat.get("grpo.num_generations_per_prompt", _MISSING))
    gbs = _int(flat.get("policy.train_global_batch_size", _MISSING))
    if prompts is None or gens is None or gbs is None:
        return
    samples = prompts * gens
    if gbs <= 0 or samples % gbs:
        found.problem(
            "policy.train_global_batch_size",
            gbs,
            f"grpo.num_prompts_per_step ({prompts}) * grpo.num_generations_per_prompt ({gens}) = "
            f"{samples} samples per step must be a whole multiple of the global batch size "
            "(NeMo-RL trains each step on whole global batches)",
        )


def user_override(job: JobSpec, key: str) -> tuple[str, Any] | None:
    """The job's own override of ``key`` (as ``key``, ``+key`` or ``++key``): its spelling and value.

    Examples:
        >>> from rl_lustre import GRPOJob
        >>> user_override(GRPOJob(name="a", overrides={"++cluster.num_nodes": 2}), "cluster.num_nodes")
        ('++cluster.num_nodes', 2)
    """
    for spelled, value in job.extra_overrides.items():
        if spelled.lstrip("+") == key and not spelled.startswith("~"):
            return spelled, value
    return None


def _check_nodes(
    job: JobSpec, cluster: ClusterSpec, overrides: Mapping[str, Any], flat: Mapping[str, Any] | None, found: _Findings
) -> None:
    """The job's size in nodes against the cluster's: set once, and no larger than the cluster."""
    theirs = user_override(job, "cluster.num_nodes")
    if job.num_nodes is not None and theirs is not None and theirs[1] != job.num_nodes:
        found.problem(
            f"overrides[{theirs[0]!r}]",
            theirs[1],
            f"conflicts with num_nodes={job.num_nodes}; set the job's size once, with num_nodes",
        )
        return
    nodes = _int(flat.get("cluster.num_nodes", None)) if flat is not None else None
    if nodes is None:
        nodes = _int(next((v for k, v in overrides.items() if k.lstrip("+") == "cluster.num_nodes"), None))
    if nodes is not None and nodes > cluster.num_nodes:
        field = "num_nodes" if job.num_nodes is not None else "cluster.num_nodes"
        found.problem(
            field,
            nodes,
            f"the job asks for {nodes} nodes but cluster {cluster.name!r} has {cluster.num_nodes} "
            f"(Cluster.num_nodes={cluster.num_nodes}); use at most {cluster.num_nodes}, or a larger cluster",
        )
    gpn = _int(flat.get("cluster.gpus_per_node", None)) if flat is not None else None
    if gpn is not None and cluster.gpus_per_node is not None and 0 < gpn < cluster.gpus_per_node:
        found.warnings.append(
            f"the job uses {gpn} of each node's {cluster.gpus_per_node} GPUs (cluster.gpus_per_node={gpn}); "
            "the cluster's queue still gives it whole nodes"
        )


def _check_parallelism(flat: Mapping[str, Any], cluster: ClusterSpec, found: _Findings) -> None:
    nodes = _int(flat.get("cluster.num_nodes", _MISSING))
    gpn = _int(flat.get("cluster.gpus_per_node", _MISSING))
    if nodes is None or gpn is None or nodes <= 0 or gpn <= 0:
        return
    total = nodes * gpn
    assert cluster.gpus_per_node is not None
    # More nodes than the cluster has is _check_nodes's finding.
    if total > cluster.total_gpus and nodes <= cluster.num_nodes:
        key, value = "cluster.gpus_per_node", gpn
        found.problem(
            key,
            value,
            f"the job asks for {nodes} nodes * {gpn} GPUs = {total} GPUs, but the cluster "
            f"has {cluster.num_nodes} * {cluster.gpus_per_node} = {cluster.total_gpus}",
        )

    train, gen = total, total
    if flat.get("policy.generation.colocated.enabled", True) is False:
        gen_nodes = _int(flat.get("policy.generation.colocated.resources.num_nodes", None)) or 0
        gen_gpn = _int(flat.get("policy.generation.colocated.resources.gpus_per_node", None)) or 0
        gen = gen_gpn if nodes == 1 else gen_nodes * gpn
        train = total - gen
        if gen <= 0 or train <= 0:
            found.problem(
                "policy.generation.colocated.resources",
                {"num_nodes": gen_nodes, "gpus_per_node": gen_gpn},
                f"non-colocated generation must leave GPUs to both generation and training "
                f"(the job has {total}: {gen} for generation, {train} for training)",
            )
            return

    if flat.get("policy.megatron_cfg.enabled", _MISSING) is True:
        prefix = "policy.megatron_cfg."
        tp_key, pp_key, cp_key = (
            prefix + "tensor_model_parallel_size",
            prefix + "pipeline_model_parallel_size",
            prefix + "context_parallel_size",
        )
    elif flat.get("policy.dtensor_cfg.enabled", _MISSING) is True:
        prefix = "policy.dtensor_cfg."
        tp_key, pp_key, cp_key = prefix + "tensor_parallel_size", "", prefix + "context_parallel_size"
    else:
        return
    tp = _int(flat.get(tp_key, 1)) or 1
    pp = _int(flat.get(pp_key, 1)) or 1
    cp = _int(flat.get(cp_key, 1)) or 1
    model_parallel = tp * pp * cp
    if train % model_parallel:
        found.problem(
            tp_key,
            tp,
            f"tensor ({tp}) * pipeline ({pp}) * context ({cp}) parallel = {model_parallel} "
            f"must divide the {train} training GPUs ({nodes} nodes * {gpn} GPUs per node)",
        )
    else:
        dp = train // model_parallel
        mbs = _int(flat.get("policy.train_micro_batch_size", 1)) or 1
        gbs = _int(flat.get("policy.train_global_batch_size", _MISSING))
        if gbs is not None and gbs % (dp * mbs):
            found.problem(
                "policy.train_global_batch_size",
                gbs,
                f"must be a multiple of data-parallel size * micro batch = {dp} * {mbs} = "
                f"{dp * mbs} (data-parallel size = {train} training GPUs / "
                f"(tensor {tp} * pipeline {pp} * context {cp}))",
            )

    if flat.get("policy.generation.backend", _MISSING) == "vllm":
        vkey = "policy.generation.vllm_cfg."
        vtp = _int(flat.get(vkey + "tensor_parallel_size", 1)) or 1
        vpp = _int(flat.get(vkey + "pipeline_parallel_size", 1)) or 1
        if vtp > gpn:
            found.problem(
                vkey + "tensor_parallel_size",
                vtp,
                f"must be at most the {gpn} GPUs per node (a vLLM tensor-parallel group stays on one node)",
            )
        elif gen % (vtp * vpp):
            found.problem(
                vkey + "tensor_parallel_size",
                vtp,
                f"vLLM tensor ({vtp}) * pipeline ({vpp}) parallel must divide the {gen} generation GPUs",
            )


def _check_metric(flat: Mapping[str, Any], found: _Findings) -> None:
    metric = flat.get("checkpointing.metric_name", _MISSING)
    if metric is _MISSING or metric is None:
        return
    if not isinstance(metric, str) or not metric.startswith(("val:", "train:")) or metric in ("val:", "train:"):
        found.problem(
            "checkpointing.metric_name",
            metric,
            "must be None (keep the newest checkpoints) or 'val:<metric>' / 'train:<metric>', "
            "like 'val:accuracy' (NeMo-RL 0.4.0 ranks checkpoints by a validation or "
            "training metric)",
        )
    elif metric.startswith("val:") and not flat.get("grpo.val_period", 0):
        found.warnings.append(
            f"checkpointing.metric_name={metric!r} ranks by a validation metric, but grpo.val_period "
            "is 0, so no validation runs"
        )


def _check_dataset(flat: Mapping[str, Any], key: str, exact: bool, found: _Findings) -> None:
    name = flat.get(key, _MISSING)
    if name is _MISSING or name in MATH_DATASETS:
        return
    if name in PREFERENCE_DATASETS:
        found.problem(
            key,
            name,
            "is a preference dataset (chosen/rejected pairs, for DPO or reward models); GRPO "
            "loads response datasets only and NeMo-RL stops with 'Unsupported dataset_name' "
            f"(math datasets: {', '.join(MATH_DATASETS)}, or ResponseDataset for your own files)",
        )
        return
    if name == "ResponseDataset":
        if exact and flat.get("data.train_data_path", _MISSING) is _MISSING:
            found.problem(
                key,
                name,
                "ResponseDataset reads your own data and needs '+data.train_data_path=<jsonl "
                "file or HF dataset>' (and optionally +data.val_data_path)",
            )
        return
    if name in OTHER_DATASETS:
        found.warnings.append(
            f"{key}={name!r} is not a math dataset; examples/run_grpo_math.py scores answers with "
            f"the math environment (math datasets: {', '.join(MATH_DATASETS)})"
        )
        return
    lowered = {d.lower(): d for d in (*MATH_DATASETS, "ResponseDataset")}
    near = [lowered[m] for m in difflib.get_close_matches(str(name).lower(), list(lowered), n=2, cutoff=0.6)]
    unknown = (
        f"is not a dataset NeMo-RL 0.4.0's GRPO math example knows "
        f"({', '.join(MATH_DATASETS)}, or ResponseDataset for your own files)"
        + (f"; did you mean {' or '.join(map(repr, near))}?" if near else "")
    )
    if exact:
        # The version whose loader we know: it raises ValueError("Unsupported dataset_name").
        found.problem(key, name, unknown + "; NeMo-RL stops with 'Unsupported dataset_name'")
    else:
        found.warnings.append(
            f"{key}={name!r} {unknown} NeMo-RL stops with 'Unsupported dataset_name' "
            "unless this version or your image adds it."
        )


def _check_storage(flat: Mapping[str, Any], cluster: ClusterSpec, found: _Findings) -> None:
    from .._sizing import (
        CHECKPOINT_BYTES_PER_PARAM,
        IN_FLIGHT_CHECKPOINTS,
        checkpoint_bytes,
        parse_param_count,
    )

    if flat.get("checkpointing.enabled", _MISSING) is not True:
        return
    model = flat.get("policy.model_name", _MISSING)
    params = parse_param_count(model) if isinstance(model, str) else None
    if params is None:
        found.warnings.append(
            f"cannot tell the parameter count of {model!r} from its name; the check that its "
            "checkpoints fit the volume was skipped"
        )
        return
    steps = _int(flat.get("grpo.max_num_steps", _MISSING)) or 1
    period = _int(flat.get("checkpointing.save_period", _MISSING)) or 1
    keep = _int(flat.get("checkpointing.keep_top_k", None))
    saves = max(1, math.ceil(steps / period))
    kept = saves if keep is None else min(keep, saves)
    # Beyond the kept ones: the save being written (tmp_step_N) and a stale one left by
    # an interrupted save; never more than the run writes in total.
    count = min(kept + IN_FLIGHT_CHECKPOINTS, saves)
    one = checkpoint_bytes(params, CHECKPOINT_BYTES_PER_PARAM)
    scale = 1.0
    if cluster.backend == "gke":
        assert cluster.volume is not None
        assert cluster.volume.capacity_gib is not None
        space = cluster.volume.capacity_gib * 1024**3
        where = f"the Lustre volume ({cluster.volume.capacity_gib:,} GiB)"
    else:
        existing = next((p for p in (Path(cluster.mount_path), *Path(cluster.mount_path).parents) if p.exists()), None)
        if existing is None or not os.access(existing, os.R_OK):
            return
        space = shutil.disk_usage(existing).free
        where = f"the free space under {cluster.mount_path} ({space / 1024**3:,.1f} GiB)"
        if cluster.nemo_rl_path is None:
            scale = cluster.rehearsal_scale
    need = count * one * scale
    why = (
        f"keep_top_k=None keeps all {saves} this run saves"
        if keep is None
        else f"keep_top_k={keep} + {IN_FLIGHT_CHECKPOINTS} in flight, at most the {saves} this run saves"
    )
    desc = (
        f"{count} checkpoints ({why}) * {one / 1024**3:,.0f} GiB ({params / 1e9:g}B parameters * "
        f"{CHECKPOINT_BYTES_PER_PARAM} B: bf16 weights, fp32 master weights and Adam moments)"
        + (f" * rehearsal scale {scale:g}" if scale != 1.0 else "")
    )
    if need > space:
        found.problem(
            "checkpointing.keep_top_k",
            keep,
            f"{desc} = {need / 1024**3:,.1f} GiB do not fit {where}; keep fewer checkpoints, "
            "save less often, or size the volume with rl_lustre.sizing.size_lustre",
        )
    elif need > 0.8 * space:
        found.warnings.append(f"{desc} = {need / 1024**3:,.1f} GiB fill more than 80% of {where}")
