"""Every error rl_lustre raises.

One root, :class:`RLLustreError`. Errors that resemble a built-in also subclass it,
so callers may catch either (``except ValueError`` works for bad configuration)::

    RLLustreError
    ├── ConfigError (ValueError)           bad input, raised before any remote call
    │   └── PreflightError                 a job that NeMo-RL would reject or that cannot fit
    ├── NotReadyError                      a live value asked for before it exists
    ├── WaitTimeoutError (TimeoutError)    a deadline passed; carries the last state seen
    ├── OwnershipError                     a same-named resource exists without our labels
    ├── RemoteError                        a remote API refused or failed
    │   ├── GCPError
    │   │   ├── PermissionDeniedError (PermissionError)
    │   │   ├── QuotaExceededError         quota, rate limits, GPU/Spot stock-outs
    │   │   ├── NotFoundError (LookupError)
    │   │   └── OperationFailedError       a long-running operation ended in error
    │   ├── KubernetesError
    │   └── RayError
    │       └── JobFailedError             a job ended FAILED or STOPPED
    └── RollbackError                      provisioning failed; says what was cleaned up

Foreign exceptions (``google.*``, ``kubernetes.*``, ``ray.*``) are translated at the
boundary and chained with ``raise ... from exc``; none reaches a caller unwrapped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "ConfigError",
    "GCPError",
    "JobFailedError",
    "KubernetesError",
    "NotFoundError",
    "NotReadyError",
    "OperationFailedError",
    "OwnershipError",
    "PermissionDeniedError",
    "PreflightError",
    "QuotaExceededError",
    "RLLustreError",
    "RayError",
    "RemoteError",
    "RollbackError",
    "WaitTimeoutError",
]


class RLLustreError(Exception):
    """Root of every error rl_lustre raises."""


class ConfigError(RLLustreError, ValueError):
    """An invalid configuration value, detected before any remote call.

    Attributes:
        owner: the spec class whose field is wrong (``"Cluster"``).
        field: the field name (``"zone"``).
        value: the offending value.
        rule: the rule it breaks, in words.
    """

    def __init__(self, owner: str, field: str, value: Any, rule: str) -> None:
        self.owner = owner
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{owner}.{field}={value!r}: {rule}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.owner, self.field, self.value, self.rule))


class PreflightError(ConfigError):
    """A job that NeMo-RL would reject, or that does not fit the cluster or volume.

    ``problems`` lists every problem found, not just the first; each is a
    :class:`ConfigError` naming the override key (as ``field``), the value and the rule.
    """

    def __init__(self, problems: Sequence[ConfigError]) -> None:
        self.problems = list(problems)
        first = self.problems[0]
        RLLustreError.__init__(self)
        self.owner, self.field, self.value, self.rule = (
            first.owner,
            first.field,
            first.value,
            first.rule,
        )
        self.args = (self._message(),)

    def _message(self) -> str:
        lines = [f"preflight found {len(self.problems)} problem(s):"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._message()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems,))


class NotReadyError(RLLustreError):
    """A live value (an IP, a mount point, a run) was asked for before it exists."""


class WaitTimeoutError(RLLustreError, TimeoutError):
    """A wait passed its deadline. ``last_state`` is the last state observed."""

    def __init__(self, what: str, timeout: float, last_state: Any = None) -> None:
        self.what = what
        self.timeout = timeout
        self.last_state = last_state
        super().__init__(f"timed out after {timeout:g}s waiting for {what}; last state: {last_state!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what, self.timeout, self.last_state))


class OwnershipError(RLLustreError):
    """A resource with the name we need exists but does not carry our labels.

    rl_lustre never adopts or deletes what it did not create.
    """


class RemoteError(RLLustreError):
    """A remote API refused a request or failed."""


class GCPError(RemoteError):
    """A Google Cloud API call failed."""


class PermissionDeniedError(GCPError, PermissionError):
    """The caller lacks a permission; the message names the API and the role."""


class QuotaExceededError(GCPError):
    """Quota, rate limit, or capacity (GPU / Spot stock-out) exhausted."""


class NotFoundError(GCPError, LookupError):
    """The remote resource does not exist."""


class OperationFailedError(GCPError):
    """A long-running operation finished with an error."""


class KubernetesError(RemoteError):
    """A Kubernetes API call failed, or objects did not become ready."""


class RayError(RemoteError):
    """The Ray head or its Jobs API failed."""


class JobFailedError(RayError):
    """A job ended in FAILED or STOPPED.

    Attributes:
        job_id: the Ray submission id.
        status: the final status.
        last_lines: the last lines of the job's log.
    """

    def __init__(self, job_id: str, status: str, last_lines: Sequence[str] = ()) -> None:
        self.job_id = job_id
        self.status = status
        self.last_lines = list(last_lines)
        tail = "\n".join(f"  | {line}" for line in self.last_lines)
        msg = f"job {job_id} ended {status}"
        super().__init__(f"{msg}; last log lines:\n{tail}" if tail else msg)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id, self.status, self.last_lines))


class RollbackError(RLLustreError):
    """Provisioning failed half-way. ``cause`` failed; ``cleaned`` were deleted again;
    ``left`` could not be deleted and need attention."""

    def __init__(
        self, cause: BaseException, cleaned: Sequence[str] = (), left: Sequence[str] = ()
    ) -> None:
        self.cause = cause
        self.cleaned = list(cleaned)
        self.left = list(left)
        msg = f"provisioning failed: {cause}"
        msg += f"\n  cleaned up: {', '.join(self.cleaned) or 'nothing'}"
        if self.left:
            msg += f"\n  NOT cleaned up (delete by hand): {', '.join(self.left)}"
        super().__init__(msg)
