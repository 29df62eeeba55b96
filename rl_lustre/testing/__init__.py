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
Spot preemption does, and brings replacements back; :func:`lose_head` takes its Ray head away,
as a pod deletion or an OOM kill does, and brings a new one back as KubeRay would;
:func:`freeze` stops a job's workers on worker nodes with SIGSTOP, as a stuck rank stops, with
every node alive.

The kinds ``KubeFake`` serves are one table: :func:`register_kind` adds one
(``register_kind(KindInfo("ReplicaSet", "apps/v1", "replicasets", ...))``), and routing,
discovery, status subresources, field selectors and strategic-merge keys follow from it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..gcp._errors import RetryPolicy
from ..gcp._wait import Backoff

if TYPE_CHECKING:
    from ._capacity import Catalog
    from ._core import DEFAULT_LATENCY, FakeError, Faults, RequestRecord, project_number
    from ._fake import FakeGCP
    from ._fake_gke import FakeGKE
    from ._freeze import Freeze, freeze
    from ._kube_faults import KubeFaults, KubeTimings
    from ._kube_kinds import KindInfo, pod_merge_keys, register_kind
    from ._lose_head import lose_head
    from ._preempt import preempt
    from ._preemption import HeadLoss, Preemption
    from .kube import KubeFake
    from .kube import schema_validator as kube_schema_validator

# Polling and retry settings for adapters under test: the fakes answer in milliseconds.
FAST_BACKOFF = Backoff(initial=0.01, maximum=0.05, multiplier=1.5)
FAST_RETRY = RetryPolicy(attempts=5, initial=0.005, maximum=0.02)

# Each public name, the module that defines it and its name there, imported on first use:
# the fakes load gRPC, the Google clients and an HTTP server, which a test of the
# polling settings alone does not need.
_HOMES = {
    "Catalog": ("._capacity", "Catalog"),
    "DEFAULT_LATENCY": ("._core", "DEFAULT_LATENCY"),
    "FakeError": ("._core", "FakeError"),
    "FakeGCP": ("._fake", "FakeGCP"),
    "FakeGKE": ("._fake_gke", "FakeGKE"),
    "Faults": ("._core", "Faults"),
    "Freeze": ("._freeze", "Freeze"),
    "HeadLoss": ("._preemption", "HeadLoss"),
    "KindInfo": ("._kube_kinds", "KindInfo"),
    "KubeFake": (".kube", "KubeFake"),
    "KubeFaults": ("._kube_faults", "KubeFaults"),
    "KubeTimings": ("._kube_faults", "KubeTimings"),
    "Preemption": ("._preemption", "Preemption"),
    "RequestRecord": ("._core", "RequestRecord"),
    "freeze": ("._freeze", "freeze"),
    "kube_schema_validator": (".kube", "schema_validator"),
    "lose_head": ("._lose_head", "lose_head"),
    "pod_merge_keys": ("._kube_kinds", "pod_merge_keys"),
    "preempt": ("._preempt", "preempt"),
    "project_number": ("._core", "project_number"),
    "register_kind": ("._kube_kinds", "register_kind"),
}

__all__ = [
    "DEFAULT_LATENCY",
    "FAST_BACKOFF",
    "FAST_RETRY",
    "Catalog",
    "FakeError",
    "FakeGCP",
    "FakeGKE",
    "Faults",
    "Freeze",
    "HeadLoss",
    "KindInfo",
    "KubeFake",
    "KubeFaults",
    "KubeTimings",
    "Preemption",
    "RequestRecord",
    "freeze",
    "kube_schema_validator",
    "lose_head",
    "pod_merge_keys",
    "preempt",
    "project_number",
    "register_kind",
]


if not TYPE_CHECKING:  # type checkers see the imports above, and flag a misspelt name

    def __getattr__(name: str) -> object:
        if name not in _HOMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module, attribute = _HOMES[name]
        return getattr(importlib.import_module(module, __name__), attribute)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
