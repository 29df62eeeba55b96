"""The API server's field validation: we ask it to refuse a field its schema for the kind
lacks, and read which fields it named. No remote call.
"""

from __future__ import annotations

import re

__all__ = ["FIELD_VALIDATION", "unknown_fields"]

FIELD_VALIDATION = "Strict"
"""What :class:`~rl_lustre.kube.client.ResourceClient` asks of the server for a field its schema for the kind does
not know (``fieldValidation``): to refuse the request. Without it a server drops such a
field and only says so in a ``Warning`` header, which the Python client ignores: a
mistyped field, or one the cluster's KubeRay CRD is too old to know, would be created,
then missing, then "drifted" on every later ``up()``."""

_UNKNOWN_FIELD = re.compile(r'unknown field \\?"((?:[^"\\]|\\.)*?)\\?"')


def unknown_fields(message: str) -> list[str]:
    """The fields a server's strict decoding error names (none for any other message).

    Examples:
        >>> unknown_fields('RayCluster in version "v1" cannot be handled as a RayCluster: strict decoding '
        ...                'error: unknown field "spec.upgradeStrategy", unknown field "spec.x"')
        ['spec.upgradeStrategy', 'spec.x']
        >>> unknown_fields("pods is forbidden")
        []
    """
    _, marker, rest = message.partition("strict decoding error:")
    return list(dict.fromkeys(_UNKNOWN_FIELD.findall(rest))) if marker else []
