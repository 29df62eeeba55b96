"""Reading the Kubernetes API from inside the cluster, as the pod this process runs in.

The standard in-cluster credentials: the API server at
``$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``, the pod's service account token and CA
under ``/var/run/secrets/kubernetes.io/serviceaccount`` (another directory may be named, as
the keeper's ``--kube-credentials`` does). On the Ray head that account is
``<cluster>-ray-head`` (:mod:`rl_lustre.kube.head_access`): it may read the pods and events of
its namespace and the cluster's Nodes, nothing else. What reads through here:
:mod:`.kubeevents` (a stalled run's bundle) and :mod:`.nodeends` (when a flex-start node ends).

    >>> api = Api("https://127.0.0.1:6443", token="t", timeout=3.0)
    >>> api.url("/api/v1/nodes/n 1", labelSelector="a=b")
    'https://127.0.0.1:6443/api/v1/nodes/n 1?labelSelector=a%3Db'

Standard library only (part of the on-cluster package).
"""

from __future__ import annotations

import dataclasses
import json
import os
import ssl
import urllib.parse
import urllib.request
from typing import Any

__all__ = ["SERVICE_ACCOUNT_DIR", "Api", "connect", "in_cluster", "own_namespace"]

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def in_cluster(credentials: str = SERVICE_ACCOUNT_DIR) -> bool:
    """Whether this process runs in a Kubernetes pod with a service account token."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.isfile(os.path.join(credentials, "token"))


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def own_namespace(credentials: str = SERVICE_ACCOUNT_DIR) -> str:
    """The namespace of this process's pod (from its service account's files)."""
    return _read(os.path.join(credentials, "namespace"))


@dataclasses.dataclass(frozen=True)
class Api:
    """The API server at ``base``, read with ``token`` (never shown), trusting ``context``'s CAs."""

    base: str
    token: str = dataclasses.field(repr=False)
    timeout: float = 10.0
    context: ssl.SSLContext | None = dataclasses.field(default=None, repr=False)

    def url(self, path: str, **params: str) -> str:
        return f"{self.base.rstrip('/')}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")

    def get(self, path: str, **params: str) -> Any:
        """The JSON at ``path`` (already quoted). Raises OSError (``HTTPError`` for a refusal)."""
        request = urllib.request.Request(self.url(path, **params), headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as response:
            return json.loads(response.read())


def connect(
    *,
    api: str | None = None,
    token: str | None = None,
    ca_pem: str | None = None,
    credentials: str = SERVICE_ACCOUNT_DIR,
    timeout: float = 10.0,
) -> Api:
    """The API server as this pod reaches it; ``api``, ``token`` and ``ca_pem`` default to the
    pod's own (``credentials``: the directory of its service account's token and CA).

    Raises:
        OSError: not in a pod (no ``KUBERNETES_SERVICE_HOST``), or its credentials unreadable.
    """
    if api is None:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise OSError("not in a Kubernetes pod: KUBERNETES_SERVICE_HOST is not set")
        api = f"https://{f'[{host}]' if ':' in host else host}:{port}"
    token = token if token is not None else _read(os.path.join(credentials, "token"))
    context = ssl.create_default_context(cafile=None if ca_pem is not None else os.path.join(credentials, "ca.crt"))
    if ca_pem is not None:
        context.load_verify_locations(cadata=ca_pem)
    return Api(api, token, timeout, context)
