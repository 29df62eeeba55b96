"""The fake Compute Engine networking API (REST): VPC networks, subnetworks, global
addresses, firewall rules and their operations, as ``compute.v1`` answers them.

:class:`ComputeFake` holds the handlers; :class:`~rl_lustre.testing._rest.RestFake`
serves them over HTTP at the real URL templates (:meth:`ComputeFake.routes`).
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Callable
from typing import Any

from ._core import Core, FakeError, project_number
from ._filters import compute_filter

__all__ = ["NETWORK_URL", "ComputeFake", "Handler"]

_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
NETWORK_URL = re.compile(r"(?:.*/)?projects/([^/]+)/global/networks/([^/]+)$")
_PSA_POOL = ipaddress.ip_network("10.90.0.0/15")
_PROFILE = re.compile(r"(?:.*/)?projects/([^/]+)/global/networkProfiles/(([a-z]+-[a-z]+[0-9]+)-[a-z])-vpc-roce$")
Handler = Callable[[dict[str, str], dict[str, str], dict[str, Any]], Any]
# Compute's collection for each kind, as it names methods ("compute.globalAddresses.insert").
_COLLECTION = {
    "network": "networks",
    "subnetwork": "subnetworks",
    "address": "globalAddresses",
    "firewall": "firewalls",
    "image": "images",
    "disk": "disks",
    "instance": "instances",
}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class ComputeFake:
    """Compute networks, subnetworks, global addresses, firewalls and their operations.

    Args:
        core: the state the fakes share (the resources live there).
        base: the served base URL, once known (self links name it).
    """

    def __init__(self, core: Core, base: Callable[[], str]) -> None:
        self.core = core
        self._base = base
        self._compute_ops: dict[str, dict[str, Any]] = {}
        self._pending: set[tuple[str, ...]] = set()

    def routes(self) -> list[tuple[str, str, str, Handler]]:
        """``(verb, path regex, method, handler)`` of every Compute method served."""
        p = "/compute/v1/projects/(?P<project>[^/]+)"
        return [
            ("GET", p, "compute.projects.get", self.project_get),
            ("POST", p + "/global/networks", "compute.networks.insert", self.network_insert),
            ("GET", p + "/global/networks", "compute.networks.list", self.network_list),
            ("GET", p + "/global/networks/(?P<name>[^/]+)", "compute.networks.get", self.network_get),
            ("GET", p + "/aggregated/subnetworks", "compute.subnetworks.aggregatedList", self.subnet_aggregated_list),
            ("GET", p + "/global/addresses", "compute.globalAddresses.list", self.address_list),
            ("GET", p + "/global/firewalls", "compute.firewalls.list", self.firewall_list),
            ("DELETE", p + "/global/networks/(?P<name>[^/]+)", "compute.networks.delete", self.network_delete),
            ("POST", p + "/regions/(?P<region>[^/]+)/subnetworks", "compute.subnetworks.insert", self.subnet_insert),
            (
                "GET",
                p + "/regions/(?P<region>[^/]+)/subnetworks/(?P<name>[^/]+)",
                "compute.subnetworks.get",
                self.subnet_get,
            ),
            (
                "DELETE",
                p + "/regions/(?P<region>[^/]+)/subnetworks/(?P<name>[^/]+)",
                "compute.subnetworks.delete",
                self.subnet_delete,
            ),
            ("POST", p + "/global/addresses", "compute.globalAddresses.insert", self.address_insert),
            ("GET", p + "/global/addresses/(?P<name>[^/]+)", "compute.globalAddresses.get", self.address_get),
            ("DELETE", p + "/global/addresses/(?P<name>[^/]+)", "compute.globalAddresses.delete", self.address_delete),
            ("POST", p + "/global/firewalls", "compute.firewalls.insert", self.firewall_insert),
            ("GET", p + "/global/firewalls/(?P<name>[^/]+)", "compute.firewalls.get", self.firewall_get),
            ("DELETE", p + "/global/firewalls/(?P<name>[^/]+)", "compute.firewalls.delete", self.firewall_delete),
            ("GET", p + "/global/operations/(?P<name>[^/]+)", "compute.globalOperations.get", self.operation_get),
            (
                "GET",
                p + "/regions/(?P<region>[^/]+)/operations/(?P<name>[^/]+)",
                "compute.regionOperations.get",
                self.operation_get,
            ),
        ]

    def _link(self, path: str) -> str:
        return f"{self._base()}/compute/v1/{path}"

    def _compute_op(
        self,
        project: str,
        region: str | None,
        op_type: str,
        target: str,
        method: str,
        latency: str,
        effect: Callable[[], None],
        pending: tuple[str, ...] | None = None,
        zone: str | None = None,
        on_failure: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        number = self.core.next_id()
        name = f"operation-{number}"
        scope = (
            f"projects/{project}/zones/{zone}"
            if zone
            else f"projects/{project}/regions/{region}"
            if region
            else f"projects/{project}/global"
        )
        op: dict[str, Any] = {
            "kind": "compute#operation",
            "id": str(number),
            "name": name,
            "operationType": op_type,
            "targetLink": self._link(target),
            "status": "RUNNING",
            "progress": 0,
            "insertTime": _now(),
            "startTime": _now(),
            "selfLink": self._link(f"{scope}/operations/{name}"),
            "user": "fake@rl-lustre",
        }
        if region:
            op["region"] = self._link(f"projects/{project}/regions/{region}")
        if zone:
            op["zone"] = self._link(f"projects/{project}/zones/{zone}")
        self._compute_ops[f"{scope}/operations/{name}"] = op
        fault = self.core.operation_fault(method, f"/compute/v1/{target}")
        if pending is not None:
            self._pending.add(pending)

        def finish() -> None:
            if pending is not None:
                self._pending.discard(pending)
            if fault is not None:
                op["error"] = {"errors": [{"code": fault.reason or fault.grpc_code.name, "message": fault.message}]}
                op["httpErrorStatusCode"] = fault.http_code
                op["httpErrorMessage"] = fault.grpc_code.name.replace("_", " ")
                if on_failure is not None:
                    on_failure()
            else:
                effect()
            op.update(status="DONE", progress=100, endTime=_now())

        self.core.schedule(self.core.delay(latency), finish)
        return dict(op)

    def operation_get(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        scope = (
            f"projects/{p['project']}/zones/{p['zone']}"
            if p.get("zone")
            else f"projects/{p['project']}/regions/{p['region']}"
            if p.get("region")
            else f"projects/{p['project']}/global"
        )
        op = self._compute_ops.get(f"{scope}/operations/{p['name']}")
        if op is None:
            raise FakeError(404, f"The resource '{scope}/operations/{p['name']}' was not found", "notFound")
        return dict(op)

    def project_get(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        return {
            "kind": "compute#project",
            "name": p["project"],
            "id": project_number(p["project"]),
            "selfLink": self._link(f"projects/{p['project']}"),
        }

    def _network_key(self, url: str) -> tuple[str, str]:
        m = NETWORK_URL.match(url or "")
        if m is None:
            raise FakeError(400, f"Invalid value for field 'network': {url!r}", "invalid")
        if (m[1], m[2]) not in self.core.networks:
            raise FakeError(404, f"The resource 'projects/{m[1]}/global/networks/{m[2]}' was not found", "notFound")
        return m[1], m[2]

    @staticmethod
    def _check_name(body: dict[str, Any]) -> str:
        name = body.get("name", "")
        if not _NAME.fullmatch(name):
            raise FakeError(400, f"Invalid value for field 'resource.name': {name!r}", "invalid")
        return str(name)

    def _insert(
        self,
        table: dict[Any, Any],
        key: tuple[str, ...],
        path: str,
        project: str,
        region: str | None,
        kind: str,
        latency: str,
        body: dict[str, Any],
        extra: Callable[[], dict[str, Any]] | None = None,
    ) -> Any:
        if key in table or (kind, *key) in self._pending:
            raise FakeError(409, f"The resource '{path}' already exists", "alreadyExists")
        resource = {
            **body,
            "kind": f"compute#{kind}",
            "id": str(self.core.next_id()),
            "selfLink": self._link(path),
            "creationTimestamp": _now(),
        }
        if extra is not None:
            resource.update(extra())

        def create() -> None:
            table[key] = resource

        return self._compute_op(
            project,
            region,
            "insert",
            path,
            f"compute.{_COLLECTION[kind]}.insert",
            latency,
            create,
            pending=(kind, *key),
        )

    def _get(self, table: dict[Any, Any], key: tuple[str, ...], path: str) -> Any:
        found = table.get(key)
        if found is None:
            raise FakeError(404, f"The resource '{path}' was not found", "notFound")
        return dict(found)

    def _delete(
        self,
        table: dict[Any, Any],
        key: tuple[str, ...],
        path: str,
        project: str,
        region: str | None,
        kind: str,
        latency: str,
        users: list[str],
    ) -> Any:
        self._get(table, key, path)
        if users:
            raise FakeError(
                400,
                f"The {kind} resource '{path}' is already being used by '{users[0]}'",
                "resourceInUseByAnotherResource",
            )

        def remove() -> None:
            table.pop(key, None)

        return self._compute_op(project, region, "delete", path, f"compute.{_COLLECTION[kind]}.delete", latency, remove)

    def _list(self, table: dict[Any, Any], project: str, kind: str, q: dict[str, str]) -> dict[str, Any]:
        wanted = compute_filter(q.get("filter", ""))
        items = [dict(v) for k, v in sorted(table.items()) if k[0] == project and wanted(v)]
        return {
            "kind": f"compute#{kind}List",
            "id": f"projects/{project}/{_COLLECTION[kind]}",
            "items": items,
            "selfLink": self._link(f"projects/{project}/global/{_COLLECTION[kind]}"),
        }

    def network_list(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        return self._list(self.core.networks, p["project"], "network", q)

    def address_list(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        return self._list(self.core.addresses, p["project"], "address", q)

    def firewall_list(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        return self._list(self.core.firewalls, p["project"], "firewall", q)

    def subnet_aggregated_list(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        # Aggregated lists group the items by scope ("regions/us-east1"), as the real API does.
        wanted = compute_filter(q.get("filter", ""))
        items: dict[str, dict[str, Any]] = {}
        for (project, region, _), subnet in sorted(self.core.subnetworks.items()):
            if project == p["project"] and wanted(subnet):
                items.setdefault(f"regions/{region}", {"subnetworks": []})["subnetworks"].append(dict(subnet))
        return {
            "kind": "compute#subnetworkAggregatedList",
            "id": f"projects/{p['project']}/aggregated/subnetworks",
            "items": items,
            "selfLink": self._link(f"projects/{p['project']}/aggregated/subnetworks"),
        }

    def network_insert(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        name = self._check_name(b)
        path = f"projects/{p['project']}/global/networks/{name}"
        body = dict(b)
        mtu = body.setdefault("mtu", 1460)
        if not isinstance(mtu, int) or not 1300 <= mtu <= 8896:
            raise FakeError(
                400, f"Invalid value for field 'resource.mtu': {mtu!r}. Must be between 1300 and 8896.", "invalid"
            )
        if "networkProfile" in body:
            m = _PROFILE.fullmatch(body["networkProfile"])
            if m is None or m[1] != p["project"]:
                raise FakeError(
                    400, f"Invalid value for field 'resource.networkProfile': {body['networkProfile']!r}", "invalid"
                )
            if body.get("autoCreateSubnetworks", True):
                raise FakeError(400, "A network with an RDMA network profile must be in custom subnet mode", "invalid")
        return self._insert(
            self.core.networks,
            (p["project"], name),
            path,
            p["project"],
            None,
            "network",
            "compute.create_network",
            body,
        )

    def _profile_zone(self, project: str, network: str) -> tuple[str, str] | None:
        """``(zone, region)`` of a RoCE network's profile, or None for an ordinary network."""
        m = _PROFILE.fullmatch(self.core.networks[(project, network)].get("networkProfile", ""))
        return (m[2], m[3]) if m else None

    def network_get(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key = (p["project"], p["name"])
        found = self._get(self.core.networks, key, f"projects/{key[0]}/global/networks/{key[1]}")
        found["subnetworks"] = [
            s["selfLink"]
            for k, s in sorted(self.core.subnetworks.items())
            if k[0] == key[0] and NETWORK_URL.match(s["network"])[2] == key[1]  # type: ignore[index]
        ]
        return found

    def _on_network(self, table: dict[Any, Any], project: str, network: str) -> list[str]:
        users = []
        for value in table.values():
            m = NETWORK_URL.match(value.get("network", ""))
            if m and (m[1], m[2]) == (project, network):
                users.append(value["selfLink"])
        return users

    def network_delete(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        project, name = p["project"], p["name"]
        users = (
            self._on_network(self.core.subnetworks, project, name)
            + self._on_network(self.core.firewalls, project, name)
            + self._on_network(self.core.addresses, project, name)
        )
        if (project, name) in self.core.connections:
            users.append(f"projects/{project}/global/networks/{name}/peerings/servicenetworking-googleapis-com")
        return self._delete(
            self.core.networks,
            (project, name),
            f"projects/{project}/global/networks/{name}",
            project,
            None,
            "network",
            "compute.delete_network",
            users,
        )

    def subnet_insert(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        name = self._check_name(b)
        project, region = p["project"], p["region"]
        net = self._network_key(b.get("network", ""))
        try:
            primary = ipaddress.ip_network(b.get("ipCidrRange", ""))
            secondary = [
                (r["rangeName"], ipaddress.ip_network(r["ipCidrRange"])) for r in b.get("secondaryIpRanges", [])
            ]
        except (ValueError, KeyError) as err:
            raise FakeError(400, f"Invalid IP range: {err}", "invalid") from None
        blocks = [primary] + [c for _, c in secondary]
        for i, a in enumerate(blocks):
            for c in blocks[i + 1 :]:
                if a.overlaps(c):
                    raise FakeError(400, f"IP range {a} overlaps with {c}", "invalid")
        self._check_free(self._link(f"projects/{net[0]}/global/networks/{net[1]}"), blocks)
        roce = self._profile_zone(*net)
        if roce is not None and (secondary or roce[1] != region):
            raise FakeError(
                400,
                f"Subnetworks of RDMA network {net[1]!r} must be in region {roce[1]} (the profile's "
                f"zone {roce[0]}) and have no secondary ranges",
                "invalid",
            )
        path = f"projects/{project}/regions/{region}/subnetworks/{name}"
        body = {
            **b,
            "network": self._link(f"projects/{net[0]}/global/networks/{net[1]}"),
            "region": self._link(f"projects/{project}/regions/{region}"),
        }
        return self._insert(
            self.core.subnetworks,
            (project, region, name),
            path,
            project,
            region,
            "subnetwork",
            "compute.create_subnetwork",
            body,
            extra=lambda: {"state": "READY"},
        )

    def subnet_get(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key = (p["project"], p["region"], p["name"])
        return self._get(self.core.subnetworks, key, f"projects/{key[0]}/regions/{key[1]}/subnetworks/{key[2]}")

    def subnet_delete(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        project, region, name = p["project"], p["region"], p["name"]
        users = [
            f"projects/{project}/locations/{c.location}/clusters/{c.name}"
            for n, c in sorted(self.core.clusters.items())
            if n.startswith(f"projects/{project}/") and c.subnetwork == name and c.location.startswith(region)
        ]
        # Nodes of a pool with an extra NIC on the subnet hold addresses in it.
        users += [
            f"projects/{project}/locations/{c.location}/clusters/{c.name}/nodePools/{pool.name}"
            for n, c in sorted(self.core.clusters.items())
            if n.startswith(f"projects/{project}/") and c.location.startswith(region)
            for pool in c.node_pools
            if any(extra.subnetwork == name for extra in pool.network_config.additional_node_network_configs)
        ]
        return self._delete(
            self.core.subnetworks,
            (project, region, name),
            f"projects/{project}/regions/{region}/subnetworks/{name}",
            project,
            region,
            "subnetwork",
            "compute.delete_subnetwork",
            users,
        )

    def _used_blocks(self, network_link: str) -> list[tuple[str, Any]]:
        """The blocks network ``network_link`` already uses: its subnets' primary and
        secondary ranges and its private services access ranges."""
        used: list[tuple[str, Any]] = []
        for (_, _, name), sub in sorted(self.core.subnetworks.items()):
            if sub.get("network") == network_link:
                used.append((f"subnetwork {name}", ipaddress.ip_network(sub["ipCidrRange"])))
                used += [
                    (f"secondary range {r['rangeName']} of {name}", ipaddress.ip_network(r["ipCidrRange"]))
                    for r in sub.get("secondaryIpRanges", [])
                ]
        for (_, name), a in sorted(self.core.addresses.items()):
            if a.get("network") == network_link and a.get("purpose") == "VPC_PEERING" and a.get("address"):
                used.append((f"address {name}", ipaddress.ip_network(f"{a['address']}/{a['prefixLength']}")))
        return used

    def _check_free(self, network_link: str, blocks: list[Any]) -> None:
        for block in blocks:
            for what, used in self._used_blocks(network_link):
                if block.overlaps(used):
                    raise FakeError(
                        400, f"Requested range {block} conflicts with {what} ({used}) of the network", "invalid"
                    )

    def _allocate(self, prefix: int) -> str:
        taken = [
            ipaddress.ip_network(f"{a['address']}/{a['prefixLength']}")
            for a in self.core.addresses.values()
            if a.get("address") and a.get("prefixLength")
        ]
        for block in _PSA_POOL.subnets(new_prefix=prefix):
            if not any(block.overlaps(t) for t in taken):
                return str(block.network_address)
        raise FakeError(400, f"No free /{prefix} block left for private services access", "ipSpaceExhausted")

    def address_insert(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        name = self._check_name(b)
        project = p["project"]
        body = dict(b)
        if body.get("purpose") == "VPC_PEERING":
            net = self._network_key(body.get("network", ""))
            body["network"] = self._link(f"projects/{net[0]}/global/networks/{net[1]}")
            prefix = int(body.get("prefixLength") or 0)
            if not 8 <= prefix <= 29:
                raise FakeError(400, f"Invalid value for field 'resource.prefixLength': {prefix}", "invalid")
            body["prefixLength"] = prefix
            if body.get("address"):
                try:
                    block = ipaddress.ip_network(f"{body['address']}/{prefix}")
                except ValueError as err:
                    raise FakeError(400, f"Invalid value for field 'resource.address': {err}", "invalid") from None
                self._check_free(body["network"], [block])
            address = body.get("address") or self._allocate(prefix)
        else:
            address = body.get("address") or f"34.120.0.{self.core.next_id() % 250 + 1}"
        path = f"projects/{project}/global/addresses/{name}"
        return self._insert(
            self.core.addresses,
            (project, name),
            path,
            project,
            None,
            "address",
            "compute.create_address",
            body,
            extra=lambda: {"address": address, "status": "RESERVED"},
        )

    def address_get(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key = (p["project"], p["name"])
        return self._get(self.core.addresses, key, f"projects/{key[0]}/global/addresses/{key[1]}")

    def address_delete(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        project, name = p["project"], p["name"]
        users = [
            f"projects/{k[0]}/global/networks/{k[1]}/peerings/servicenetworking-googleapis-com"
            for k, c in sorted(self.core.connections.items())
            if k[0] == project and name in c["reservedPeeringRanges"]
        ]
        return self._delete(
            self.core.addresses,
            (project, name),
            f"projects/{project}/global/addresses/{name}",
            project,
            None,
            "address",
            "compute.delete_address",
            users,
        )

    def firewall_insert(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        name = self._check_name(b)
        project = p["project"]
        net = self._network_key(b.get("network", ""))
        if self._profile_zone(*net) is not None:
            raise FakeError(
                400,
                f"Firewall rules cannot be applied to network {net[1]!r}: it has an RDMA network profile",
                "invalid",
            )
        if not b.get("allowed") and not b.get("denied"):
            raise FakeError(400, "A firewall rule needs 'allowed' or 'denied'", "invalid")
        for block in b.get("sourceRanges", []):
            try:
                ipaddress.ip_network(block)
            except ValueError:
                raise FakeError(400, f"Invalid value for field 'resource.sourceRanges': {block!r}", "invalid") from None
        body = {
            **b,
            "network": self._link(f"projects/{net[0]}/global/networks/{net[1]}"),
            "direction": b.get("direction", "INGRESS"),
            "priority": b.get("priority", 1000),
        }
        path = f"projects/{project}/global/firewalls/{name}"
        return self._insert(
            self.core.firewalls, (project, name), path, project, None, "firewall", "compute.create_firewall", body
        )

    def firewall_get(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        key = (p["project"], p["name"])
        return self._get(self.core.firewalls, key, f"projects/{key[0]}/global/firewalls/{key[1]}")

    def firewall_delete(self, p: dict[str, str], q: dict[str, str], b: dict[str, Any]) -> Any:
        project, name = p["project"], p["name"]
        return self._delete(
            self.core.firewalls,
            (project, name),
            f"projects/{project}/global/firewalls/{name}",
            project,
            None,
            "firewall",
            "compute.delete_firewall",
            [],
        )
