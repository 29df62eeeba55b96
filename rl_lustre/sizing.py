"""Sizing a Managed Lustre instance for a model's checkpoints.

The reference workflow guesses the capacity and tier. :func:`size_lustre` derives them
from what the volume must hold and how fast a checkpoint must land:

- **Bytes per parameter.** A full Megatron checkpoint, which NeMo-RL's Megatron backend
  writes so that a run can resume, holds the bf16 weights (2 B per parameter), the fp32
  master weights (4 B) and Adam's two fp32 moments (4 B + 4 B): 14 B per parameter.
  :data:`CHECKPOINT_BYTES_PER_PARAM` rounds that up to 16 to cover what scales with the
  model but is not a parameter (per-tensor metadata and padding of the sharded format,
  gradient-scaler, scheduler and RNG state): guessing low makes a save fail part-way,
  guessing high only costs capacity.
- **Capacity.** ``checkpoints_kept`` finished checkpoints plus two in flight (NeMo-RL
  writes ``tmp_step_N`` before it deletes the oldest ``step_N``, and a resumed run may
  find a stale ``tmp_step_*``), times ``headroom`` (1.25 keeps the file system at most
  80 % full, past which Lustre slows down), plus ``extra_gib`` (the Hugging Face cache,
  datasets, logs).
- **Throughput.** One checkpoint must be written within ``target_write_seconds`` at
  the instance's aggregate throughput (tier MB/s per TiB x TiB; 1 MB = 10⁶ bytes).

Among the capacities that satisfy both on each tier, the smallest capacity wins; on
equal capacity the lower tier wins, since it costs less per GiB.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from ._public import public
from ._sizing import (
    _MB,
    CHECKPOINT_BYTES_PER_PARAM,
    DEFAULT_HEADROOM,
    DEFAULT_WRITE_SECONDS,
    IN_FLIGHT_CHECKPOINTS,
    _positive,
    best_option,
    checkpoint_bytes,
    parse_param_count,
    requirement,
    tier_options,
)
from .catalog import LUSTRE_TIERS
from .errors import ConfigError
from .volume import LustreVolume

__all__ = [
    "CHECKPOINT_BYTES_PER_PARAM",
    "DEFAULT_HEADROOM",
    "IN_FLIGHT_CHECKPOINTS",
    "LustreSizing",
    "checkpoint_bytes",
    "parse_param_count",
    "size_lustre",
]


@public("rl_lustre")
@attrs.frozen(kw_only=True)
class LustreSizing:
    """The smallest valid Managed Lustre instance for a model's checkpoints.

    Examples:
        >>> from rl_lustre.sizing import size_lustre
        >>> s = size_lustre("Qwen/Qwen2.5-72B-Instruct")
        >>> s.capacity_gib, s.throughput_mbps_per_tib
        (9000, 1000)
        >>> s.volume("rl-demo-lustre").capacity_gib
        9000

    Attributes:
        model: the model name sized for, if one was given.
        params: the parameter count used.
        bytes_per_param: bytes per parameter assumed for a checkpoint.
        checkpoint_bytes: bytes of one checkpoint.
        checkpoints_kept: finished checkpoints kept (``keep_top_k``).
        headroom: capacity factor over what the checkpoints need.
        extra_gib: room added for other data (model cache, datasets, logs).
        hf_copy_bytes: room added for checkpoints converted to Hugging Face format.
        target_write_seconds: the longest acceptable time to write one checkpoint.
        required_gib: the capacity the checkpoints, headroom and extra need.
        required_mbps: the aggregate throughput the write target needs.
        capacity_gib: the chosen capacity.
        throughput_mbps_per_tib: the chosen tier.
        aggregate_mbps: the chosen instance's aggregate throughput in MB/s.
        estimated_write_seconds: one checkpoint at that throughput.
        options: the smallest valid capacity on every tier, as ``(tier, capacity_gib)``.
    """

    model: str | None
    params: int
    bytes_per_param: float
    checkpoint_bytes: int
    checkpoints_kept: int
    headroom: float
    extra_gib: float
    hf_copy_bytes: int
    target_write_seconds: float
    required_gib: float
    required_mbps: float
    capacity_gib: int
    throughput_mbps_per_tib: int
    aggregate_mbps: float
    estimated_write_seconds: float
    options: tuple[tuple[int, int], ...]

    def volume(self, name: str, **kwargs: Any) -> LustreVolume:
        """A :class:`~rl_lustre.LustreVolume` of the chosen capacity and tier.

        Examples:
            >>> from rl_lustre.sizing import size_lustre
            >>> size_lustre(params=8e9).volume("rl-8b", filesystem="ckpt").filesystem
            'ckpt'

        Args:
            name: the instance id.
            **kwargs: any other ``LustreVolume`` field except the two chosen here.

        Raises:
            ConfigError: ``kwargs`` sets the capacity or tier, or a field is invalid.
        """
        for field in ("capacity_gib", "throughput_mbps_per_tib"):
            if field in kwargs:
                raise ConfigError(
                    "LustreSizing.volume",
                    field,
                    kwargs[field],
                    "is chosen by the sizing; evolve the returned volume to override it",
                )
        return LustreVolume(
            name=name, capacity_gib=self.capacity_gib, throughput_mbps_per_tib=self.throughput_mbps_per_tib, **kwargs
        )

    def __str__(self) -> str:
        what = self.model if self.model is not None else "a model"
        kept = self.checkpoints_kept
        extra = f" + {self.extra_gib:,g} GiB extra" if self.extra_gib else ""
        if self.hf_copy_bytes:
            extra += f" + {_bytes(self.hf_copy_bytes)} of Hugging Face copies"
        others = ", ".join(f"{tier} → {cap:,} GiB" for tier, cap in self.options)
        return "\n".join(
            [
                f"Lustre sizing for {what} ({self.params / 1e9:,.3g} B parameters)",
                f"  checkpoint   {_bytes(self.checkpoint_bytes)} "
                f"({self.bytes_per_param:g} B/param: bf16 weights, fp32 master weights, Adam m and v)",
                f"  capacity     {kept} kept + {IN_FLIGHT_CHECKPOINTS} in flight, x {self.headroom:g} headroom"
                f"{extra} = {self.required_gib:,.0f} GiB needed",
                f"  throughput   one checkpoint in {self.target_write_seconds:g} s needs "
                f"{self.required_mbps:,.0f} MB/s",
                f"  chosen       {self.capacity_gib:,} GiB ({self.capacity_gib / 1024:,.1f} TiB) at "
                f"{self.throughput_mbps_per_tib} MB/s/TiB = {self.aggregate_mbps:,.0f} MB/s; "
                f"a checkpoint writes in ≈ {self.estimated_write_seconds:,.0f} s",
                f"  per tier     {others} (MB/s/TiB → smallest valid capacity; smallest wins, "
                "ties go to the lower tier)",
            ]
        )


def _bytes(n: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:,.3g} {unit}"
    return f"{n:,.0f} B"


@public("rl_lustre")
def size_lustre(
    model: str | None = None,
    *,
    params: float | None = None,
    checkpoints_kept: int = 2,
    target_write_seconds: float = DEFAULT_WRITE_SECONDS,
    bytes_per_param: float = CHECKPOINT_BYTES_PER_PARAM,
    headroom: float = DEFAULT_HEADROOM,
    extra_gib: float = 0,
    hf_copies: int = 0,
) -> LustreSizing:
    """The smallest valid Managed Lustre capacity and tier for a model's checkpoints.

    The volume must hold ``checkpoints_kept + 2`` checkpoints (two in flight) times
    ``headroom``, plus ``extra_gib``; one checkpoint must be written within
    ``target_write_seconds`` at the tier's aggregate throughput. On each tier the
    smallest valid capacity (at least its minimum, a multiple of its step) meeting both
    is found; the smallest of those wins, and on a tie the lower tier (cheaper per
    GiB). A checkpoint is ``bytes_per_param`` bytes per parameter, 16 by default: a
    full Megatron checkpoint holds bf16 weights (2 B), fp32 master weights (4 B) and
    Adam's m and v (8 B), 14 B, rounded up for non-parameter state (see the module
    documentation). Each tier's maximum capacity and its larger steps above a threshold
    are respected (see :class:`rl_lustre.catalog.LustreTier`).

    Examples:
        >>> from rl_lustre.sizing import size_lustre
        >>> s = size_lustre("Qwen/Qwen2.5-72B-Instruct", checkpoints_kept=2, target_write_seconds=300)
        >>> s.capacity_gib, s.throughput_mbps_per_tib, round(s.estimated_write_seconds)
        (9000, 1000, 131)

    Args:
        model: a model name stating its size (``"Qwen/Qwen2.5-72B-Instruct"``,
            ``"Llama-3.1-8B"``, ``"Mixtral-8x7B"``); see :func:`parse_param_count`.
        params: the parameter count; overrides what ``model`` states.
        checkpoints_kept: finished checkpoints kept (NeMo-RL's ``keep_top_k``).
        target_write_seconds: the longest acceptable time to write one checkpoint.
        bytes_per_param: bytes per parameter of one checkpoint.
        headroom: capacity factor over the checkpoints, at least 1.
        extra_gib: GiB for everything else on the volume (``HF_HOME``, datasets, logs).
        hf_copies: checkpoints converted to Hugging Face format kept on the volume
            (``run.export_model(..., format="hf")`` writes one there before copying it out):
            each the model's weights, at the converters' larger size (4 B per parameter,
            the DCP converter's; Megatron's writes bf16, 2 B), added to ``extra_gib``.

    Raises:
        ConfigError: neither ``model`` (with a size in its name) nor ``params`` is
            given, or a number is out of range; the error names the argument.
    """
    owner = "size_lustre"
    if model is not None and not isinstance(model, str):
        raise ConfigError(owner, "model", model, "must be a model name such as 'Qwen/Qwen2.5-72B-Instruct'")
    if params is None:
        if model is None:
            raise ConfigError(owner, "params", None, "give a model name stating its size, or params=")
        parsed = parse_param_count(model)
        if parsed is None:
            raise ConfigError(
                owner, "model", model, "states no parameter count (like '72B' or '1.5B'); pass params= as well"
            )
        count = parsed
    else:
        _positive(owner, "params", params)
        count = math.ceil(params)
    if not isinstance(checkpoints_kept, int) or isinstance(checkpoints_kept, bool) or checkpoints_kept < 1:
        raise ConfigError(owner, "checkpoints_kept", checkpoints_kept, "must be a whole number of at least 1")
    _positive(owner, "target_write_seconds", target_write_seconds)
    _positive(owner, "bytes_per_param", bytes_per_param)
    _positive(owner, "headroom", headroom)
    if headroom < 1:
        raise ConfigError(owner, "headroom", headroom, "must be at least 1 (1.25 keeps the volume 80 % full)")
    if (
        not isinstance(extra_gib, (int, float))
        or isinstance(extra_gib, bool)
        or not math.isfinite(extra_gib)
        or extra_gib < 0
    ):
        raise ConfigError(owner, "extra_gib", extra_gib, "must be a finite number of at least 0")

    if not isinstance(hf_copies, int) or isinstance(hf_copies, bool) or hf_copies < 0:
        raise ConfigError(owner, "hf_copies", hf_copies, "must be a whole number of at least 0")
    from .nemo_rl.converters import HF_BYTES_PER_PARAM

    hf_bytes = hf_copies * count * max(HF_BYTES_PER_PARAM.values())
    ckpt = checkpoint_bytes(count, bytes_per_param)
    need_gib, need_mbps = requirement(
        ckpt,
        checkpoints_kept=checkpoints_kept,
        target_write_seconds=target_write_seconds,
        headroom=headroom,
        extra_gib=extra_gib + hf_bytes / 1024**3,
    )
    options = tier_options(need_gib, need_mbps)
    if not options:
        largest = max(t.max_gib for t in LUSTRE_TIERS.values())
        raise ConfigError(
            owner,
            "checkpoints_kept",
            checkpoints_kept,
            f"these checkpoints need {float(need_gib):,.0f} GiB at {float(need_mbps):,.0f} MB/s, "
            f"more than any Managed Lustre instance holds or delivers (at most {largest:,} GiB); "
            "keep fewer checkpoints or allow a longer target_write_seconds",
        )
    tier, capacity = best_option(options)
    aggregate = LUSTRE_TIERS[tier].throughput_mbps(capacity)
    return LustreSizing(
        model=model,
        params=count,
        bytes_per_param=bytes_per_param,
        checkpoint_bytes=ckpt,
        checkpoints_kept=checkpoints_kept,
        headroom=headroom,
        extra_gib=extra_gib,
        hf_copy_bytes=hf_bytes,
        target_write_seconds=target_write_seconds,
        required_gib=float(need_gib),
        required_mbps=float(need_mbps),
        capacity_gib=capacity,
        throughput_mbps_per_tib=tier,
        aggregate_mbps=aggregate,
        estimated_write_seconds=ckpt / (aggregate * _MB),
        options=tuple(sorted(options, key=lambda o: -o[0])),
    )
