"""What every ``ray start`` of a local head shares, head or worker node: its environment,
its log, and one more try when Ray's fixed wait for the node's raylet runs out."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal, TypeVar

from ..errors import RayError
from .processes import MARK

__all__ = [
    "START_ATTEMPTS",
    "TOKEN_FILE",
    "AuthMode",
    "OverloadedStart",
    "indent",
    "log_tail",
    "node_env",
    "overloaded_start",
    "retry_overloaded",
]

logger = logging.getLogger("rl_lustre.ray.head")

AuthMode = Literal["token", "disabled"]
TOKEN_FILE = "auth_token"

# Ray waits a fixed 30 s for a new node's raylet to register with the GCS and then gives
# up with this message; on a loaded machine that is load, not a fault, so a node start that
# ends this way is tried again, up to START_ATTEMPTS times in all.
_RAYLET_TIMED_OUT = "timed out during startup"
START_ATTEMPTS = 3
# The head's own variables win over these when inherited from the caller: a stray
# RAY_ADDRESS would point job drivers at someone else's cluster.
_INHERITED_RAY_VARS = (
    "RAY_ADDRESS",
    "RAY_API_SERVER_ADDRESS",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
)


class OverloadedStart(RayError):
    """A node's start ran out of Ray's fixed wait for its raylet (see :func:`retry_overloaded`)."""


_T = TypeVar("_T")


def retry_overloaded(what: str, start: Callable[[], _T]) -> _T:
    """``start()``, again while it raises :class:`OverloadedStart`, up to ``START_ATTEMPTS`` in all."""
    for attempt in range(1, START_ATTEMPTS):
        try:
            return start()
        except OverloadedStart:
            logger.warning(
                "%s gave up waiting for its own raylet (Ray allows it 30 s; is the machine "
                "overloaded?); starting it again (attempt %d of %d)",
                what,
                attempt + 1,
                START_ATTEMPTS,
            )
    return start()


def node_env(temp_dir: Path, env: Mapping[str, str] | None, mode: AuthMode) -> dict[str, str]:
    """The environment of every ``ray start`` of the head in ``temp_dir`` (head or worker node).

    Examples:
        >>> e = node_env(Path("/tmp/rll-x"), {"RAY_ADDRESS": "elsewhere:6379", "A": "1"}, "token")
        >>> e["A"], "RAY_ADDRESS" in e, e["RAY_AUTH_TOKEN_PATH"], e["RAY_ENABLE_UV_RUN_RUNTIME_ENV"]
        ('1', False, '/tmp/rll-x/auth_token', '0')
    """
    out = dict(os.environ if env is None else env)
    for name in _INHERITED_RAY_VARS:
        out.pop(name, None)
    out.update(
        {
            MARK: str(temp_dir),
            "RAY_AUTH_MODE": mode,
            # Off macOS/Windows this makes Ray bind every interface; we want loopback.
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            # SIGTERM would otherwise wait for a node drain (meant for Serve on
            # Kubernetes) before stopping anything.
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            # The start-up message we wait for must reach the node's log while we wait.
            "PYTHONUNBUFFERED": "1",
            # A worker node that vanishes is declared dead after about 1.5 s rather than
            # Ray's default 15 s (GCS health checks: every 0.5 s, dead after 3 refused);
            # a slow but living raylet still has Ray's 10 s timeout per check.
            "RAY_health_check_period_ms": "500",
            "RAY_health_check_failure_threshold": "3",
            # On a loaded machine the raylet's dashboard agent (a Python process) can take
            # longer than the raylet's default wait for it, which then takes the node down.
            "RAY_agent_register_timeout_ms": "120000",
            # Every process of the node descends from the user's script; started by
            # `uv run --project <clone> script.py` from elsewhere, Ray's hook for uv would make
            # the head's own drivers re-run that uv command, and refuse every job ("Your
            # <clone>/pyproject.toml is not in the working_dir"). Jobs here name their Python.
            "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
            # The dashboard's stack traces (py-spy, which ships with ray[default] beside this
            # Python): a stalled run's diagnostics bundle takes them (oncluster/evidence.py).
            "RAY_DASHBOARD_ENABLE_PROFILING": "1",
            "PATH": os.pathsep.join(p for p in (out.get("PATH"), os.path.dirname(sys.executable)) if p),
        }
    )
    if mode == "token":
        out["RAY_AUTH_TOKEN_PATH"] = str(temp_dir / TOKEN_FILE)
    return out


def overloaded_start(output: list[str]) -> bool:
    """Whether a node's start-up output ends in Ray's fixed wait for its raylet running out.

    Examples:
        >>> overloaded_start(["Exception: The current node timed out during startup. This could"])
        True
        >>> overloaded_start(["ValueError: port 6379 is already in use"])
        False
    """
    return any(_RAYLET_TIMED_OUT in line for line in output)


def log_tail(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of a node's log file; none when it cannot be read."""
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def indent(lines: list[str]) -> str:
    return "\n".join(f"  | {line}" for line in lines) or "  | (nothing)"
