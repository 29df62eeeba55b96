"""Exit codes of ``rl-lustre``: one per kind of library error, most specific first.

=====  ==========================================================
code   meaning
=====  ==========================================================
0      success
1      another rl_lustre error
2      bad arguments or configuration (``ConfigError``, click usage errors)
3      a resource exists without our labels (``OwnershipError``)
4      not found, or not up yet (``NotFoundError``, ``NotReadyError``)
5      a wait timed out (``WaitTimeoutError``)
6      no credentials, or permission denied (``CredentialsError``, ``PermissionDeniedError``)
7      quota or capacity exhausted (``QuotaExceededError``)
8      a remote API failed (``RemoteError``: GCP, Kubernetes, Ray)
9      ``up()`` failed and rolled back (``RollbackError``, ``ProvisioningError``)
10     ``down()`` left something behind (``TeardownError``)
11     the job ended FAILED (``JobFailedError``)
130    interrupted (Ctrl-C, or SIGTERM during ``up``)
=====  ==========================================================
"""

from __future__ import annotations

from .. import errors

INTERRUPTED = 130

# Checked in order: a subclass comes before its base class.
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (errors.ProvisioningInterrupted, INTERRUPTED),
    (errors.ConfigError, 2),
    (errors.OwnershipError, 3),
    (errors.NotFoundError, 4),
    (errors.NotReadyError, 4),
    (errors.WaitTimeoutError, 5),
    (errors.PermissionDeniedError, 6),
    (errors.QuotaExceededError, 7),
    (errors.JobFailedError, 11),
    (errors.TeardownError, 10),
    (errors.RemoteError, 8),
    (errors.RollbackError, 9),
    (errors.RLLustreError, 1),
)


def exit_code(exc: BaseException) -> int:
    """The exit code for ``exc``.

    Examples:
        >>> from rl_lustre.errors import ConfigError, TeardownError
        >>> exit_code(ConfigError("Cluster", "zone", "x", "must be a zone"))
        2
        >>> exit_code(KeyboardInterrupt())
        130
    """
    for cls, code in EXIT_CODES:
        if isinstance(exc, cls):
            return code
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    return 1
