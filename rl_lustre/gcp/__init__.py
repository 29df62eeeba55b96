"""Google Cloud adapters: one thin module per API, each mapping its errors to ours.

========================  ==============================================================
module                    API and resources
========================  ==============================================================
``lustre``                Managed Lustre instances, ImportData / ExportData (gRPC)
``container``             GKE clusters and node pools, GKE operations (gRPC)
``container_requests``    the GKE cluster and node pool requests, built from the plan
``pool_provisioning``     what a live node pool's nodes are billed as, and how long they live
``compute``               VPC network, subnetwork, PSA range, firewall rule (REST)
``servicenetworking``     the private services access connection (plain REST)
``monitoring``            time series of Cloud Monitoring metrics (gRPC, read only)
``iam``                   the nodes' service account (IAM Admin) and its project roles (the
                          project IAM policy, Resource Manager), gRPC
``_errors``               the one place Google errors become :mod:`rl_lustre.errors`
``_resource``             create-or-adopt and delete-if-ours, shared by the labelled adapters
``_wait``                 polling with capped backoff, deadlines and progress
``_clients``              clients from the environment; the emulator hooks
========================  ==============================================================

Importing this package loads the Google client libraries; ``import rl_lustre`` does not.
Every adapter takes an optional client (by default the cached one for the environment)
and offers ``get_or_none``, an idempotent ``create`` that adopts a resource carrying our
labels and refuses one without them, ``delete`` of labelled resources only, and
``wait_ready``.
"""

from __future__ import annotations

import importlib
from typing import Any

# Loaded on first use: google-cloud-compute alone takes seconds to import, and a
# LustreVolume.create() should not pay for it.
_EXPORTS = {
    "Backoff": "._wait",
    "Ensured": "._ownership",
    "Firewalls": ".compute",
    "GkeClusters": ".container",
    "GkeNodePools": ".container",
    "GlobalAddresses": ".compute",
    "LustreInstances": ".lustre",
    "Monitoring": ".monitoring",
    "Networks": ".compute",
    "Projects": ".compute",
    "PsaConnections": ".servicenetworking",
    "RetryPolicy": "._errors",
    "Subnetworks": ".compute",
    "TransferResult": ".lustre",
    "WaitProgress": "._wait",
    "progress_hook": "._wait",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)


def __dir__() -> list[str]:
    return __all__
