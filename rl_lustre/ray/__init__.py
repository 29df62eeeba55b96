"""Ray: a local head launcher and a Jobs API client.

* :mod:`rl_lustre.ray.head` starts and stops a real Ray head on this machine
  (loopback only, free ports, its own temp dir, token auth);
  :mod:`rl_lustre.ray.workers` adds worker nodes to it. Both build on
  :mod:`~rl_lustre.ray.nodes` (a node's environment, log and start retry),
  :mod:`~rl_lustre.ray.ports` and :mod:`~rl_lustre.ray.processes` (finding a head's
  processes by their mark).
* :mod:`rl_lustre.ray.jobs` wraps Ray's ``JobSubmissionClient`` and maps its
  errors to :class:`rl_lustre.errors.RayError` in one place.

Both import Ray lazily, on first use.
"""

from __future__ import annotations

from .head import LocalHead, start_local_head
from .jobs import JobInfo, JobsClient

__all__ = ["JobInfo", "JobsClient", "LocalHead", "start_local_head"]
