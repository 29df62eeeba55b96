"""An instant for a ledger's window, from what a user types or passes.

``since`` / ``until`` of :meth:`Cluster.goodput <rl_lustre.Cluster.goodput>` and of
``rl-lustre goodput --since/--until``: seconds since the epoch, an aware ``datetime``, a
``timedelta`` (that long before now), ISO 8601 text (``2025-12-01T10:00Z``) or a duration
before now (``90s``, ``30m``, ``2h``, ``1d``).

    >>> when("Cluster.goodput", "since", "30m", now=10_000.0)
    8200.0
    >>> when("Cluster.goodput", "since", "2025-12-01T10:00Z", now=0.0)
    1764583200.0
    >>> when("Cluster.goodput", "since", "soon", now=0.0)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    rl_lustre.errors.ConfigError: Cluster.goodput.since='soon': must be seconds since the epoch, an aware datetime,
    a timedelta before now, ISO 8601 ('2025-12-01T10:00Z') or a duration before now ('90s', '30m', '2h', '1d')
"""

from __future__ import annotations

import datetime as dt
import math
import re

from ..errors import ConfigError

__all__ = ["Instant", "when", "window"]

# What ``since`` / ``until`` take (see the module): seconds since the epoch, an aware datetime,
# a timedelta before now, or ISO 8601 / duration text.
Instant = float | dt.datetime | dt.timedelta | str

_RULE = (
    "must be seconds since the epoch, an aware datetime, a timedelta before now, ISO 8601 "
    "('2025-12-01T10:00Z') or a duration before now ('90s', '30m', '2h', '1d')"
)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def when(owner: str, field: str, value: object, *, now: float) -> float:
    """``value`` as seconds since the epoch (see the module)."""
    if isinstance(value, bool):
        raise ConfigError(owner, field, value, _RULE)
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(owner, field, value, _RULE)
        return float(value)
    if isinstance(value, dt.timedelta):
        return now - value.total_seconds()
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ConfigError(
                owner, field, value, "must be an aware datetime (with a time zone), e.g. datetime.now(timezone.utc)"
            )
        return value.timestamp()
    if isinstance(value, str):
        text = value.strip()
        m = _DURATION.fullmatch(text)
        if m:
            return now - float(m.group(1)) * _UNIT[m.group(2)]
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ConfigError(owner, field, value, _RULE) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.timezone.utc)
        return parsed.timestamp()
    raise ConfigError(owner, field, value, _RULE)


def window(owner: str, since: object, until: object, *, now: float) -> tuple[float | None, float | None]:
    """``(since, until)`` as seconds (None stays None: from the first billed second / to now)."""
    lo = None if since is None else when(owner, "since", since, now=now)
    hi = None if until is None else when(owner, "until", until, now=now)
    if lo is not None and lo > now:
        raise ConfigError(owner, "since", since, "must not be in the future")
    if lo is not None and hi is not None and hi < lo:
        raise ConfigError(owner, "until", until, f"must not be before since ({since!r})")
    return lo, hi
