"""``Cluster``: a GKE (or local) deployment that runs NeMo-RL jobs on KubeRay.

The fields, their rules and the values derived from them are
:class:`~rl_lustre.spec.ClusterSpec`'s; this module adds the lifecycle: ``plan``,
``up``, ``down``, ``submit``, ``attach``, ``check`` and ``metrics``, through a backend
(:mod:`rl_lustre.backends`).
"""

from __future__ import annotations

import atexit
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from . import _validate as v
from ._public import public
from .errors import ConfigError
from .spec.cluster import (
    CLUSTER_NAME_RULE,
    DEFAULT_SECRETS,
    HF_REPO_ID_RULE,
    MAINTENANCE_EXCLUSIONS,
    ClusterSpec,
)
from .spec.cluster_storage import default_volume_size
from .volume import LustreVolume

if TYPE_CHECKING:
    from types import TracebackType

    from .backends import Backend
    from .check import CheckReport
    from .gcp.monitoring import Monitoring
    from .goodput import GoodputLedger
    from .goodput.when import Instant
    from .job import GRPOJob
    from .metrics import ClusterMetrics, When
    from .plan import Plan
    from .prices import Prices
    from .queueing.state import QueueState
    from .run import Run

__all__ = [
    "CLUSTER_NAME_RULE",
    "DEFAULT_SECRETS",
    "HF_REPO_ID_RULE",
    "MAINTENANCE_EXCLUSIONS",
    "Cluster",
    "default_volume",
]

logger = logging.getLogger("rl_lustre.cluster")


def default_volume(name: str) -> LustreVolume:
    """The volume a ``Cluster`` gets when given none: what :func:`~rl_lustre.size_lustre`
    picks for the default job (``GRPOJob()``'s model and ``keep_top_k``, a checkpoint
    written in 300 s).

    Examples:
        >>> v = default_volume("rl-demo-lustre")
        >>> v.capacity_gib, v.throughput_mbps_per_tib
        (9000, 1000)
    """
    capacity, tier = default_volume_size()
    return LustreVolume(name=name, capacity_gib=capacity, throughput_mbps_per_tib=tier)


@attrs.define
class _ClusterState:
    """Live state of a deployment (backend handle); not part of the spec's identity."""

    backend: Any = None
    # up() ran through this backend and down() has not (use_backend may not swap it then).
    started: bool = False


@public("rl_lustre")
@v.keyword_errors
@attrs.frozen(kw_only=True)
class Cluster(ClusterSpec):
    """A GKE cluster with a Spot GPU pool, Managed Lustre and a KubeRay RayCluster.

    Defaults reproduce the reference workflow: 8 Spot ``a4-highgpu-8g`` nodes with
    8 ``nvidia-b200`` each, image ``nvcr.io/nvidia/nemo-rl:v0.4.0``, Lustre at ``/lustre``.
    Unlike it, the Ray head runs on a small on-demand CPU pool so that a Spot
    preemption cannot kill the job driver.

    A field left out that follows from others (``accelerator_type``, ``gpus_per_node``,
    ``fabric``, ``ray_version``, ``mount_path``, ``volume``) is derived from them, and
    derived again by ``attrs.evolve`` from the new values; a value you set stays.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="ray-a4-gpu-spot", project="my-project",
        ...             region="us-east1", zone="us-east1-b")
        >>> c.num_nodes, c.gpus_per_node, c.accelerator_type, c.volume.name
        (8, 8, 'nvidia-b200', 'ray-a4-gpu-spot-lustre')

    Args:
        name: the deployment name; also the GKE cluster and RayCluster name.
        project: the Google Cloud project id.
        region: the region (``us-east1``).
        zone: the zone of the node pools and the Lustre instance (``us-east1-b``).
        volume: the Lustre volume; by default ``<name>-lustre`` sized by :func:`~rl_lustre.size_lustre`
            for the default job (9,000 GiB at 1000 MB/s/TiB for Qwen2.5-72B); pass one sized for
            your jobs (``size_lustre(model).volume(name)``) when they differ.
        machine_type: GPU node machine type.
        accelerator_type: GPU type; derived from ``machine_type`` when omitted.
        gpus_per_node: GPUs per node; derived from ``machine_type`` when omitted.
        num_nodes: GPU nodes, one Ray worker each.
        spot: use Spot VMs for the GPU pool (the default when ``capacity`` is not given;
            ``spot=False`` is on-demand). With ``capacity`` given, ``spot`` says whether its
            first kind is Spot, and may be left out.
        reservation: a reservation to consume: its name, ``"<name>/reservationBlocks/<block>"``,
            or one shared from another project, ``"projects/<project>/reservations/<name>"``
            (not with ``spot`` unless ``capacity`` lists both).
        capacity: the capacity to try, in order: ``"reservation"`` (the ``reservation``
            field's), ``"spot"``, ``"flex-start"`` (Dynamic Workload Scheduler, queued: all
            nodes at once, for at most 7 days) and ``"on-demand"`` (list price; only when
            listed), or :class:`rl_lustre.Capacity` values for their options
            (``Capacity("flex-start", queued=False, max_run_duration=86400)``,
            ``Capacity("reservation", reservation="projects/p/reservations/r")``, ``wait=``).
            ``up()`` moves on to the next when one is stocked out or does not deliver its
            nodes within its ``wait`` (see docs/getting-gpus.md). Default: what ``spot`` /
            ``reservation`` say.
        capacity_zones: where the GPU pool may go: ``"zone"`` (the default: ``zone``
            only), ``"region"`` (every zone of the region that offers the machine type and
            Managed Lustre, found at ``up()``), or a list of zones of the region starting
            with ``zone``. Each capacity kind is tried in every zone before the next kind.
            The volume stays in ``zone``; a GPU pool elsewhere reaches it across zones.
        on_no_capacity: what ``up()`` keeps when no capacity came: ``"storage"`` (the
            default: the Lustre instance and its network, so the next ``up()`` skips the
            longest step) or ``"nothing"`` (everything it created is deleted).
        head_machine_type: on-demand CPU machine type for the Ray head.
        head_on_gpu_pool: put the head on the GPU pool, as the reference workflow does
            (a Spot preemption then kills the driver).
        image: the container image of head and workers.
        ray_version: the Ray inside ``image``; derived for known images.
        mount_path: where Lustre is mounted in the pods; ``/lustre`` by default (locally: the
            volume directory, see :meth:`local`).
        namespace: the Kubernetes namespace.
        network: an existing VPC network to use as-is; by default ``<name>-net`` is created.
        authorized_networks: CIDR blocks allowed to reach the control plane.
        public_control_plane: must be True to allow ``0.0.0.0/0``.
        node_service_account: the service account every node pool runs as (an e-mail, checked
            offline), with the ``cloud-platform`` scope narrowed by its IAM roles; give it the
            minimal node role ``roles/container.defaultNodeServiceAccount`` (and
            ``roles/artifactregistry.reader`` for private images), as the A4 blueprint and GKE's
            hardening guide do. rl_lustre never creates, changes or deletes it. By default
            ``up()`` creates one for the deployment (plan node ``node-sa``,
            ``rl-<name>-nodes@PROJECT.iam.gserviceaccount.com``) with that role on the project
            (and the registry reader role when ``image`` is in Artifact Registry), and
            ``down()`` takes the roles back and deletes it; that needs
            ``roles/iam.serviceAccountAdmin`` and ``roles/resourcemanager.projectIamAdmin``.
        secrets: names of environment variables copied into a Kubernetes Secret and
            exposed to the pods (never to the job's runtime env).
        fabric: ``"rdma"``: the GPUs talk over GPUDirect-RDMA (a gVNIC VPC and a RoCE VPC
            with one subnet per GPU NIC, multi-networking, the gIB NCCL plugin), as the
            Cluster Toolkit A4 blueprint builds it; ``"tcp"``: one gVNIC, as the reference
            workflow. Defaults to ``"rdma"`` on machine types with RDMA NICs
            (``a4-highgpu-8g``, ``a3-ultragpu-8g``), ``"tcp"`` otherwise.
        maintenance_exclusion: the scope of the GKE maintenance exclusion set at creation,
            from then until the cluster version's end of support: ``"NO_MINOR_OR_NODE_UPGRADES"``
            (default: GKE never upgrades, so never recreates, the nodes under a run;
            control-plane patches still apply), ``"NO_MINOR_UPGRADES"`` (node patch
            upgrades allowed), or None (GKE's normal auto-upgrades).
        labels: extra labels for every resource.
        prefetch_models: Hugging Face model ids that ``up()`` downloads into the volume's
            Hugging Face cache (a Kubernetes Job on the CPU pool, while the RayCluster
            starts), so that jobs on them start without a download; a model already in
            the cache is not fetched again. ``()`` turns the prefetch off.
        prepull_image: pull ``image`` onto every GPU node as soon as the GPU pool exists
            (a DaemonSet, removed once the RayCluster's workers run), while Lustre is
            still being created. With a preload image only the Ray head's CPU node
            pre-pulls (the GPU nodes boot with the image).
        preload_image: ``True`` (default): the GPU nodes boot with ``image`` already on
            a secondary boot disk (GKE's ``CONTAINER_IMAGE_CACHE``), made from a disk
            image that ``up()`` finds by the image's digest or builds once on a temporary
            VM (~16 minutes, once per image and project); ``down()`` keeps it for the
            next deployment. ``False``: no preload; the image is pulled on each node
            (pre-pulled, with ``prepull_image``). A string
            ``"projects/P/global/images/NAME"`` (or ``"global/images/NAME"``): your own
            disk image, used as it is, never built or deleted.
        warm_start: ``"gs://BUCKET/PREFIX"`` (your bucket, in the cluster's region; never
            created or deleted by rl_lustre): after the model prefetch, ``up()`` exports
            the Hugging Face cache from Lustre to it (``ExportData``), and ``down()`` the
            converted checkpoints and compile caches too; the next deployment imports them
            (``ImportData``) instead of downloading and converting again. Credentials
            (huggingface_hub's ``token``, anything under a secrets directory) are never
            kept; ``PREFIX/rl-lustre-manifest.json`` lists every object with its size.
            None (default): no warm start. Needs a volume this deployment creates.
        results: where runs' results go before ``down()`` deletes the volume: ``"gs://BUCKET/PREFIX"``
            (locally a directory), not inside ``warm_start``'s; each run under ``<run id>/``, read back by
            :meth:`Run.from_results <rl_lustre.Run.from_results>`. None: ``down()`` keeps a volume holding results.
        keep: leave everything running at the end of a ``with`` block.
    """

    _volume_class: ClassVar[type[LustreVolume]] = LustreVolume
    _live: _ClusterState = attrs.field(factory=_ClusterState, init=False, repr=False, eq=False, hash=False)

    def plan(self) -> Plan:
        """Every resource :meth:`up` would create, with its settings and dependencies.

        Makes no remote call.

        Examples:
            >>> from rl_lustre import Cluster
            >>> plan = Cluster(name="demo", project="my-project", region="us-east1",
            ...                zone="us-east1-b").plan()
            >>> [r.key for r in plan.resources][:3]
            ['network', 'subnet', 'psa-range']
        """
        from .plan import build_plan

        return build_plan(self)

    def manifests(self) -> list[dict[str, Any]]:
        """Every Kubernetes object ``up()`` applies, as plain dicts, in apply order.

        With ``fabric="rdma"``, first a GKENetworkParamSet and a Network per extra node
        network and the gIB NCCL installer DaemonSet; then the image pre-pull DaemonSet
        (``prepull_image``), the PersistentVolume, PersistentVolumeClaim, Secret (values
        redacted), the Ray head's ServiceAccount, Role, RoleBinding, ClusterRole and binding (it
        reads its pods' events, gets Nodes), the model prefetch Job, the ``ray.io/v1`` RayCluster,
        and last the keeper's ServiceAccount, Role, RoleBinding, ConfigMap and Deployment
        (docs/head-loss.md). Before the volume exists its IP is a placeholder.

        Examples:
            >>> from attrs import evolve
            >>> from rl_lustre import Cluster
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> [m["kind"] for m in c.manifests()][-12:-5]
            ['ServiceAccount', 'Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding', 'Job', 'RayCluster']
            >>> [m["kind"] for m in evolve(c, fabric="tcp", prepull_image=False, prefetch_models=()).manifests()][:10]
            ... # doctest: +NORMALIZE_WHITESPACE
            ['ComputeClass', 'PersistentVolume', 'PersistentVolumeClaim', 'Secret', 'ServiceAccount', 'Role',
             'RoleBinding', 'ClusterRole', 'ClusterRoleBinding', 'RayCluster']
        """
        from .kube.manifests import deployment_manifests

        return deployment_manifests(self)

    def up(self, *, keep_on_failure: bool = False, check: bool = True) -> Cluster:
        """Create the deployment (or adopt the one already running) and wait until it takes jobs.

        Idempotent. Locally: the volume directory and a Ray head on 127.0.0.1. On GKE it
        first runs :meth:`check` (read-only) and creates nothing when the zone does not
        offer what the cluster asks for or the region's GPU quota falls short; then, if
        a step fails (or the process gets SIGINT/SIGTERM), everything this call created is
        deleted again unless ``keep_on_failure``.

        A GKE deployment brought up this way stays up until :meth:`down` — also after
        this process ends, so that another process can ``attach`` to its jobs; use
        ``with cluster:`` for one that tears itself down. A local head is a child of
        this machine's session: unless ``keep``, it is stopped when the interpreter exits.

        Examples:
            >>> cluster = Cluster.local("demo").up()  # doctest: +SKIP
            >>> cluster.down()  # doctest: +SKIP

        Args:
            keep_on_failure: leave what was created in place when ``up()`` fails, to debug it.
            check: run :meth:`check` first (GKE); ``False`` skips it.

        Returns:
            The cluster itself, for chaining.

        Raises:
            CapacityError: the check found a problem; nothing was created.
            RollbackError: provisioning failed; says what failed and what was cleaned up.
        """
        v.need("Cluster.up", "keep_on_failure", keep_on_failure, bool, "True or False")
        v.need("Cluster.up", "check", check, bool, "True or False")
        self._up(keep_on_failure=keep_on_failure, check=check)
        if self.backend != "local":
            logger.info("cluster %r is up and stays up until down(). %s", self.name, self._backend().cleanup_hint())
        return self

    def _up(self, *, keep_on_failure: bool = False, check: bool = True) -> None:
        self._live.started = True
        self._backend().up(keep_on_failure=keep_on_failure, check=check)
        if self.backend == "local" and not self.keep:
            atexit.register(self._down_at_exit)

    def check(self) -> CheckReport:
        """Ask Google Cloud, read-only, whether this deployment can be created where it asks.

        Confirms that the zone offers the GPU machine type, its GPU type and the head's
        machine type, that Managed Lustre runs in the zone, and that the region's GPU quota
        (Spot: ``PREEMPTIBLE_<GPU>_GPUS``, else ``<GPU>_GPUS``) covers every node; each
        problem names its fix (the quota to raise, zones that work). ``up()`` runs it first.
        Also on the command line: ``rl-lustre check path/to/script.py:cluster``.

        Examples:
            >>> report = Cluster(name="demo", project="my-project", region="us-east1",
            ...                  zone="us-east1-b").check()  # doctest: +SKIP
            >>> print(report)  # doctest: +SKIP
            check of 'demo': ok
            ok       zone us-east1-b offers machine type a4-highgpu-8g
            ...

        Returns:
            A :class:`~rl_lustre.CheckReport` (``report.ok``, ``report.problems``).

        Raises:
            GCPError: a question could not be asked (credentials, permissions).
        """
        from .check import check_cluster

        return check_cluster(self)

    def down(self, *, delete_preload_image: bool = False, discard_results: bool = False) -> None:
        """Tear down what :meth:`up` created, results first; what you own is never deleted.

        The keeper stops, then the runs (stopped by teardown); their results are exported to :attr:`results`
        and verified before the Lustre instance ``up()`` created is deleted. Without ``results``, or when the
        export fails, the volume is **kept** while all else goes (:class:`~rl_lustre.errors.ResultsKeptWarning`,
        docs/operations.md). A local volume directory and the preload image stay.

        Examples:
            >>> cluster.down(discard_results=True)  # doctest: +SKIP

        Args:
            delete_preload_image: delete the preload image too, unless a node pool still boots from it.
            discard_results: delete the volume though its runs' results were not exported.
        """
        from ._validate import need

        need("Cluster.down", "delete_preload_image", delete_preload_image, bool, "True or False")
        need("Cluster.down", "discard_results", discard_results, bool, "True or False")
        atexit.unregister(self._down_at_exit)
        self._backend().down(delete_preload_image=delete_preload_image, discard_results=discard_results)
        self._live.started = False

    def __enter__(self) -> Cluster:
        self._up()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        from . import _output

        if exc_type is None or (isinstance(exc, SystemExit) and not exc.code):
            why = "finished"
        elif issubclass(exc_type, KeyboardInterrupt):
            why = "was interrupted"
        else:
            why = f"raised {exc_type.__name__}"
        backend = self._backend()
        if self.keep:
            message = (
                f"cluster {self.name!r}: the with block {why}; keep=True leaves it running. {backend.cleanup_hint()}"
            )
            logger.warning("%s", message)
            _output.echo(message, style="yellow")
            return
        message = f"cluster {self.name!r}: the with block {why}; tearing down the {backend.describe()}"
        logger.info("%s", message)
        _output.echo(message)
        self.down()

    def submit(self, job: GRPOJob, *, fresh: bool = False) -> Run:
        """Submit ``job``; returns its run handle. The cluster must be up.

        Checks the job offline first (see :meth:`GRPOJob.preflight`). Submitting a job
        that is still running attaches to it rather than starting a second copy;
        submitting it again after it ended starts a new attempt, which NeMo-RL resumes
        from the newest checkpoint. When that checkpoint already reaches
        ``max_num_steps`` the run has nothing left to do and ends SUCCEEDED at once:
        that is reported with a :class:`~rl_lustre.errors.NothingToDoWarning` (at submit
        where the volume is readable from here, as on the local backend; otherwise when
        :meth:`Run.wait` sees the run end without a step) and in the run's ``repr``.

        Examples:
            >>> with Cluster.local("demo") as cluster:  # doctest: +SKIP
            ...     run = cluster.submit(GRPOJob(name="tiny", recipe="grpo_math_1B", max_num_steps=4))
            ...     run.wait()
            ...     again = cluster.submit(GRPOJob(name="tiny", recipe="grpo_math_1B", max_num_steps=4),
            ...                            fresh=True)   # trains from step 0 again

        Args:
            job: the job.
            fresh: start over: the job's command first moves its checkpoint directory
                aside (``<dir>.before-fresh-<UTC time>``; nothing is deleted), so NeMo-RL
                does not resume.

        Raises:
            ConfigError: the job is invalid for this cluster or would carry a secret.
            NotReadyError: the cluster is not up.
            RayError: the Jobs API refused the job.
        """
        from .job import GRPOJob

        v.need("Cluster.submit", "job", job, GRPOJob, "a GRPOJob")
        return self._backend().submit(job, fresh=fresh)

    def attach(self, job_id: str) -> Run:
        """The run handle of a job already submitted to this cluster, by its id.

        Works from another process too, while the deployment runs.

        Examples:
            >>> run = Cluster.local("demo").attach("rl-lustre-tiny-0f3a9c1e")  # doctest: +SKIP
            >>> run.status()  # doctest: +SKIP
            'RUNNING'

        Raises:
            NotReadyError: the cluster is not up.
            RayError: the cluster has no such job.
        """
        v.need("Cluster.attach", "job_id", job_id, str, "a Ray submission id (str)")
        if not job_id or v.control_char(job_id) is not None:
            raise ConfigError("Cluster.attach", "job_id", job_id, "must be a non-empty id without control characters")
        return self._backend().attach(job_id)

    def queue(self) -> list[tuple[Run, QueueState]]:
        """The cluster's queue: every job rl_lustre submitted that has not ended, with its state.

        Jobs holding their nodes come first, then the queued ones by place. Read from the
        jobs' logs on the cluster, so any process sees the same queue, whichever submitted
        the jobs. See docs/sweeps.md.

        Examples:
            >>> for run, state in cluster.queue():  # doctest: +SKIP
            ...     print(run.job_id, state)
            rl-lustre-lr-1-0f3a9c1e holds 4 of 8 nodes
            rl-lustre-lr-2-77be01d2 1st of 1, waiting for 8 nodes: 4 of the cluster's 8 are free (4 held by 1 job)

        Raises:
            NotReadyError: the cluster is not up.
        """
        return self._backend().queue()

    def goodput(
        self, since: Instant | None = None, until: Instant | None = None, *, prices: Prices | None = None
    ) -> GoodputLedger:
        """Where the cluster's GPU-node-seconds went over a window: every run's ledger
        (``.runs``) and the cluster's own time, no run's (``.own``), in seconds and USD.

        Examples:
            >>> ledger = cluster.goodput(since="2h")  # doctest: +SKIP
            >>> runs = [(r.name, f"{r.goodput_fraction:.0%}") for r in ledger.runs]  # doctest: +SKIP
            >>> runs, ledger.own.seconds["idle"]  # doctest: +SKIP

        Args:
            since: seconds since the epoch, an aware datetime, a timedelta before now, or text
                (``"2025-12-01T10:00Z"``, ``"30m"``); None: from the first billed second known.
            until: the same; None: now.
            prices: your prices; by default the dated list prices.

        Raises:
            ConfigError: a bad ``since`` or ``until`` (before any remote call).
            NotReadyError: the cluster is not up.
        """
        import time

        from .goodput.when import window

        lo, hi = window("Cluster.goodput", since, until, now=time.time())
        return self._backend().cluster_goodput(lo, hi, prices=prices)

    def metrics(
        self,
        start: When | None = None,
        end: When | None = None,
        *,
        step: int = 60,
        monitoring: Monitoring | None = None,
    ) -> ClusterMetrics:
        """GPU utilisation of the deployment's pods and its Lustre throughput, from Cloud Monitoring.

        Example::

            m = cluster.metrics()                # the last hour, one point a minute
            m.gpu_utilization.mean(), m.volume.write_mbps.max()

        ``start``, ``end``, ``step`` and ``monitoring`` are as for
        :meth:`LustreVolume.metrics <rl_lustre.LustreVolume.metrics>` (default: the last hour).

        Raises:
            ConfigError: a local cluster, or a bad window or step.
            GCPError: Cloud Monitoring refused (e.g. no ``roles/monitoring.viewer``).
        """
        from .metrics import cluster_metrics

        return cluster_metrics(self, start=start, end=end, step=step, monitoring=monitoring)

    def use_kubeconfig(self, path: str | Path | None = None, context: str | None = None) -> Cluster:
        """Reach the RayCluster through a kubeconfig context instead of through the GKE API.

        For a RayCluster named like this cluster (in its namespace) that runs somewhere
        you already have credentials for, or a control plane reached only through a
        kubeconfig. ``submit``, ``attach`` and the run handles then go through it;
        ``up()`` and ``down()`` still work through the Google Cloud APIs.

        Examples:
            >>> cluster = Cluster(name="demo", project="my-project", region="us-east1",
            ...                   zone="us-east1-b")
            >>> cluster = cluster.use_kubeconfig("~/.kube/config", "gke_my-project_us-east1_demo")  # doctest: +SKIP
            >>> run = cluster.submit(job)  # doctest: +SKIP

        Args:
            path: the kubeconfig; by default ``$KUBECONFIG`` or ``~/.kube/config``.
            context: the context; by default the file's current context.

        Returns:
            The cluster itself, for chaining.

        Raises:
            ConfigError: a local cluster, or a kubeconfig that is missing, unreadable or
                lacks ``context`` (checked now; nothing is requested).
        """
        v.need(
            "Cluster.use_kubeconfig", "path", path, (str, os.PathLike), "a kubeconfig path (str or Path)", optional=True
        )
        v.need("Cluster.use_kubeconfig", "context", context, str, "a context name (str)", optional=True)
        for param, value in (("path", path), ("context", context)):
            if value is not None:
                v.no_control("Cluster.use_kubeconfig", param, os.fspath(value))
        if self.backend != "gke":
            v.fail(self, "backend", self.backend, "only a GKE cluster is reached through a kubeconfig")
        self._backend().use_kubeconfig(path, context)  # type: ignore[attr-defined]
        return self

    def use_backend(self, backend: Backend) -> Cluster:
        """Run this deployment's lifecycle (``up``, ``down``, ``submit``, ``attach``) through ``backend``.

        The injection point for tests and for deployments of your own: by default the
        backend is built from ``backend=`` (``"gke"`` or ``"local"``) on first use; here
        you hand one over, such as a :class:`~rl_lustre.backends.gke.GKEBackend` with
        its own polling delays or adapters, or any object with the methods of
        :class:`rl_lustre.backends.Backend`. It belongs to this object: a copy made
        with ``attrs.evolve`` builds its own.

        Examples:
            >>> from rl_lustre.backends.gke import GKEBackend
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> c.use_backend(GKEBackend(c, gcp_only=True)) is c
            True

        Args:
            backend: the backend, built for this cluster (or an equal one).

        Returns:
            The cluster itself, for chaining.

        Raises:
            ConfigError: ``backend`` lacks a method of the backend protocol, was built for
                another cluster, or this cluster is already up through another backend.
        """
        from .backends.base import missing_methods

        missing = missing_methods(backend)
        if missing:
            raise ConfigError(
                "Cluster.use_backend",
                "backend",
                backend,
                f"must be a backend (rl_lustre.backends.Backend); it lacks {', '.join(missing)}",
            )
        theirs = getattr(backend, "cluster", self)
        if theirs != self:
            raise ConfigError(
                "Cluster.use_backend",
                "backend",
                backend,
                f"was built for another cluster ({getattr(theirs, 'name', theirs)!r}); build it for this one",
            )
        if self._live.started and backend is not self._live.backend:
            raise ConfigError(
                "Cluster.use_backend",
                "backend",
                backend,
                f"cannot replace the backend of {self.name!r} while it is up; call down() first",
            )
        self._live.backend = backend
        return self

    def _backend(self) -> Backend:
        if self._live.backend is None:
            from .backends import backend_for

            self._live.backend = backend_for(self)
        backend: Backend = self._live.backend
        return backend

    def _down_at_exit(self) -> None:
        logger.info("cluster %r is still up at interpreter exit; tearing it down", self.name)
        self._backend().down()


# The field is ClusterSpec's; the signature (and so the reference docs) names the volume
# class a Cluster takes.
Cluster.__init__.__annotations__["volume"] = "LustreVolume | None"
