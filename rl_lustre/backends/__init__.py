"""Backends: what ``Cluster.up()``, ``down()``, ``submit()`` and ``attach()`` do, per deployment kind.

A backend holds the live state of one deployment. :func:`backend_for` picks it from
``cluster.backend``; every backend hands out the same :class:`~rl_lustre.run.Run`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Backend

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["Backend", "backend_for"]


def backend_for(cluster: ClusterSpec) -> Backend:
    """A new backend for ``cluster`` (no remote call is made).

    Examples:
        >>> from rl_lustre import Cluster
        >>> type(backend_for(Cluster.local("demo", volume_dir="/tmp/rl-demo"))).__name__
        'LocalBackend'
    """
    if cluster.backend == "local":
        from .local import LocalBackend

        return LocalBackend(cluster)
    from .gke import GKEBackend

    return GKEBackend(cluster)
