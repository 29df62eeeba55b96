"""The records a run leaves, as both sides of the wire read and write them.

Two kinds, one module, so that the client and the code on the cluster share one
definition of each:

- **The job's metadata keys** (:data:`CHECKPOINT_DIR`, :data:`TOTAL_STEPS`, ...): written
  into the Ray job's metadata at submission (``rl_lustre.backends.submission``), read back
  by the run handle, its plot and sweeps, and on the cluster by the supervisor; and the
  notes a run carries (:data:`REHEARSAL_NOTE`, :data:`NOTHING_TO_DO_NOTE`).
- **The journal**: records for programs, one line each in the job's log. A record is the
  line :data:`MARK` + a JSON object with at least ``v`` (the schema's version,
  :data:`VERSION`), ``at`` (the head's ``time.time()`` when it was written, rounded to
  milliseconds) and ``event`` (what happened). Any process reads them back from the log
  through the Jobs API with :func:`read_journal`; people read the ``rl_lustre supervisor:``
  lines printed beside them.

The events of the cluster's queue (``queued``, ``waiting``, ``granted``, ``held``,
``released``, ``reaped``) and their fields are listed in :mod:`rl_lustre.oncluster.queue`.
The recoveries keep their own marks, :data:`RESTART_MARK` and :data:`RESUMED_MARK`
(see :mod:`rl_lustre.oncluster.supervisor`).

    >>> import io
    >>> out = io.StringIO()
    >>> write({"event": "granted", "need": 2}, out=out, at=1.5)
    >>> out.getvalue()
    'RL_LUSTRE_EVENT {"at": 1.5, "event": "granted", "need": 2, "v": 1}\\n'
    >>> read_journal("a line\\n" + out.getvalue() + "RL_LUSTRE_EVENT {torn")
    [{'at': 1.5, 'event': 'granted', 'need': 2, 'v': 1}]
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

__all__ = [
    "CHECKPOINT_DIR",
    "DASHBOARD",
    "HEAD_LOST",
    "JOB",
    "LOG_DIR",
    "MARK",
    "METRIC",
    "MODEL",
    "NEMO_RL_DIR",
    "NOTHING_TO_DO_NOTE",
    "NUM_NODES",
    "POLICY_BACKEND",
    "PRIORITY",
    "RECIPE",
    "REHEARSAL_NOTE",
    "REPLAY_BEGIN",
    "REPLAY_END",
    "RESTART_MARK",
    "RESUMED_MARK",
    "RUN_DIR",
    "RUN_ID",
    "SEQ",
    "SUBMISSION_LINE",
    "SUBMITTED_AT",
    "TOTAL_STEPS",
    "VERSION",
    "read_journal",
    "write",
]

# The job's metadata keys.
CHECKPOINT_DIR = "rl_lustre.checkpoint_dir"
# NeMo-RL's logger.log_dir in force (exported with the run's results).
LOG_DIR = "rl_lustre.log_dir"
# What run.export_model() needs of the job: where NeMo-RL is in the image, the policy's
# backend ("megatron" or "dtensor": its checkpoint layout and converter), and the metric
# keep_top_k ranks checkpoints by ("<name>" or "-<name>" when lower is better; absent: none).
NEMO_RL_DIR = "rl_lustre.nemo_rl_dir"
POLICY_BACKEND = "rl_lustre.policy_backend"
METRIC = "rl_lustre.checkpoint_metric"
TOTAL_STEPS = "rl_lustre.total_steps"
MODEL = "rl_lustre.model"
RECIPE = "rl_lustre.recipe"
JOB = "rl_lustre.job"
# The run's identity, which outlives its Ray submissions, and its directory on the volume
# (rl_lustre.oncluster.rundir).
RUN_ID = "rl_lustre.run_id"
RUN_DIR = "rl_lustre.run_dir"
# Set by the keeper (rl_lustre.oncluster.keeper) on a run it resubmits after its head was lost:
# JSON {lost_at, head, reason}. Such a submission resumes the run (rl_lustre.oncluster.runrecords).
HEAD_LOST = "rl_lustre.head_lost"
# For the cluster's queue (rl_lustre.oncluster.queue), read by the job's supervisor on the head:
# the job's size and priority, when and in which order of its batch it was submitted (the
# submitting client's clock), and the Ray dashboard's address as seen from the head.
NUM_NODES = "rl_lustre.num_nodes"
PRIORITY = "rl_lustre.priority"
SUBMITTED_AT = "rl_lustre.submitted_at"
SEQ = "rl_lustre.seq"
DASHBOARD = "rl_lustre.dashboard"

# The notes a run carries.
REHEARSAL_NOTE = "rehearsal: no model is trained and its metrics are synthetic"
NOTHING_TO_DO_NOTE = "nothing left to do"

# The journal.

MARK = "RL_LUSTRE_EVENT "
# A recovery's records (see rl_lustre.oncluster.supervisor, and parse_restarts there).
RESTART_MARK = "RL_LUSTRE_RESTART "
RESUMED_MARK = "RL_LUSTRE_RESUMED "
# A resubmission after a head loss first prints the run's records so far (from the run's
# directory) between these two lines, so that its log tells the whole run (rl_lustre.oncluster.runhome).
REPLAY_BEGIN = "rl_lustre supervisor: the run's records so far, from its directory on the volume:"
REPLAY_END = "rl_lustre supervisor: (end of the records so far)"
# In the run's driver.log on the volume (not in the job's log): where each submission's part begins.
SUBMISSION_LINE = "rl_lustre supervisor: --- the log of submission "
VERSION = 1
# One write of a whole line at a time (the output copier writes from another thread).
LOCK = threading.Lock()


def write(record: dict[str, Any], *, out: TextIO | None = None, at: float | None = None) -> None:
    """Write one record (``v`` and ``at`` added) as one line, flushed."""
    full = {"v": VERSION, "at": round(time.time() if at is None else at, 3), **record}
    text = MARK + json.dumps(full, sort_keys=True) + "\n"
    stream = sys.stdout if out is None else out
    with LOCK:
        stream.write(text)
        stream.flush()


def read_journal(log: str) -> list[dict[str, Any]]:
    """Every record in ``log``, in order; lines that do not parse are left out."""
    out = []
    for line in log.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            record = json.loads(line[len(MARK) :])
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("event"), str):
            out.append(record)
    return out
