"""Google API clients, built on first use from the environment and cached per (API, endpoint).

Credentials are Application Default Credentials, unless an emulator is configured
(Google's ``*_EMULATOR_HOST`` convention):

- ``RL_LUSTRE_GCP_EMULATOR_HOST=host:port``: every gRPC client (Lustre,
  ClusterManager, Monitoring, Cloud Quotas, IAM, Resource Manager) talks to that address over an insecure channel with
  anonymous credentials.
- ``RL_LUSTRE_GCP_REST_EMULATOR=http://host:port``: every REST client (Compute,
  Service Networking) talks to that base URL over plain HTTP with anonymous credentials.

The variables are read each time a client is asked for, so a test that sets them (for
instance with :class:`rl_lustre.testing.FakeGCP`) gets clients for its own fake.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..errors import ConfigError

log = logging.getLogger("rl_lustre.gcp.clients")

GRPC_EMULATOR_ENV = "RL_LUSTRE_GCP_EMULATOR_HOST"
REST_EMULATOR_ENV = "RL_LUSTRE_GCP_REST_EMULATOR"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
SERVICE_NETWORKING_URL = "https://servicenetworking.googleapis.com"
STORAGE_URL = "https://storage.googleapis.com"

T = TypeVar("T")

_lock = threading.Lock()
_cache: dict[tuple[str, str], Any] = {}
_channels: dict[str, Any] = {}


def grpc_emulator() -> str | None:
    """The ``host:port`` of the gRPC emulator, or None to use Google's endpoints.

    Example::

        # RL_LUSTRE_GCP_EMULATOR_HOST=127.0.0.1:8085
        grpc_emulator()  # '127.0.0.1:8085'

    Raises:
        ConfigError: the variable is set but is not ``host:port``.
    """
    value = os.environ.get(GRPC_EMULATOR_ENV, "").strip()
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or "/" in value:
        raise ConfigError("environment", GRPC_EMULATOR_ENV, value, "must be host:port, like '127.0.0.1:8085'")
    return value


def rest_emulator() -> str | None:
    """The base URL of the REST emulator (no trailing slash), or None for Google's endpoints.

    Example::

        # RL_LUSTRE_GCP_REST_EMULATOR=http://127.0.0.1:8086/
        rest_emulator()  # 'http://127.0.0.1:8086'

    Raises:
        ConfigError: the variable is set but is not an http(s) base URL.
    """
    value = os.environ.get(REST_EMULATOR_ENV, "").strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise ConfigError("environment", REST_EMULATOR_ENV, value, "must be a base URL like 'http://127.0.0.1:8086'")
    return value.rstrip("/")


def credentials() -> Any:
    """Application Default Credentials with the cloud-platform scope.

    Example::

        creds = credentials()   # after `gcloud auth application-default login`

    Raises:
        GCPError: no credentials are configured; the message says how to set them up.
    """
    import google.auth

    from ._errors import ADC, translated

    with translated(ADC):
        creds, _ = google.auth.default(scopes=list(SCOPES))
    return creds


def _anonymous() -> Any:
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()


def _cached(api: str, endpoint: str, build: Callable[[], T]) -> T:
    key = (api, endpoint)
    with _lock:
        client = _cache.get(key)
    if client is not None:
        return client
    # Built outside the lock: finding credentials may take a network round trip.
    client = build()
    with _lock:
        return _cache.setdefault(key, client)


def _channel(host: str) -> Any:
    import grpc

    with _lock:
        channel = _channels.get(host)
        if channel is None:
            channel = _channels[host] = grpc.insecure_channel(host)
        return channel


def grpc_client(client_cls: type[T], transport_cls: type[Any]) -> T:
    """A cached client of a gRPC API (``LustreClient``, ``ClusterManagerClient``, ...).

    With ``RL_LUSTRE_GCP_EMULATOR_HOST`` set, the client's transport is built on an
    insecure channel to the emulator (an ``api_endpoint`` option would build TLS).

    Examples:
        >>> from google.cloud.lustre_v1 import LustreClient
        >>> from google.cloud.lustre_v1.services.lustre.transports import LustreGrpcTransport
        >>> import os; os.environ["RL_LUSTRE_GCP_EMULATOR_HOST"] = "127.0.0.1:9"
        >>> client = grpc_client(LustreClient, LustreGrpcTransport)
        >>> client is grpc_client(LustreClient, LustreGrpcTransport)
        True
        >>> del os.environ["RL_LUSTRE_GCP_EMULATOR_HOST"]; clear_cache("127.0.0.1:9")
    """
    host = grpc_emulator()
    if host is not None:
        emulator = host

        def build_emulated() -> T:
            log.debug("%s: emulator at %s", client_cls.__name__, emulator)
            transport = transport_cls(channel=_channel(emulator))
            return client_cls(transport=transport)  # type: ignore[call-arg]

        return _cached(client_cls.__name__, emulator, build_emulated)
    build = lambda: client_cls(credentials=credentials())  # type: ignore[call-arg]  # noqa: E731
    return _cached(client_cls.__name__, "google", build)


def lustre() -> Any:
    """The cached ``google.cloud.lustre_v1.LustreClient``.

    Example::

        list(lustre().list_instances(parent="projects/my-project/locations/-"))
    """
    from google.cloud.lustre_v1 import LustreClient
    from google.cloud.lustre_v1.services.lustre.transports import LustreGrpcTransport

    return grpc_client(LustreClient, LustreGrpcTransport)


def cluster_manager() -> Any:
    """The cached ``google.cloud.container_v1.ClusterManagerClient``.

    Example::

        cluster_manager().list_clusters(parent="projects/my-project/locations/-").clusters
    """
    from google.cloud.container_v1 import ClusterManagerClient
    from google.cloud.container_v1.services.cluster_manager.transports import (
        ClusterManagerGrpcTransport,
    )

    return grpc_client(ClusterManagerClient, ClusterManagerGrpcTransport)


def monitoring() -> Any:
    """The cached ``google.cloud.monitoring_v3.MetricServiceClient``.

    Example::

        monitoring().list_time_series(request={"name": "projects/my-project", ...})
    """
    from google.cloud.monitoring_v3 import MetricServiceClient
    from google.cloud.monitoring_v3.services.metric_service.transports import (
        MetricServiceGrpcTransport,
    )

    return grpc_client(MetricServiceClient, MetricServiceGrpcTransport)


def cloud_quotas() -> Any:
    """The cached ``google.cloud.cloudquotas_v1.CloudQuotasClient``.

    Example::

        cloud_quotas().list_quota_infos(parent="projects/my-project/locations/global/services/compute.googleapis.com")
    """
    from google.cloud.cloudquotas_v1 import CloudQuotasClient
    from google.cloud.cloudquotas_v1.services.cloud_quotas.transports import (
        CloudQuotasGrpcTransport,
    )

    return grpc_client(CloudQuotasClient, CloudQuotasGrpcTransport)


def iam_admin() -> Any:
    """The cached ``google.cloud.iam_admin_v1.IAMClient`` (service accounts).

    Example::

        account = "rl-demo-nodes@my-project.iam.gserviceaccount.com"
        iam_admin().get_service_account(name=f"projects/-/serviceAccounts/{account}")
    """
    from google.cloud.iam_admin_v1 import IAMClient
    from google.cloud.iam_admin_v1.services.iam.transports import IAMGrpcTransport

    return grpc_client(IAMClient, IAMGrpcTransport)


def projects() -> Any:
    """The cached ``google.cloud.resourcemanager_v3.ProjectsClient`` (a project's IAM policy).

    Example::

        projects().get_iam_policy(request={"resource": "projects/my-project"}).etag
    """
    from google.cloud.resourcemanager_v3 import ProjectsClient
    from google.cloud.resourcemanager_v3.services.projects.transports import ProjectsGrpcTransport

    return grpc_client(ProjectsClient, ProjectsGrpcTransport)


def compute(client_cls: type[T]) -> T:
    """A cached Compute Engine REST client, e.g. ``compute(compute_v1.NetworksClient)``.

    With ``RL_LUSTRE_GCP_REST_EMULATOR`` set, its REST transport points at the
    emulator over plain HTTP.

    Examples:
        >>> from google.cloud import compute_v1
        >>> import os; os.environ["RL_LUSTRE_GCP_REST_EMULATOR"] = "http://127.0.0.1:9"
        >>> compute(compute_v1.FirewallsClient).transport._host
        'http://127.0.0.1:9'
        >>> del os.environ["RL_LUSTRE_GCP_REST_EMULATOR"]; clear_cache("http://127.0.0.1:9")
    """
    import importlib

    base = rest_emulator()
    if base is None:
        build = lambda: client_cls(credentials=credentials())  # type: ignore[call-arg]  # noqa: E731
        return _cached(client_cls.__name__, "google", build)
    # NetworksClient lives in ...services.networks; its transport is NetworksRestTransport.
    package = client_cls.__module__.rsplit(".", 1)[0]
    transports = importlib.import_module(package + ".transports")
    transport_cls = getattr(transports, client_cls.__name__.removesuffix("Client") + "RestTransport")
    scheme = urlsplit(base).scheme
    emulator = base

    def build_emulated() -> T:
        transport = transport_cls(host=emulator, url_scheme=scheme, credentials=_anonymous())
        return client_cls(transport=transport)  # type: ignore[call-arg]

    return _cached(client_cls.__name__, emulator, build_emulated)


def http_session(api: str, google_url: str) -> tuple[Any, str]:
    """An authorised ``requests`` session and the base URL for a REST API that has no
    Google client library (Service Networking).

    Example::

        session, base = http_session("servicenetworking", SERVICE_NETWORKING_URL)
        session.get(f"{base}/v1/operations/...")

    Returns:
        ``(session, base_url)``; the base URL is the emulator's when one is configured.
    """
    from google.auth.transport.requests import AuthorizedSession

    base = rest_emulator()
    if base is None:
        return _cached(api, "google", lambda: AuthorizedSession(credentials())), google_url
    return _cached(api, base, lambda: AuthorizedSession(_anonymous())), base


def clear_cache(endpoint: str | None = None) -> None:
    """Forget cached clients (those of one emulator ``endpoint``, or all) and close their channels.

    Examples:
        >>> clear_cache()
    """
    with _lock:
        keys = [k for k in _cache if endpoint is None or k[1] == endpoint]
        for key in keys:
            del _cache[key]
        hosts = [h for h in _channels if endpoint is None or h == endpoint]
        channels = [_channels.pop(h) for h in hosts]
    for channel in channels:
        channel.close()
