"""GKE clusters and node pools (``google.cloud.container_v1.ClusterManager``).

The adapters :class:`GkeClusters` and :class:`GkeNodePools` send the requests that
:mod:`rl_lustre.gcp.container_requests` builds from the deployment's plan. GKE's mutating
calls return its own ``Operation`` (not ``google.longrunning``), polled with
``GetOperation`` until DONE.

The cluster is created with the CPU pool as its only pool; the ``cpu-pool`` node of the
plan then finds that pool and adopts it. What a live pool's nodes are billed as, and how
long they live, is read by :mod:`rl_lustre.gcp.pool_provisioning`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from google.cloud import container_v1

from ..errors import ConfigError, GCPError, NotFoundError, OperationFailedError
from . import _clients
from ._errors import CONTAINER, Call, RetryPolicy, call, operation_error
from ._ownership import Ensured, is_ours
from ._resource import DELETE_TIMEOUT, StatefulResource
from ._wait import Backoff, ProgressCallback, wait_for

log = logging.getLogger("rl_lustre.gcp.container")

CLUSTER = "GKE cluster"
NODE_POOL = "GKE node pool"
CREATE_TIMEOUT = 3600.0
_CLUSTER = re.compile(r"projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/clusters/(?P<cluster>[^/]+)")
_POOL = re.compile(_CLUSTER.pattern + r"/nodePools/(?P<pool>[^/]+)")
ClusterStatus = container_v1.Cluster.Status
PoolStatus = container_v1.NodePool.Status
OpStatus = container_v1.Operation.Status

_PORT_988 = (
    "the Lustre CSI driver reaches Managed Lustre on port 988 only from GKE {minimum} (the legacy "
    "port is off). Upgrade the control plane, or pick a newer release channel."
)


def check_version(cluster: container_v1.Cluster, minimum: str, needs: str = _PORT_988) -> None:
    """Refuse a cluster whose control plane is older than ``minimum`` (``needs`` says why,
    with ``{minimum}`` in it).

    Examples:
        >>> check_version(container_v1.Cluster(name="c", current_master_version="1.33.2-gke.1000"),
        ...               "1.33.2-gke.4780000")  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        rl_lustre.errors.GCPError: GKE cluster c runs 1.33.2-gke.1000; the Lustre CSI driver reaches Managed Lustre on
        port 988 only from GKE 1.33.2-gke.4780000 (the legacy port is off). Upgrade the control plane, or pick a newer
        release channel.

    Raises:
        GCPError: the version is older (or unreadable).
    """
    from ..catalog import gke_version_key

    version = cluster.current_master_version
    try:
        old = gke_version_key(version) < gke_version_key(minimum)
    except ValueError:
        old = True
    if old:
        raise GCPError(
            f"{CLUSTER} {cluster.name} runs {version or 'an unknown version'}; " + needs.format(minimum=minimum)
        )


def _split_cluster(name: str) -> re.Match[str]:
    m = _CLUSTER.fullmatch(name)
    if m is None:
        raise ConfigError("GkeClusters", "name", name, "must be projects/P/locations/L/clusters/NAME")
    return m


def _split_pool(name: str) -> re.Match[str]:
    m = _POOL.fullmatch(name)
    if m is None:
        raise ConfigError("GkeNodePools", "name", name, "must be projects/P/locations/L/clusters/C/nodePools/NAME")
    return m


def _status(obj: Any) -> str:
    if obj is None:
        return "ABSENT"
    name = type(obj).Status(obj.status).name
    return f"{name} ({obj.status_message})" if obj.status_message else name


class _Gke(StatefulResource):
    """What both GKE adapters share: the client, the call wrapper and operation polling."""

    kind = ""
    api = CONTAINER
    _log = log

    def __init__(self, client: Any = None, *, backoff: Backoff | None = None, retry: RetryPolicy | None = None) -> None:
        self._client = client
        self._backoff = backoff
        self._retry = retry

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else _clients.cluster_manager()

    def _call(self, action: str, name: str, fn: Any, zone: str | None = None, **kwargs: Any) -> Any:
        return call(Call(CONTAINER, action, f"{self.kind} {name}", zone=zone), fn, policy=self._retry, **kwargs)

    def _state_of(self, found: Any) -> str:
        return _status(found)

    def wait_operation(
        self,
        op: container_v1.Operation,
        *,
        location_path: str,
        what: str,
        action: str,
        resource: str,
        zone: str | None,
        timeout: float,
        progress: ProgressCallback | None = None,
    ) -> container_v1.Operation:
        """Poll GKE's ``GetOperation`` until ``op`` is DONE.

        Args:
            op: the operation a mutating call returned.
            location_path: ``projects/P/locations/L`` the operation lives in.

        Raises:
            OperationFailedError: it finished with an error (QuotaExceededError for a
                stock-out or quota failure).
            WaitTimeoutError: not DONE within ``timeout``; carries its last status.
        """
        short = op.name.rsplit("/", 1)[-1]
        op_name = f"{location_path}/operations/{short}"

        def poll() -> container_v1.Operation:
            return self._call(
                f"poll the operation {short} of",
                resource,
                self.client.get_operation,
                zone=zone,
                request={"name": op_name},
                retry=None,
            )

        def describe(o: container_v1.Operation) -> str:
            text = OpStatus(o.status).name
            return f"{text} ({o.detail})" if o.detail else text

        done = wait_for(
            what,
            poll,
            done=lambda o: o.status == OpStatus.DONE,
            describe=describe,
            timeout=timeout,
            backoff=self._backoff,
            progress=progress,
        )
        # status_message is the deprecated twin of error: set only when the operation failed.
        if done.error.code or done.status_message:
            raise operation_error(
                Call(CONTAINER, action, f"{self.kind} {resource}", zone=zone),
                done.error.message or done.status_message,
                code=done.error.code or None,
            )
        return done


class GkeClusters(_Gke):
    """GKE clusters through ``ClusterManagerClient``.

    Example::

        api = GkeClusters()               # a client from the environment, on first use
        api.get_or_none("projects/p/locations/us-east1/clusters/demo")

    Args:
        client: a ``container_v1.ClusterManagerClient``; by default the cached one for
            this environment (the emulator's when ``RL_LUSTRE_GCP_EMULATOR_HOST`` is set).
        backoff: polling delays of waits.
        retry: retries of transient failures.
    """

    kind = CLUSTER

    def _labels_of(self, found: container_v1.Cluster) -> Mapping[str, str]:
        return found.resource_labels

    def _being_deleted(self, found: container_v1.Cluster) -> bool:
        return found.status == ClusterStatus.STOPPING

    def get_or_none(self, name: str) -> container_v1.Cluster | None:
        """The cluster ``projects/P/locations/L/clusters/NAME``, or None.

        Example::

            GkeClusters().get_or_none("projects/p/locations/us-east1/clusters/demo")
        """
        _split_cluster(name)
        try:
            return self._call("get", name, self.client.get_cluster, request={"name": name}, retry=None)
        except NotFoundError:
            return None

    def list_ours(self, project: str) -> list[container_v1.Cluster]:
        """Every cluster in ``project`` (all locations) whose resource labels are ours.

        ``ListClusters`` has no filter: it lists every location (``locations/-``) and the
        labels are checked here. Each cluster comes with its node pools.

        Example::

            [c.name for c in GkeClusters().list_ours("my-project")]
        """
        return [c for c in self.list_all(project) if is_ours(c.resource_labels)]

    def list_all(self, project: str) -> list[container_v1.Cluster]:
        """Every cluster in ``project`` (all locations, anyone's), with its node pools."""
        parent = f"projects/{project}/locations/-"
        found = self._call(
            "list clusters in", parent, self.client.list_clusters, request={"parent": parent}, retry=None
        )
        return list(found.clusters)

    def create(
        self,
        cluster: container_v1.Cluster,
        *,
        parent: str,
        deployment: str,
        wait: bool = True,
        timeout: float = CREATE_TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> Ensured[container_v1.Cluster]:
        """Create ``cluster`` under ``parent`` (``projects/P/locations/L``), or adopt it.

        Example::

            done = GkeClusters().create(cluster_request(plan), parent="projects/p/locations/us-east1",
                                        deployment="demo")
            done.resource.endpoint
            # '34.23.1.10'

        Raises:
            OwnershipError: a cluster of that name exists without our labels.
            OperationFailedError: creation failed or the cluster ended in ERROR.
            WaitTimeoutError: not RUNNING within ``timeout``.
        """
        name = f"{parent}/clusters/{cluster.name}"
        location = _split_cluster(name)["location"]
        zone = cluster.locations[0] if cluster.locations else location
        return self._create_or_adopt(
            name,
            cluster,
            deployment=deployment,
            send=lambda: self._call(
                "create",
                name,
                self.client.create_cluster,
                zone=zone,
                request={"parent": parent, "cluster": cluster},
                retry=None,
            ),
            await_op=lambda op: self.wait_operation(
                op,
                location_path=parent,
                what=f"{CLUSTER} {name} to be created",
                action="create",
                resource=name,
                zone=zone,
                timeout=timeout,
                progress=progress,
            ),
            wait=wait,
            timeout=timeout,
            progress=progress,
        )

    def wait_ready(
        self, name: str, *, timeout: float = CREATE_TIMEOUT, progress: ProgressCallback | None = None
    ) -> container_v1.Cluster:
        """Wait until the cluster is RUNNING and return it.

        Example::

            GkeClusters().wait_ready("projects/p/locations/us-east1/clusters/demo").status
            # <Status.RUNNING: 2>

        Raises:
            NotFoundError: the cluster does not exist.
            OperationFailedError: the cluster is in ERROR (or DEGRADED).
            WaitTimeoutError: not RUNNING within ``timeout``.
        """

        def check(found: container_v1.Cluster) -> None:
            if found.status in (ClusterStatus.ERROR, ClusterStatus.DEGRADED):
                raise OperationFailedError(
                    f"{CONTAINER}: {CLUSTER} {name} is {_status(found)}; delete it "
                    "(cluster.down()) before creating it again"
                )

        return self._wait_for_state(
            name,
            "RUNNING",
            done=lambda c: c.status == ClusterStatus.RUNNING,
            check=check,
            timeout=timeout,
            progress=progress,
        )

    def delete(
        self,
        name: str,
        *,
        deployment: str,
        wait: bool = True,
        timeout: float = DELETE_TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> bool:
        """Delete the cluster (and its node pools) if it exists and carries our labels.

        Example::

            GkeClusters().delete("projects/p/locations/us-east1/clusters/demo", deployment="demo")
            # True

        Returns:
            True if a deletion was started (and, with ``wait``, finished); False if it did not exist.

        Raises:
            OwnershipError: the cluster exists without our labels; it is left alone.
        """
        return self._delete_if_ours(
            name,
            deployment=deployment,
            send=lambda: self._call("delete", name, self.client.delete_cluster, request={"name": name}, retry=None),
            await_op=lambda op: self.wait_operation(
                op,
                location_path=name.rsplit("/clusters/", 1)[0],
                what=f"{CLUSTER} {name} to be deleted",
                action="delete",
                resource=name,
                zone=None,
                timeout=timeout,
                progress=progress,
            ),
            wait=wait,
            timeout=timeout,
            progress=progress,
        )


class GkeNodePools(_Gke):
    """GKE node pools through ``ClusterManagerClient``.

    Node pools carry our labels in ``config.resource_labels``.

    Example::

        GkeNodePools().get_or_none("projects/p/locations/us-east1/clusters/demo/nodePools/gpu-pool")

    Args:
        client: a ``container_v1.ClusterManagerClient``; by default the cached one.
        backoff: polling delays of waits.
        retry: retries of transient failures.
    """

    kind = NODE_POOL

    def _labels_of(self, found: container_v1.NodePool) -> Mapping[str, str]:
        return found.config.resource_labels

    def _being_deleted(self, found: container_v1.NodePool) -> bool:
        return found.status == PoolStatus.STOPPING

    def get_or_none(self, name: str) -> container_v1.NodePool | None:
        """The node pool ``projects/P/locations/L/clusters/C/nodePools/NAME``, or None
        (also when its cluster does not exist).

        Example::

            GkeNodePools().get_or_none(".../clusters/demo/nodePools/gpu-pool")
        """
        _split_pool(name)
        try:
            return self._call("get", name, self.client.get_node_pool, request={"name": name}, retry=None)
        except NotFoundError:
            return None

    def create(
        self,
        pool: container_v1.NodePool,
        *,
        cluster: str,
        deployment: str,
        wait: bool = True,
        timeout: float = CREATE_TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> Ensured[container_v1.NodePool]:
        """Create ``pool`` in ``cluster`` (its full name), or adopt it if it carries our labels.

        Example::

            GkeNodePools().create(node_pool_request(plan, "gpu-pool"), cluster=cluster_path(plan),
                                  deployment="demo")

        Raises:
            OwnershipError: a pool of that name exists without our labels.
            QuotaExceededError: GPUs or Spot capacity are not available in the zone.
            OperationFailedError: creation failed otherwise.
            WaitTimeoutError: not RUNNING within ``timeout``.
        """
        name = f"{cluster}/nodePools/{pool.name}"
        m = _split_pool(name)
        zone = pool.locations[0] if pool.locations else m["location"]
        return self._create_or_adopt(
            name,
            pool,
            deployment=deployment,
            send=lambda: self._call(
                "create",
                name,
                self.client.create_node_pool,
                zone=zone,
                request={"parent": cluster, "node_pool": pool},
                retry=None,
            ),
            await_op=lambda op: self.wait_operation(
                op,
                location_path=f"projects/{m['project']}/locations/{m['location']}",
                what=f"{NODE_POOL} {name} to be created",
                action="create",
                resource=name,
                zone=zone,
                timeout=timeout,
                progress=progress,
            ),
            wait=wait,
            timeout=timeout,
            progress=progress,
            detail=(
                " (%d × %s%s)",
                pool.initial_node_count,
                pool.config.machine_type,
                ", Spot" if pool.config.spot else "",
            ),
        )

    def wait_ready(
        self, name: str, *, timeout: float = CREATE_TIMEOUT, progress: ProgressCallback | None = None
    ) -> container_v1.NodePool:
        """Wait until the pool is RUNNING and return it.

        Example::

            GkeNodePools().wait_ready(".../nodePools/gpu-pool").status
            # <Status.RUNNING: 2>

        Raises:
            NotFoundError: the pool does not exist.
            OperationFailedError: the pool is in ERROR (QuotaExceededError for a stock-out).
            WaitTimeoutError: not RUNNING within ``timeout``.
        """
        zone = _split_pool(name)["location"]

        def check(found: container_v1.NodePool) -> None:
            if found.status in (PoolStatus.ERROR, PoolStatus.RUNNING_WITH_ERROR):
                raise operation_error(
                    Call(
                        CONTAINER, "create", f"{NODE_POOL} {name}", zone=found.locations[0] if found.locations else zone
                    ),
                    f"the pool is {_status(found)}",
                )

        return self._wait_for_state(
            name,
            "RUNNING",
            done=lambda p: p.status == PoolStatus.RUNNING,
            check=check,
            timeout=timeout,
            progress=progress,
        )

    def delete(
        self,
        name: str,
        *,
        deployment: str,
        wait: bool = True,
        timeout: float = DELETE_TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> bool:
        """Delete the pool if it exists and carries our labels.

        Example::

            GkeNodePools().delete(".../nodePools/gpu-pool", deployment="demo")
            # True

        Returns:
            True if a deletion was started (and, with ``wait``, finished); False if it did not exist.

        Raises:
            OwnershipError: the pool exists without our labels; it is left alone.
        """
        m = _split_pool(name)
        return self._delete_if_ours(
            name,
            deployment=deployment,
            send=lambda: self._call("delete", name, self.client.delete_node_pool, request={"name": name}, retry=None),
            await_op=lambda op: self.wait_operation(
                op,
                location_path=f"projects/{m['project']}/locations/{m['location']}",
                what=f"{NODE_POOL} {name} to be deleted",
                action="delete",
                resource=name,
                zone=None,
                timeout=timeout,
                progress=progress,
            ),
            wait=wait,
            timeout=timeout,
            progress=progress,
        )


def parent_of(name: str) -> str:
    """``projects/P/locations/L`` of a cluster's full name.

    Examples:
        >>> parent_of("projects/p/locations/us-east1/clusters/demo")
        'projects/p/locations/us-east1'
    """
    m = _split_cluster(name)
    return f"projects/{m['project']}/locations/{m['location']}"
