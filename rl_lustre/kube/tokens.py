"""Bearer tokens for the Kubernetes API: a fixed one, or Google's kept fresh.

:func:`~rl_lustre.kube.client.kube_api_client` asks its token source for the token on
every request, so a source only has to be cheap while its token is valid:

- :class:`StaticTokenSource` returns a fixed token (tests, or a token you manage);
- :class:`GoogleTokenSource` returns a Google access token from Application Default
  Credentials and refreshes it before it expires;
- :func:`default_token_source` picks Google's, or :data:`EMULATOR_TOKEN` under the GCP
  emulators.

google-auth is imported inside functions: ``import rl_lustre`` stays cheap.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import attrs

from .._secrets import REDACTED
from ..errors import GCPError

__all__ = [
    "CLOUD_PLATFORM_SCOPE",
    "EMULATOR_TOKEN",
    "GoogleTokenSource",
    "StaticTokenSource",
    "TokenSource",
    "default_token_source",
]

# The client's logger, as before the token sources had a module of their own.
logger = logging.getLogger("rl_lustre.kube.client")

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# Sent instead of a Google token when the GCP emulators are in use (the same switch
# that gives the Google clients anonymous credentials).
EMULATOR_TOKEN = "rl-lustre-emulator"
_EMULATOR_ENV = "RL_LUSTRE_GCP_EMULATOR_HOST"

TokenSource = Callable[[], str]
"""Anything that returns a current bearer token when called (cheaply, when it is still valid)."""


@attrs.frozen
class StaticTokenSource:
    """A fixed bearer token (tests, or a token you manage yourself).

    Examples:
        >>> source = StaticTokenSource("t0k3n")
        >>> source(), repr(source)
        ('t0k3n', 'StaticTokenSource(token=<redacted>)')
    """

    token: str = attrs.field(repr=lambda _: REDACTED)

    def __call__(self) -> str:
        return self.token


class GoogleTokenSource:
    """A Google OAuth access token from Application Default Credentials, kept fresh.

    Each call returns the cached token while it is valid and refreshes it (one
    thread at a time) when it is within google-auth's refresh margin of expiring,
    so long watches and port-forwards never present an expired token.

    Examples:
        >>> source = GoogleTokenSource()     # doctest: +SKIP
        >>> source().startswith("ya29.")      # doctest: +SKIP
        True

    Args:
        credentials: google-auth credentials; by default ``google.auth.default()``
            with the ``cloud-platform`` scope, resolved on first use.
    """

    def __init__(self, credentials: Any = None) -> None:
        self._credentials = credentials
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"GoogleTokenSource(credentials={type(self._credentials).__name__})"

    def __call__(self) -> str:
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.requests

        with self._lock:
            try:
                if self._credentials is None:
                    self._credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
                if not self._credentials.valid:
                    logger.debug("refreshing the Google access token for the Kubernetes API")
                    self._credentials.refresh(google.auth.transport.requests.Request())
            except google.auth.exceptions.DefaultCredentialsError as exc:
                raise GCPError(
                    "no Google credentials for the Kubernetes API: run "
                    "`gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"
                ) from exc
            except google.auth.exceptions.GoogleAuthError as exc:
                raise GCPError(f"refreshing the Google access token failed: {exc}") from exc
            token = self._credentials.token
        if not token:
            raise GCPError("Google credentials produced no access token")
        return str(token)


def default_token_source() -> TokenSource:
    """Google Application Default Credentials, or a fixed token under the GCP emulators.

    When ``RL_LUSTRE_GCP_EMULATOR_HOST`` is set, Google clients use anonymous
    credentials; the Kubernetes API then gets :data:`EMULATOR_TOKEN` instead of a
    Google token, so that nothing reaches Google.

    Examples:
        >>> source = default_token_source()   # no Google call until it is asked for a token
        >>> callable(source)
        True
    """
    if os.environ.get(_EMULATOR_ENV, "").strip():
        return StaticTokenSource(EMULATOR_TOKEN)
    return GoogleTokenSource()
