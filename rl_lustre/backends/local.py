"""The local backend: a real Ray head on this machine and a directory as the volume.

``up()`` creates the volume directory and starts (or adopts) the head; ``down()``
stops the head and keeps the directory, which holds the user's checkpoints. The
head's temp dir is derived from the cluster's name and volume, so a later process
finds a head that ``keep=True`` left running, and ``up()`` adopts it.

Secrets reach jobs through the head's environment: of the variables that look like
secrets, by name (see :func:`rl_lustre._secrets.looks_secret`) or by the shape of their
value, the head inherits only those named in ``cluster.secrets``. They never enter a job's runtime env or metadata.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import NotReadyError
from . import submission

if TYPE_CHECKING:
    from ..goodput.timeline import Evidence
    from ..nemo_rl.checkpoints import Checkpoint
    from ..prices import Prices
    from ..ray.head import LocalHead
    from ..ray.jobs import JobsClient
    from ..ray.keeper import LocalKeeper
    from ..ray.nodes import AuthMode
    from ..ray.workers import LocalWorker
    from ..run import Run
    from ..spec import ClusterSpec, JobSpec
    from .goodput import TimelineCache

__all__ = ["LocalBackend"]

logger = logging.getLogger("rl_lustre.backends.local")

# What a head with worker nodes keeps for job drivers; real NeMo-RL gets what Ray detects.
_REHEARSAL_CPUS = 2
# NeMo-RL's placement-group bundles with vLLM colocated: {"CPU": 2, "GPU": 1} per GPU
# (rl_lustre.rehearsal.virtual_cluster); its check counts the cluster's total CPUs.
_CPUS_PER_GPU = 2


def rehearsal_resources(cluster: ClusterSpec) -> tuple[int | None, int | None]:
    """The (CPUs, GPUs) the local head declares, for a rehearsal cluster (None: Ray counts them).

    Without worker nodes the head declares the whole cluster's GPUs, ``num_nodes`` x
    ``gpus_per_node``, so that the rehearsal reserves them as NeMo-RL does; with worker
    nodes they declare them and the head none. Logical CPUs and GPUs cost nothing: no
    process is started per CPU.

    Examples:
        >>> from rl_lustre import Cluster
        >>> rehearsal_resources(Cluster.local("demo", volume_dir="/tmp/rl-demo", num_nodes=8, gpus_per_node=8))
        (130, 64)
        >>> rehearsal_resources(Cluster.local("demo", volume_dir="/tmp/rl-demo", num_nodes=2, worker_nodes=2))
        (2, 0)
    """
    if cluster.nemo_rl_path is not None:
        return None, (0 if cluster.worker_nodes else None)
    if cluster.worker_nodes:
        return _REHEARSAL_CPUS, 0
    gpus = cluster.total_gpus
    return _CPUS_PER_GPU * gpus + _REHEARSAL_CPUS, gpus


def worker_cpus(gpus_per_node: int) -> int:
    """The CPUs a local worker node declares: NeMo-RL's bundles' and one for a worker process."""
    return _CPUS_PER_GPU * gpus_per_node + 1


class LocalBackend(submission.JobsBackend):
    """The live side of a ``Cluster.local(...)``.

    Examples:
        >>> from rl_lustre import Cluster
        >>> backend = LocalBackend(Cluster.local("demo", volume_dir="/tmp/rl-demo"))
        >>> backend.up()  # doctest: +SKIP
        >>> backend.describe()  # doctest: +SKIP
        "local Ray head for 'demo' at http://127.0.0.1:45123 (pid 4242), volume /tmp/rl-demo"

    Args:
        cluster: a cluster with ``backend="local"``.
        auth: Ray's auth mode for a head we start; by default ``$RAY_AUTH_MODE``, else token.
    """

    _where = "local Ray head"
    cheap_listing = True

    def __init__(self, cluster: ClusterSpec, *, auth: AuthMode | None = None) -> None:
        from ..ray.head import head_dir

        self.cluster = cluster
        self.temp_dir = head_dir(f"{cluster.name}:{cluster.mount_path}")
        self._auth = auth
        self.head: LocalHead | None = None
        self._jobs: JobsClient | None = None
        self._last_jobs: JobsClient | None = None
        self._timelines: TimelineCache | None = None

    def __repr__(self) -> str:
        return f"LocalBackend({self.cluster.name!r}, head={self.head!r})"

    def up(self, *, keep_on_failure: bool = False, check: bool = True) -> None:
        # check has nothing to ask about on this machine. keep_on_failure has nothing to keep here:
        # a head that fails to start is stopped
        # by start_local_head itself, and the volume directory is the user's.
        Path(self.cluster.mount_path).mkdir(parents=True, exist_ok=True)
        if self._adopt():
            logger.info("adopted the running local Ray head of %r at %s", self.cluster.name, self.head_url)
        else:
            self.start_head()
        try:
            self.start_workers()
            self.start_keeper()
        except BaseException:
            self._stop_head()
            raise

    def start_head(self, *, keep: tuple[str, ...] = ()) -> LocalHead:
        """Start the head (none may run): with worker nodes GPU work belongs on them, never on the
        head. ``keep``: files of the head's temp dir that outlive the head before it."""
        from ..ray.head import start_local_head

        num_cpus, num_gpus = rehearsal_resources(self.cluster)
        self.head, self._jobs = None, None
        self.head = start_local_head(
            self.temp_dir, num_cpus=num_cpus, num_gpus=num_gpus, env=self._head_env(), auth=self._auth, keep=keep
        )
        return self.head

    def start_keeper(self) -> LocalKeeper:
        """Start the deployment's keeper beside the head (see :mod:`rl_lustre.ray.keeper`); one running stays."""
        from ..ray.keeper import start_local_keeper

        return start_local_keeper(self.temp_dir, cluster=self.cluster.name, mount_path=self.cluster.mount_path)

    def keeper(self) -> LocalKeeper | None:
        """The deployment's keeper, if it runs."""
        from ..ray.keeper import find_local_keeper

        return find_local_keeper(self.temp_dir)

    def start_workers(self, count: int | None = None) -> list[LocalWorker]:
        """Start worker nodes until ``count`` (by default ``worker_nodes``) run; returns those started.

        Examples:
            >>> backend.start_workers()  # doctest: +SKIP
            [LocalWorker('worker-1', pid=4321, num_gpus=1)]
        """
        from ..ray.workers import live_workers, start_local_worker

        head = self._head()
        want = self.cluster.worker_nodes if count is None else count
        started = []
        assert self.cluster.gpus_per_node is not None
        # One counter at a time (a preemption's replacements start from a thread): two
        # callers that both saw a node missing would otherwise both start one.
        with open(head.temp_dir / "workers.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for _ in range(want - len(live_workers(head))):
                started.append(
                    start_local_worker(
                        head,
                        num_gpus=self.cluster.gpus_per_node,
                        num_cpus=worker_cpus(self.cluster.gpus_per_node),
                        env=self._head_env(),
                    )
                )
        return started

    def workers(self) -> list[LocalWorker]:
        """The worker nodes running now, oldest first."""
        from ..ray.workers import live_workers

        return live_workers(self._head())

    def down(self, *, delete_preload_image: bool = False, discard_results: bool = False) -> None:
        """The keeper first (nothing is resubmitted from here on), then the runs, recorded as
        stopped by teardown and sealed, then the worker nodes and the head (what a lost head
        left behind goes too), then the runs' results copied to ``results`` (see
        :mod:`rl_lustre.backends.teardown`). The volume directory is yours and stays:
        ``discard_results`` changes nothing here, and a local deployment has no preload image
        (``delete_preload_image`` neither)."""
        from .teardown import local_down

        local_down(self, discard_results=discard_results)

    def results_mover(self, location: Any) -> Any:
        """What copies a directory of the volume to ``location`` (a directory): file copies."""
        from .export import DirectoryMover

        return DirectoryMover(location.path)

    def _stop_head(self) -> None:
        """Stop what ``up()`` started (the keeper, the worker nodes, the head), nothing else."""
        from ..ray.workers import live_workers

        keeper = self.keeper()
        if keeper is not None:
            keeper.stop()
        head = self.head if self.head is not None else self._find()
        self.head, self._jobs = None, None
        for worker in live_workers(self.temp_dir):
            worker.kill()
        if head is not None:
            head.stop()

    def _status(self) -> dict[str, Any] | None:
        """The last head's loss, as whatever ended it told (``lose_head``), if it was lost."""
        import json

        from ..ray.keeper import status_path

        try:
            told = json.loads(status_path(self.temp_dir).read_text())
        except (OSError, ValueError):
            return None
        return {
            "head": f"the local Ray head (pid {told.get('pid', '?')})",
            "reason": told.get("reason") or "lost",
            "lost_at": told.get("at"),
            "session": told.get("session"),
        }

    # -- the runs' records on the volume: this machine sees it ---------------------------------

    def cluster_up(self) -> bool:
        """Whether a head runs, or the keeper that waits for the next one."""
        return self._find() is not None or self.keeper() is not None

    def head_losses(self) -> list[dict[str, Any]]:
        losses = super().head_losses()
        lost = self._status()
        if lost is not None and self._find() is None:
            known = {round(float(x.get("lost_at") or 0), 3) for x in losses}
            if round(float(lost.get("lost_at") or 0), 3) not in known:
                losses.append(lost)
        return losses

    def dashboard_on_head(self) -> str | None:
        # The head listens on loopback, on a port of its own.
        return self._head().dashboard_url

    @property
    def head_url(self) -> str:
        """The head's dashboard / Jobs API address."""
        return self._head().dashboard_url

    @property
    def jobs(self) -> JobsClient:
        """The head's Jobs API. While a lost head's keeper waits for the next one, the client
        of the last head (its calls fail as an outage does, and go to the next head once it is up)."""
        from ..ray.jobs import JobsClient

        if not self._adopt() and self._last_jobs is not None and self.keeper() is not None:
            return self._last_jobs
        head = self._head()
        if self._jobs is None:
            self._jobs = JobsClient(
                head.dashboard_url, headers=head.headers(), gone=self._gone, relocate=self._relocate
            )
        self._last_jobs = self._jobs
        return self._jobs

    def _relocate(self) -> tuple[str, dict[str, str]] | None:
        """Where the head listens now (a lost head's successor listens on ports of its own)."""
        head = self._find()
        return None if head is None else (head.dashboard_url, head.headers())

    def _gone(self) -> str | None:
        """Why the head is gone for good, once a call to it failed; None while it runs, or while
        its keeper waits for the next head (a lost head comes back)."""
        if self._find() is not None or self.keeper() is not None:
            return None
        losses = self.head_losses()
        if losses and losses[-1].get("lost_at") is not None and self._last_was_lost():
            loss = losses[-1]
            return (
                f"the local cluster {self.cluster.name!r} is down: its Ray head was lost ({loss['reason']}: "
                f"{loss['head']}) at {_clock(loss['lost_at'])}, and no head came back before the cluster was torn down"
            )
        return (
            f"the local cluster {self.cluster.name!r} is down: its Ray head was stopped (by "
            "down() or the end of the `with cluster:` block that started it, in this or another "
            "process), and its runs ended with it"
        )

    def _last_was_lost(self) -> bool:
        """Whether the cluster's last head was lost (no head came after its loss)."""
        from ..oncluster.runview import history

        marks = [
            r["event"]
            for r in history(self.cluster.mount_path, self.cluster.name)
            if r.get("event") in ("head", "lost")
        ]
        return (bool(marks) and marks[-1] == "lost") or (self._status() is not None and self._find() is None)

    def describe(self) -> str:
        head = self.head
        where = f"at {head.dashboard_url} (pid {head.pid})" if head is not None else "(not running)"
        return f"local Ray head for {self.cluster.name!r} {where}, volume {self.cluster.mount_path}"

    def cleanup_hint(self) -> str:
        head = self._head()
        return (
            f"The local Ray head of {self.cluster.name!r} keeps running at {head.dashboard_url} "
            f"(pid {head.pid}). The same Cluster.local(...) adopts it on up() or attach(); "
            f"stop it with its down(), or with `kill -TERM {head.pid}` and `rm -rf {head.temp_dir}`."
        )

    def submit(self, job: JobSpec, *, fresh: bool = False) -> Run:
        run = super().submit(job, fresh=fresh)
        if self.cluster.nemo_rl_path is None:
            # Visible without enable_output(): logging's last-resort handler prints warnings.
            logger.warning(
                "job %s runs in REHEARSAL mode (no NeMo-RL checkout was given): no model is "
                "trained and its metrics are synthetic; Cluster.local(..., nemo_rl_path=...) runs "
                "NeMo-RL itself",
                run.job_id,
            )
        return run

    def goodput_evidence(self, since: float, until: float | None, *, prices: Prices | None = None) -> Evidence:
        """The goodput ledger's evidence: the raylets, Ray's node table and the jobs' logs
        (see :mod:`rl_lustre.backends.goodput_local`); a local cluster costs nothing, whatever ``prices``."""
        from .goodput import TimelineCache
        from .goodput_local import local_evidence

        if self._timelines is None:
            self._timelines = TimelineCache()
        return local_evidence(self, since, until, cache=self._timelines)

    def head_for_goodput(self) -> LocalHead:
        """The running head, or why there is no ledger without it."""
        if not self._adopt():
            raise NotReadyError(
                f"the local cluster {self.cluster.name!r} is not up, and its job logs and Ray's node table went with "
                "its head: take the ledger (run.goodput(), cluster.goodput()) before down()"
            )
        assert self.head is not None
        return self.head

    def list_checkpoints(self, checkpoint_dir: str) -> list[Checkpoint]:
        """The checkpoints in ``checkpoint_dir``, read straight from the volume directory."""
        from ..nemo_rl.checkpoints import list_checkpoints

        return list_checkpoints(checkpoint_dir)

    def _find(self) -> LocalHead | None:
        from ..ray.head import find_local_head

        return find_local_head(self.temp_dir)

    def _adopt(self) -> bool:
        if self.head is not None and self.head.alive():
            return True
        self.head, self._jobs = self._find(), None
        return self.head is not None

    def _head(self) -> LocalHead:
        if not self._adopt():
            raise NotReadyError(
                f"the local cluster {self.cluster.name!r} is not up: call cluster.up() or use `with cluster:`"
            )
        assert self.head is not None
        return self.head

    def _head_env(self) -> dict[str, str]:
        from .._secrets import looks_secret, secret_shape

        allowed = set(self.cluster.secrets)
        env = {
            k: v for k, v in os.environ.items() if k in allowed or not (looks_secret(k) or secret_shape(v) is not None)
        }
        root = _package_root()
        if root is not None:
            # Job drivers (the rehearsal) import the rl_lustre this process runs.
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        return env


def _package_root() -> str | None:
    """The directory holding ``rl_lustre/`` when it is not an installed package."""
    root = Path(__file__).resolve().parents[2]
    if any(part in ("site-packages", "dist-packages") for part in root.parts):
        return None
    return str(root)


def _clock(at: object) -> str:
    import time

    return time.strftime("%H:%M:%S UTC", time.gmtime(at)) if isinstance(at, (int, float)) else "an unknown time"
