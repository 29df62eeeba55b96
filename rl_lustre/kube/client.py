"""Kubernetes API clients, and the one place where Kubernetes errors become ours.

Two ways to reach a cluster, neither needing ``kubectl`` or ``gcloud``:

- :func:`kube_api_client` does what ``gcloud container clusters get-credentials``
  does: the GKE cluster's endpoint and CA certificate plus a Google access token
  that is refreshed before it expires (Application Default Credentials, scope
  ``cloud-platform``);
- :func:`kube_api_client_from_kubeconfig` uses an existing kubeconfig and context.

The token sources (:class:`StaticTokenSource`, :class:`GoogleTokenSource`,
:func:`default_token_source`) live in :mod:`rl_lustre.kube.tokens` and are importable
from here too.

:class:`ResourceClient` gives create/get/patch/delete/list/watch of one kind as plain
dicts, over the typed ``CoreV1Api`` and, for the RayCluster, ``CustomObjectsApi``
(the KubeRay Python client is not on PyPI; this is what it does underneath).
:func:`translate_errors` maps ``ApiException``, urllib3, TLS and client-side schema
errors to :class:`~rl_lustre.errors.KubernetesError` at that boundary.

The kubernetes package is imported inside functions: ``import rl_lustre`` stays cheap.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import os
import re
import ssl
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import ConfigError, KubernetesError, RLLustreError
from .field_validation import FIELD_VALIDATION, unknown_fields
from .tokens import (
    CLOUD_PLATFORM_SCOPE,
    EMULATOR_TOKEN,
    GoogleTokenSource,
    StaticTokenSource,
    TokenSource,
    default_token_source,
)

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, Configuration

__all__ = [
    "CLOUD_PLATFORM_SCOPE",
    "EMULATOR_TOKEN",
    "FIELD_VALIDATION",
    "KINDS",
    "REQUEST_TIMEOUT",
    "GoogleTokenSource",
    "Kind",
    "ResourceClient",
    "StaticTokenSource",
    "TokenSource",
    "WatchExpired",
    "auth_headers",
    "default_token_source",
    "kube_api_client",
    "kube_api_client_from_kubeconfig",
    "ssl_context",
    "translate_errors",
    "unknown_fields",
]

logger = logging.getLogger("rl_lustre.kube.client")

REQUEST_TIMEOUT: tuple[float, float] = (10.0, 60.0)
"""``(connect, read)`` seconds allowed to every request but a watch (whose read timeout
follows its ``timeoutSeconds``): a server that accepts the connection and never answers
costs at most this, then a :class:`~rl_lustre.errors.KubernetesError` says so."""

_ENDPOINT = re.compile(r"(?:https://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>\d{1,5}))?/?")
_PEM_BEGIN = "-----BEGIN CERTIFICATE-----"


def _ca_pem(ca: bytes | str) -> str:
    """PEM text from PEM or from base64 of PEM (what GKE's ``cluster_ca_certificate`` holds)."""
    text = ca.decode("ascii", "replace") if isinstance(ca, bytes) else str(ca)
    if _PEM_BEGIN not in text:
        try:
            text = base64.b64decode("".join(text.split()), validate=True).decode("ascii")
        except (ValueError, UnicodeDecodeError):
            text = ""
    if _PEM_BEGIN not in text:
        raise ConfigError(
            "kube_api_client",
            "ca_pem",
            "<not a certificate>",
            "must be a PEM certificate or base64 of one (GKE's master_auth.cluster_ca_certificate)",
        )
    try:
        ssl.create_default_context(cadata=text)
    except ssl.SSLError as exc:
        raise ConfigError(
            "kube_api_client", "ca_pem", "<unreadable certificate>", f"must be a valid PEM certificate ({exc})"
        ) from exc
    return text


def kube_api_client(endpoint: str, ca_pem: bytes | str | None, token_source: TokenSource | None = None) -> ApiClient:
    """A Kubernetes ``ApiClient`` for a GKE cluster, without ``gcloud`` or a kubeconfig.

    The server is verified against the cluster's own CA (the IP endpoint), or, with
    ``ca_pem=None``, against the system's trusted CAs (GKE's DNS endpoint
    ``gke-….<region>.gke.goog`` carries a publicly signed certificate). Each request
    carries a bearer token from ``token_source``, asked again per request so that a
    refreshed token is used as soon as it exists.

    Examples:
        >>> from rl_lustre.testing.kube import KubeFake   # doctest: +SKIP
        >>> with KubeFake() as fake:                       # doctest: +SKIP
        ...     api = kube_api_client(fake.endpoint, fake.ca_pem, StaticTokenSource("t"))

    Args:
        endpoint: the cluster endpoint, ``IP``, ``host:port`` or ``https://host[:port]``.
        ca_pem: the cluster CA certificate, PEM or base64 of PEM as GKE returns it;
            None to trust the system CAs (the DNS endpoint).
        token_source: returns the bearer token; by default :func:`default_token_source`.

    Raises:
        ConfigError: the endpoint or CA certificate is malformed (no request is made).
    """
    from kubernetes.client import ApiClient, Configuration

    m = _ENDPOINT.fullmatch(endpoint.strip()) if isinstance(endpoint, str) else None
    if m is None or (m["port"] is not None and not 0 < int(m["port"]) < 65536):
        raise ConfigError(
            "kube_api_client",
            "endpoint",
            endpoint,
            "must be a host, host:port or https://host[:port] (the GKE cluster's endpoint)",
        )
    host = f"https://{m['host']}" + (f":{m['port']}" if m["port"] else "")
    source = token_source if token_source is not None else default_token_source()

    config = Configuration(host=host, ca_cert_data=None if ca_pem is None else _ca_pem(ca_pem))
    # The key must exist for the client to ask for it; the hook fills in the real
    # token on every request, so the first Google call happens on the first request.
    config.api_key = {"BearerToken": ""}
    config.api_key_prefix = {"BearerToken": "Bearer"}

    def refresh(cfg: Configuration) -> None:
        cfg.api_key["BearerToken"] = source()

    config.refresh_api_key_hook = refresh  # type: ignore[assignment]  # the client types it as None
    logger.debug("Kubernetes API client for %s", host)
    return ApiClient(config)


def gke_api_client(gke_cluster: Any, token_source: TokenSource | None = None) -> ApiClient:
    """A Kubernetes ``ApiClient`` for a GKE cluster as the GKE API describes it.

    GKE's DNS-based endpoint is preferred when the cluster has one open to external
    traffic: access is gated by IAM, so it works from any address, and its
    certificate is publicly signed. Otherwise the IP endpoint is used with the
    cluster's own CA (reachable from ``authorized_networks`` only).

    Examples:
        >>> from google.cloud import container_v1  # doctest: +SKIP
        >>> api = gke_api_client(container_v1.ClusterManagerClient().get_cluster(name=path))  # doctest: +SKIP

    Args:
        gke_cluster: a ``google.cloud.container_v1.Cluster``.
        token_source: returns the bearer token; by default :func:`default_token_source`.
    """
    endpoints = getattr(gke_cluster, "control_plane_endpoints_config", None)
    dns = getattr(endpoints, "dns_endpoint_config", None)
    if dns is not None and dns.endpoint and dns.allow_external_traffic:
        return kube_api_client(dns.endpoint, None, token_source)
    return kube_api_client(gke_cluster.endpoint, gke_cluster.master_auth.cluster_ca_certificate, token_source)


def kube_api_client_from_kubeconfig(
    path: str | os.PathLike[str] | None = None, context: str | None = None
) -> ApiClient:
    """A Kubernetes ``ApiClient`` from a kubeconfig file and context.

    Exec credential plugins (``gke-gcloud-auth-plugin``) and client certificates work
    as they do for ``kubectl``.

    Examples:
        >>> api = kube_api_client_from_kubeconfig("~/.kube/config", context="gke_p_z_c")  # doctest: +SKIP

    Args:
        path: the kubeconfig; by default ``$KUBECONFIG`` or ``~/.kube/config``.
        context: the context to use; by default the file's current context.

    Raises:
        ConfigError: the file is missing or unreadable, or has no such context.
    """
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    # The client reads $KUBECONFIG once, at import; read it now. It may list several
    # files, which the client merges.
    given = os.fspath(path) if path is not None else os.environ.get("KUBECONFIG") or "~/.kube/config"
    resolved = os.pathsep.join(os.path.expanduser(p) for p in given.split(os.pathsep) if p)
    if not any(os.path.isfile(p) for p in resolved.split(os.pathsep)):
        raise ConfigError("kubeconfig", "path", given, "must be an existing kubeconfig file")
    try:
        return config.new_client_from_config(config_file=resolved, context=context, persist_config=False)
    except ConfigException as exc:
        if context is not None and context in str(exc):
            raise ConfigError("kubeconfig", "context", context, f"must be a context of {resolved} ({exc})") from exc
        raise ConfigError("kubeconfig", "path", resolved, f"must be a usable kubeconfig ({exc})") from exc
    except (OSError, ValueError) as exc:
        raise ConfigError("kubeconfig", "path", resolved, f"must be a readable kubeconfig ({exc})") from exc


def ssl_context(configuration: Configuration) -> ssl.SSLContext | None:
    """The TLS context a raw connection (a websocket) to the API server should use.

    Mirrors what the REST client does with the same configuration: CA from data or
    file, client certificate, ``verify_ssl``. ``None`` for a plain-HTTP server.
    """
    if not str(configuration.host).startswith("https://"):
        return None
    ctx = ssl.create_default_context(
        cafile=configuration.ssl_ca_cert or None,
        cadata=configuration.ca_cert_data if isinstance(configuration.ca_cert_data, str) else None,
    )
    if isinstance(configuration.ca_cert_data, bytes):
        ctx.load_verify_locations(cadata=configuration.ca_cert_data)
    if configuration.cert_file:
        ctx.load_cert_chain(configuration.cert_file, configuration.key_file)
    if not configuration.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        ctx.check_hostname = False
    return ctx


def auth_headers(configuration: Configuration) -> dict[str, str]:
    """The authentication headers a request made now would carry (a fresh token)."""
    headers: dict[str, str] = {}
    settings: Any = configuration.auth_settings()
    for setting in settings.values():
        if setting.get("in") == "header" and setting.get("value"):
            headers[str(setting["key"])] = str(setting["value"])
    if configuration.username or configuration.password:
        basic = configuration.get_basic_auth_token()
        if basic:
            headers["authorization"] = basic
    return headers


def describe_api_exception(exc: Any) -> str:
    """``403 Forbidden: <the server's message>`` from an ``ApiException``."""
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or ""
    message = ""
    body = getattr(exc, "body", None)
    if body:
        try:
            parsed = json.loads(body)
            if isinstance(parsed, Mapping):
                message = str(parsed.get("message") or "")
        except (ValueError, TypeError):
            message = str(body)[:500]
    if not status:
        return f"no response from the Kubernetes API ({reason or 'connection failed'})"
    text = f"{status} {reason}".strip()
    unknown = unknown_fields(message)
    if unknown:
        # A strict decoding error quotes the whole object (a patch's message holds all of it).
        return (
            f"{text}: the API server's schema for this kind has no field {', '.join(unknown)} "
            "(strict field validation): it would have dropped it"
        )
    if message:
        text += f": {message}"
    if status == 401:
        text += " (the bearer token was rejected: check the Google credentials or kubeconfig)"
    elif status == 403:
        text += " (the account lacks a Kubernetes RBAC permission for this)"
    return text


@contextlib.contextmanager
def translate_errors(action: str) -> Iterator[None]:
    """Turn Kubernetes client, urllib3, websocket and TLS errors raised inside into
    :class:`~rl_lustre.errors.KubernetesError` naming ``action``.

    Our own errors pass through unchanged.

    Examples:
        >>> with translate_errors("read Secret default/x"):   # doctest: +SKIP
        ...     core.read_namespaced_secret("x", "default")
    """
    import pydantic
    import urllib3.exceptions
    import websocket
    from kubernetes.client.exceptions import ApiException, OpenApiException

    try:
        yield
    except RLLustreError:
        raise
    except ApiException as exc:
        raise KubernetesError(f"{action}: {describe_api_exception(exc)}") from exc
    except pydantic.ValidationError as exc:
        # Pydantic's message quotes input values, which for a Secret are secret: only
        # the field paths and rules are kept, and the original is not chained.
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg')}" for err in exc.errors()
        )
        raise KubernetesError(f"{action}: the object does not match the Kubernetes API schema: {problems}") from None
    except OpenApiException as exc:
        raise KubernetesError(f"{action}: {exc}") from exc
    except urllib3.exceptions.HTTPError as exc:
        if isinstance(exc, urllib3.exceptions.TimeoutError) or isinstance(
            getattr(exc, "reason", None), urllib3.exceptions.TimeoutError
        ):
            raise KubernetesError(
                f"{action}: the Kubernetes API did not answer in time (connect/read timeout "
                f"{REQUEST_TIMEOUT[0]:g}s/{REQUEST_TIMEOUT[1]:g}s); it may be restarting or unreachable"
            ) from exc
        raise KubernetesError(f"{action}: cannot reach the Kubernetes API: {exc}") from exc
    except websocket.WebSocketException as exc:
        raise KubernetesError(f"{action}: websocket to the Kubernetes API failed: {exc}") from exc
    except (ssl.SSLError, OSError) as exc:
        raise KubernetesError(f"{action}: connection to the Kubernetes API failed: {exc}") from exc


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again, then watch."""


@attrs.frozen
class Kind:
    """An API kind as the clients address it."""

    kind: str
    api_version: str
    plural: str
    namespaced: bool = True
    # CoreV1Api method suffix (``persistent_volume_claim``); None for custom resources.
    core: str | None = None

    @property
    def group_version(self) -> tuple[str, str]:
        group, _, version = self.api_version.rpartition("/")
        return group, version


KINDS: dict[str, Kind] = {
    k.kind: k
    for k in [
        Kind("PersistentVolume", "v1", "persistentvolumes", namespaced=False, core="persistent_volume"),
        Kind("PersistentVolumeClaim", "v1", "persistentvolumeclaims", core="persistent_volume_claim"),
        Kind("Secret", "v1", "secrets", core="secret"),
        Kind("Service", "v1", "services", core="service"),
        Kind("Pod", "v1", "pods", core="pod"),
        Kind("Event", "v1", "events", core="event"),
        Kind("RayCluster", "ray.io/v1", "rayclusters"),
        # Group kinds go through CustomObjectsApi, which addresses any /apis/<group>/<version> path.
        Kind("DaemonSet", "apps/v1", "daemonsets"),
        Kind("Job", "batch/v1", "jobs"),
        Kind("Node", "v1", "nodes", namespaced=False, core="node"),
        Kind("GKENetworkParamSet", "networking.gke.io/v1", "gkenetworkparamsets", namespaced=False),
        Kind("Network", "networking.gke.io/v1", "networks", namespaced=False),
        Kind("PodTemplate", "v1", "podtemplates", core="pod_template"),
        # The keeper's (rl_lustre.kube.keeper) and the head's (rl_lustre.kube.head_access).
        Kind("ServiceAccount", "v1", "serviceaccounts", core="service_account"),
        Kind("ConfigMap", "v1", "configmaps", core="config_map"),
        Kind("Role", "rbac.authorization.k8s.io/v1", "roles"),
        Kind("RoleBinding", "rbac.authorization.k8s.io/v1", "rolebindings"),
        # The head's, to get Nodes (cluster-scoped: a Role cannot grant them).
        Kind("ClusterRole", "rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False),
        Kind("ClusterRoleBinding", "rbac.authorization.k8s.io/v1", "clusterrolebindings", namespaced=False),
        Kind("Deployment", "apps/v1", "deployments"),
        Kind("ProvisioningRequest", "autoscaling.x-k8s.io/v1", "provisioningrequests"),
        Kind("ComputeClass", "cloud.google.com/v1", "computeclasses", namespaced=False),
    ]
}


def _json(response: Any) -> Any:
    data = response.data
    response.release_conn()
    return json.loads(data) if data else None


class ResourceClient:
    """CRUD, list and watch of one kind in one namespace, with plain dicts in and out.

    Errors are not translated here: callers decide what a 404 or 409 means and wrap
    the rest in :func:`translate_errors`.

    Examples:
        >>> secrets = ResourceClient(api, "Secret", "default")   # doctest: +SKIP
        >>> secrets.get("missing") is None                          # doctest: +SKIP
        True

    Args:
        api_client: a kubernetes ``ApiClient``.
        kind: a kind of :data:`KINDS`.
        namespace: the namespace; ignored for cluster-scoped kinds.
    """

    def __init__(self, api_client: ApiClient, kind: str, namespace: str | None = None) -> None:
        from kubernetes import client

        self.kind = KINDS[kind]
        self.namespace = namespace if self.kind.namespaced else None
        if self.kind.namespaced and not namespace:
            raise ConfigError(
                "ResourceClient", "namespace", namespace, f"{kind} is namespaced: a namespace is required"
            )
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)

    def describe(self, name: str) -> str:
        """``Kind namespace/name`` (or ``Kind name`` when cluster-scoped)."""
        return f"{self.kind.kind} {self.namespace}/{name}" if self.namespace else f"{self.kind.kind} {name}"

    def _call(self, verb: str, *args: Any, **kwargs: Any) -> Any:
        kwargs["_preload_content"] = False
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        k = self.kind
        if k.core is not None:
            scope = "namespaced_" if k.namespaced else ""
            method = getattr(self._core, f"{verb}_{scope}{k.core}")
            if k.namespaced:
                args = (self.namespace, *args) if verb in ("create", "list") else (args[0], self.namespace, *args[1:])
            return method(*args, **kwargs)
        group, version = k.group_version
        custom_verb = {"read": "get"}.get(verb, verb)
        if not k.namespaced:
            return getattr(self._custom, f"{custom_verb}_cluster_custom_object")(
                group, version, k.plural, *args, **kwargs
            )
        method = getattr(self._custom, f"{custom_verb}_namespaced_custom_object")
        return method(group, version, self.namespace, k.plural, *args, **kwargs)

    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``body``; returns the stored object. Raises ``ApiException`` (409 if it exists;
        400 when the server's schema for the kind lacks a field of ``body``: see :data:`FIELD_VALIDATION`)."""
        result: dict[str, Any] = _json(self._call("create", dict(body), field_validation=FIELD_VALIDATION))
        return result

    def get(self, name: str) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        from kubernetes.client.exceptions import ApiException

        try:
            result: dict[str, Any] = _json(self._call("read", name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return result

    def patch(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch (RFC 7386); returns the stored object."""
        result: dict[str, Any] = _json(
            self._call(
                "patch",
                name,
                dict(patch),
                _content_type="application/merge-patch+json",
                field_validation=FIELD_VALIDATION,
            )
        )
        return result

    def delete(self, name: str, *, propagation: str = "Background") -> bool:
        """Ask for deletion; ``False`` when the object was already gone."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._call("delete", name, propagation_policy=propagation).release_conn()
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def list(
        self, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """``(items, resourceVersion)``: the matching objects and the version to watch from."""
        kwargs = {k: v for k, v in (("label_selector", label_selector), ("field_selector", field_selector)) if v}
        body = _json(self._call("list", **kwargs))
        items = [dict(item) for item in body.get("items") or []]
        for item in items:
            item.setdefault("kind", self.kind.kind)
            item.setdefault("apiVersion", self.kind.api_version)
        return items, str((body.get("metadata") or {}).get("resourceVersion") or "")

    def watch(
        self,
        *,
        resource_version: str,
        timeout: float,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(type, object)`` events after ``resource_version`` for up to ``timeout`` seconds.

        The server ends the stream at the timeout. Raises :class:`WatchExpired` when
        the version is too old (410 Gone) so the caller lists again.
        """
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        seconds = max(1, math.ceil(timeout))
        kwargs: dict[str, Any] = {
            k: v for k, v in (("label_selector", label_selector), ("field_selector", field_selector)) if v
        }
        # The server closes the stream at timeout_seconds; the read timeout only
        # guards against a server that stops answering.
        kwargs.update(resource_version=resource_version, timeout_seconds=seconds, _request_timeout=(10, seconds + 15))
        w = watch.Watch(return_type="object")
        try:
            args: tuple[Any, ...]
            if self.kind.core is not None:
                scope = "namespaced_" if self.kind.namespaced else ""
                func = getattr(self._core, f"list_{scope}{self.kind.core}")
                args = (self.namespace,) if self.kind.namespaced else ()
            else:
                group, version = self.kind.group_version
                if self.kind.namespaced:
                    func = self._custom.list_namespaced_custom_object
                    args = (group, version, self.namespace, self.kind.plural)
                else:
                    func = self._custom.list_cluster_custom_object
                    args = (group, version, self.kind.plural)
            for event in w.stream(func, *args, **kwargs):
                yield str(event["type"]), dict(event["raw_object"])
        except ApiException as exc:
            if exc.status == 410:
                raise WatchExpired(str(exc.reason)) from exc
            raise
        finally:
            w.stop()
