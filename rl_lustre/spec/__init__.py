"""Specs: the frozen, validated description of a deployment, a volume and a job.

:class:`ClusterSpec`, :class:`VolumeSpec` and :class:`JobSpec` hold the fields of
:class:`~rl_lustre.Cluster`, :class:`~rl_lustre.LustreVolume` and :class:`~rl_lustre.GRPOJob`
and every rule they follow: a bad value fails on construction, naming the field, the
value and the rule, before anything talks to a remote API. The public classes are these
specs plus their lifecycle (``up``, ``submit``, ``create``, ...); every layer below them
(the plan, the manifests, NeMo-RL knowledge, the adapters, the backends) takes a spec,
so none of them needs the public classes. See ``docs/architecture.md``.

    >>> from rl_lustre.spec import ClusterSpec
    >>> spec = ClusterSpec(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
    >>> spec.gpus_per_node, spec.fabric, spec.volume.capacity_gib
    (8, 'rdma', 9000)

Only ``rl_lustre.errors``, ``rl_lustre.catalog`` and the validation helpers are
imported here.
"""

from __future__ import annotations

from .capacity import Capacity
from .cluster import ClusterSpec
from .job import JobSpec
from .volume import VolumeSpec, VolumeState

__all__ = ["Capacity", "ClusterSpec", "JobSpec", "VolumeSpec", "VolumeState"]
