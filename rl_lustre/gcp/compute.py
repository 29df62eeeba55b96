"""Compute Engine networking (``google.cloud.compute_v1``, REST): the VPC network, its
subnetwork with pod and service ranges, the private services access (PSA) range and
the firewall rule that lets Lustre traffic (tcp:988) in from it.

These resources carry no labels, so ownership is recorded in their description
(``[managed-by=rl-lustre rl-lustre-deployment=NAME]``) and read back from there.
Requests are built from the deployment's :class:`~rl_lustre.plan.Plan`.

Examples:
    >>> from rl_lustre import Cluster
    >>> plan = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b").plan()
    >>> sub = subnetwork_request(plan)
    >>> sub.ip_cidr_range, [(r.range_name, r.ip_cidr_range) for r in sub.secondary_ip_ranges]
    ('192.168.0.0/18', [('pods', '10.4.0.0/14'), ('services', '10.0.32.0/20')])
    >>> psa_range_request(plan).purpose, firewall_request(plan, "10.90.0.0/22").allowed[0].ports
    ('VPC_PEERING', ['988'])
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from google.cloud import compute_v1

from .. import naming
from ..errors import ConfigError, NotFoundError
from ..plankeys import FIREWALL_LUSTRE_KEY, NETWORK_KEY, PSA_RANGE_KEY, SUBNET_KEY
from . import _clients
from ._errors import (
    COMPUTE,
    COMPUTE_FIREWALLS,
    Api,
    Call,
    RetryPolicy,
    call,
    operation_error,
)
from ._ownership import (
    DESCRIPTION_FILTER,
    Ensured,
    describe_ownership,
    is_ours,
    labels_from_description,
)
from ._resource import OwnedResource
from ._wait import Backoff, ProgressCallback, wait_for

if TYPE_CHECKING:
    from ..plan import Plan

log = logging.getLogger("rl_lustre.gcp.compute")

TIMEOUT = 15 * 60.0
OpStatus = compute_v1.Operation.Status


def network_path(plan: Plan, key: str = NETWORK_KEY) -> str:
    """``projects/P/global/networks/NAME`` of the plan's network ``key`` (the cluster's
    VPC, or one of the fabric's: ``gvnic-network``, ``rdma-network``)."""
    return naming.network_path(str(plan.project), plan.get(key).name)


def subnetwork_path(plan: Plan, key: str = SUBNET_KEY) -> str:
    """``projects/P/regions/R/subnetworks/NAME`` of the plan's subnetwork ``key``."""
    return f"projects/{plan.project}/regions/{plan.region}/subnetworks/{plan.get(key).name}"


def psa_range_path(plan: Plan) -> str:
    """``projects/P/global/addresses/NAME`` of the plan's PSA range."""
    return f"projects/{plan.project}/global/addresses/{plan.get(PSA_RANGE_KEY).name}"


def firewall_path(plan: Plan) -> str:
    """``projects/P/global/firewalls/NAME`` of the plan's Lustre firewall rule."""
    return f"projects/{plan.project}/global/firewalls/{plan.get(FIREWALL_LUSTRE_KEY).name}"


def _describe(plan: Plan, text: str) -> str:
    return describe_ownership(plan.cluster_name, text)


def network_request(plan: Plan, key: str = NETWORK_KEY) -> compute_v1.Network:
    """The custom-mode VPC ``Network`` of the plan's node ``key``, with its MTU and, for
    the RoCE network, its RDMA network profile.

    Examples:
        >>> from rl_lustre import Cluster
        >>> plan = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b").plan()
        >>> roce = network_request(plan, "rdma-network")
        >>> roce.mtu, roce.network_profile
        (8896, 'projects/my-project/global/networkProfiles/us-east1-b-vpc-roce')
    """
    node = plan.get(key)
    s = node.settings
    what = s.get("purpose", "VPC")
    network = compute_v1.Network(
        name=node.name,
        description=_describe(plan, f"{what} of rl_lustre deployment {plan.cluster_name}"),
        auto_create_subnetworks=s["auto_create_subnetworks"],
        routing_config=compute_v1.NetworkRoutingConfig(routing_mode=s["routing_mode"]),
    )
    if "mtu" in s:
        network.mtu = s["mtu"]
    if "network_profile" in s:
        network.network_profile = s["network_profile"]
    return network


def subnetwork_request(plan: Plan, key: str = SUBNET_KEY) -> compute_v1.Subnetwork:
    """The ``Subnetwork`` of the plan's node ``key``; the cluster's carries the secondary
    ranges GKE uses for pods and services."""
    node = plan.get(key)
    s = node.settings
    network_key = next(d for d in node.depends_on if plan.get(d).kind == "compute.v1.Network")
    return compute_v1.Subnetwork(
        name=node.name,
        description=_describe(plan, f"{node.key} of {plan.cluster_name}"),
        network=network_path(plan, network_key),
        region=s["region"],
        ip_cidr_range=s["ip_cidr_range"],
        secondary_ip_ranges=[
            compute_v1.SubnetworkSecondaryRange(range_name=k, ip_cidr_range=v)
            for k, v in s["secondary_ip_ranges"].items()
        ],
        private_ip_google_access=s["private_ip_google_access"],
    )


def psa_range_request(plan: Plan) -> compute_v1.Address:
    """The global ``Address`` reserved for private services access (the plan's block, or
    one Google picks when the plan names none)."""
    node = plan.get(PSA_RANGE_KEY)
    s = node.settings
    address = compute_v1.Address(
        name=node.name,
        description=_describe(plan, f"private services access range for Managed Lustre of {plan.cluster_name}"),
        network=network_path(plan),
        purpose=s["purpose"],
        address_type=s["address_type"],
        prefix_length=s["prefix_length"],
    )
    if s.get("address"):
        address.address = s["address"]
    return address


def firewall_request(plan: Plan, source_range: str) -> compute_v1.Firewall:
    """The ingress ``Firewall`` rule for Lustre traffic from ``source_range`` (the PSA block)."""
    node = plan.get(FIREWALL_LUSTRE_KEY)
    s = node.settings
    return compute_v1.Firewall(
        name=node.name,
        description=_describe(plan, f"Managed Lustre traffic from the PSA range of {plan.cluster_name}"),
        network=network_path(plan),
        direction=s["direction"],
        allowed=[compute_v1.Allowed(I_p_protocol=a["protocol"], ports=list(a["ports"])) for a in s["allow"]],
        source_ranges=[source_range],
    )


def cidr_of(address: compute_v1.Address) -> str:
    """The CIDR block an allocated range covers (``address/prefix_length``).

    Examples:
        >>> cidr_of(compute_v1.Address(address="10.90.0.0", prefix_length=22))
        '10.90.0.0/22'
    """
    return f"{address.address}/{address.prefix_length}"


class _ComputeResource(OwnedResource):
    """Create / get / delete for one kind of Compute resource, and waiting on its operations.

    Ownership lives in the description; a resource is gone once its delete operation is
    DONE, and one adopted is returned as read.
    """

    title: ClassVar[str]
    client_cls: ClassVar[type[Any]]
    field: ClassVar[str]
    collection: ClassVar[str]
    # "global", "regions" or "zones": where the resource and its operations live.
    scope: ClassVar[str] = "global"
    api: ClassVar[Api] = COMPUTE
    _log = log

    def __init__(
        self,
        client: Any = None,
        *,
        operations: Any = None,
        backoff: Backoff | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._client = client
        self._operations = operations
        self._backoff = backoff
        self._retry = retry
        scope = "global" if self.scope == "global" else rf"{self.scope}/(?P<{self._where}>[^/]+)"
        self._path = re.compile(rf"projects/(?P<project>[^/]+)/{scope}/{self.collection}/(?P<name>[^/]+)")

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else _clients.compute(self.client_cls)

    @property
    def operations(self) -> Any:
        if self._operations is not None:
            return self._operations
        cls = {"regions": compute_v1.RegionOperationsClient, "zones": compute_v1.ZoneOperationsClient}.get(
            self.scope, compute_v1.GlobalOperationsClient
        )
        return _clients.compute(cls)

    def _split(self, name: str) -> re.Match[str]:
        m = self._path.fullmatch(name)
        if m is None:
            scope = "global" if self.scope == "global" else f"{self.scope}/{self._where.upper()[0]}"
            raise ConfigError(type(self).__name__, "name", name, f"must be projects/P/{scope}/{self.collection}/NAME")
        return m

    def _keys(self, m: re.Match[str]) -> dict[str, str]:
        keys = {"project": m["project"]}
        if self.scope != "global":
            keys[self._where] = m[self._where]
        return keys

    @property
    def _where(self) -> str:
        """The path parameter of the resource's scope (``region``, ``zone``)."""
        return self.scope.removesuffix("s")

    @property
    def kind(self) -> str:
        return self.title

    def _labels_of(self, found: Any) -> Mapping[str, str]:
        return labels_from_description(found.description)

    def _call(self, action: str, name: str, fn: Any, **kwargs: Any) -> Any:
        m = self._path.fullmatch(name)
        zone = m[self._where] if (m and self.scope != "global") else None
        return call(Call(self.api, action, f"{self.title} {name}", zone=zone), fn, policy=self._retry, **kwargs)

    def get_or_none(self, name: str) -> Any:
        """The resource called ``name`` (``projects/P/global/<collection>/NAME``), or None.

        Example::

            Networks().get_or_none("projects/p/global/networks/demo-net")
        """
        m = self._split(name)
        try:
            return self._call(
                "get", name, self.client.get, request={**self._keys(m), self.field: m["name"]}, retry=None
            )
        except NotFoundError:
            return None

    def list_ours(self, project: str) -> list[Any]:
        """Every resource of this kind in ``project`` whose description carries our labels.

        The server filters on the description (``description eq ".*managed-by=rl-lustre.*"``);
        regional kinds are listed across all regions with ``aggregatedList``. The labels
        are parsed and checked again here.

        Example::

            [n.name for n in Networks().list_ours("my-project")]
        """
        return [r for r in self._list(project, DESCRIPTION_FILTER) if is_ours(labels_from_description(r.description))]

    def _list(self, project: str, server_filter: str) -> list[Any]:
        """Every resource of this kind in ``project`` that ``server_filter`` selects (all
        scopes of a regional or zonal kind, with ``aggregatedList``)."""
        request = {"project": project, "filter": server_filter}

        def fetch() -> list[Any]:
            if self.scope == "global":
                return list(self.client.list(request=request, retry=None))
            return [
                item
                for _, scoped in self.client.aggregated_list(request=request, retry=None)
                for item in getattr(scoped, self.collection)
            ]

        return call(Call(self.api, f"list {self.collection} in", f"projects/{project}"), fetch, policy=self._retry)

    def create(
        self,
        body: Any,
        *,
        parent: str,
        deployment: str,
        wait: bool = True,
        timeout: float = TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> Ensured[Any]:
        """Create ``body`` under ``parent`` (``projects/P/global`` or ``projects/P/regions/R``),
        or adopt a same-named resource whose description carries our labels.

        Example::

            Networks().create(network_request(plan), parent="projects/p/global", deployment="demo")
            # Ensured(name='projects/p/global/networks/demo-net', adopted=False, ...)

        Raises:
            OwnershipError: a resource of that name exists without our labels.
            OperationFailedError: the insert operation failed.
            WaitTimeoutError: not done within ``timeout``.
        """
        name = f"{parent}/{self.collection}/{body.name}"
        m = self._split(name)
        return self._create_or_adopt(
            name,
            body,
            deployment=deployment,
            send=lambda: self._call(
                "create",
                name,
                self.client.insert_unary,
                request={**self._keys(m), f"{self.field}_resource": body},
                retry=None,
            ),
            await_op=lambda op: self.wait_operation(op, name=name, action="create", timeout=timeout, progress=progress),
            wait=wait,
            timeout=timeout,
            progress=progress,
        )

    def wait_ready(self, name: str, *, timeout: float = TIMEOUT, progress: ProgressCallback | None = None) -> Any:
        """Wait until the resource can be read, and return it.

        Example::

            Networks().wait_ready("projects/p/global/networks/demo-net").name
            # 'demo-net'
        """
        return wait_for(
            f"{self.title} {name} to exist",
            lambda: self.get_or_none(name),
            done=lambda r: r is not None,
            describe=lambda r: "ABSENT" if r is None else "READY",
            timeout=timeout,
            backoff=self._backoff,
            progress=progress,
        )

    def delete(
        self,
        name: str,
        *,
        deployment: str,
        wait: bool = True,
        timeout: float = TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> bool:
        """Delete the resource if it exists and its description carries our labels.

        Example::

            Networks().delete("projects/p/global/networks/demo-net", deployment="demo")
            # True

        Returns:
            True if deleted (or, without ``wait``, deletion started); False if it did not exist.

        Raises:
            OwnershipError: it exists without our labels; it is left alone.
        """
        m = self._split(name)
        return self._delete_if_ours(
            name,
            deployment=deployment,
            send=lambda: self._call(
                "delete", name, self.client.delete_unary, request={**self._keys(m), self.field: m["name"]}, retry=None
            ),
            await_op=lambda op: self.wait_operation(op, name=name, action="delete", timeout=timeout, progress=progress),
            wait=wait,
            timeout=timeout,
            progress=progress,
        )

    def wait_operation(
        self,
        op: compute_v1.Operation,
        *,
        name: str,
        action: str,
        timeout: float = TIMEOUT,
        progress: ProgressCallback | None = None,
    ) -> compute_v1.Operation:
        """Poll the operation (global or regional, as the resource is) until DONE.

        Raises:
            OperationFailedError: it finished with errors (QuotaExceededError for quota).
            WaitTimeoutError: not DONE within ``timeout``; carries its last status.
        """
        keys = self._keys(self._split(name))

        def poll() -> compute_v1.Operation:
            if op.status == OpStatus.DONE:
                return op
            return self._call(
                f"poll the operation {op.name} of",
                name,
                self.operations.get,
                request={**keys, "operation": op.name},
                retry=None,
            )

        done = wait_for(
            f"{self.title} {name} to {action}",
            poll,
            done=lambda o: o.status == OpStatus.DONE,
            describe=lambda o: OpStatus(o.status).name,
            timeout=timeout,
            backoff=self._backoff,
            progress=progress,
        )
        if done.error.errors:
            message = "; ".join(f"{e.code}: {e.message}" for e in done.error.errors)
            zone = keys.get("region")
            raise operation_error(
                Call(self.api, action, f"{self.title} {name}", zone=zone),
                message,
                code=done.http_error_status_code or None,
            )
        return done


class Networks(_ComputeResource):
    """VPC networks (``compute_v1.NetworksClient``).

    Example::

        Networks().get_or_none("projects/p/global/networks/demo-net")

    Args:
        client: a ``NetworksClient``; by default the cached one for this environment.
        operations: a ``GlobalOperationsClient``; by default the cached one.
        backoff: polling delays of waits.
        retry: retries of transient failures.
    """

    title = "VPC network"
    client_cls = compute_v1.NetworksClient
    field = "network"
    collection = "networks"


class Subnetworks(_ComputeResource):
    """Subnetworks (``compute_v1.SubnetworksClient``); regional.

    Example::

        Subnetworks().get_or_none("projects/p/regions/us-east1/subnetworks/demo-subnet")
    """

    title = "subnetwork"
    client_cls = compute_v1.SubnetworksClient
    field = "subnetwork"
    collection = "subnetworks"
    scope = "regions"


class GlobalAddresses(_ComputeResource):
    """Global addresses (``compute_v1.GlobalAddressesClient``), here the PSA range.

    Example::

        GlobalAddresses().get_or_none("projects/p/global/addresses/demo-psa")
    """

    title = "global address"
    client_cls = compute_v1.GlobalAddressesClient
    field = "address"
    collection = "addresses"


class Firewalls(_ComputeResource):
    """Firewall rules (``compute_v1.FirewallsClient``); they need roles/compute.securityAdmin.

    Example::

        Firewalls().get_or_none("projects/p/global/firewalls/demo-allow-lustre")
    """

    title = "firewall rule"
    client_cls = compute_v1.FirewallsClient
    field = "firewall"
    collection = "firewalls"
    api = COMPUTE_FIREWALLS


class Projects:
    """The project's number, which Service Networking wants (``compute_v1.ProjectsClient``).

    Example::

        Projects().number("my-project")
        # '123456789012'
    """

    def __init__(self, client: Any = None, *, retry: RetryPolicy | None = None) -> None:
        self._client = client
        self._retry = retry
        self._numbers: dict[str, str] = {}

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else _clients.compute(compute_v1.ProjectsClient)

    def number(self, project: str) -> str:
        """The numeric id of ``project`` (cached)."""
        if project not in self._numbers:
            found = call(
                Call(COMPUTE, "get", f"project {project}"),
                self.client.get,
                policy=self._retry,
                request={"project": project},
                retry=None,
            )
            self._numbers[project] = str(found.id)
        return self._numbers[project]
