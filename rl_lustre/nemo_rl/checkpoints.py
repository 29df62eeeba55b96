"""Read NeMo-RL checkpoint directories: which ``step_N`` exist, how big, written when and how fast.

NeMo-RL's ``CheckpointManager`` writes a save into ``tmp_step_N/`` and renames it to
``step_N/`` once complete; a ``step_N`` that replaces an older one passes through
``old_step_N/``. Only ``step_N`` directories are checkpoints: ``tmp_step_*`` is a save in
progress (or an interrupted one) and ``old_step_*`` is on its way out, so both are
ignored here, as NeMo-RL's own ``get_latest_checkpoint_path`` ignores them.

Inside a checkpoint, ``training_info.json`` and ``config.yaml`` are written first and the
policy weights, optimizer state and ``train_dataloader.pt`` after them. The spread of
file modification times from ``training_info.json`` to the last file written is
therefore the time the save spent writing, which is what :attr:`Checkpoint.save_seconds`
reports (Lustre keeps whole-second timestamps, so short saves read as 0 or 1 s there).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

__all__ = ["Checkpoint", "latest_checkpoint", "list_checkpoints"]

_STEP_DIR = re.compile(r"step_(\d+)")


@attrs.frozen
class Checkpoint:
    """One complete NeMo-RL checkpoint (a ``step_N`` directory).

    Attributes:
        step: the training step it was saved after.
        path: the ``step_N`` directory.
        size_bytes: the bytes of every file under it.
        finished_at: when its last file was written (seconds since the epoch).
        save_seconds: how long the save spent writing, from the first file written
            (``training_info.json``) to the last; None without ``training_info.json``.
        training_info: the parsed ``training_info.json`` (empty when absent or unreadable).
    """

    step: int
    path: Path
    size_bytes: int
    finished_at: float
    save_seconds: float | None
    training_info: Mapping[str, Any] = attrs.field(factory=dict, repr=False, eq=False)

    @property
    def mb_per_second(self) -> float | None:
        """Write throughput in MB/s (10**6 bytes), when the save time is known and non-zero."""
        if not self.save_seconds:
            return None
        return self.size_bytes / 1e6 / self.save_seconds


def list_checkpoints(checkpoint_dir: str | os.PathLike[str]) -> list[Checkpoint]:
    """Every complete checkpoint in ``checkpoint_dir``, oldest step first.

    A missing directory has no checkpoints. ``tmp_step_*`` and ``old_step_*`` are ignored.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> for name in ("step_2", "step_10", "tmp_step_12"):
        ...     (root / name).mkdir()
        ...     _ = (root / name / "training_info.json").write_text('{"total_steps": 1}')
        >>> [c.step for c in list_checkpoints(root)]
        [2, 10]
    """
    root = Path(checkpoint_dir)
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        # Not there yet (nothing saved), or a file in its place: either way, no checkpoints.
        return []
    found = []
    for entry in entries:
        m = _STEP_DIR.fullmatch(entry.name)
        if m is None or not entry.is_dir(follow_symlinks=False):
            continue
        checkpoint = _read(int(m.group(1)), Path(entry.path))
        if checkpoint is not None:
            found.append(checkpoint)
    return sorted(found, key=lambda c: c.step)


def latest_checkpoint(checkpoint_dir: str | os.PathLike[str]) -> Checkpoint | None:
    """The checkpoint NeMo-RL resumes from: the highest ``step_N``, or None.

    Example:
        >>> import tempfile
        >>> latest_checkpoint(tempfile.mkdtemp()) is None
        True
    """
    checkpoints = list_checkpoints(checkpoint_dir)
    return checkpoints[-1] if checkpoints else None


def _read(step: int, path: Path) -> Checkpoint | None:
    size = 0
    last_mtime = 0.0
    try:
        last_mtime = path.stat().st_mtime
        for dirpath, _dirnames, filenames in os.walk(path):
            for name in filenames:
                st = os.stat(os.path.join(dirpath, name), follow_symlinks=False)
                size += st.st_size
                last_mtime = max(last_mtime, st.st_mtime)
    except FileNotFoundError:
        # keep_top_k deleted it while we were looking; it is no longer a checkpoint.
        return None
    info_path = path / "training_info.json"
    info: dict[str, Any] = {}
    save_seconds: float | None = None
    try:
        save_seconds = max(0.0, last_mtime - info_path.stat().st_mtime)
        loaded = json.loads(info_path.read_text())
        if isinstance(loaded, dict):
            info = loaded
    except (FileNotFoundError, ValueError):
        pass
    return Checkpoint(
        step=step,
        path=path,
        size_bytes=size,
        finished_at=last_mtime,
        save_seconds=save_seconds,
        training_info=info,
    )
