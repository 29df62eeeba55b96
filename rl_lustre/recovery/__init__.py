"""Recovery as the client sees it: the command that runs the supervisor, and its records.

The supervisor itself runs on the cluster (:mod:`rl_lustre.oncluster.supervisor`): a
submitted job does not run NeMo-RL's command directly but the supervisor on the Ray
head, which runs the command and runs it again, from the newest checkpoint, when worker
nodes were lost. This package is the client's side:

- :func:`supervised` renders the Ray job's entrypoint around NeMo-RL's command, and
  :func:`shipped_package` is the directory Ray uploads as the job's ``py_modules``
  (:mod:`.shipping`);
- :func:`parse_restarts` reads the supervisor's records back from the job's log, for
  :meth:`rl_lustre.run.Run.restarts` (:mod:`.restarts`), and :func:`parse_diagnostics` the
  diagnostics bundles it kept when the run stalled, for :meth:`rl_lustre.run.Run.diagnostics`
  (:mod:`.diagnostics`).
"""

from __future__ import annotations

from .diagnostics import Diagnostics, parse_diagnostics
from .restarts import LostNode, Restart, parse_restarts
from .shipping import PACKAGE, shipped_package, supervised

__all__ = [
    "PACKAGE",
    "Diagnostics",
    "LostNode",
    "Restart",
    "parse_diagnostics",
    "parse_restarts",
    "shipped_package",
    "supervised",
]
