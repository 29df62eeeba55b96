"""The schemas shipped with the package (KubeRay's ``RayCluster`` CRD, GKE's networking objects
and ``ComputeClass``), and the check every such object passes before it is sent.

The schema is KubeRay's own ``openAPIV3Schema`` for ``ray.io/v1`` (descriptions removed;
provenance and licence in ``crds/NOTICE``). :func:`validate_raycluster` applies it the
way the API server does for a client: a field the schema does not know is an error
(the server would prune it silently, which loses settings), and so is a wrong type or a
missing required field. ``jsonschema`` is imported on first use.

Examples:
    >>> from rl_lustre.kube.schema import validate_raycluster
    >>> validate_raycluster({"apiVersion": "ray.io/v1", "kind": "RayCluster",
    ...                      "metadata": {"name": "demo"}, "spec": {"headGroupSpec": {"rayStartparams": {}}}})
    Traceback (most recent call last):
    ...
    rl_lustre.errors.ConfigError: RayCluster.spec.headGroupSpec='rayStartparams': ...
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = [
    "COMPUTE_CLASS_FILE",
    "CRD_FILE",
    "NETWORKING_API",
    "NETWORKING_FILE",
    "compute_class_crd",
    "forbid_unknown_fields",
    "raycluster_crd",
    "raycluster_schema",
    "validate_compute_class",
    "validate_networking",
    "validate_raycluster",
]

CRD_FILE = Path(__file__).with_name("crds") / "ray.io_rayclusters.v1.json"
NETWORKING_FILE = Path(__file__).with_name("crds") / "networking.gke.io_v1.json"
NETWORKING_API = "networking.gke.io/v1"
COMPUTE_CLASS_FILE = Path(__file__).with_name("crds") / "cloud.google.com_computeclasses.v1.json"

_SUBSCHEMA_MAPS = ("properties", "patternProperties")
_SUBSCHEMAS = ("items", "additionalProperties", "not")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf")


@functools.lru_cache(maxsize=1)
def raycluster_crd() -> dict[str, Any]:
    """The vendored CRD facts: ``group``, ``kind``, ``plural``, ``version``,
    ``subresources`` and ``openAPIV3Schema``.

    Examples:
        >>> crd = raycluster_crd()
        >>> crd["group"], crd["kind"], sorted(crd["subresources"])
        ('ray.io', 'RayCluster', ['status'])
    """
    data: dict[str, Any] = json.loads(CRD_FILE.read_text())
    return data


def forbid_unknown_fields(schema: Any) -> Any:
    """A copy of an OpenAPI schema with ``additionalProperties: false`` wherever
    properties are listed and unknown fields are not explicitly preserved: what the API
    server's pruning amounts to for a client that sends an unknown field.

    Examples:
        >>> forbid_unknown_fields({"type": "object", "properties": {"a": {"type": "string"}}})["additionalProperties"]
        False
    """
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), Mapping):
            out[key] = {name: forbid_unknown_fields(sub) for name, sub in schema[key].items()}
    for key in _SUBSCHEMAS:
        if isinstance(schema.get(key), Mapping):
            out[key] = forbid_unknown_fields(schema[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            out[key] = [forbid_unknown_fields(sub) for sub in schema[key]]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.lru_cache(maxsize=1)
def raycluster_schema() -> dict[str, Any]:
    """The RayCluster schema with unknown fields forbidden (see :func:`forbid_unknown_fields`).

    Examples:
        >>> raycluster_schema()["properties"]["spec"]["additionalProperties"]
        False
    """
    schema: dict[str, Any] = forbid_unknown_fields(raycluster_crd()["openAPIV3Schema"])
    return schema


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    schema = raycluster_schema()
    return jsonschema.validators.validator_for(schema)(schema)


def validate_raycluster(obj: Mapping[str, Any]) -> None:
    """Check a ``ray.io/v1`` RayCluster against KubeRay's CRD schema (no remote call).

    Examples:
        >>> from rl_lustre import Cluster
        >>> from rl_lustre.kube.manifests import build_manifests
        >>> ray = build_manifests(Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b"))[-1]
        >>> validate_raycluster(ray)

    Raises:
        ConfigError: naming the first offending field (a dotted path under the
            RayCluster), its value (an unknown field's name; values of other fields
            shortened) and the schema rule it breaks.
    """
    errors = list(_validator().iter_errors(dict(obj)))
    if not errors:
        return
    # An unknown (misspelt) field explains the rest: report it first.
    error = min(
        errors,
        key=lambda e: (e.validator != "additionalProperties", len(e.absolute_path), [str(p) for p in e.absolute_path]),
    )
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = set((error.schema or {}).get("properties") or {})
        unknown = sorted(k for k in error.instance if k not in allowed)
        value: Any = unknown[0] if len(unknown) == 1 else unknown
        rule = f"not a field of the KubeRay RayCluster schema here (known: {', '.join(sorted(allowed))})"
    else:
        text = repr(error.instance)
        value = error.instance if len(text) <= 80 else text[:77] + "..."
        message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
        rule = f"the KubeRay RayCluster schema requires it: {message}"
    raise ConfigError("RayCluster", path or "<root>", value, rule)


@functools.lru_cache(maxsize=1)
def _networking_schemas() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(NETWORKING_FILE.read_text())
    return loaded


def validate_networking(obj: Mapping[str, Any]) -> None:
    """Check a ``networking.gke.io/v1`` object (GKENetworkParamSet, Network) against the
    schemas in ``crds/networking.gke.io_v1.json`` (provenance in ``crds/NOTICE``).

    Examples:
        >>> validate_networking({"apiVersion": "networking.gke.io/v1", "kind": "GKENetworkParamSet",
        ...                      "metadata": {"name": "rdma-0"},
        ...                      "spec": {"vpc": "n", "vpcSubnet": "s", "deviceMode": "RMDA"}})
        ... # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        rl_lustre.errors.ConfigError: GKENetworkParamSet.spec.deviceMode='RMDA': must match the networking.gke.io/v1
        schema: 'RMDA' is not one of ['RDMA', 'NetDevice']

    Raises:
        ConfigError: a kind without a schema, or an object the schema rejects (naming the
            field, the value and the rule).
    """
    import jsonschema

    kind = str(obj.get("kind"))
    schemas = _networking_schemas()["kinds"]
    if obj.get("apiVersion") != NETWORKING_API or kind not in schemas:
        raise ConfigError(
            "manifest",
            "kind",
            f"{obj.get('apiVersion')}/{kind}",
            f"must be one of {', '.join(f'{NETWORKING_API}/{k}' for k in sorted(schemas))}",
        )
    validator = jsonschema.Draft202012Validator(schemas[kind])
    error = jsonschema.exceptions.best_match(validator.iter_errors(copy.deepcopy(dict(obj))))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "(object)"
        raise ConfigError(
            kind,
            where,
            error.instance if error.absolute_path else None,
            f"must match the {NETWORKING_API} schema: {error.message}",
        )


@functools.lru_cache(maxsize=1)
def compute_class_crd() -> dict[str, Any]:
    """The vendored ``ComputeClass`` CRD version (``cloud.google.com/v1``), written from Google's
    field reference (provenance in ``crds/NOTICE``): ``group``, ``kind``, ``plural``,
    ``singular``, ``scope``, ``version``, ``subresources`` and ``openAPIV3Schema``.

    Examples:
        >>> crd = compute_class_crd()
        >>> crd["group"], crd["kind"], crd["scope"]
        ('cloud.google.com', 'ComputeClass', 'Cluster')
        >>> crd["openAPIV3Schema"]["properties"]["spec"]["properties"]["whenUnsatisfiable"]["enum"]
        ['ScaleUpAnyway', 'DoNotScaleUp']
    """
    data: dict[str, Any] = json.loads(COMPUTE_CLASS_FILE.read_text())
    return data


@functools.lru_cache(maxsize=1)
def _compute_class_validator() -> Any:
    import jsonschema

    schema = forbid_unknown_fields(compute_class_crd()["openAPIV3Schema"])
    return jsonschema.validators.validator_for(schema)(schema)


def validate_compute_class(obj: Mapping[str, Any]) -> None:
    """Check a ``cloud.google.com/v1`` ComputeClass against the vendored schema (no remote call):
    an unknown field, a wrong type, a value out of range or not among those allowed is an error.

    Examples:
        >>> validate_compute_class({"apiVersion": "cloud.google.com/v1", "kind": "ComputeClass",
        ...     "metadata": {"name": "c"}, "spec": {"priorities": [{"nodepools": ["gpu-pool"]}],
        ...     "whenUnsatisfiable": "DoNotScaleUp", "autoscalingPolicy": {"consolidationDelayMinutes": 0}}})
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rl_lustre.errors.ConfigError: ComputeClass.spec.autoscalingPolicy.consolidationDelayMinutes=0: ...

    Raises:
        ConfigError: naming the first offending field (a dotted path under the object), its
            value and the rule the schema states.
    """
    if obj.get("apiVersion") != "cloud.google.com/v1" or obj.get("kind") != "ComputeClass":
        raise ConfigError(
            "manifest", "kind", f"{obj.get('apiVersion')}/{obj.get('kind')}", "must be cloud.google.com/v1/ComputeClass"
        )
    errors = list(_compute_class_validator().iter_errors(copy.deepcopy(dict(obj))))
    if not errors:
        return
    error = min(
        errors,
        key=lambda e: (e.validator != "additionalProperties", len(e.absolute_path), [str(p) for p in e.absolute_path]),
    )
    path = ".".join(str(p) for p in error.absolute_path) or "<root>"
    if error.validator == "additionalProperties":
        allowed = set((error.schema or {}).get("properties") or {})
        unknown = sorted(k for k in error.instance if k not in allowed)
        value: Any = unknown[0] if len(unknown) == 1 else unknown
        rule = f"not a field of the ComputeClass reference here (known: {', '.join(sorted(allowed))})"
    else:
        value = error.instance
        cited = str((error.schema or {}).get("description") or "").split(" (", 1)[0]
        rule = f"the ComputeClass reference requires it: {error.message}" + (f" ({cited})" if cited else "")
    raise ConfigError("ComputeClass", path, value, rule)
