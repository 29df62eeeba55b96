"""What NeMo-RL writes that programs on both sides read: the step header of its log and
the names of its checkpoint directories.

One place for these facts, read by :mod:`rl_lustre.nemo_rl.logs` and
:mod:`rl_lustre.nemo_rl.checkpoints` here, by the rehearsal driver that writes them, and
on the cluster by the recovery supervisor. It is part of the on-cluster package
(:mod:`rl_lustre.oncluster`: standard library only, shipped whole with every job), and
 :func:`rl_lustre.nemo_rl.checkpoints.listing_command` pastes its source
into the script it runs on the Ray head.

The format is that of NeMo-RL v0.4.0: ``grpo_train`` in ``nemo_rl/algorithms/grpo.py``
prints the headers (epoch, step), the save, validation and results lines and the last
line, ``setup`` the ``SETUP COMPLETE`` banner; ``CheckpointManager`` in ``nemo_rl/utils/checkpoint.py`` writes a save
into ``tmp_step_N``, renames it ``step_N`` once complete, and passes a ``step_N`` that
``keep_top_k`` deletes through ``old_step_N``.

    >>> step_header(3, 20)
    '========================= Step 3/20 ========================='
    >>> m = STEP_HEADER.search(step_header(3, 20)); int(m.group(1)), int(m.group(2))
    (3, 20)
    >>> checkpoint_name(4), checkpoint_step("step_4"), checkpoint_step("tmp_step_4"), checkpoint_step("step_x")
    ('step_4', 4, None, None)
    >>> checkpoint_step(checkpoint_name(4, SAVING), SAVING)
    4
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

# NeMo-RL's step header: 25 '=' on each side of "Step k/N" (3 or more are accepted).
STEP_HEADER = re.compile(r"={3,} Step (\d+)/(\d+) ={3,}")
# Printed inside a step, before the save, on the steps that save.
SAVE_LINE = re.compile(r"Saving checkpoint for step (\d+)\.\.\.")
# The epoch header, before the first step of each epoch: 25 '=' on each side of "Epoch e/E".
EPOCH_HEADER = re.compile(r"={3,} Epoch (\d+)/(\d+) ={3,}")
# Printed when validation starts (S is the global step; 0 for grpo.val_at_start's).
VALIDATION_LINE = re.compile(r"▶ Starting validation at step (\d+)\.\.\.")
# The banner's middle line at the end of setup(), and the header of a step's results.
SETUP_DONE = "SETUP COMPLETE"
RESULTS_LINE = re.compile(r"📊 Training Results:")
# The loop's last line: max_num_steps reached, or checkpoint_must_save_by's timeout.
END_LINE = re.compile(r"(Max number of steps|Timeout) has been reached, stopping training early")
# Inside a step, the progress line that opens each of its phases ("▶ Generating responses for
# batch of size 256...", "▶ Training policy...", ...), and the timers printed after it.
PHASE_LINE = re.compile(r"▶ \S.*")
STEP_TIME_LINE = re.compile(r"• Total step time: ([0-9.]+)s")
VALIDATION_TIME_LINE = re.compile(r"• Total validation time: ([0-9.]+)s")
# What PyTorch's NCCL watchdog (ProcessGroupNCCL) logs, on a rank's stderr, before it ends a
# process whose collective ran past its timeout: "[Rank 3] Watchdog caught collective
# operation timeout: WorkNCCL(SeqNum=64214, OpType=ALLGATHER, ...) ran for 600000 milliseconds
# before timing out."
NCCL_TIMEOUT_LINE = re.compile(r"Watchdog caught collective operation timeout")

# The prefixes of a checkpoint directory's name, followed by the step number.
COMPLETE = "step_"  # a complete checkpoint: the only kind NeMo-RL resumes from
SAVING = "tmp_step_"  # a save in progress, or one interrupted
DELETING = "old_step_"  # a checkpoint on its way out (keep_top_k)
# Written first into every checkpoint: NeMo-RL's step counters.
TRAINING_INFO = "training_info.json"

# NeMo-RL saves, then stops, before this much time from its training loop's start has passed:
# a duration written DD:HH:MM:SS (see save_by_text).
DEADLINE_KEY = "checkpointing.checkpoint_must_save_by"


def save_by_text(seconds: float) -> str:
    """``seconds`` as NeMo-RL writes the key's value: ``DD:HH:MM:SS`` (whole seconds, rounded down).

    Examples:
        >>> save_by_text(0), save_by_text(7 * 86400 - 1)
        ('00:00:00:00', '06:23:59:59')
    """
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days:02d}:{hours:02d}:{minutes:02d}:{secs:02d}"


def parse_save_by(text: Any) -> float | None:
    """The seconds a ``DD:HH:MM:SS`` value stands for; None for anything else (null included).

    Examples:
        >>> parse_save_by("00:03:30:00"), parse_save_by(None), parse_save_by("3h")
        (12600.0, None, None)
    """
    if not isinstance(text, str):
        return None
    parts = text.split(":")
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        return None
    days, hours, minutes, secs = (int(p) for p in parts)
    return float(days * 86400 + hours * 3600 + minutes * 60 + secs)


def step_header(step: int, total: int) -> str:
    """The header NeMo-RL prints at the start of a step (1-based)."""
    return f"{'=' * 25} Step {step}/{total} {'=' * 25}"


def save_line(step: int) -> str:
    """The line NeMo-RL prints when it starts saving a checkpoint."""
    return f"Saving checkpoint for step {step}..."


def checkpoint_name(step: int, prefix: str = COMPLETE) -> str:
    """The directory name of step ``step``'s checkpoint (``step_4``; ``tmp_step_4`` with ``SAVING``)."""
    return f"{prefix}{step}"


def checkpoint_step(name: str, prefix: str = COMPLETE) -> int | None:
    """The step of a directory named ``<prefix>N``; None for any other name."""
    if not name.startswith(prefix):
        return None
    digits = name[len(prefix) :]
    return int(digits) if digits.isascii() and digits.isdigit() else None


def scan_checkpoints(root: str) -> list[dict[str, Any]]:
    """The ``step_N`` directories under ``root`` as plain records, oldest step first: step,
    path, size_bytes, finished_at (the last file's time), save_seconds (from
    ``training_info.json``'s time to the last file's), training_info.

    The one scanner of checkpoint directories: the client's listing
    (:func:`rl_lustre.nemo_rl.checkpoints.list_checkpoints`), the listing command on the Ray
    head (which pastes this module's source) and the seal of a run (:mod:`.seal`) use it.

    Examples:
        >>> import tempfile
        >>> root = tempfile.mkdtemp()
        >>> for name in ("step_2", "tmp_step_4"):
        ...     os.mkdir(os.path.join(root, name))
        >>> [r["step"] for r in scan_checkpoints(root)]
        [2]
    """
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        # Not there yet (nothing saved), or a file in its place: either way, no checkpoints.
        return []
    found = []
    for entry in entries:
        step = checkpoint_step(entry.name)
        if step is None or not entry.is_dir(follow_symlinks=False):
            continue
        size = 0
        try:
            last_mtime = os.stat(entry.path).st_mtime
            for dirpath, _dirnames, filenames in os.walk(entry.path):
                for name in filenames:
                    st = os.stat(os.path.join(dirpath, name), follow_symlinks=False)
                    size += st.st_size
                    last_mtime = max(last_mtime, st.st_mtime)
        except FileNotFoundError:
            # keep_top_k deleted it while we were looking; it is no longer a checkpoint.
            continue
        info_path = os.path.join(entry.path, TRAINING_INFO)
        info = {}
        save_seconds = None
        try:
            save_seconds = max(0.0, last_mtime - os.stat(info_path).st_mtime)
            with open(info_path) as f:
                loaded = json.load(f)
            if isinstance(loaded, dict):
                info = loaded
        except (FileNotFoundError, ValueError):
            pass
        found.append({
            "step": step,
            "path": entry.path,
            "size_bytes": size,
            "finished_at": last_mtime,
            "save_seconds": save_seconds,
            "training_info": info,
        })  # fmt: skip
    return sorted(found, key=lambda record: record["step"])
