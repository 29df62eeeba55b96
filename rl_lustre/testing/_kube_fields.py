"""Server-side field validation for :class:`~rl_lustre.testing.kube.KubeFake`, as the API
server does it: what happens to a field the kind's schema does not know.

A real API server decodes what a client sends against the kind's schema (Go types for
built-in kinds, the CRD's structural schema for custom resources). A field it does not
know is, by the request's ``fieldValidation`` parameter:

- ``Ignore``: dropped;
- ``Warn`` (what the server does when the client sends nothing, as the Python client
  does): dropped, with a ``Warning: 299 - "unknown field \\"spec.x\\""`` header per field;
- ``Strict`` (kubectl's default): the request fails: ``400 BadRequest`` on create and
  update (``... cannot be handled as a Job: strict decoding error: unknown field
  "spec.x"``), ``422 Invalid`` on a patch.

The schemas: the Kubernetes OpenAPI definitions ``kubernetes-validate`` ships (for the
built-in kinds), the RayCluster and ComputeClass CRDs the package vendors, the
``networking.gke.io`` schemas it ships; ``metadata`` is ``ObjectMeta`` for every kind. Fields under a schema that keeps
unknown fields (``x-kubernetes-preserve-unknown-fields``, maps) are known. A kind without a
schema here keeps every field.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from ._kube_kinds import KINDS
from ._kube_store import ApiError, Obj

__all__ = ["FIELD_VALIDATION", "check_fields", "unknown_fields"]

FIELD_VALIDATION = ("Ignore", "Warn", "Strict")
_KUBERNETES_VERSION = "1.35.0"  # the Kubernetes minor whose built-in schemas apply
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def _root() -> Any:
    import importlib.resources

    return importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v{_KUBERNETES_VERSION}-local"


@functools.lru_cache(maxsize=1)
def _definitions() -> dict[str, Any]:
    defs: dict[str, Any] = json.loads((_root() / "_definitions.json").read_text())["$defs"]
    return defs


@functools.lru_cache(maxsize=64)
def _schema(kind: str) -> dict[str, Any] | None:
    """The schema a kind's objects are decoded with, or None when the fake has none."""
    info = KINDS.get(kind)
    if info is None:
        return None
    if info.api_version == "ray.io/v1" and kind == "RayCluster":
        from ..kube.schema import raycluster_crd

        return dict(raycluster_crd()["openAPIV3Schema"])
    if info.api_version == "cloud.google.com/v1" and kind == "ComputeClass":
        from ..kube.schema import compute_class_crd

        return dict(compute_class_crd()["openAPIV3Schema"])
    if info.api_version == "networking.gke.io/v1":
        from ..kube.schema import _networking_schemas

        found = _networking_schemas()["kinds"].get(kind)
        return dict(found) if found is not None else None
    if not info.builtin:
        return None
    group = info.group.split(".")[0] if info.group else ""
    name = "-".join(p for p in (kind.lower(), group, info.version) if p)
    path = _root() / f"{name}.json"
    try:
        schema: dict[str, Any] = json.loads(path.read_text())
    except (FileNotFoundError, OSError):
        return None
    return schema


def _resolve(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    seen = 0
    while "$ref" in schema and seen < 50:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        schema = _definitions().get(name, {})
        seen += 1
    for combined in ("allOf", "anyOf", "oneOf"):
        parts = schema.get(combined)
        if isinstance(parts, list) and len(parts) == 1 and isinstance(parts[0], Mapping):
            return _resolve(parts[0])
    return schema


def _walk(schema: Mapping[str, Any], value: Any, path: str, out: list[str]) -> None:
    schema = _resolve(schema)
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _walk(items, item, f"{path}[{i}]", out)
        return
    if not isinstance(value, Mapping):
        return
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    if not isinstance(props, Mapping):
        if isinstance(extra, Mapping):
            for key, item in value.items():
                _walk(extra, item, f"{path}.{key}" if path else str(key), out)
        return
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    for key, item in value.items():
        where = f"{path}.{key}" if path else str(key)
        if key in props:
            _walk(props[key], item, where, out)
        elif isinstance(extra, Mapping):
            _walk(extra, item, where, out)
        elif not preserve and extra is not True:
            out.append(where)


def unknown_fields(obj: Mapping[str, Any]) -> list[str]:
    """The paths of ``obj``'s fields its kind's schema does not know, as the server names
    them (``spec.template.spec.containers[0].bogus``).

    Examples:
        >>> containers = [{"name": "c", "img": "x"}]
        >>> unknown_fields({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "labelz": {}},
        ...                 "spec": {"backofLimit": 2, "template": {"spec": {"containers": containers}}}})
        ['metadata.labelz', 'spec.backofLimit', 'spec.template.spec.containers[0].img']
    """
    schema = _schema(str(obj.get("kind")))
    if schema is None:
        return []
    out: list[str] = []
    for key, value in obj.items():
        if key == "metadata":
            _walk({"$ref": f"#/$defs/{_OBJECT_META}"}, value, "metadata", out)
        elif key in ("apiVersion", "kind"):
            continue
        else:
            props = _resolve(schema).get("properties") or {}
            if key in props:
                _walk(props[key], value, key, out)
            else:
                out.append(key)
    return sorted(out)


def _drop(obj: Any, path: str) -> None:
    """Remove the field at ``path`` (as :func:`unknown_fields` names it) from ``obj``."""
    parts: list[str | int] = []
    for piece in path.split("."):
        name, _, rest = piece.partition("[")
        if name:
            parts.append(name)
        while rest:
            index, _, rest = rest.partition("]")
            parts.append(int(index))
            rest = rest.removeprefix("[")
    node = obj
    for part in parts[:-1]:
        node = node[part]
    del node[parts[-1]]


def check_fields(obj: Obj, mode: str, *, patch: bool, warnings: list[str]) -> None:
    """Apply field validation ``mode`` to ``obj`` (in place): drop unknown fields and note
    a warning for each (``Warn``), drop them silently (``Ignore``), or refuse (``Strict``).

    Raises:
        ApiError: ``mode`` is not a valid value (400), or ``Strict`` found unknown fields
            (400 for a create or update, 422 for a patch).
    """
    if mode not in FIELD_VALIDATION:
        raise ApiError(
            400,
            "BadRequest",
            f'fieldValidation: Unsupported value: "{mode}": supported values: '
            f"{', '.join(repr(m) for m in FIELD_VALIDATION)}",
        )
    unknown = unknown_fields(obj)
    if not unknown:
        return
    listed = ", ".join(f'unknown field "{path}"' for path in unknown)
    if mode == "Strict":
        kind = str(obj.get("kind"))
        version = str(obj.get("apiVersion", "")).rpartition("/")[2]
        if patch:
            raise ApiError(
                422, "Invalid", f' "" is invalid: patch: Invalid value: "{{...}}": strict decoding error: {listed}'
            )
        raise ApiError(
            400,
            "BadRequest",
            f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: {listed}',
        )
    for path in unknown:
        _drop(obj, path)
    if mode == "Warn":
        warnings += [f'unknown field "{path}"' for path in unknown]
