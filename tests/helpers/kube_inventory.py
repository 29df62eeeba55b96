"""Every object an API server holds, of every kind its discovery lists (a test helper).

Works on the real control plane (``kube_plane``) and on :class:`~rl_lustre.testing.KubeFake`
alike: it asks ``/api``, ``/apis`` and each group version for the kinds that can be listed,
then lists each. The tests that check what ``down()`` leaves compare two inventories.
"""

from __future__ import annotations

from typing import Any

import attrs

# Kinds that come and go by themselves on any cluster: never something we create.
SELF_MANAGED = frozenset(
    {
        "Event",
        "Lease",
        "Node",
        "ComponentStatus",
        "Binding",
        # kwok's own configuration (its stages), and the test harness's port-forwards and logs.
        "Stage",
        "PortForward",
        "ClusterPortForward",
        "Logs",
        "ClusterLogs",
        "Attach",
        "ClusterAttach",
        "Exec",
        "ClusterExec",
        "Metric",
        "ResourceUsage",
        "ClusterResourceUsage",
    }
)


@attrs.frozen
class Item:
    api_version: str
    kind: str
    namespace: str | None
    name: str
    uid: str
    labels: dict[str, str] = attrs.field(eq=False, repr=False)
    owners: tuple[str, ...] = attrs.field(eq=False, repr=False)
    path: str = attrs.field(eq=False, repr=False)

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


def _call(api: Any, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
    """One request through ``api`` (an ``ApiClient``): its host, TLS and bearer token."""
    import json

    from kubernetes.client.exceptions import ApiException

    from rl_lustre.kube.client import auth_headers

    headers = {"Accept": "application/json", "Content-Type": content_type, **auth_headers(api.configuration)}
    response = api.call_api(
        method, api.configuration.host + path, header_params=headers, body=None if body is None else body
    )
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(status=response.status, reason=response.reason, body=response.data)
    return json.loads(response.data or b"{}")


def _get(api: Any, path: str) -> Any:
    return _call(api, "GET", path)


def kinds(api: Any) -> list[tuple[str, str, str, bool]]:
    """``(path prefix, apiVersion, plural, namespaced)`` of every listable kind (minus
    :data:`SELF_MANAGED`), preferred versions only."""
    out = []
    versions = [("/api/v1", "v1")]
    for group in _get(api, "/apis").get("groups", []):
        preferred = group.get("preferredVersion") or group["versions"][0]
        versions.append((f"/apis/{preferred['groupVersion']}", preferred["groupVersion"]))
    for prefix, api_version in versions:
        for resource in _get(api, prefix).get("resources", []):
            if "/" in resource["name"] or "list" not in resource.get("verbs", []):
                continue
            if resource["kind"] in SELF_MANAGED:
                continue
            out.append((prefix, api_version, resource["name"], bool(resource.get("namespaced"))))
    return out


def inventory(api: Any) -> set[Item]:
    """Every object of every listable kind (minus :data:`SELF_MANAGED`), all namespaces."""
    items = set()
    for prefix, api_version, plural, _ in kinds(api):
        listed = _get(api, f"{prefix}/{plural}")
        kind = listed.get("kind", "").removesuffix("List")
        for obj in listed.get("items") or []:
            meta = obj.get("metadata") or {}
            ns = meta.get("namespace")
            path = f"{prefix}{f'/namespaces/{ns}' if ns else ''}/{plural}/{meta['name']}"
            items.add(
                Item(
                    api_version,
                    obj.get("kind") or kind,
                    ns,
                    meta["name"],
                    meta.get("uid", ""),
                    dict(meta.get("labels") or {}),
                    tuple(o.get("uid", "") for o in meta.get("ownerReferences") or []),
                    path,
                )
            )
    return items


def delete(api: Any, item: Item, *, force: bool = False) -> None:
    """Delete ``item`` (what it owns goes after it, by the garbage collector); gone already
    is fine. ``force``: its finalizers are dropped first, and a pod goes without grace."""
    from kubernetes.client.exceptions import ApiException

    try:
        if force:
            _call(api, "PATCH", item.path, {"metadata": {"finalizers": None}}, "application/merge-patch+json")
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if force and item.kind == "Pod":
            body["gracePeriodSeconds"] = 0
        _call(api, "DELETE", item.path, body)
    except ApiException as exc:
        if exc.status != 404:
            raise
