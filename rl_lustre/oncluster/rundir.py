"""A run's home on the volume: the directory that holds its records, beside its checkpoints.

Every run rl_lustre submits has a run id that outlives its Ray submissions (a resubmission
after a head loss or a preemption is the same run) and a directory on the volume::

    <mount>/rl_lustre/runs/<run id>/
        submission.json     what was submitted: entrypoint, runtime env (no secret), metadata
        journal.jsonl       every journal record (oncluster.records), one JSON object a line
        driver.log          a rolling copy of the job's log (the driver's output)
        driver.log.1        the part of the log before driver.log (the log rolls at a size)
        stopped             present once the run was stopped (by the user or by teardown):
                            it is never resubmitted
        given_up            present once the keeper gave up resubmitting it (why, in JSON)
        owners/             one file per writer, numbered: the newest is the run's only
                            writer (oncluster/runrecords.py)
        packages/           what the job uploaded (the on-cluster package, its working_dir),
                            for a resubmission after the head that held them was lost
        diagnostics/        evidence bundles, one directory each (hangs)
        summary.json        written by teardown: the run's status, attempts and goodput ledger
        export.json         written by teardown: what of the run is exported, and where
                            (rl_lustre.oncluster.seal)

The cluster's keeper (oncluster/keeper.py), which resubmits the runs a lost head took with
it, keeps its own records beside them::

    <mount>/rl_lustre/keeper/<cluster>/
        heads.jsonl         every head the keeper saw, and each loss (when, why)
        owners/             the keepers, numbered: the newest is the only one that acts

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
    "DRIVER_LOG_PREVIOUS",
    "EXPORT",
    "GIVEN_UP",
    "HEADS",
    "JOURNAL",
    "KEEPERS",
    "OWNERS",
    "PACKAGE",
    "PACKAGES",
    "RUNS",
    "STOPPED",
    "SUBMISSION",
    "SUMMARY",
    "check_run_id",
    "keeper_dir",
    "run_dir",
    "runs_dir",
]

# The name this package has on the cluster (a job's py_modules, packages/ of a run's directory).
PACKAGE = "rl_lustre_oncluster"
# Under the volume's mount path.
RUNS = "rl_lustre/runs"
SUBMISSION = "submission.json"
JOURNAL = "journal.jsonl"
DRIVER_LOG = "driver.log"
STOPPED = "stopped"
DIAGNOSTICS = "diagnostics"
DRIVER_LOG_PREVIOUS = "driver.log.1"
GIVEN_UP = "given_up"
OWNERS = "owners"
PACKAGES = "packages"
SUMMARY = "summary.json"
EXPORT = "export.json"
# Under the volume's mount path: the keepers' records, one directory per cluster.
KEEPERS = "rl_lustre/keeper"
HEADS = "heads.jsonl"

_RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")


def check_run_id(run_id: str) -> str:
    """``run_id`` if it can name a directory of its own (no path separator, no ``..``)."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r}: must be 1-128 letters, digits, '-', '_' or '.', not starting with '.'")
    return run_id


def run_dir(mount_path: str, run_id: str) -> str:
    """The run's directory under the volume mounted at ``mount_path``."""
    return posixpath.join(mount_path, RUNS, check_run_id(run_id))


def runs_dir(mount_path: str) -> str:
    """The directory of every run's directory under the volume mounted at ``mount_path``.

    Examples:
        >>> runs_dir("/lustre")
        '/lustre/rl_lustre/runs'
    """
    return posixpath.join(mount_path, RUNS)


def keeper_dir(mount_path: str, cluster: str) -> str:
    """The records of the keeper of the cluster named ``cluster``.

    Examples:
        >>> keeper_dir("/lustre", "demo")
        '/lustre/rl_lustre/keeper/demo'
    """
    return posixpath.join(mount_path, KEEPERS, check_run_id(cluster))
