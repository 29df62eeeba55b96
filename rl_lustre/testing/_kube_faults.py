"""The knobs of :class:`~rl_lustre.testing.kube.KubeFake`'s simulated cluster: what goes
wrong (:class:`KubeFaults`) and how fast things move (:class:`KubeTimings`), with the
messages the scheduler and the cluster autoscaler give for each scheduling fault.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .._public import public

# The scheduler's words (Kubernetes 1.35, as tests/test_kube_real.py sees them).
UNSCHEDULABLE_MESSAGES = {
    "insufficient-gpu": (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient "
        "nvidia.com/gpu. no new claims to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not "
        "helpful for scheduling, 2 No preemption victims found for incoming pod."
    ),
    "spot-stockout": (
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. no new claims to "
        "deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    ),
    "node-selector": (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. no new claims to "
        "deallocate, preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    ),
}
AUTOSCALER_EVENTS = {
    "spot-stockout": (
        "FailedScaleUp",
        "Node scale up in zones us-east1-b associated with this pod failed: GCE out of resources. "
        "Pod is at risk of not being scheduled.",
    ),
    "node-selector": (
        "NotTriggerScaleUp",
        "pod didn't trigger scale-up: 2 node(s) didn't match Pod's node affinity/selector",
    ),
}


@public("rl_lustre.testing")
@attrs.define
class KubeFaults:
    """Fault knobs of the simulated cluster. Change them before or during a test.

    Attributes:
        image_pull: ``True`` makes every image pull fail; a string fails only that image.
        unschedulable: GPU pods stay Pending with a FailedScheduling event:
            ``"insufficient-gpu"`` (no free ``nvidia.com/gpu``), ``"spot-stockout"``
            (the autoscaler cannot get Spot VMs) or ``"node-selector"`` (no node pool
            matches the selector).
        pvc_never_binds: PersistentVolumeClaims stay Pending (with a VolumeMismatch event).
        crash_loop: containers exit with this termination message and go CrashLoopBackOff.
        no_operator: the KubeRay operator is not running: RayClusters get no pods.
        no_crd: the RayCluster CRD is not installed: ``ray.io/v1`` requests get 404.
        legacy_status: report RayCluster readiness as older KubeRay did (``status.state``
            only, no conditions).
        job_failure: the containers of ``batch/v1`` Job pods exit 1 with this
            termination message (reason ``Error``) instead of 0.
    """

    image_pull: bool | str = False
    unschedulable: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.in_(set(UNSCHEDULABLE_MESSAGES)))
    )
    pvc_never_binds: bool = False
    crash_loop: str | None = None
    no_operator: bool = False
    no_crd: bool = False
    legacy_status: bool = False
    job_failure: str | None = None


@public("rl_lustre.testing")
@attrs.define
class KubeTimings:
    """How long the simulated cluster takes for each step, in seconds."""

    tick: float = 0.03
    schedule: float = 0.05
    start: float = 0.1
    bind: float = 0.05
    deletion: float = 0.1
    job_run: float = 0.15
    # Pulling an image onto a node that does not have it yet (once per node and image).
    image_pull: float = 0.0
    # Per image, in place of ``image_pull`` (a 25 GB image and a 1 MB one do not take as long).
    image_pulls: Mapping[str, float] = attrs.field(factory=dict)
    # An image a node finds on its secondary boot disk (KubeFake.preload): read, not pulled.
    preloaded_pull: float = 0.0
    # A Job pod's container start once its image is on the node (None: ``start``, as Ray pods).
    job_start: float | None = None
    # How long a Job pod runs, per image of its first container, in place of ``job_run``
    # (``math.inf``: it runs until deleted).
    job_runs: Mapping[str, float] = attrs.field(factory=dict)
    # The Job controller's wait before it replaces a failed pod: ``job_backoff`` after the
    # first failure, doubling after each further one, at most 60 times it (the real
    # controller: 10 s, 20 s, 40 s, ... up to 10 minutes).
    job_backoff: float = 0.05
    # A minute of the cluster autoscaler's clocks (its backoff, a ComputeClass's consolidation
    # delay, a flex-start node's run): wall seconds per simulated minute.
    minute: float = 60.0

    def pull_time(self, image: str) -> float:
        """How long pulling ``image`` onto a node takes."""
        return self.image_pulls.get(image, self.image_pull)
