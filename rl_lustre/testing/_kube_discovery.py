"""API discovery for :class:`~rl_lustre.testing.kube.KubeFake`, built from the kind table.

What ``kubectl`` (and any client-go program) reads before it can do anything: ``/api``
(``APIVersions``), ``/api/v1`` and ``/apis/<group>/<version>`` (``APIResourceList``),
``/apis`` (``APIGroupList``) and ``/openapi/v3`` (the index of per-group-version OpenAPI
documents; each lists its paths' parameters, so that kubectl knows the server validates
fields itself, and the schemas: the KubeRay CRD's own for ``ray.io/v1``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ._kube_kinds import KINDS, KindInfo

Obj = dict[str, Any]

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_SUBRESOURCE_KINDS = {"portforward": ("PodPortForwardOptions", ["create", "get"]), "log": ("Pod", ["get"])}


def group_versions() -> dict[str, list[KindInfo]]:
    """Kinds by ``apiVersion`` (``v1``, ``apps/v1``, ``ray.io/v1``), in table order."""
    out: dict[str, list[KindInfo]] = {}
    for info in KINDS.values():
        out.setdefault(info.api_version, []).append(info)
    return out


def api_versions(endpoint: str) -> Obj:
    """``GET /api``."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": endpoint}],
    }


def api_group_list(hidden: set[str] = frozenset()) -> Obj:  # type: ignore[assignment]
    """``GET /apis``: every non-core group the table serves (minus ``hidden`` ones)."""
    groups = []
    for gv in group_versions():
        group, _, version = gv.rpartition("/")
        if not group or group in hidden:
            continue
        entry = {"groupVersion": gv, "version": version}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(group_version: str) -> Obj | None:
    """``GET /api/v1`` or ``/apis/<group>/<version>``; None for a group version not served."""
    kinds = group_versions().get(group_version)
    if not kinds:
        return None
    resources: list[Obj] = []
    for info in kinds:
        entry: Obj = {
            "name": info.plural,
            "singularName": info.kind.lower(),
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": list(_VERBS),
            "storageVersionHash": _hash(info.kind + info.api_version)[:12],
        }
        if info.short_names:
            entry["shortNames"] = list(info.short_names)
        if info.kind in ("Pod", "Service", "DaemonSet", "Job", "RayCluster"):
            entry["categories"] = ["all"]
        resources.append(entry)
        if info.status:
            resources.append(
                {
                    "name": f"{info.plural}/status",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        for sub in info.subresources:
            kind, verbs = _SUBRESOURCE_KINDS.get(sub, (info.kind, ["get"]))
            resources.append(
                {
                    "name": f"{info.plural}/{sub}",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": kind,
                    "verbs": verbs,
                }
            )
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest().upper()


def _openapi_path(group_version: str) -> str:
    return "api/v1" if group_version == "v1" else f"apis/{group_version}"


def openapi_v3_index() -> Obj:
    """``GET /openapi/v3``: where each group version's document is."""
    paths = {}
    for gv in group_versions():
        path = _openapi_path(gv)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={_hash(json.dumps(openapi_v3(gv)))[:32]}"}
    return {"paths": paths}


_FIELD_VALIDATION = {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}


def openapi_v3(group_version: str) -> Obj | None:
    """The OpenAPI v3 document of one group version.

    Its paths carry the ``fieldValidation`` parameter on writes (and the kind they
    write), which tells kubectl to let the server validate (``?fieldValidation=Strict``).
    There is no OpenAPI v2 document (``/openapi/v2`` is a 404), as on a server that
    serves v3 only. Schemas are given for custom
    resources only (the RayCluster's is KubeRay's own), so kubectl computes patches of
    built-in kinds from its compiled-in types, as it does for any server it has no
    schema from, and merge patches of RayClusters.
    """
    kinds = group_versions().get(group_version)
    if not kinds:
        return None
    paths: Obj = {}
    schemas: Obj = {}
    for info in kinds:
        prefix = "/" + _openapi_path(group_version)
        scope = f"{prefix}/namespaces/{{namespace}}/{info.plural}" if info.namespaced else f"{prefix}/{info.plural}"
        gvk = {"group": info.group, "version": info.version, "kind": info.kind}
        write = {
            "parameters": [_FIELD_VALIDATION],
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-group-version-kind": gvk,
        }
        read = {"responses": {"200": {"description": "OK"}}, "x-kubernetes-group-version-kind": gvk}
        paths[scope] = {"get": read, "post": write}
        paths[f"{scope}/{{name}}"] = {"get": read, "put": write, "patch": write, "delete": read}
        if not info.builtin:
            schema = _custom_schema(info)
            if schema is not None:
                schemas[f"{info.group}.{info.version}.{info.kind}"] = schema
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0-kube-fake"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _custom_schema(info: KindInfo) -> Obj | None:
    if info.kind != "RayCluster":
        return None
    from ..kube.schema import raycluster_crd

    schema = dict(raycluster_crd()["openAPIV3Schema"])
    schema["x-kubernetes-group-version-kind"] = [{"group": info.group, "kind": info.kind, "version": info.version}]
    return schema
