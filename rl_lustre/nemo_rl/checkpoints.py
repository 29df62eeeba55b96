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
When the run's log is at hand, NeMo-RL's own ``checkpointing`` timer is the better figure
(see :meth:`rl_lustre.run.Run.checkpoints`).

On GKE the checkpoints live on Lustre inside the cluster. :func:`listing_command` is a
stdlib-only ``python3 -c`` command, run on the Ray head (which mounts the volume), that
applies the very same rules -- its script is the source of the scanner used here -- and
:func:`parse_listing` reads what it prints.
"""

from __future__ import annotations

import inspect
import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from .._public import public
from ..oncluster import nemo_formats as formats
from ..oncluster.nemo_formats import scan_checkpoints as _scan

__all__ = ["LISTING_MARK", "Checkpoint", "latest_checkpoint", "list_checkpoints", "listing_command", "parse_listing"]

# Starts the one line of the listing command's output that carries the listing.
LISTING_MARK = "RL_LUSTRE_CHECKPOINTS "


@public("rl_lustre")
@attrs.frozen
class Checkpoint:
    """One complete NeMo-RL checkpoint (a ``step_N`` directory).

    Attributes:
        step: the training step it was saved after.
        path: the ``step_N`` directory (on GKE, its path inside the pods).
        size_bytes: the bytes of every file under it.
        finished_at: when its last file was written (seconds since the epoch).
        save_seconds: how long the save took: NeMo-RL's own ``checkpointing`` timer when
            the run's log has it, otherwise the spread of file times from the first file
            written (``training_info.json``) to the last; None when neither is known.
        save_seconds_from: where ``save_seconds`` comes from: ``"log"`` or ``"files"``.
        training_info: the parsed ``training_info.json`` (empty when absent or unreadable).
        uri: where an exported copy lives (``gs://.../<run id>/checkpoints/step_N``), for a
            run read back from its results (:meth:`rl_lustre.Run.from_results`); None otherwise.
    """

    step: int
    path: Path
    size_bytes: int
    finished_at: float
    save_seconds: float | None
    training_info: Mapping[str, Any] = attrs.field(factory=dict, repr=False, eq=False)
    save_seconds_from: Literal["log", "files"] | None = None
    uri: str | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def mb_per_second(self) -> float | None:
        """Write throughput in MB/s (10**6 bytes), when the save time is known and non-zero."""
        if not self.save_seconds:
            return None
        return self.size_bytes / 1e6 / self.save_seconds

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint as JSON data (``training_info`` included as parsed).

        Examples:
            >>> c = Checkpoint(step=2, path=Path("/v/step_2"), size_bytes=2_000_000, finished_at=0.0,
            ...                save_seconds=0.5)
            >>> c.to_dict()["mb_per_second"]
            4.0
        """
        return {
            "step": self.step,
            "path": str(self.path),
            "size_bytes": self.size_bytes,
            "finished_at": self.finished_at,
            "save_seconds": self.save_seconds,
            "save_seconds_from": self.save_seconds_from,
            "mb_per_second": self.mb_per_second,
            "training_info": dict(self.training_info),
            "uri": self.uri,
        }


def list_checkpoints(checkpoint_dir: str | os.PathLike[str]) -> list[Checkpoint]:
    """Every complete checkpoint in ``checkpoint_dir``, oldest step first.

    A missing directory has no checkpoints. ``tmp_step_*`` and ``old_step_*`` are ignored.

    Examples:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> for name in ("step_2", "step_10", "tmp_step_12"):
        ...     (root / name).mkdir()
        ...     _ = (root / name / "training_info.json").write_text('{"total_steps": 1}')
        >>> [c.step for c in list_checkpoints(root)]
        [2, 10]
    """
    return [_checkpoint(record) for record in _scan(os.fspath(checkpoint_dir))]


def latest_checkpoint(checkpoint_dir: str | os.PathLike[str]) -> Checkpoint | None:
    """The checkpoint NeMo-RL resumes from: the highest ``step_N``, or None.

    Examples:
        >>> import tempfile
        >>> latest_checkpoint(tempfile.mkdtemp()) is None
        True
    """
    checkpoints = list_checkpoints(checkpoint_dir)
    return checkpoints[-1] if checkpoints else None


def listing_command(checkpoint_dir: str, *, python: str = "python3") -> str:
    """A shell command that prints the checkpoints of ``checkpoint_dir`` on the machine it runs on.

    Needs only a Python 3 standard library (any NeMo-RL or Ray image has one). It prints
    one line, :data:`LISTING_MARK` followed by JSON, that :func:`parse_listing` reads.

    Examples:
        >>> import subprocess, tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "step_3").mkdir()
        >>> out = subprocess.run(listing_command(str(root)), shell=True, capture_output=True, text=True).stdout
        >>> [c.step for c in parse_listing(out)]
        [3]
    """
    script = "\n".join([
        inspect.getsource(formats),  # it starts with its ``from __future__`` import
        "import json, sys",
        f"print({LISTING_MARK!r} + json.dumps(scan_checkpoints(sys.argv[1])), flush=True)",
    ])  # fmt: skip
    return f"{shlex.quote(python)} -c {shlex.quote(script)} {shlex.quote(checkpoint_dir)}"


def parse_listing(output: str) -> list[Checkpoint]:
    """The checkpoints in what :func:`listing_command` printed (other lines are ignored).

    Examples:
        >>> parse_listing('noise\\nRL_LUSTRE_CHECKPOINTS [{"step": 4, "path": "/lustre/c/step_4", '
        ...               '"size_bytes": 10, "finished_at": 1.0, "save_seconds": 0.0, "training_info": {}}]')
        ... # doctest: +NORMALIZE_WHITESPACE
        [Checkpoint(step=4, path=PosixPath('/lustre/c/step_4'), size_bytes=10, finished_at=1.0, save_seconds=0.0,
                    save_seconds_from='files')]

    Raises:
        ValueError: the output holds no listing, or a malformed one.
    """
    lines = [line for line in output.splitlines() if line.startswith(LISTING_MARK)]
    if not lines:
        raise ValueError("the output holds no checkpoint listing")
    records = json.loads(lines[-1][len(LISTING_MARK) :])
    if not isinstance(records, list):
        raise ValueError("the checkpoint listing is not a list")
    try:
        return [_checkpoint(record) for record in records]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed checkpoint listing: {exc!r}") from exc


def _checkpoint(record: Mapping[str, Any]) -> Checkpoint:
    seconds = record["save_seconds"]
    info = record.get("training_info")
    return Checkpoint(
        step=int(record["step"]),
        path=Path(record["path"]),
        size_bytes=int(record["size_bytes"]),
        finished_at=float(record["finished_at"]),
        save_seconds=None if seconds is None else float(seconds),
        training_info=info if isinstance(info, dict) else {},
        save_seconds_from=None if seconds is None else "files",
    )
