"""The GKE backend: the Google Cloud side (network, private services access, Managed
Lustre, the GKE cluster and its pools) and the Kubernetes objects, as one graph.

``up()`` walks the plan of the ``Cluster`` (the same nodes ``cluster.plan()`` shows)
with :class:`~rl_lustre.provision.executor.Executor`: Lustre is created alongside the
GKE cluster and its pools; existing resources with our labels are adopted; a failure
or a SIGINT / SIGTERM rolls back what this ``up()`` created. ``down()`` deletes what
carries our labels, in reverse order, from any process: it finds the resources by
name and labels, so no local state is needed.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import TYPE_CHECKING

from ..errors import KubernetesError
from ..provision.executor import Executor, Report, cancel_on_signals

if TYPE_CHECKING:
    from ..cluster import Cluster
    from ..gcp import Backoff, RetryPolicy
    from ..job import GRPOJob
    from ..plan import Plan
    from ..provision.drivers import Apis
    from ..provision.progress import Display
    from ..run import Run

__all__ = ["GKEBackend"]

logger = logging.getLogger("rl_lustre.backends.gke")


class GKEBackend:
    """The live side of a GKE ``Cluster``.

    Example:
        >>> from rl_lustre import Cluster
        >>> backend = GKEBackend(Cluster(name="demo", project="my-project", region="us-east1",
        ...                              zone="us-east1-b"))
        >>> backend.up()  # doctest: +SKIP
        >>> backend.last_report.keys("created")  # doctest: +SKIP
        ['network', 'subnet', 'psa-range', ...]

    Args:
        cluster: a cluster with ``backend="gke"``.
        gcp_only: internal, for tests of the Google Cloud side and its benchmark: skip
            the Kubernetes nodes (pv, pvc, secret, raycluster). ``up()`` and ``down()``
            then report them as ``skipped``, never silently.
        apis: the Google Cloud adapters; by default built from the environment (the
            emulators' clients when ``RL_LUSTRE_GCP_EMULATOR_HOST`` /
            ``RL_LUSTRE_GCP_REST_EMULATOR`` are set).
        backoff: polling delays of every wait (when ``apis`` is not given).
        retry: retries of transient failures (when ``apis`` is not given).
        display: where progress goes; by default the log, plus a live view when output is on.
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        gcp_only: bool = False,
        apis: Apis | None = None,
        backoff: Backoff | None = None,
        retry: RetryPolicy | None = None,
        display: Display | None = None,
    ) -> None:
        self.cluster = cluster
        self.gcp_only = gcp_only
        self._apis = apis
        self._backoff = backoff
        self._retry = retry
        self._display = display
        self.last_report: Report | None = None

    def __repr__(self) -> str:
        return f"GKEBackend({self.cluster.name!r}, gcp_only={self.gcp_only})"

    @property
    def plan(self) -> Plan:
        """The deployment's plan: the graph ``up()`` and ``down()`` walk."""
        return self.cluster.plan()

    def executor(self) -> Executor:
        """An executor over this deployment's plan and drivers (no remote call is made)."""
        from ..provision.drivers import Apis, Context, gke_drivers

        apis = self._apis or Apis.from_env(backoff=self._backoff, retry=self._retry)
        plan = self.plan
        ctx = Context(self.cluster, plan, apis, backoff=self._backoff)
        return Executor(plan, gke_drivers(ctx, kube=not self.gcp_only), display=self._display)

    def up(self, *, keep_on_failure: bool = False) -> Report:
        """Create or adopt the whole deployment and wait until it is ready.

        In the main thread, SIGINT and SIGTERM stop it the same way a failure does:
        no new resource is started, waits are abandoned, and what this ``up()``
        created is deleted again before :class:`ProvisioningInterrupted` (also a
        ``KeyboardInterrupt``) is raised. A third signal abandons that clean-up.

        Example:
            >>> report = GKEBackend(cluster).up()  # doctest: +SKIP
            >>> print(report)  # doctest: +SKIP

        Args:
            keep_on_failure: keep what this run created when it fails (``down()``
                removes it later).

        Raises:
            ProvisioningError: a step failed; it names the step, what was cleaned up,
                kept and left.
            ProvisioningInterrupted: SIGINT or SIGTERM arrived; likewise.
            KubernetesError: the Kubernetes layer is missing (raised before any remote call).
        """
        if not self.gcp_only:
            _require_kube()
        executor = self.executor()
        cancel, abandon = threading.Event(), threading.Event()
        stages = (
            (cancel, "stopping up() and deleting what it created"),
            (None, "still cleaning up; one more signal abandons the clean-up and leaves resources behind"),
            (abandon, "abandoning the clean-up; run cluster.down() later to remove what is left"),
        )
        with cancel_on_signals(*stages) as received:

            def reason() -> str:
                return f"{signal.Signals(received[0]).name} received" if received else "up() was cancelled"

            try:
                report = executor.up(keep_on_failure=keep_on_failure, cancel=cancel, abandon=abandon,
                                     reason=reason)
            except BaseException as exc:
                self.last_report = getattr(exc, "report", None)
                raise
        self.last_report = report
        return report

    def down(self) -> Report:
        """Delete every resource of the deployment that carries our labels; keep the rest.

        Works from a fresh process (resources are found by name and labels) and is
        safe to call twice. Resources the plan only uses (your network, an existing
        volume) are never touched. A first SIGINT or SIGTERM does not stop it
        half-way (it is logged); a second abandons it, reporting what is left.

        Example:
            >>> GKEBackend(cluster).down().keys("deleted")  # doctest: +SKIP
            ['gke-cluster', 'lustre', ...]

        Raises:
            TeardownError: something could not be deleted; everything else was.
        """
        executor = self.executor()
        abandon = threading.Event()
        stages = (
            (None, "down() keeps going so that nothing is left half-deleted; one more signal abandons it"),
            (abandon, "abandoning down(); run it again later to remove what is left"),
        )
        with cancel_on_signals(*stages):
            try:
                report = executor.down(abandon=abandon)
            except BaseException as exc:
                self.last_report = getattr(exc, "report", None)
                raise
        self.last_report = report
        return report

    def submit(self, job: GRPOJob) -> Run:
        raise NotImplementedError(
            "submitting to a GKE deployment needs the Ray dashboard reached through the Kubernetes API, "
            "which this version of rl_lustre does not have yet"
        )

    def attach(self, job_id: str) -> Run:
        raise NotImplementedError(
            "attaching to a job on a GKE deployment needs the Ray dashboard reached through the Kubernetes API, "
            "which this version of rl_lustre does not have yet"
        )

    def describe(self) -> str:
        c = self.cluster
        return (f"GKE deployment {c.name!r} (project {c.project}, zone {c.zone}: {c.num_nodes} x {c.machine_type}, "
                f"Lustre {c.volume.name if c.volume else '-'})")

    def cleanup_hint(self) -> str:
        c = self.cluster
        return (
            f"The GKE deployment {c.name!r} keeps running in project {c.project}. From any process, "
            f"the same Cluster(name={c.name!r}, project={c.project!r}, region={c.region!r}, zone={c.zone!r}, ...)"
            ".down() deletes what rl_lustre created: resources labelled managed-by=rl-lustre, "
            f"rl-lustre-deployment={c.name}."
        )


def _require_kube() -> None:
    try:
        from ..kube import apply  # noqa: F401
    except ImportError as exc:
        raise KubernetesError(
            f"the Kubernetes layer (rl_lustre.kube.apply) cannot be imported ({exc}); up() would create the "
            "Google Cloud resources and then fail, so it starts nothing"
        ) from exc
