"""The rehearsal driver, ``python -m rl_lustre.rehearsal``: NeMo-RL's GRPO command line
and outputs without training.

Local jobs run it when no NeMo-RL installation is given. It resolves the recipe and
Hydra overrides exactly as NeMo-RL would (an unknown key fails the same way), prints
NeMo-RL-format step lines with synthetic metrics, writes checkpoints in NeMo-RL's layout
at a chosen fraction of their real size, applies ``save_period`` and ``keep_top_k``, and
resumes from the newest ``step_N``. It rehearses orchestration and storage; it does not
train, and its first and last lines say so. See :mod:`rl_lustre.rehearsal.driver` (the
loop), :mod:`~rl_lustre.rehearsal.checkpoints` and :mod:`~rl_lustre.rehearsal.metrics` for
the NeMo-RL behaviour it reproduces and where that was read.
"""

from __future__ import annotations

from .driver import PREFIX
from .entrypoint import main

__all__ = ["PREFIX", "main"]
