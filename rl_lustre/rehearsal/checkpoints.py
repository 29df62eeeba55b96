"""The rehearsal's checkpoints: NeMo-RL's ``CheckpointManager`` layout and rules, with filler bytes.

What it reproduces (see :mod:`rl_lustre.rehearsal.driver` for where it was read):

``nemo_rl/utils/checkpoint.py`` ``CheckpointManager``
    ``init_tmp_checkpoint(step, training_info, run_config)`` creates
    ``checkpoint_dir/tmp_step_{step}`` (``mkdir(parents=True, exist_ok=True)``), writes
    ``training_info.json`` (``json.dump``, no indent) and ``config.yaml``
    (``yaml.safe_dump`` of the resolved config, with ``logger.log_dir`` already pointing at
    the new ``exp_NNN``). ``finalize_checkpoint`` renames ``tmp_step_N`` to ``step_N``
    (an existing ``step_N`` is first renamed ``old_step_N`` and deleted afterwards), then
    ``remove_old_checkpoints(exclude_latest=True)``: with ``keep_top_k`` None nothing is
    removed; with ``metric_name`` None the newest ``keep_top_k`` steps are kept; with a
    metric, the order is by ``(training_info.get(metric, worst), step)`` (descending when
    ``higher_is_better``, with ``-inf`` for a checkpoint lacking the metric; else metric
    ascending with ``+inf`` for a lacking one, newer first): a checkpoint saved without
    the metric ranks worst, and later saves keep writing it when they have it. The newest
    step is never
    deleted, so up to ``keep_top_k + 1`` remain; each deletion prints
    ``Removing checkpoint <path> due to being outside top-<k>``.
    ``get_latest_checkpoint_path`` is the highest ``step_N`` by number.
    Stale ``tmp_step_*`` are not cleared at start in that version: ``init_tmp_checkpoint``
    reuses the directory when the same step is saved again (2026 ``main`` deletes a stale
    ``tmp_step_N`` first and prints ``Removed stale tmp_step_N in …s``). The rehearsal
    clears every stale ``tmp_step_*`` at start, so that an interrupted save never mixes
    with a new one, and says so.

On-disk layout under ``step_N`` (what ``policy.save_checkpoint`` writes)
    DTensor policy (``policy.dtensor_cfg.enabled``): ``policy/weights/`` and
    ``policy/optimizer/`` as torch distributed checkpoints (one ``__<rank>_0.distcp`` per
    rank plus ``.metadata``), ``policy/tokenizer/`` (Hugging Face tokenizer files).
    Megatron policy (``policy.megatron_cfg.enabled``): ``policy/weights/iter_0000000/``
    (``__<rank>_0.distcp`` shards, ``common.pt``, ``metadata.json``) holding the optimizer
    state too -- ``policy/optimizer`` is then only a flag and not written --, and
    ``policy/tokenizer/``. Both: ``train_dataloader.pt``, ``training_info.json``,
    ``config.yaml``.

What the rehearsal writes
    The same names, with filler bytes. The weight and optimizer files together hold
    ``--checkpoint-scale`` x the real checkpoint size, ``parse_param_count(policy.model_name)``
    x :data:`rl_lustre.sizing.CHECKPOINT_BYTES_PER_PARAM` (a quarter as fp32 weights, the
    rest optimizer state), in at most 128 shards per directory (one per GPU the config
    names). Every file is fsynced before ``tmp_step_N`` is renamed; a stop during a save
    never leaves a partial ``step_N``; the next start clears such an ``old_step_N`` too.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from pathlib import Path
from typing import Any

from ..oncluster import nemo_formats as formats

__all__ = [
    "MAX_SHARDS",
    "clear_interrupted",
    "fsync_path",
    "remove_old_checkpoints",
    "save_checkpoint",
    "shard_layout",
    "step_dirs",
    "write_filler",
]

MAX_SHARDS = 128
_BLOCK = 1 << 20
_FILLER_HEADER = b"rl_lustre rehearsal filler: not model weights\n"


def step_dirs(checkpoint_dir: Path, prefix: str) -> dict[int, Path]:
    """``{N: checkpoint_dir/<prefix>N}`` of the directories there (``step_``, ``tmp_step_``, ``old_step_``)."""
    found = {}
    if checkpoint_dir.is_dir():
        for p in checkpoint_dir.iterdir():
            step = formats.checkpoint_step(p.name, prefix)
            if step is not None and p.is_dir():
                found[step] = p
    return found


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (so that a rename in it is durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clear_interrupted(checkpoint_dir: Path) -> list[tuple[str, str]]:
    """Delete what a stopped run left half-done; returns ``(name, why)`` for each.

    An ``old_step_N`` is a checkpoint keep_top_k was deleting; a ``tmp_step_N`` an
    interrupted save, never a checkpoint.
    """
    cleared = []
    for old in sorted(step_dirs(checkpoint_dir, formats.DELETING).values()):
        shutil.rmtree(old)
        cleared.append((old.name, "keep_top_k was deleting it when the last run stopped"))
    for tmp in sorted(step_dirs(checkpoint_dir, formats.SAVING).values()):
        shutil.rmtree(tmp)
        cleared.append((f"stale {tmp.name}", "an interrupted save; it was never a checkpoint"))
    return cleared


def shard_layout(total_bytes: int, shards: int, *, megatron: bool) -> dict[str, int]:
    """Relative path → bytes of the weight and optimizer files of one checkpoint of
    ``total_bytes`` in ``shards`` shards per directory.

    Examples:
        >>> shard_layout(10, 2, megatron=False)  # doctest: +NORMALIZE_WHITESPACE
        {'policy/weights/__0_0.distcp': 1, 'policy/weights/__1_0.distcp': 1,
         'policy/optimizer/__0_0.distcp': 4, 'policy/optimizer/__1_0.distcp': 4}
    """
    weights = total_bytes // 4
    files: dict[str, int] = {}

    def split(directory: str, nbytes: int) -> None:
        for rank in range(shards):
            files[f"{directory}/__{rank}_0.distcp"] = nbytes // shards + (1 if rank < nbytes % shards else 0)

    if megatron:
        split("policy/weights/iter_0000000", total_bytes)
    else:
        split("policy/weights", weights)
        split("policy/optimizer", total_bytes - weights)
    return files


def save_checkpoint(
    checkpoint_dir: Path,
    k: int,
    state: dict[str, Any],
    cfg: dict[str, Any],
    files: dict[str, int],
    *,
    megatron: bool,
    seed: int,
) -> None:
    """Save step ``k`` as NeMo-RL does: ``tmp_step_k`` written and fsynced, then renamed ``step_k``.

    ``state`` goes to ``training_info.json``, ``cfg`` to ``config.yaml``, ``files`` (see
    :func:`shard_layout`) are filled with bytes drawn from ``seed``.
    """
    import yaml

    print(formats.save_line(k), flush=True)
    tmp = checkpoint_dir / formats.checkpoint_name(k, formats.SAVING)
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / formats.TRAINING_INFO).write_text(json.dumps(state))
    (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
    block = random.Random(f"{seed}:filler").randbytes(_BLOCK)
    small = {
        "policy/tokenizer/tokenizer_config.json": json.dumps({"rl_lustre_rehearsal": True}),
        "train_dataloader.pt": json.dumps({"rl_lustre_rehearsal": True, "step": k}),
    }
    if megatron:
        small["policy/weights/iter_0000000/common.pt"] = "rl_lustre rehearsal filler\n"
        small["policy/weights/iter_0000000/metadata.json"] = json.dumps({"rl_lustre_rehearsal": True})
    else:
        small["policy/weights/.metadata"] = "rl_lustre rehearsal filler\n"
        small["policy/optimizer/.metadata"] = "rl_lustre rehearsal filler\n"
    dirs = {tmp}
    for rel, size in files.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        dirs.add(path.parent)
        write_filler(path, size, block)
    for rel, content in small.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        dirs.add(path.parent)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
    for name in (formats.TRAINING_INFO, "config.yaml"):
        fsync_path(tmp / name)
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        fsync_path(d)
    # Saved steps only ever exceed the newest step_N found at start, so step_k is new.
    os.rename(tmp, checkpoint_dir / formats.checkpoint_name(k))
    fsync_path(checkpoint_dir)


def remove_old_checkpoints(
    checkpoint_dir: Path, keep_top_k: int | None, metric: str | None, higher_is_better: bool
) -> None:
    """keep_top_k as NeMo-RL applies it after a save: the newest step is always kept."""
    if keep_top_k is None:
        return
    history = []
    for step, path in step_dirs(checkpoint_dir, formats.COMPLETE).items():
        info_file = path / formats.TRAINING_INFO
        if info_file.exists():
            history.append((step, path, json.loads(info_file.read_text())))
    if not history:
        return
    latest = max(step for step, _, _ in history)
    if metric is None:
        history.sort(key=lambda h: h[0], reverse=True)
    elif higher_is_better:
        history.sort(key=lambda h: (h[2].get(metric, -math.inf), h[0]), reverse=True)
    else:
        history.sort(key=lambda h: (h[2].get(metric, math.inf), -h[0]))
    for step, path, _ in history[keep_top_k:]:
        if step == latest:
            continue
        print(f"Removing checkpoint {path} due to being outside top-{keep_top_k}", flush=True)
        # Renamed first, so that a stop half-way through never leaves a partial step_N.
        doomed = path.with_name(formats.checkpoint_name(step, formats.DELETING))
        os.rename(path, doomed)
        shutil.rmtree(doomed)


def write_filler(path: Path, size: int, block: bytes) -> None:
    with open(path, "wb") as f:
        head = _FILLER_HEADER[:size]
        f.write(head)
        left = size - len(head)
        while left > 0:
            chunk = block[: min(left, len(block))]
            f.write(chunk)
            left -= len(chunk)
        f.flush()
        os.fsync(f.fileno())
