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
    │   │   │   └── CredentialsError       no Google Cloud credentials here, or they were rejected
    │   │   ├── QuotaExceededError         quota, rate limits, GPU/Spot stock-outs
    │   │   │   ├── StockoutError          the zone has no VMs of the kind asked for (``.signal``)
    │   │   │   ├── CapacityExhaustedError every capacity the policy allows was tried (``.attempts``)
    │   │   │   └── CapacityError          the check before up(): zone or quota cannot host it
    │   │   ├── NotFoundError (LookupError)
    │   │   ├── OperationFailedError       a long-running operation ended in error
    │   │   └── PreloadBuildError          the preload disk image could not be built
    │   ├── KubernetesError
    │   ├── RegistryError                  a container registry refused or failed
    │   │   ├── ImageNotFoundError (LookupError)
    │   │   └── RegistryAuthError (PermissionError)
    │   ├── RayError
    │   │   └── JobFailedError             a job ended FAILED (a stopped one is not a failure)
    │   ├── TeardownError                  down() could not delete everything
    │   └── ExportError                    results could not be exported (the volume is kept)
    └── RollbackError                      provisioning failed; says what was cleaned up
        └── ProvisioningError              up() failed at a step (names it) and rolled back
            ├── NoCapacityError            no GPUs anywhere the policy allows: every attempt, what was kept
            └── ProvisioningInterrupted (KeyboardInterrupt)   SIGINT/SIGTERM during up()

Warnings (``UserWarning``): :class:`NothingToDoWarning`: a submitted run found its
checkpoint directory already at ``max_num_steps`` and ends SUCCEEDED without training;
:class:`CapacityDeadlineWarning`: a run may not finish inside the lifetime of capacity
that ends (flex-start's ``max_run_duration``); :class:`ResultsKeptWarning`: ``down()`` kept
the volume because the results on it exist nowhere else.

Foreign exceptions (``google.*``, ``kubernetes.*``, ``ray.*``) are translated at the
boundary and chained with ``raise ... from exc``; none reaches a caller unwrapped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# A provisioning report (rl_lustre.provision.records.Report): this module, at the bottom
# of the package, does not import the provisioning layer, even for its type.
_Report = Any

__all__ = [
    "CapacityDeadlineWarning",
    "CapacityError",
    "CapacityExhaustedError",
    "ConfigError",
    "CredentialsError",
    "ExportError",
    "GCPError",
    "ImageNotFoundError",
    "JobFailedError",
    "KubernetesError",
    "NoCapacityError",
    "NotFoundError",
    "NotReadyError",
    "NothingToDoWarning",
    "OperationFailedError",
    "OwnershipError",
    "PermissionDeniedError",
    "PreflightError",
    "PreloadBuildError",
    "ProvisioningError",
    "ProvisioningInterrupted",
    "QuotaExceededError",
    "RLLustreError",
    "RayError",
    "RegistryAuthError",
    "RegistryError",
    "RemoteError",
    "ResultsKeptWarning",
    "RollbackError",
    "StockoutError",
    "TeardownError",
    "WaitTimeoutError",
]


class RLLustreError(Exception):
    """Root of every error rl_lustre raises.

    Its message never shows a secret: anything shaped like a token or a private key
    (see :mod:`rl_lustre._secrets`) is replaced by ``<redacted>``, whatever put it there.
    """

    def __str__(self) -> str:
        from ._secrets import redact

        return redact(super().__str__())

    def __repr__(self) -> str:
        from ._secrets import redact

        return redact(super().__repr__())


class ConfigError(RLLustreError, ValueError):
    """An invalid configuration value, detected before any remote call.

    The message shows the value with its type when the type is what is wrong, names
    every non-ASCII character in a string (a Cyrillic look-alike of ``e`` shows as
    ``(U+0435 CYRILLIC SMALL LETTER IE)``),
    and never shows a secret.

    Attributes:
        owner: the spec class or function whose field or parameter is wrong (``"Cluster"``).
        field: the field or parameter name (``"zone"``).
        value: the offending value (``"<redacted>"`` when it holds anything secret-shaped).
        rule: the rule it breaks, in words.
    """

    def __init__(self, owner: str, field: str, value: Any, rule: str) -> None:
        from ._secrets import redact, redact_value

        self.owner = owner
        self.field = field
        self.value = redact_value(value)
        self.rule = redact(rule)
        super().__init__(f"{owner}.{field}={describe(self.value)}: {self.rule}")

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


class CredentialsError(PermissionDeniedError):
    """No Google Cloud credentials were found in this process, or Google rejected them;
    the message says how to set them up (``gcloud auth application-default login``)."""


class QuotaExceededError(GCPError):
    """Quota, rate limit, or capacity (GPU / Spot stock-out) exhausted.

    ``signal`` is the capacity signal behind it
    (:class:`~rl_lustre.kube.capacity_signals.Signal`), when it is a quota or stock-out
    of a capacity kind; None for a rate limit.
    """

    signal: Any = None


class StockoutError(QuotaExceededError):
    """The zone has no VMs of the kind asked for right now (``GCE_STOCKOUT``,
    ``ZONE_RESOURCE_POOL_EXHAUSTED``); ``signal`` says where and what Google said.
    Waiting, another capacity kind or another zone may help; more quota does not."""

    def __init__(self, message: str, signal: Any = None) -> None:
        super().__init__(message)
        self.signal = signal

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0] if self.args else "", self.signal))


class CapacityExhaustedError(QuotaExceededError):
    """Every capacity the cluster's policy allows was tried, in order, and none came.

    Attributes:
        attempts: one record per attempt (:class:`rl_lustre.provision.capacity.Attempt`),
            in order, each with its lane, times, outcome and reason.
        summary: the attempts as lines of text.
    """

    def __init__(self, summary: str, attempts: Sequence[Any] = ()) -> None:
        super().__init__(summary)
        self.summary = summary
        self.attempts = list(attempts)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.summary, self.attempts))


class CapacityError(QuotaExceededError):
    """The online check before ``up()`` found that the zone or the region's quotas cannot
    host the deployment; nothing was created. ``report`` is the whole
    :class:`~rl_lustre.CheckReport`; the message lists each problem and its fix.
    """

    def __init__(self, report: Any) -> None:
        self.report = report
        lines = [
            f"the check before up() of {report.cluster!r} found {len(report.problems)} problem(s); nothing was created:"
        ]
        lines += [
            f"  - {item.what}: {item.detail}" + (f"\n    -> {item.fix}" if item.fix else "") for item in report.problems
        ]
        super().__init__("\n".join(lines))


class NotFoundError(GCPError, LookupError):
    """The remote resource does not exist."""


class OperationFailedError(GCPError):
    """A long-running operation finished with an error."""


class PreloadBuildError(GCPError):
    """The preload disk image could not be built (the builder VM's script failed or timed
    out); the message has its error and the end of its serial port, secrets scrubbed."""


class KubernetesError(RemoteError):
    """A Kubernetes API call failed, or objects did not become ready."""


class RegistryError(RemoteError):
    """A container registry (nvcr.io, Artifact Registry, Docker Hub) refused a request or failed."""


class ImageNotFoundError(RegistryError, LookupError):
    """The registry has no such image (repository, tag or digest)."""


class RegistryAuthError(RegistryError, PermissionError):
    """The registry wants credentials rl_lustre does not have for it (a private image)."""


class RayError(RemoteError):
    """The Ray head or its Jobs API failed."""


class JobFailedError(RayError):
    """A job ended FAILED. (One that was stopped ends STOPPED, which ``Run.wait()`` returns.)

    Attributes:
        job_id: the Ray submission id.
        status: the final status.
        last_lines: the last lines of the job's log (anything secret-shaped redacted).
        why: why it ended, when the job's log cannot say (its Ray head was lost, say).
    """

    def __init__(self, job_id: str, status: str, last_lines: Sequence[str] = (), why: str = "") -> None:
        self.job_id = job_id
        self.status = status
        self.why = why
        from ._secrets import redact

        self.last_lines = [redact(line) for line in last_lines]
        tail = "\n".join(f"  | {line}" for line in self.last_lines)
        msg = f"job {job_id} ended {status}" + (f": {why}" if why else "")
        super().__init__(f"{msg}; last log lines:\n{tail}" if tail else msg)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id, self.status, self.last_lines, self.why))


class RollbackError(RLLustreError):
    """Provisioning failed half-way. ``cause`` failed; ``cleaned`` were deleted again;
    ``left`` could not be deleted and need attention."""

    def __init__(self, cause: BaseException, cleaned: Sequence[str] = (), left: Sequence[str] = ()) -> None:
        self.cause = cause
        self.cleaned = list(cleaned)
        self.left = list(left)
        msg = f"provisioning failed: {cause}"
        msg += f"\n  cleaned up: {', '.join(self.cleaned) or 'nothing'}"
        if self.left:
            msg += f"\n  NOT cleaned up (delete by hand): {', '.join(self.left)}"
        super().__init__(msg)


class ProvisioningError(RollbackError):
    """``up()`` failed at ``step`` and what it had created was rolled back.

    Attributes:
        step: the plan key that failed, or None when ``up()`` was interrupted.
        cause: the error (or interrupt) that stopped ``up()``.
        cleaned: resources (``key kind name``) deleted again.
        kept: resources left on purpose: adopted ones, or everything created when
            ``keep_on_failure=True``.
        left: resources that could not be deleted and need attention.
        report: the ``Report`` of the failed ``up()``.
        rollback: the ``Report`` of the rollback (None with ``keep_on_failure``).
    """

    def __init__(
        self,
        cause: BaseException,
        *,
        step: str | None,
        cleaned: Sequence[str] = (),
        kept: Sequence[str] = (),
        left: Sequence[str] = (),
        report: _Report | None = None,
        rollback: _Report | None = None,
        hint: str = "",
    ) -> None:
        super().__init__(cause, cleaned, left)
        self.step = step
        self.kept = list(kept)
        self.report = report
        self.rollback = rollback
        if step is None:
            headline = f"up() was stopped ({str(cause).strip() or 'interrupted'})"
        else:
            headline = f"up() failed at {step}: {_one_line(cause)}"
        lines = [headline, f"  cleaned up: {', '.join(self.cleaned) or 'nothing'}"]
        if self.kept:
            lines.append(f"  kept: {', '.join(self.kept)}")
        if self.left:
            lines.append(f"  NOT cleaned up (delete by hand, or run cluster.down() again): {', '.join(self.left)}")
        if hint:
            lines.append(f"  {hint}")
        self.args = ("\n".join(lines),)


class NoCapacityError(ProvisioningError):
    """``up()`` got no GPUs from any capacity its policy allows.

    The deployment did not fail for any other reason: what is kept follows
    ``up(on_no_capacity=...)`` (by default the storage: the Lustre volume and its
    network, so that the next ``up()`` skips the longest step).

    Attributes:
        attempts: every attempt, in order (see :class:`CapacityExhaustedError`).
        on_no_capacity: the option that decided what was kept.
    """

    def __init__(self, cause: CapacityExhaustedError, *, on_no_capacity: str, **kwargs: Any) -> None:
        self.attempts = list(cause.attempts)
        self.on_no_capacity = on_no_capacity
        super().__init__(cause, **kwargs)
        lines = [
            cause.summary,
            f"  kept (on_no_capacity={on_no_capacity!r}): {', '.join(self.kept) or 'nothing'}",
            f"  cleaned up: {', '.join(self.cleaned) or 'nothing'}",
        ]
        if self.left:
            lines.append(f"  NOT cleaned up (delete by hand, or run cluster.down() again): {', '.join(self.left)}")
        if self.kept:
            lines.append("  cluster.up() again adopts what was kept; cluster.down() deletes it.")
        self.args = ("\n".join(lines),)


class ProvisioningInterrupted(ProvisioningError, KeyboardInterrupt):
    """``up()`` was interrupted (SIGINT or SIGTERM) and rolled back.

    Also a :class:`KeyboardInterrupt`, so that code stopping on Ctrl-C still stops.
    """


class TeardownError(RemoteError):
    """``down()`` could not delete everything.

    Attributes:
        left: the resources still there (``key kind name``).
        errors: the error of each, by plan key.
        report: the full ``Report`` of the teardown.
    """

    def __init__(self, left: Sequence[str], errors: Mapping[str, BaseException], report: _Report) -> None:
        self.left = list(left)
        self.errors = dict(errors)
        self.report = report
        details = "; ".join(f"{k}: {_one_line(e)}" for k, e in self.errors.items())
        super().__init__(
            f"down() could not delete {', '.join(self.left)} ({details}); run it again, or delete them by hand"
        )


class ExportError(RemoteError):
    """Teardown could not export a run's results (a transfer failed or did not verify, or
    the destination refused); the volume is kept. ``what`` names the transfer."""

    def __init__(self, message: str, what: str = "") -> None:
        super().__init__(message)
        self.what = what


def describe(value: Any) -> str:
    """``repr(value)``, naming each non-ASCII character of a string so look-alikes show.

    Examples:
        >>> describe("d\u0435mo").endswith("(U+0435 CYRILLIC SMALL LETTER IE))")
        True
    """
    text = repr(value)
    if len(text) > 300:
        text = text[:200] + f"... ({len(text)} characters)"
    if isinstance(value, str):
        import unicodedata

        odd = list(dict.fromkeys(c for c in value if not c.isascii()))
        if odd:
            names = ", ".join(f"{c!r} (U+{ord(c):04X} {unicodedata.name(c, 'unnamed character')})" for c in odd[:5])
            text += f" (contains {names}{', ...' if len(odd) > 5 else ''})"
    return text


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, RLLustreError):
        return text
    # A foreign error here is a bug or an interrupt: its type says more than its text.
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


SUBMIT_FRESH = "cluster.submit(job, fresh=True)"
SWEEP_FRESH = "run_sweep(cluster, jobs, fresh=True)"


def nothing_to_do_advice(start_over: str = SUBMIT_FRESH) -> str:
    """What to do about a run with nothing left to do; ``start_over`` is the call that starts over.

    Examples:
        >>> print(nothing_to_do_advice(SWEEP_FRESH))  # doctest: +NORMALIZE_WHITESPACE
        To start over, use run_sweep(cluster, jobs, fresh=True) (the old checkpoints are moved aside, not deleted),
        or raise max_num_steps to train further
    """
    return (
        f"To start over, use {start_over} (the old checkpoints are moved aside, not deleted), "
        "or raise max_num_steps to train further"
    )


class CapacityDeadlineWarning(UserWarning):
    """A run may not finish inside the lifetime of capacity that ends: flex-start nodes
    live at most ``max_run_duration`` (7 days at most). NeMo-RL is told to save before the
    nodes go (``checkpointing.checkpoint_must_save_by``) and the run continues on the
    capacity the policy provides next."""


class NothingToDoWarning(UserWarning):
    """A run that ends, or will end, SUCCEEDED without training a step.

    NeMo-RL resumes from the newest ``step_N`` in the job's checkpoint directory; when
    that step already reaches ``max_num_steps`` there is nothing left to do. Submit with
    ``cluster.submit(job, fresh=True)`` to start over (the old checkpoints are moved
    aside, not deleted), or give the job another name.
    """


class ResultsKeptWarning(UserWarning):
    """``down()`` kept the volume because its runs' results exist nowhere else: no
    ``results`` destination, or the export failed or was interrupted. The message names
    each run, its newest checkpoint, what keeping the volume costs, and the ways forward
    (a destination and ``down()`` again, keeping it on purpose, or
    ``down(discard_results=True)``)."""
