"""PyTorch's NCCL flight recorder: what a run's environment sets, how a dump is triggered, where it lands.

Every rank of a PyTorch process group keeps a ring buffer of its last collectives (which
operation, which sequence number, its sizes, whether it started and completed) when
``TORCH_NCCL_TRACE_BUFFER_SIZE`` is above 0. Read from all ranks, the buffers say which
rank never joined the collective the others wait in. The names are PyTorch's
(``torch/csrc/distributed/c10d``: ``ProcessGroupNCCL.hpp``'s ``DumpPipe`` and the
``DebugInfoWriter``; PyTorch 2.7 reads them, later versions read them too beside their
``TORCH_FR_*`` names):

``TORCH_NCCL_TRACE_BUFFER_SIZE``
    entries kept per rank (:data:`BUFFER_ENTRIES`);
``TORCH_NCCL_DUMP_ON_TIMEOUT=1``
    a rank dumps its buffer when its NCCL watchdog times a collective out, before it ends
    the process (the "collective operation timeout" NeMo-RL then dies of);
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``
    where: the file ``<value><rank>``. rl_lustre puts it in the run's directory on the
    volume, ``<run dir>/diagnostics/nccl/rank_``, so every node's ranks write to one place;
``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``
    each rank makes a named pipe ``<value><rank>.pipe`` and dumps when something is written
    to it: the trigger. A pipe works only on the node that made it, so it is on the node's
    own ``/tmp`` (:func:`pipe_stem`), and :mod:`.probe` writes to the pipes on every node
    when the watchdog finds a stall, before anything is stopped.

:func:`recorder_env` is the job's part of it (set in the Ray job's runtime env at
submission); :func:`trigger` writes to a node's pipes; :func:`take_dumps` moves the dumps
an attempt left into its bundle.

It runs on the cluster (shipped with the supervisor; standard library only).
"""

from __future__ import annotations

import errno
import glob
import os
import shutil

from .diagnostics import NCCL
from .rundir import DIAGNOSTICS

__all__ = [
    "BUFFER_ENTRIES",
    "DUMP_FILE",
    "DUMP_ON_TIMEOUT",
    "PIPE_FILE",
    "PIPE_SUFFIX",
    "TRACE_BUFFER_SIZE",
    "dump_prefix",
    "pipe_stem",
    "recorder_env",
    "take_dumps",
    "trigger",
]

TRACE_BUFFER_SIZE = "TORCH_NCCL_TRACE_BUFFER_SIZE"
DUMP_ON_TIMEOUT = "TORCH_NCCL_DUMP_ON_TIMEOUT"
DUMP_FILE = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
PIPE_FILE = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
PIPE_SUFFIX = ".pipe"
# PyTorch's own default size, and TorchTitan's: a few MB per rank.
BUFFER_ENTRIES = 2000


def dump_prefix(run_dir: str) -> str:
    """Where the run's ranks dump: ``<run dir>/diagnostics/nccl/rank_`` (+ the rank).

    Examples:
        >>> dump_prefix("/lustre/rl_lustre/runs/r1")
        '/lustre/rl_lustre/runs/r1/diagnostics/nccl/rank_'
    """
    return os.path.join(run_dir, DIAGNOSTICS, NCCL, "rank_")


def pipe_stem(run_id: str) -> str:
    """The stem of the run's ranks' pipes, on each node's own ``/tmp`` (which exists: PyTorch
    makes the pipe with ``mkfifo``, and fails the process group when it cannot).

    Examples:
        >>> pipe_stem("rl-lustre-run-1-0a1b2c3d")
        '/tmp/rl_lustre_nccl_rl-lustre-run-1-0a1b2c3d_rank_'
    """
    return f"/tmp/rl_lustre_nccl_{run_id}_rank_"


def recorder_env(run_dir: str, run_id: str) -> dict[str, str]:
    """The flight recorder's settings for a run's environment.

    Examples:
        >>> sorted(recorder_env("/v/rl_lustre/runs/r1", "r1").items())  # doctest: +NORMALIZE_WHITESPACE
        [('TORCH_NCCL_DEBUG_INFO_PIPE_FILE', '/tmp/rl_lustre_nccl_r1_rank_'),
         ('TORCH_NCCL_DEBUG_INFO_TEMP_FILE', '/v/rl_lustre/runs/r1/diagnostics/nccl/rank_'),
         ('TORCH_NCCL_DUMP_ON_TIMEOUT', '1'), ('TORCH_NCCL_TRACE_BUFFER_SIZE', '2000')]
    """
    return {
        TRACE_BUFFER_SIZE: str(BUFFER_ENTRIES),
        DUMP_ON_TIMEOUT: "1",
        DUMP_FILE: dump_prefix(run_dir),
        PIPE_FILE: pipe_stem(run_id),
    }


def trigger(stem: str) -> list[str]:
    """Write to every rank's pipe ``<stem><rank>.pipe`` on this node; returns the pipes
    written to. A pipe whose rank is gone (no reader) is skipped."""
    written = []
    for path in sorted(glob.glob(glob.escape(stem) + "*" + PIPE_SUFFIX)):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno in (errno.ENXIO, errno.ENOENT):
                continue
            raise
        try:
            os.write(fd, b"1")
            written.append(path)
        finally:
            os.close(fd)
    return written


def take_dumps(prefix: str, since: float, dest: str) -> list[str]:
    """Move the dumps written to ``<prefix><rank>`` at or after ``since`` into ``dest``
    (older ones, from an earlier attempt, stay); returns the new paths."""
    moved = []
    for path in sorted(glob.glob(glob.escape(prefix) + "*")):
        try:
            if not os.path.isfile(path) or os.path.getmtime(path) < since:
                continue
            os.makedirs(dest, exist_ok=True)
            target = os.path.join(dest, os.path.basename(path))
            shutil.move(path, target)
            moved.append(target)
        except OSError:
            continue
    return moved
