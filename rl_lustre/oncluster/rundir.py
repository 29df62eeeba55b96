"""A run's home on the volume: the directory that holds its records, beside its checkpoints.

Every run rl_lustre submits has a run id that outlives its Ray submissions (a resubmission
after a head loss or a preemption is the same run) and a directory on the volume::

    <mount>/rl_lustre/runs/<run id>/
        submission.json     what was submitted: entrypoint, runtime env (no secret), metadata
        journal.jsonl       every journal record (oncluster.records), one JSON object a line
        driver.log          a rolling copy of the job's log (the driver's output)
        stopped             present once the run was stopped (by the user or by teardown):
                            it is never resubmitted
        diagnostics/        evidence bundles, one directory each (hangs)

The files are written on the cluster as things happen; the head's copies (the Ray job's
log, its job table) are caches of them. The client reads a finished or orphaned run from
here. The names are this module's: both sides import them from here.

Standard library only (part of the on-cluster package).

Examples:
    >>> run_dir("/lustre", "rl-lustre-run-1-0a1b2c3d")
    '/lustre/rl_lustre/runs/rl-lustre-run-1-0a1b2c3d'
    >>> run_dir("/lustre", "../elsewhere")
    Traceback (most recent call last):
    ...
    ValueError: run id '../elsewhere': must be 1-128 letters, digits, '-', '_' or '.', not starting with '.'
"""

from __future__ import annotations

import posixpath
import re

__all__ = [
    "DIAGNOSTICS",
    "DRIVER_LOG",
    "JOURNAL",
    "RUNS",
    "STOPPED",
    "SUBMISSION",
    "check_run_id",
    "run_dir",
]

# Under the volume's mount path.
RUNS = "rl_lustre/runs"
SUBMISSION = "submission.json"
JOURNAL = "journal.jsonl"
DRIVER_LOG = "driver.log"
STOPPED = "stopped"
DIAGNOSTICS = "diagnostics"

_RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")


def check_run_id(run_id: str) -> str:
    """``run_id`` if it can name a directory of its own (no path separator, no ``..``)."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r}: must be 1-128 letters, digits, '-', '_' or '.', not starting with '.'")
    return run_id


def run_dir(mount_path: str, run_id: str) -> str:
    """The run's directory under the volume mounted at ``mount_path``."""
    return posixpath.join(mount_path, RUNS, check_run_id(run_id))
