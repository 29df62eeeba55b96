"""What a submitted job records about itself, read back by the run handle, its plot and sweeps.

The keys rl_lustre writes into a Ray job's metadata at submission, and the notes a run
carries; writers (``backends.submission``) and readers (``run``, ``plot``, ``sweep``, and
on the cluster the supervisor, with which this module is shipped: standard library only)
name them from here.
"""

from __future__ import annotations

CHECKPOINT_DIR = "rl_lustre.checkpoint_dir"
TOTAL_STEPS = "rl_lustre.total_steps"
MODEL = "rl_lustre.model"
RECIPE = "rl_lustre.recipe"
JOB = "rl_lustre.job"
# For the cluster's queue (rl_lustre.queueing), read by the job's supervisor on the head:
# the job's size and priority, when and in which order of its batch it was submitted (the
# submitting client's clock), and the Ray dashboard's address as seen from the head.
NUM_NODES = "rl_lustre.num_nodes"
PRIORITY = "rl_lustre.priority"
SUBMITTED_AT = "rl_lustre.submitted_at"
SEQ = "rl_lustre.seq"
DASHBOARD = "rl_lustre.dashboard"

REHEARSAL_NOTE = "rehearsal: no model is trained and its metrics are synthetic"
NOTHING_TO_DO_NOTE = "nothing left to do"
