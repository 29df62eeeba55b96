"""Google Cloud adapters: one thin module per API, each mapping its errors to ours.

=====================  ==============================================================
module                 API and resources
=====================  ==============================================================
``lustre``             Managed Lustre instances, ImportData / ExportData (gRPC)
``container``          GKE clusters and node pools, GKE operations (gRPC)
``compute``            VPC network, subnetwork, PSA range, firewall rule (REST)
``servicenetworking``  the private services access connection (plain REST)
``_errors``            the one place Google errors become :mod:`rl_lustre.errors`
``_wait``              polling with capped backoff, deadlines and progress
``_clients``           clients from the environment; the emulator hooks
=====================  ==============================================================

Importing this package loads the Google client libraries; ``import rl_lustre`` does not.
Every adapter takes an optional client (by default the cached one for the environment)
and offers ``get_or_none``, an idempotent ``create`` that adopts a resource carrying our
labels and refuses one without them, ``delete`` of labelled resources only, and
``wait_ready``.
"""

from __future__ import annotations

from ._errors import RetryPolicy
from ._ownership import Ensured
from ._wait import Backoff, WaitProgress, progress_hook
from .compute import Firewalls, GlobalAddresses, Networks, Projects, Subnetworks
from .container import GkeClusters, GkeNodePools
from .lustre import LustreInstances, TransferResult
from .servicenetworking import PsaConnections

__all__ = [
    "Backoff",
    "Ensured",
    "Firewalls",
    "GkeClusters",
    "GkeNodePools",
    "GlobalAddresses",
    "LustreInstances",
    "Networks",
    "Projects",
    "PsaConnections",
    "RetryPolicy",
    "Subnetworks",
    "TransferResult",
    "WaitProgress",
    "progress_hook",
]
