"""Strict schema validation for what clients send :class:`~rl_lustre.testing.kube.KubeFake`.

:func:`schema_validator` is the ``validate`` callable a test hands the fake (public as
``rl_lustre.testing.kube_schema_validator``): the real Kubernetes schemas for core
objects, KubeRay's CRD for RayClusters, the shipped ``networking.gke.io`` and ComputeClass schemas.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._kube_store import Obj

__all__ = ["schema_validator"]


def schema_validator(
    crd_path: str | os.PathLike[str] | None = None, *, kubernetes_version: str = "1.33.0"
) -> Callable[[Obj], None]:
    """A ``validate`` callable for :class:`KubeFake`: the real schemas, strictly.

    Core objects go through ``kubernetes_validate`` in strict mode (unknown fields
    are errors). RayClusters go through ``jsonschema`` against KubeRay's CRD with
    unknown fields forbidden, as the API server prunes and rejects them: the schema
    shipped in :mod:`rl_lustre.kube.schema`, or the CRD YAML at ``crd_path``.
    ``networking.gke.io/v1`` objects go through the schemas shipped in
    ``rl_lustre/kube/crds`` (:func:`rl_lustre.kube.schema.validate_networking`), ComputeClasses
    through the one written from GKE's reference (:func:`rl_lustre.kube.schema.validate_compute_class`).

    Examples:
        >>> check = schema_validator()
        >>> check({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque"})
        >>> check({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "tpye": "Opaque"})
        ... # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        kubernetes_validate.utils.ValidationError: unknown field 'tpye'

    Args:
        crd_path: a ``ray.io_rayclusters.yaml`` CRD to use instead of the shipped schema.
        kubernetes_version: the Kubernetes version whose schemas apply.
    """
    import kubernetes_validate

    ray_validator = _crd_validator(os.fspath(crd_path) if crd_path is not None else None)

    def validate(obj: Obj) -> None:
        if obj.get("apiVersion") == "networking.gke.io/v1":
            from ..kube.schema import validate_networking

            validate_networking(obj)
            return
        if obj.get("apiVersion") == "ray.io/v1":
            ray_validator.validate(obj)
            return
        if obj.get("apiVersion") == "cloud.google.com/v1" and obj.get("kind") == "ComputeClass":
            from ..kube.schema import validate_compute_class

            validate_compute_class(obj)
            return
        kubernetes_validate.validate(obj, kubernetes_version, strict=True)

    return validate


@functools.lru_cache(maxsize=4)
def _crd_validator(crd_path: str | None) -> Any:
    """A jsonschema validator for the CRD's v1 schema, built once per file (it is large)."""
    import jsonschema

    from ..kube.schema import forbid_unknown_fields, raycluster_schema

    if crd_path is None:
        schema = raycluster_schema()
    else:
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        crd = yaml.load(Path(crd_path).read_text(), Loader=loader)
        version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
        schema = forbid_unknown_fields(version["schema"]["openAPIV3Schema"])
    return jsonschema.validators.validator_for(schema)(schema)
