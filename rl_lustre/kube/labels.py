"""The labels every Kubernetes object of a deployment carries: the cluster's own (checked
against Kubernetes' rules), then our ownership labels."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..catalog import ownership_labels
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["deployment_labels"]

# Kubernetes label values are stricter than GCP's: they must start and end alphanumeric.
_K8S_LABEL = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?")


def deployment_labels(cluster: ClusterSpec) -> dict[str, str]:
    """The labels of every Kubernetes object of ``cluster``: its own, then our ownership labels."""
    for key, value in cluster.labels.items():
        if not _K8S_LABEL.fullmatch(key):
            raise ConfigError(
                "Cluster",
                f"labels[{key!r}]",
                key,
                "Kubernetes label keys must start and end with a letter or digit",
            )
        if not _K8S_LABEL.fullmatch(value):
            raise ConfigError(
                "Cluster",
                f"labels[{key!r}]",
                value,
                "Kubernetes label values must start and end with a letter or digit",
            )
    # Ours last: a user label must not disown a resource we created.
    return {**cluster.labels, **ownership_labels(cluster.name)}
