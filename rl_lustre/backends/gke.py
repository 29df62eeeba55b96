"""The GKE backend: the Google Cloud side (network, private services access, Managed
Lustre, the GKE cluster and its pools) and the Kubernetes objects, as one graph.

``up()`` walks the plan of the ``Cluster`` (the same nodes ``cluster.plan()`` shows)
with :class:`~rl_lustre.provision.executor.Executor`: Lustre is created alongside the
GKE cluster and its pools; existing resources with our labels are adopted; a failure
or a SIGINT / SIGTERM rolls back what this ``up()`` created. ``down()`` deletes what
carries our labels, in reverse order, from any process: it finds the resources by
name and labels, so no local state is needed.

Jobs reach the RayCluster's Jobs API through a port-forward to ``<name>-head-svc:8265``
made over the Kubernetes API (:class:`~rl_lustre.kube.portforward.PortForward`), with
credentials from the GKE cluster's endpoint and CA, found through the GKE API -- so a
fresh process with an equal ``Cluster`` spec attaches too -- or from a kubeconfig
(:meth:`GKEBackend.use_kubeconfig`). The forward opens on first use and lasts until
``down()``; every HTTP request opens its own stream, so a dropped stream costs one
request, and a replaced head pod is found again. With ``RAY_AUTH_TOKEN`` among the
cluster's secrets, Ray runs in token mode and requests carry this process's
``$RAY_AUTH_TOKEN`` as a bearer token.

The checkpoints live on Lustre, which this machine does not mount: ``checkpoints()``
runs a stdlib-only helper job on the head (``rl-lustre-ls-<id>``, deleted once read)
that lists them with the same rules as the local listing.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import DASHBOARD_PORT
from ..errors import ConfigError, KubernetesError, NotReadyError, RayError
from ..kube.head_pod import HeadWatch
from ..plankeys import LUSTRE_KEY
from ..provision.executor import Executor
from ..provision.records import Report
from ..provision.signals import cancel_on_signals
from . import submission

if TYPE_CHECKING:
    from ..gcp import Backoff, RetryPolicy
    from ..goodput.timeline import Evidence
    from ..kube.portforward import PortForward
    from ..nemo_rl.checkpoints import Checkpoint
    from ..nemo_rl.deadline import Deadline
    from ..oncluster.runview import RunView
    from ..plan import Plan
    from ..prices import Prices
    from ..provision.context import Apis, Context
    from ..provision.progress import Display
    from ..ray.jobs import JobsClient
    from ..spec import ClusterSpec
    from .goodput import TimelineCache
    from .granted import OnDemandFallback

__all__ = ["GKEBackend"]

logger = logging.getLogger("rl_lustre.backends.gke")

# Ray's dashboard and Jobs API on the head service.
_LISTING_TIMEOUT = 300.0
# How often a run's directory is read through the head (a helper job) while its head lost it.
_VIEW_EVERY = 15.0


class GKEBackend(submission.JobsBackend):
    """The live side of a GKE ``Cluster``.

    Examples:
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
        zones: finds the GPU pool's candidate zones for ``capacity_zones="region"`` (by default
            ``rl_lustre.gcp.zones.capacity_zones``, through the Compute and Lustre location APIs).
        time_scale: wall seconds per second of the capacity lanes' waits (the fakes' simulated time).
    """

    _where = "RayCluster"

    def dashboard_on_head(self) -> str | None:
        # Seen from the head pod, its dashboard listens on every address at its port.
        return f"http://127.0.0.1:{DASHBOARD_PORT}"

    def __init__(
        self,
        cluster: ClusterSpec,
        *,
        gcp_only: bool = False,
        apis: Apis | None = None,
        backoff: Backoff | None = None,
        retry: RetryPolicy | None = None,
        display: Display | None = None,
        zones: Callable[[ClusterSpec], Sequence[str]] | None = None,
        time_scale: float = 1.0,
    ) -> None:
        self.cluster = cluster
        self._zones = zones
        self._time_scale = time_scale
        self.gcp_only = gcp_only
        self._apis = apis
        self._backoff = backoff
        self._retry = retry
        self._display = display
        self.last_report: Report | None = None
        # The message of the volume the last down() kept for its results (None: none kept).
        self.last_kept: str | None = None
        self._labelled = False
        self._kubeconfig: tuple[str | None, str | None] | None = None
        self._lock = threading.Lock()
        self._forward: PortForward | None = None
        self._head_watch = HeadWatch()
        self._jobs: JobsClient | None = None
        self._timelines: TimelineCache | None = None
        # Run directories read through the head (when), and the head losses read with them.
        self._views: dict[str, tuple[float, RunView]] = {}
        self._losses: list[dict[str, Any]] = []
        # When the GPU nodes' capacity ends (flex-start: their arrival plus max_run_duration);
        # set when up() is granted such a lane, None for capacity that does not end.
        self.granted_deadline: Deadline | None = None

    def capacity_deadline(self) -> Deadline | None:
        """When the GPU nodes' capacity ends: jobs submitted now are told to save before then."""
        return self.granted_deadline

    def capacity_lifetimes(self) -> tuple[tuple[str, float], ...]:
        """The node-name prefixes of the live flex-start pools (the standby pool beside Spot, a
        flex-start lane) and their ``max_run_duration``: a rerun on their nodes is told to save
        before they go. Asks GKE only when the capacity policy lists flex-start."""
        flex = [
            float(c.max_run_duration) for c in self.cluster.capacity if c.kind == "flex-start" and c.max_run_duration
        ]
        if not flex:
            return ()
        from ..gcp.pool_provisioning import node_lifetimes

        # A queued lane's ProvisioningRequest carries its lane's max_run_duration: the shortest
        # of the policy's is a safe stand-in.
        return node_lifetimes(self.live_node_pools() or (), queued=min(flex))

    def capacity_fallback(self) -> OnDemandFallback | None:
        """The on-demand GPU pools' node-name prefixes when the capacity policy lists on-demand
        after another kind (see :mod:`rl_lustre.backends.granted`). Asks GKE only then."""
        if not any(c.kind == "on-demand" for c in self.cluster.capacity[1:]):
            return None
        from .granted import on_demand_fallback

        return on_demand_fallback(self.cluster, self.live_node_pools() or ())

    def __repr__(self) -> str:
        return f"GKEBackend({self.cluster.name!r}, gcp_only={self.gcp_only})"

    @property
    def plan(self) -> Plan:
        """The deployment's plan: the graph ``up()`` and ``down()`` walk."""
        from ..plan import build_plan

        return build_plan(self.cluster)

    def executor(self, ctx: Context | None = None) -> Executor:
        """An executor over this deployment's plan and drivers (no remote call is made).

        Args:
            ctx: the drivers' context; by default a new one (see :meth:`context`).
        """
        from ..provision.drivers import gke_drivers

        ctx = ctx or self.context()
        return Executor(ctx.plan, gke_drivers(ctx, kube=not self.gcp_only), display=self._display)

    def context(self) -> Context:
        """What the drivers of one ``up()`` or ``down()`` share (no remote call is made)."""
        from ..provision.context import Apis, Context

        apis = self._apis or Apis.from_env(backoff=self._backoff, retry=self._retry)
        ctx = Context(self.cluster, self.plan, apis, backoff=self._backoff)
        ctx.time_scale = self._time_scale
        return ctx

    def up(self, *, keep_on_failure: bool = False, check: bool = True) -> Report:
        """Create or adopt the whole deployment and wait until it is ready.

        In the main thread, SIGINT and SIGTERM stop it the same way a failure does:
        no new resource is started, waits are abandoned, and what this ``up()``
        created is deleted again before :class:`ProvisioningInterrupted` (also a
        ``KeyboardInterrupt``) is raised. A third signal abandons that clean-up.

        Examples:
            >>> report = GKEBackend(cluster).up()  # doctest: +SKIP
            >>> print(report)  # doctest: +SKIP

        Args:
            keep_on_failure: keep what this run created when it fails (``down()``
                removes it later).
            check: first ask, read-only, whether the zone and the region's quotas can
                host the deployment (:func:`rl_lustre.check.check_cluster`).

        Raises:
            CapacityError: the check found a problem; nothing was created.
            ProvisioningError: a step failed; it names the step, what was cleaned up,
                kept and left.
            ProvisioningInterrupted: SIGINT or SIGTERM arrived; likewise.
            KubernetesError: the Kubernetes layer is missing (raised before any remote call).
        """
        ctx = self.context()
        if not self.gcp_only:
            _require_kube()
            # Built once for this up(), before any remote call: this checks the RayCluster
            # against KubeRay's schema, and the drivers apply these very objects.
            ctx.manifests()
        from ..provision.capacity import zones_for

        # Where the GPU pool may go: known (and refused when it cannot be found) before anything is created.
        ctx.capacity_zones = zones_for(ctx, self._zones)  # type: ignore[arg-type]
        if check:
            from ..check import check_cluster

            check_cluster(self.cluster).raise_for_problems()
        executor = self.executor(ctx)
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
                report = executor.up(
                    keep_on_failure=keep_on_failure,
                    cancel=cancel,
                    abandon=abandon,
                    reason=reason,
                    on_no_capacity=self.cluster.on_no_capacity,
                )
            except BaseException as exc:
                self.last_report = getattr(exc, "report", None)
                raise
        self.last_report = report
        from .granted import granted_deadline

        self.granted_deadline = granted_deadline(ctx.capacity_lane, ctx.capacity_granted_at, ctx.capacity_ends_at)
        return report

    def down(
        self, keys: Sequence[str] | None = None, *, delete_preload_image: bool = False, discard_results: bool = False
    ) -> Report:
        """Delete every resource of the deployment (or only the plan nodes ``keys``) that
        carries our labels; keep the rest, and the preload disk image (shared by the
        deployments of its image) unless ``delete_preload_image`` (it stays while any node
        pool in the project still boots from it).

        The whole deployment's teardown exports first (:mod:`rl_lustre.backends.teardown_gke`):
        the runs are stopped and exported to ``results``, and the volume is deleted only
        when no run's results exist on it alone (``discard_results`` deletes it anyway); a
        kept volume's message is :attr:`last_kept`. With ``keys``, only those nodes are
        deleted, as they are.

        Works from a fresh process (resources are found by name and labels) and is
        safe to call twice. Resources the plan only uses (your network, an existing
        volume) are never touched. A first SIGINT or SIGTERM does not stop it
        half-way (it is logged); a second abandons it, reporting what is left.

        Examples:
            >>> GKEBackend(cluster).down().keys("deleted")  # doctest: +SKIP
            ['gke-cluster', 'lustre', ...]

        Raises:
            TeardownError: something could not be deleted; everything else was.
        """
        if keys is None:
            from .teardown_gke import gke_down

            try:
                report = gke_down(self, delete_preload_image=delete_preload_image, discard_results=discard_results)
            except BaseException as exc:
                self.last_report = getattr(exc, "report", None)
                raise
            self.last_report = report
            return report
        self.disconnect()
        executor = self.executor()
        abandon = threading.Event()
        stages = (
            (None, "down() keeps going so that nothing is left half-deleted; one more signal abandons it"),
            (abandon, "abandoning down(); run it again later to remove what is left"),
        )
        with cancel_on_signals(*stages):
            try:
                report = executor.down(keys, abandon=abandon, cache=delete_preload_image)
            except BaseException as exc:
                self.last_report = getattr(exc, "report", None)
                raise
        self.last_report = report
        return report

    def before_submitting(self) -> None:
        """Once the jobs passed their offline checks, the volume this deployment created is
        labelled as holding results (``rl-lustre-results=on-volume``), so that a teardown
        that finds no cluster still knows not to delete it unexported."""
        self._label_results_on_volume()

    def _label_results_on_volume(self) -> None:
        # From the spec, not the plan (a submit builds none): a volume this deployment created.
        volume = self.cluster.volume
        if self._labelled or self.gcp_only or volume is None or volume.existing:
            return
        from .. import gcp
        from ..catalog import LABEL_RESULTS
        from ..provision.results import RESULTS_ON_VOLUME, label_volume

        lustre = (
            self._apis.lustre
            if self._apis is not None
            else gcp.LustreInstances(backoff=self._backoff, retry=self._retry)
        )
        name = volume.resource_name()
        try:
            found = lustre.get_or_none(name)
            if found is not None and LABEL_RESULTS not in found.labels:
                label_volume(lustre, name, RESULTS_ON_VOLUME)
            self._labelled = True
        except Exception as exc:  # a label is a safeguard for teardowns without the cluster, not a reason to refuse
            logger.warning("could not label the volume %s as holding results: %s", name, exc)

    def results_mover(self, location: Any) -> Any:
        """What copies a directory of the volume to ``location`` (a bucket): ExportData."""
        from .teardown_gke import LustreMover

        assert self.cluster.volume is not None
        ctx = self.context()
        node = ctx.plan.get(LUSTRE_KEY) if LUSTRE_KEY in ctx.plan else None
        throughput = node.settings.get("aggregate_throughput_mbps") if node is not None else None
        return LustreMover(
            ctx.apis.lustre, self.cluster.volume.resource_name(), self.cluster.mount_path, location, throughput
        )

    def use_kubeconfig(self, path: str | os.PathLike[str] | None = None, context: str | None = None) -> None:
        """Reach the RayCluster through a kubeconfig context instead of the GKE API.

        For a cluster that already runs the RayCluster (named like the ``Cluster``, in its
        namespace), or when this machine reaches the control plane only through a
        kubeconfig (a DNS endpoint, a proxy). It changes how jobs are submitted, attached and
        listed; ``up()`` and ``down()`` still work through the Google Cloud APIs.

        Examples:
            >>> backend.use_kubeconfig("~/.kube/config", context="gke_my-project_us-east1_demo")  # doctest: +SKIP

        Raises:
            ConfigError: the kubeconfig is missing or unreadable, or lacks ``context``.
        """
        from ..kube.client import kube_api_client_from_kubeconfig

        # Read now, so that a wrong path or context fails here rather than at submit().
        kube_api_client_from_kubeconfig(path, context)
        self.disconnect()
        self._kubeconfig = (None if path is None else os.fspath(path), context)

    @property
    def jobs(self) -> JobsClient:
        """The RayCluster's Jobs API, through a port-forward opened on first use.

        Raises:
            NotReadyError: the GKE cluster does not exist or is not running.
            KubernetesError: the head service has no ready pod.
            ConfigError: the cluster uses Ray token auth and ``$RAY_AUTH_TOKEN`` is unset.
        """
        with self._lock:
            if self._jobs is None:
                self._jobs = self._connect()
            return self._jobs

    def disconnect(self) -> None:
        """Close the port-forward to the dashboard (the next use opens a new one)."""
        with self._lock:
            forward, self._forward, self._jobs = self._forward, None, None
        if forward is not None:
            forward.close()

    def list_checkpoints(self, checkpoint_dir: str) -> list[Checkpoint]:
        """The checkpoints in ``checkpoint_dir`` on the volume, read on the Ray head.

        Runs :func:`~rl_lustre.nemo_rl.checkpoints.listing_command` as a helper job named
        ``rl-lustre-ls-<id>``, which holds no secret and is deleted once read.

        Examples:
            >>> [c.step for c in backend.list_checkpoints("/lustre/checkpoints/run-1")]  # doctest: +SKIP
            [4, 6]

        Raises:
            RayError: the helper job failed or printed no listing.
        """
        from ..nemo_rl.checkpoints import listing_command, parse_listing

        helper = f"rl-lustre-ls-{uuid.uuid4().hex[:12]}"
        metadata = {"rl_lustre.cluster": self.cluster.name, "rl_lustre.helper": "list-checkpoints"}
        info, log = self.jobs.run(
            listing_command(checkpoint_dir), submission_id=helper, metadata=metadata, timeout=_LISTING_TIMEOUT
        )
        if info.status != "SUCCEEDED":
            tail = "\n".join(f"  | {line}" for line in log.splitlines()[-10:])
            raise RayError(
                f"listing the checkpoints in {checkpoint_dir} on the Ray head failed ({info.status}):\n{tail}"
            )
        try:
            return parse_listing(log)
        except ValueError as exc:
            raise RayError(f"listing the checkpoints in {checkpoint_dir} on the Ray head: {exc}") from exc

    def run_view(self, run_dir: str) -> RunView | None:
        """The run's directory: read here where this process sees the volume, else through a
        helper job on the head (``rl-lustre-runview-<id>``, at most every 15 s per run), which
        also brings the cluster's head losses; None when neither can be had."""
        import time

        from ..errors import RLLustreError
        from ..oncluster.runview import RunView

        if self.volume_here():
            return super().run_view(run_dir)
        cached = self._views.get(run_dir)
        if cached is not None and time.monotonic() - cached[0] < _VIEW_EVERY:
            return cached[1]
        try:
            data = self._remote_view(run_dir)
        except RLLustreError as exc:
            logger.debug("cannot read the run directory %s through the head: %s", run_dir, exc)
            return None
        view = RunView(run_dir, data=data["view"])
        self._views[run_dir] = (time.monotonic(), view)
        self._losses = list(data.get("losses") or [])
        return view

    def head_losses(self) -> list[dict[str, Any]]:
        return super().head_losses() if self.volume_here() else list(self._losses)

    def head_replaced(self) -> bool | None:
        """From the head pod the port-forward goes to (:mod:`rl_lustre.kube.head_pod`), where
        reading the volume takes a helper job on the head."""
        if self.volume_here() or self._forward is None:
            return None
        return self._head_watch.replaced(self._forward, self.cluster.namespace, naming.raycluster_name(self.cluster))

    def _remote_view(self, run_dir: str) -> dict[str, Any]:
        import json
        import shlex

        from ..oncluster.runview import ANSWER
        from ..recovery import PACKAGE, shipped_package

        c = self.cluster
        command = (
            f"python -m {PACKAGE}.runview {shlex.quote(run_dir)} --mount {shlex.quote(c.mount_path)} "
            f"--cluster {shlex.quote(c.name)}"
        )
        helper = f"rl-lustre-runview-{uuid.uuid4().hex[:12]}"
        metadata = {"rl_lustre.cluster": c.name, "rl_lustre.helper": "run-view"}
        info, log = self.jobs.run(
            command,
            submission_id=helper,
            metadata=metadata,
            timeout=_LISTING_TIMEOUT,
            runtime_env={"py_modules": [shipped_package()]},
        )
        found = [line[len(ANSWER) :] for line in log.splitlines() if line.startswith(ANSWER)]
        if info.status != "SUCCEEDED" or not found:
            raise RayError(f"reading the run directory {run_dir} on the Ray head failed ({info.status})")
        data: dict[str, Any] = json.loads(found[-1])
        return data

    def goodput_evidence(self, since: float, until: float | None, *, prices: Prices | None = None) -> Evidence:
        """The goodput ledger's evidence: the GPU Nodes, worker Pods and Events, Ray's node
        table, the live node pools and the jobs' logs (see :mod:`rl_lustre.backends.goodput_gke`)."""
        from .goodput import TimelineCache
        from .goodput_gke import gke_evidence

        if self._timelines is None:
            self._timelines = TimelineCache()
        return gke_evidence(self, since, until, prices=prices, cache=self._timelines)

    def live_node_pools(self) -> list[Any] | None:
        """The GKE cluster's node pools as they are now (None when the cluster is gone)."""
        from ..gcp import GkeClusters

        clusters = (
            self._apis.clusters if self._apis is not None else GkeClusters(backoff=self._backoff, retry=self._retry)
        )
        found = clusters.get_or_none(naming.gke_cluster_path(self.cluster))
        return None if found is None else list(found.node_pools)

    def describe(self) -> str:
        c = self.cluster
        return (
            f"GKE deployment {c.name!r} (project {c.project}, zone {c.zone}: {c.num_nodes} x {c.machine_type}, "
            f"Lustre {c.volume.name if c.volume else '-'})"
        )

    def cleanup_hint(self) -> str:
        c = self.cluster
        return (
            f"The GKE deployment {c.name!r} keeps running in project {c.project}. From any process, "
            f"the same Cluster(name={c.name!r}, project={c.project!r}, region={c.region!r}, zone={c.zone!r}, ...)"
            ".down() deletes what rl_lustre created: resources labelled managed-by=rl-lustre, "
            f"rl-lustre-deployment={c.name}." + self._kept_hint()
        )

    def _kept_hint(self) -> str:
        """What ``down()`` keeps for the next deployment, and how to delete it."""
        from ..plankeys import PRELOAD_IMAGE_KEY

        if PRELOAD_IMAGE_KEY not in self.plan or self.plan.get(PRELOAD_IMAGE_KEY).action != "cache":
            return ""
        family = self.plan.get(PRELOAD_IMAGE_KEY).name
        return (
            f" down() keeps the preload disk image ({family}-..., reused by the next deployment of this "
            "image); down(delete_preload_image=True) or `rl-lustre gc --preload-images --yes` deletes it."
        )

    def _connect(self) -> JobsClient:
        from ..kube.portforward import PortForward
        from ..ray.jobs import JobsClient

        if self.gcp_only:
            raise NotReadyError(f"{self!r} leaves the Kubernetes part out (gcp_only=True): it has no RayCluster")
        headers = _ray_headers(self.cluster)
        forward = PortForward(
            self._kube_api(), self.cluster.head_service, namespace=self.cluster.namespace, remote_port=DASHBOARD_PORT
        ).start()
        self._forward = forward
        return JobsClient(forward.url, headers=headers)

    def _kube_api(self) -> Any:
        """A Kubernetes ``ApiClient``: from the kubeconfig, or from the running GKE cluster."""
        from ..kube.client import gke_api_client, kube_api_client_from_kubeconfig

        if self._kubeconfig is not None:
            return kube_api_client_from_kubeconfig(*self._kubeconfig)
        from ..gcp import GkeClusters

        # From the spec's names: finding the cluster needs no plan.
        path = naming.gke_cluster_path(self.cluster)
        clusters = (
            self._apis.clusters if self._apis is not None else GkeClusters(backoff=self._backoff, retry=self._retry)
        )
        found = clusters.get_or_none(path)
        if found is None:
            raise NotReadyError(f"the GKE cluster {path} does not exist: call cluster.up() or use `with cluster:`")
        status = type(found).Status(found.status).name
        if status != "RUNNING" or not found.endpoint:
            raise NotReadyError(f"the GKE cluster {path} is {status}, not RUNNING: its Kubernetes API is not reachable")
        return gke_api_client(found)


def _ray_headers(cluster: ClusterSpec) -> dict[str, str]:
    """The Jobs API headers: Ray's bearer token when the cluster runs Ray in token mode."""
    from ..kube.raycluster import RAY_AUTH_TOKEN

    if RAY_AUTH_TOKEN not in cluster.secrets:
        return {}
    token = os.environ.get(RAY_AUTH_TOKEN, "").strip()
    if not token:
        raise ConfigError(
            "Cluster", "secrets", RAY_AUTH_TOKEN,
            f"turns Ray token auth on, so ${RAY_AUTH_TOKEN} must hold the cluster's token in this process "
            "to reach its dashboard (the same value up() put into the Kubernetes Secret)",
        )  # fmt: skip
    return {"Authorization": f"Bearer {token}"}


def _require_kube() -> None:
    try:
        from ..kube import apply  # noqa: F401
    except ImportError as exc:
        raise KubernetesError(
            f"the Kubernetes layer (rl_lustre.kube.apply) cannot be imported ({exc}); up() would create the "
            "Google Cloud resources and then fail, so it starts nothing"
        ) from exc
