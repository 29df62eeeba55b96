"""The one place where Google API errors become :mod:`rl_lustre.errors`.

Every remote call of the adapters goes through :func:`call` (retry, then translate);
code that waits on something the client library polls uses :func:`translated`.

========================================  ===============================================
Google error                              rl_lustre error
========================================  ===============================================
UNAVAILABLE, DEADLINE_EXCEEDED, 502/504,  retried with capped exponential backoff; then
ABORTED, connection errors                :class:`~rl_lustre.errors.GCPError`
RESOURCE_EXHAUSTED / 429 (rate limit)     retried; then :class:`~rl_lustre.errors.QuotaExceededError`
quota text                                :class:`~rl_lustre.errors.QuotaExceededError` naming
                                          the resource, the zone and what to try
GPU/Spot stock-outs                       :class:`~rl_lustre.errors.StockoutError`, its ``signal``
                                          classified by :mod:`rl_lustre.gcp.stockouts`
PERMISSION_DENIED                         :class:`~rl_lustre.errors.PermissionDeniedError`
                                          naming the API and the role needed
UNAUTHENTICATED, no credentials found     :class:`~rl_lustre.errors.CredentialsError` (a
                                          ``PermissionDeniedError``) saying how to log in
NOT_FOUND                                 :class:`~rl_lustre.errors.NotFoundError`
ALREADY_EXISTS                            :class:`AlreadyExistsError` (adapters adopt or refuse)
a failed long-running operation           :class:`~rl_lustre.errors.OperationFailedError`
anything else from google.*, grpc,        :class:`~rl_lustre.errors.GCPError`
requests
========================================  ===============================================
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import attrs

from ..errors import (
    CredentialsError,
    GCPError,
    NotFoundError,
    OperationFailedError,
    PermissionDeniedError,
    QuotaExceededError,
    RLLustreError,
    StockoutError,
)
from .stockouts import QUOTA as _QUOTA
from .stockouts import STOCKOUT as _STOCKOUT
from .stockouts import classify_gcp

log = logging.getLogger("rl_lustre.gcp.errors")

T = TypeVar("T")


@attrs.frozen
class Api:
    """A Google API, as error messages name it, with the predefined role its calls need."""

    title: str
    service: str
    role: str

    def __str__(self) -> str:
        return f"{self.title} ({self.service})"


LUSTRE = Api("Managed Lustre API", "lustre.googleapis.com", "roles/lustre.admin")
CONTAINER = Api("Kubernetes Engine API", "container.googleapis.com", "roles/container.admin")
COMPUTE = Api("Compute Engine API", "compute.googleapis.com", "roles/compute.networkAdmin")
# compute.networkAdmin covers networking "except for firewall rules".
COMPUTE_FIREWALLS = Api("Compute Engine API", "compute.googleapis.com", "roles/compute.securityAdmin")
SERVICE_NETWORKING = Api(
    "Service Networking API", "servicenetworking.googleapis.com", "roles/servicenetworking.networksAdmin"
)
STORAGE = Api("Cloud Storage JSON API", "storage.googleapis.com", "roles/storage.objectAdmin")
MONITORING = Api("Cloud Monitoring API", "monitoring.googleapis.com", "roles/monitoring.viewer")
IAM = Api("IAM API", "iam.googleapis.com", "roles/iam.serviceAccountAdmin")
# Granting a role on the project: reading and setting its IAM policy.
RESOURCE_MANAGER = Api(
    "Cloud Resource Manager API", "cloudresourcemanager.googleapis.com", "roles/resourcemanager.projectIamAdmin"
)


@attrs.frozen
class Call:
    """What a remote call does, so that an error can say it.

    Attributes:
        api: the API called.
        action: a verb phrase (``"create"``, ``"poll the operation of"``).
        resource: what it acts on (``"Lustre instance projects/p/locations/z/instances/x"``).
        zone: the zone or region, for quota and stock-out advice.
    """

    api: Api
    action: str = "call"
    resource: str = ""
    zone: str | None = None

    @property
    def project(self) -> str | None:
        m = re.search(r"projects/([^/\s]+)", self.resource)
        return m.group(1) if m else None

    def what(self) -> str:
        return f"{self.action} {self.resource}".strip()


ADC = Call(
    Api("Application Default Credentials", "google.auth", "roles/viewer"),
    action="find",
    resource="Application Default Credentials",
)


@attrs.frozen
class RetryPolicy:
    """How often a transient failure is retried: capped exponential backoff with jitter.

    A GKE cluster busy with another operation (which can last minutes) is retried for
    up to ``busy_timeout`` seconds instead of ``attempts`` times.

    Examples:
        >>> RetryPolicy(attempts=3, initial=0.01, maximum=0.05).attempts
        3
    """

    attempts: int = 5
    initial: float = 1.0
    maximum: float = 16.0
    busy_timeout: float = 1200.0


DEFAULT_RETRY = RetryPolicy()


class AlreadyExistsError(GCPError):
    """A create found the name taken (usually by our own earlier, retried attempt)."""


# Google words rate limits as quotas too ("Quota exceeded for quota metric 'Queries' and
# limit 'Queries per minute'"): per-time limits are rate limits, retried; the rest are not.
_RATE = re.compile(
    r"rate ?limit|RATE_LIMIT_EXCEEDED|rateLimitExceeded|per (?:minute|second|100 seconds)|too many requests",
    re.IGNORECASE,
)
# GKE runs one mutating operation per cluster at a time and asks callers to come back;
# Compute refuses to use a resource that an operation is still setting up.
_BUSY = re.compile(
    r"incompatible operation|please wait and try again|currently (?:being|running)|resourceNotReady|is not ready",
    re.IGNORECASE,
)
_SERVICE_DISABLED = re.compile(r"SERVICE_DISABLED|has not been used in project|is disabled", re.IGNORECASE)


def _normalise(exc: BaseException) -> BaseException:
    """Raw gRPC and HTTP errors as ``google.api_core`` exceptions, so one table maps them."""
    from google.api_core import exceptions as gexc

    if isinstance(exc, gexc.GoogleAPICallError):
        return exc
    import grpc

    if isinstance(exc, grpc.RpcError) and isinstance(exc, grpc.Call):
        return gexc.from_grpc_error(exc)
    import requests

    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return gexc.from_http_response(exc.response)
    return exc


def _message(exc: BaseException) -> str:
    from google.api_core import exceptions as gexc

    if isinstance(exc, gexc.GoogleAPICallError):
        text = exc.message or str(exc)
        reasons = {str(e.get("reason")) for e in exc.errors if isinstance(e, dict) and e.get("reason")}
        return f"{text} [{', '.join(sorted(reasons))}]" if reasons else text
    return str(exc) or type(exc).__name__


def is_foreign(exc: BaseException) -> bool:
    """An exception of a Google library, gRPC or requests: one that must be translated."""
    module = type(exc).__module__
    return module.split(".", 1)[0] in ("google", "grpc", "requests", "urllib3")


def _kind(exc: BaseException) -> str:
    from google.api_core import exceptions as gexc

    exc = _normalise(exc)
    text = _message(exc)
    if _STOCKOUT.search(text):
        return "stockout"
    limited = isinstance(exc, (gexc.TooManyRequests, gexc.ResourceExhausted, gexc.PermissionDenied, gexc.Forbidden))
    if limited and _RATE.search(text):
        return "rate_limit"
    if isinstance(exc, (gexc.TooManyRequests, gexc.ResourceExhausted)):
        return "quota" if _QUOTA.search(text) else "rate_limit"
    if isinstance(exc, (gexc.ServiceUnavailable, gexc.GatewayTimeout, gexc.BadGateway, gexc.Aborted)):
        return "unavailable"
    if isinstance(exc, gexc.RetryError):
        return "unavailable"
    if isinstance(exc, gexc.BadRequest) and _BUSY.search(text):
        return "busy"
    if isinstance(exc, (gexc.PermissionDenied, gexc.Forbidden)):
        # "Cloud Quotas API has not been used in project ..." is an API to enable, not a quota.
        return "quota" if _QUOTA.search(text) and not _SERVICE_DISABLED.search(text) else "permission"
    if isinstance(exc, (gexc.Unauthenticated, gexc.Unauthorized)):
        return "unauthenticated"
    if isinstance(exc, gexc.NotFound):
        return "not_found"
    if isinstance(exc, gexc.Conflict) and not isinstance(exc, gexc.Aborted):
        return "already_exists"
    import requests

    if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
        return "unavailable"
    return "other"


TRANSIENT = frozenset({"unavailable", "rate_limit", "busy"})


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: unavailable, deadline exceeded, rate limited,
    a GKE cluster busy with another operation, or a Compute resource not ready yet.

    Examples:
        >>> from google.api_core import exceptions
        >>> is_transient(exceptions.ServiceUnavailable("try later"))
        True
        >>> is_transient(exceptions.ResourceExhausted("Quota 'NVIDIA_B200_GPUS' exceeded"))
        False
    """
    return is_foreign(exc) and _kind(exc) in TRANSIENT


def _quota_advice(call: Call) -> str:
    where = f" in {call.zone}" if call.zone else ""
    return (
        f"quota is exhausted for {call.what()}{where}. Try: another zone (Cluster(zone=...)), "
        "fewer or smaller nodes (num_nodes=..., machine_type=...), or ask for more quota "
        "(Cloud console > IAM & Admin > Quotas)"
    )


def _stockout_advice(call: Call) -> str:
    where = f"zone {call.zone}" if call.zone else "this zone"
    return (
        f"{where} has no capacity right now for {call.what()}. Try: another zone "
        "(Cluster(zone=...)), fewer nodes (num_nodes=...), a reservation "
        "(reservation=..., spot=False), or on-demand VMs (spot=False) instead of Spot"
    )


def translate(exc: BaseException, call: Call, *, attempts: int = 1) -> RLLustreError:
    """The rl_lustre error for a foreign exception raised while doing ``call``.

    Examples:
        >>> from google.api_core import exceptions
        >>> err = translate(exceptions.PermissionDenied("denied"),
        ...                 Call(LUSTRE, "create", "Lustre instance projects/p/locations/z/instances/x"))
        >>> type(err).__name__, "roles/lustre.admin" in str(err)
        ('PermissionDeniedError', True)
    """
    if isinstance(exc, RLLustreError):
        return exc
    norm = _normalise(exc)
    kind = _kind(norm)
    text = _message(norm)
    api = call.api
    if kind == "stockout":
        return StockoutError(
            f"{_stockout_advice(call)}. ({api}: {text})", classify_gcp(None, text, source=call.what(), zone=call.zone)
        )
    if kind == "quota":
        err = QuotaExceededError(f"{_quota_advice(call)}. ({api}: {text})")
        err.signal = classify_gcp(None, text, source=call.what(), zone=call.zone)
        return err
    if kind == "rate_limit":
        return QuotaExceededError(
            f"{api} kept rate-limiting {call.what()} after {attempts} attempt(s); "
            f"wait a minute and retry, or ask for a higher request quota. ({text})"
        )
    if kind in ("permission", "unauthenticated"):
        project = f" on project {call.project}" if call.project else ""
        if kind == "unauthenticated":
            hint = (
                "the credentials were rejected; run `gcloud auth application-default login` "
                "or point GOOGLE_APPLICATION_CREDENTIALS at a service-account key"
            )
            return CredentialsError(f"{api} denied {call.what()}: {hint}. ({text})")
        if _SERVICE_DISABLED.search(text):
            hint = f"the API is not enabled{project}; enable {api.service} (and make sure the caller has {api.role})"
        else:
            hint = f"the caller needs {api.role} (or a custom role with the same permissions){project}"
        return PermissionDeniedError(f"{api} denied {call.what()}: {hint}. ({text})")
    if kind == "not_found":
        return NotFoundError(f"{api}: {call.resource or 'resource'} not found while trying to {call.action}. ({text})")
    if kind == "already_exists":
        return AlreadyExistsError(f"{api}: {call.resource} already exists. ({text})")
    if kind == "busy":
        return GCPError(
            f"{api}: {call.what()} was refused for {attempts} attempt(s) because another operation "
            f"is still running on it; retry later. ({text})"
        )
    if kind == "unavailable":
        return GCPError(f"{api} was still unavailable for {call.what()} after {attempts} attempt(s). ({text})")
    if call is ADC:
        return CredentialsError(
            "no Google Cloud credentials found: run `gcloud auth application-default login`, or set "
            f"GOOGLE_APPLICATION_CREDENTIALS to a service-account key file. ({text})"
        )
    code = getattr(norm, "code", None)
    code_text = f" [{getattr(code, 'name', code)}]" if code is not None else ""
    return GCPError(f"{api}: {call.what()} failed{code_text}: {text}")


def operation_error(call: Call, message: str, code: Any = None) -> RLLustreError:
    """The error for a long-running operation that finished with an error.

    A stock-out reported by the operation is a :class:`~rl_lustre.errors.StockoutError`,
    a quota failure a :class:`~rl_lustre.errors.QuotaExceededError` (so the advice
    applies), each with its ``signal``; anything else an
    :class:`~rl_lustre.errors.OperationFailedError`.

    Examples:
        >>> err = operation_error(Call(CONTAINER, "create", "node pool gpu-pool", zone="us-east1-b"),
        ...                       "ZONE_RESOURCE_POOL_EXHAUSTED: no a4-highgpu-8g", code=8)
        >>> type(err).__name__, "us-east1-b" in str(err), err.signal.kind
        ('StockoutError', True, 'stockout')
    """
    code_text = f" [code {getattr(code, 'name', code)}]" if code not in (None, 0, "") else ""
    signal = classify_gcp(None, message, source=f"{call.action} operation", zone=call.zone)
    if _STOCKOUT.search(message):
        return StockoutError(f"{_stockout_advice(call)}. (operation failed{code_text}: {message})", signal)
    if _QUOTA.search(message):
        err = QuotaExceededError(f"{_quota_advice(call)}. (operation failed{code_text}: {message})")
        err.signal = signal
        return err
    return OperationFailedError(f"{call.api}: the operation to {call.what()} failed{code_text}: {message}")


@contextlib.contextmanager
def translated(call: Call) -> Iterator[None]:
    """Translate foreign exceptions raised in the block (no retry).

    Examples:
        >>> from google.api_core import exceptions
        >>> try:
        ...     with translated(Call(CONTAINER, "get", "cluster c")):
        ...         raise exceptions.NotFound("no such cluster")
        ... except LookupError as err:
        ...     print(type(err).__name__)
        NotFoundError
    """
    try:
        yield
    except RLLustreError:
        raise
    except Exception as exc:
        if not is_foreign(exc):
            raise
        raise translate(exc, call) from exc


def call(call: Call, fn: Callable[..., T], *args: Any, policy: RetryPolicy | None = None, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, retrying transient failures per ``policy``, translating the rest.

    Pass ``retry=None`` through ``kwargs`` to a Google client method so that its own
    retry is off and this is the only retry layer.

    Examples:
        >>> from google.api_core import exceptions
        >>> tries = []
        >>> def flaky():
        ...     tries.append(1)
        ...     if len(tries) < 3:
        ...         raise exceptions.ServiceUnavailable("try again")
        ...     return "ok"
        >>> call(Call(LUSTRE, "get", "x"), flaky, policy=RetryPolicy(3, 0.001, 0.002)), len(tries)
        ('ok', 3)
    """
    import tenacity

    policy = policy or DEFAULT_RETRY

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "%s: %s failed transiently (attempt %d/%d), retrying in %.1fs: %s",
            call.api.service,
            call.what(),
            state.attempt_number,
            policy.attempts,
            state.next_action.sleep if state.next_action else 0.0,
            exc,
        )

    def stop(state: tenacity.RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome else None
        if exc is not None and is_foreign(exc) and _kind(exc) == "busy":
            return state.seconds_since_start is not None and state.seconds_since_start >= policy.busy_timeout
        return state.attempt_number >= policy.attempts

    retrying = tenacity.Retrying(
        stop=stop,
        wait=tenacity.wait_exponential(multiplier=policy.initial, max=policy.maximum)
        + tenacity.wait_random(0, policy.initial),
        retry=tenacity.retry_if_exception(is_transient),
        before_sleep=before_sleep,
        reraise=True,
    )
    attempts = 0
    try:
        for attempt in retrying:
            with attempt:
                attempts += 1
                return fn(*args, **kwargs)
    except RLLustreError:
        raise
    except Exception as exc:
        if not is_foreign(exc):
            raise
        raise translate(exc, call, attempts=attempts) from exc
    raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover
