"""The arithmetic behind :mod:`rl_lustre.sizing`: checkpoint bytes, and the smallest
valid Managed Lustre instance that holds and writes them in time, on each tier.

Plain numbers in and out; the reasoning behind the constants is in :mod:`rl_lustre.sizing`.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

from .catalog import LUSTRE_TIERS
from .errors import ConfigError

__all__ = [
    "CHECKPOINT_BYTES_PER_PARAM",
    "DEFAULT_HEADROOM",
    "DEFAULT_WRITE_SECONDS",
    "IN_FLIGHT_CHECKPOINTS",
    "best_option",
    "checkpoint_bytes",
    "parse_param_count",
    "requirement",
    "smallest_instance",
    "tier_options",
]

CHECKPOINT_BYTES_PER_PARAM = 16
"""Bytes per parameter of a full Megatron checkpoint: bf16 weights (2) + fp32 master
weights (4) + Adam m and v (8) = 14, rounded up to 16 for non-parameter state."""

IN_FLIGHT_CHECKPOINTS = 2
"""Checkpoints that may exist beyond ``keep_top_k``: the one being written and a stale
``tmp_step_*`` left by an interrupted save."""

DEFAULT_HEADROOM = 1.25
"""Capacity over what checkpoints need, so the file system stays at most 80 % full."""

DEFAULT_WRITE_SECONDS = 300.0
"""The longest time one checkpoint may take to write, unless told otherwise."""

_GIB = 1024**3
_MB = 10**6
_SCALE = {"m": 10**6, "b": 10**9, "t": 10**12}
# A size token such as "72B", "1.5b", "560M" or "8x7B", standing alone between separators,
# so that "Qwen2.5" (a version) and "A3B" (active parameters of an MoE) do not match.
_SIZE = re.compile(r"(?<![A-Za-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([mbt])(?![A-Za-z0-9])", re.IGNORECASE)


def parse_param_count(model: str) -> int | None:
    """The parameter count a model name states, or None when it states none.

    The last path component is searched for size tokens (``72B``, ``1.5b``, ``560M``);
    when there are several, the largest wins. A mixture-of-experts name ``E x S B``
    counts ``E x S`` (``8x7B`` → 56 B): an upper bound, since experts share their
    attention layers (Mixtral 8x7B has 46.7 B), and an overestimate is the safe side
    for sizing. Names that state only active parameters (``-A3B``) or experts
    (``-16E``) are not multiplied out; pass the real count to :func:`size_lustre`.

    Examples:
        >>> parse_param_count("Qwen/Qwen2.5-72B-Instruct")
        72000000000
        >>> parse_param_count("meta-llama/Llama-3.1-8B"), parse_param_count("Qwen2.5-0.5B")
        (8000000000, 500000000)
        >>> parse_param_count("mistralai/Mixtral-8x7B-v0.1")
        56000000000
        >>> parse_param_count("gpt2") is None
        True
    """
    if not isinstance(model, str):
        return None
    leaf = model.rstrip("/").rsplit("/", 1)[-1]
    counts = [
        int(Decimal(int(experts or 1)) * Decimal(size) * _SCALE[unit.lower()])
        for experts, size, unit in _SIZE.findall(leaf)
    ]
    counts = [c for c in counts if c > 0]
    return max(counts) if counts else None


def checkpoint_bytes(params: float, bytes_per_param: float = CHECKPOINT_BYTES_PER_PARAM) -> int:
    """Bytes of one full training checkpoint of a model with ``params`` parameters.

    Examples:
        >>> checkpoint_bytes(72e9)
        1152000000000

    Raises:
        ConfigError: ``params`` or ``bytes_per_param`` is not a positive number.
    """
    _positive("checkpoint_bytes", "params", params)
    _positive("checkpoint_bytes", "bytes_per_param", bytes_per_param)
    return math.ceil(Fraction(params) * Fraction(bytes_per_param))


def _positive(owner: str, field: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ConfigError(owner, field, value, "must be a finite number greater than 0")


def _smallest_capacity(tier: int, need_gib: Fraction, need_mbps: Fraction) -> int | None:
    """The smallest valid capacity of ``tier`` meeting both needs; None when none does."""
    spec = LUSTRE_TIERS[tier]
    # Aggregate throughput is tier x capacity / 1024 MB/s.
    need = max(math.ceil(need_gib), math.ceil(need_mbps * 1024 / tier))
    return spec.round_up(need)


def requirement(
    ckpt: int, *, checkpoints_kept: int, target_write_seconds: float, headroom: float, extra_gib: float
) -> tuple[Fraction, Fraction]:
    """``(GiB, MB/s)`` the volume must hold and deliver for checkpoints of ``ckpt`` bytes."""
    need_gib = Fraction(checkpoints_kept + IN_FLIGHT_CHECKPOINTS) * ckpt * Fraction(headroom) / _GIB + Fraction(
        extra_gib
    )
    need_mbps = Fraction(ckpt) / Fraction(target_write_seconds) / _MB
    return need_gib, need_mbps


def tier_options(need_gib: Fraction, need_mbps: Fraction) -> tuple[tuple[int, int], ...]:
    """``(tier, capacity_gib)``: the smallest valid capacity meeting both needs, on every
    tier that has one, lowest tier first."""
    fits = ((tier, _smallest_capacity(tier, need_gib, need_mbps)) for tier in sorted(LUSTRE_TIERS))
    return tuple((tier, cap) for tier, cap in fits if cap is not None)


def best_option(options: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """``(tier, capacity_gib)`` of the smallest capacity; on equal capacity the lower tier,
    since it costs less per GiB."""
    return min(options, key=lambda o: (o[1], o[0]))


def smallest_instance(model: str, *, checkpoints_kept: int) -> tuple[int, int]:
    """``(capacity_gib, throughput_mbps_per_tib)`` that :func:`rl_lustre.size_lustre` picks
    for ``model`` with every other setting at its default.

    Examples:
        >>> smallest_instance("Qwen/Qwen2.5-72B-Instruct", checkpoints_kept=2)
        (9000, 1000)
    """
    count = parse_param_count(model)
    if count is None:
        raise ConfigError("size_lustre", "model", model, "states no parameter count (like '72B' or '1.5B')")
    need = requirement(
        checkpoint_bytes(count),
        checkpoints_kept=checkpoints_kept,
        target_write_seconds=DEFAULT_WRITE_SECONDS,
        headroom=DEFAULT_HEADROOM,
        extra_gib=0,
    )
    tier, capacity = best_option(tier_options(*need))
    return capacity, tier
