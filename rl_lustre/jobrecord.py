"""What a submitted job records about itself, read back by the run handle, its plot and sweeps.

The keys rl_lustre writes into a Ray job's metadata at submission, and the notes a run
carries; writers (``backends.submission``) and readers (``run``, ``plot``, ``sweep``)
name them from here.
"""

from __future__ import annotations

CHECKPOINT_DIR = "rl_lustre.checkpoint_dir"
TOTAL_STEPS = "rl_lustre.total_steps"
MODEL = "rl_lustre.model"
RECIPE = "rl_lustre.recipe"

REHEARSAL_NOTE = "rehearsal: no model is trained and its metrics are synthetic"
NOTHING_TO_DO_NOTE = "nothing left to do"
