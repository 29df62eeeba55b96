"""Test doubles that ship with rl_lustre: stateful fakes of the Google APIs it uses.

The fakes speak the real wire protocols, so the real ``google-cloud-*`` clients and
all of rl_lustre's code paths run unchanged against them::

    from rl_lustre.testing import FakeGCP

    with FakeGCP(latency={"lustre.create": 0.2}) as gcp:
        gcp.seed_network("my-project", "my-net")
        volume.create(api=LustreInstances(backoff=FAST_BACKOFF))  # real LustreClient → fake
        assert gcp.leaked() == ["lustre.instances projects/my-project/..."]

``KubeFake`` is a Kubernetes API server over TLS that simulates the KubeRay operator
and forwards the head's dashboard port to a real local Ray head.

Every method they do not implement fails loudly (gRPC UNIMPLEMENTED / HTTP 501,
naming the method). Faults are injected with ``gcp.faults``.

:class:`FakeGKE` puts them together with a real local Ray head and a rehearsal image, to
run your own GKE script end to end (``submit()`` and ``wait()`` included) on this machine.

:func:`preempt` takes worker nodes of a running local or fake-GKE deployment away, as a
Spot preemption does, and brings replacements back.
"""

from __future__ import annotations

from ..gcp._errors import RetryPolicy
from ..gcp._wait import Backoff
from ._capacity import Catalog
from ._core import DEFAULT_LATENCY, FakeError, Faults, RequestRecord, project_number
from ._fake import FakeGCP
from ._fake_gke import FakeGKE
from ._preempt import preempt
from ._preemption import Preemption
from .kube import KubeFake, KubeFaults, KubeTimings
from .kube import schema_validator as kube_schema_validator

# Polling and retry settings for adapters under test: the fakes answer in milliseconds.
FAST_BACKOFF = Backoff(initial=0.01, maximum=0.05, multiplier=1.5)
FAST_RETRY = RetryPolicy(attempts=5, initial=0.005, maximum=0.02)

__all__ = [
    "DEFAULT_LATENCY",
    "FAST_BACKOFF",
    "FAST_RETRY",
    "Catalog",
    "FakeError",
    "FakeGCP",
    "FakeGKE",
    "Faults",
    "KubeFake",
    "KubeFaults",
    "KubeTimings",
    "Preemption",
    "RequestRecord",
    "kube_schema_validator",
    "preempt",
    "project_number",
]
