"""The Secret that carries the cluster's ``secrets`` to its pods, and :class:`SecretValue`.

The pods read each key through ``secretKeyRef`` (see :mod:`rl_lustre.kube.raycluster`),
never through a job's runtime env. Values are redacted unless asked for, and even then
print as :data:`REDACTED`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import naming
from .._secrets import REDACTED
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["REDACTED", "SecretValue", "secret_manifest"]


class SecretValue(str):
    """A secret string whose ``repr`` is redacted.

    It serialises as itself (``json.dumps``, the Kubernetes client), so an applied
    Secret carries the real value, while printing or logging the manifest that holds
    it shows ``'<redacted>'``. ``yaml.safe_dump`` refuses it, which keeps real values
    out of YAML files by accident.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(REDACTED)


def secret_manifest(
    cluster: ClusterSpec, labels: dict[str, str], secret_values: Mapping[str, str] | None, redact: bool
) -> dict[str, Any]:
    """The Secret of ``cluster``: the given values of its declared ``secrets`` (see
    :func:`rl_lustre.kube.manifests.build_manifests` for ``secret_values`` and ``redact``)."""
    data: dict[str, str]
    if secret_values is None:
        data = dict.fromkeys(cluster.secrets, REDACTED) if redact else {}
    else:
        unknown = sorted(set(secret_values) - set(cluster.secrets))
        if unknown:
            # Only the names go into the error: the values are secret.
            raise ConfigError(
                "build_manifests",
                "secret_values",
                unknown,
                f"names not declared in Cluster.secrets {list(cluster.secrets)}",
            )
        data = {
            name: REDACTED if redact else SecretValue(secret_values[name])
            for name in cluster.secrets
            if name in secret_values
        }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": naming.secret_name(cluster), "namespace": cluster.namespace, "labels": dict(labels)},
        "type": "Opaque",
        "stringData": data,
    }
