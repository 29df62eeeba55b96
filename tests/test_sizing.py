"""Lustre sizing: hand-computed choices, validity, minimality, monotonicity and errors."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest

from rl_lustre import LustreVolume
from rl_lustre.catalog import LUSTRE_TIERS
from rl_lustre.errors import ConfigError
from rl_lustre.sizing import (
    CHECKPOINT_BYTES_PER_PARAM,
    LustreSizing,
    checkpoint_bytes,
    parse_param_count,
    size_lustre,
)

GIB = 2**30


@pytest.mark.parametrize(
    ("model", "params"),
    [
        ("Qwen/Qwen2.5-72B-Instruct", 72e9),
        ("meta-llama/Llama-3.1-8B", 8e9),
        ("Llama-3.1-8B", 8e9),
        ("1.5B", 1.5e9),
        ("Qwen/Qwen2.5-Math-1.5B-Instruct", 1.5e9),
        ("70b", 70e9),
        ("405B", 405e9),
        ("meta-llama/Llama-3.1-405B-Instruct", 405e9),
        ("0.5B", 0.5e9),
        ("Qwen/Qwen2.5-0.5B", 0.5e9),
        ("MoE 8x7B", 56e9),
        ("mistralai/Mixtral-8x22B-v0.1", 176e9),
        ("meta-llama/Llama-3.2-1B-Instruct", 1e9),
        ("google/gemma-2-9b-it", 9e9),
        ("bigscience/bloom-560m", 560e6),
        # MoE names with an active count: the total is what is checkpointed.
        ("Qwen/Qwen3-30B-A3B", 30e9),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 32e9),
        # The organisation part does not count.
        ("team-70b/llama-7b", 7e9),
        ("/models/llama-13b/", 13e9),
    ],
)
def test_parse_param_count(model: str, params: float) -> None:
    assert parse_param_count(model) == int(params)


@pytest.mark.parametrize("model", ["gpt2", "Qwen2.5", "v0.1", "bert-base-uncased", "", "DeepSeek-V3"])
def test_parse_param_count_without_a_size(model: str) -> None:
    assert parse_param_count(model) is None


def test_checkpoint_bytes() -> None:
    # bf16 weights (2) + fp32 master weights (4) + Adam m and v (4 + 4) fit in the 16 assumed.
    assert 2 + 4 + 4 + 4 <= CHECKPOINT_BYTES_PER_PARAM == 16
    assert checkpoint_bytes(72e9) == 72 * 10**9 * 16
    assert checkpoint_bytes(1.5e9, 14) == 21 * 10**9
    for bad in (0, -1, float("nan"), float("inf"), True, "7e9"):
        with pytest.raises(ConfigError):
            checkpoint_bytes(bad)  # type: ignore[arg-type]


def test_reference_model_72b() -> None:
    s = size_lustre("Qwen/Qwen2.5-72B-Instruct", checkpoints_kept=2, target_write_seconds=300)
    # One checkpoint: 72e9 x 16 B = 1.152e12 B. Kept 2 + 2 in flight = 4 → 4.608e12 B,
    # x 1.25 headroom = 5.76e12 B = 5,364.4 GiB: under the 1000 tier's 9,000 GiB minimum.
    # Writing 1.152e12 B in 300 s needs 3,840 MB/s; 9,000 GiB at 1000 MB/s/TiB gives
    # 1000 x 9000 / 1024 = 8,789 MB/s. Every other tier's minimum is larger.
    assert s.checkpoint_bytes == 1_152_000_000_000
    assert s.required_gib == pytest.approx(5.76e12 / GIB)
    assert s.required_mbps == pytest.approx(3840)
    assert (s.capacity_gib, s.throughput_mbps_per_tib) == (9000, 1000)
    assert s.aggregate_mbps == pytest.approx(8789.0625)
    assert s.estimated_write_seconds == pytest.approx(1.152e12 / 8789.0625e6)
    assert s.params == 72_000_000_000
    assert dict(s.options) == {1000: 9000, 500: 18000, 250: 36000, 125: 72000}


def test_write_time_drives_the_size() -> None:
    s = size_lustre("Qwen/Qwen2.5-72B-Instruct", target_write_seconds=60)
    # 1.152e12 B in 60 s needs 19,200 MB/s. Every tier gives 8,789.0625 MB/s per step
    # (1000 x 9000 / 1024 = 500 x 18000 / 1024 = ...), so 3 steps: 27,000 GiB on the
    # 1000 tier beats 54,000 GiB on the 500 tier.
    assert (s.capacity_gib, s.throughput_mbps_per_tib) == (27000, 1000)
    assert s.estimated_write_seconds == pytest.approx(1.152e12 / (3 * 8789.0625e6))
    assert s.estimated_write_seconds <= 60


def test_equal_capacity_goes_to_the_lower_tier() -> None:
    # 1e9 x 16 B x 4 x 1.25 = 80e9 B = 74.5 GiB, + 10,000 GiB of model cache = 10,074.5 GiB:
    # 18,000 GiB on both the 1000 tier (2 steps) and the 500 tier (1 step, 8,789 MB/s,
    # plenty for 16e9 B in 300 s). The tie goes to the cheaper 500 tier.
    s = size_lustre(params=1e9, extra_gib=10_000)
    assert (s.capacity_gib, s.throughput_mbps_per_tib) == (18000, 500)
    # 70,000 GiB of other data: 72,000 GiB is the smallest on every tier → the 125 tier.
    s = size_lustre(params=1e9, extra_gib=70_000)
    assert (s.capacity_gib, s.throughput_mbps_per_tib) == (72000, 125)


def test_a_tie_is_broken_only_among_tiers_fast_enough() -> None:
    # 5,364.4 GiB + 10,000 GiB = 15,364.4 GiB → 18,000 GiB; writing 1.152e12 B in 100 s
    # needs 11,520 MB/s. 18,000 GiB on the 500 tier gives 8,789 MB/s (too slow); on the
    # 1000 tier 17,578 MB/s. The 500 tier would need 36,000 GiB.
    s = size_lustre(params=72e9, extra_gib=10_000, target_write_seconds=100)
    assert (s.capacity_gib, s.throughput_mbps_per_tib) == (18000, 1000)
    assert dict(s.options)[500] == 36000


def _valid_and_enough(tier: int, capacity: int, s: LustreSizing) -> bool:
    spec = LUSTRE_TIERS[tier]
    return (
        capacity >= spec.min_gib
        and capacity % spec.step_gib == 0
        and capacity >= s.required_gib
        and tier * capacity / 1024 >= s.required_mbps
    )


CASES: list[dict[str, Any]] = [
    {"params": p, "checkpoints_kept": k, "target_write_seconds": t, "extra_gib": x}
    for p in (0.5e9, 8e9, 70e9, 405e9, 1e12)
    for k in (1, 2, 5)
    for t in (30.0, 300.0, 3600.0)
    for x in (0, 2_000)
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{v:g}" for v in c.values()))
def test_choice_is_valid_and_minimal(case: dict[str, Any]) -> None:
    s = size_lustre(**case)
    tier = LUSTRE_TIERS[s.throughput_mbps_per_tib]
    assert s.capacity_gib % tier.step_gib == 0
    assert s.capacity_gib >= tier.min_gib
    assert s.capacity_gib >= s.required_gib
    assert s.aggregate_mbps >= s.required_mbps
    assert s.estimated_write_seconds <= case["target_write_seconds"]
    ckpts = (case["checkpoints_kept"] + 2) * s.checkpoint_bytes
    assert s.capacity_gib * GIB >= ckpts + case["extra_gib"] * GIB
    # Brute force over every tier and step count: nothing valid is smaller, and nothing
    # of equal size is on a lower tier.
    limit = s.capacity_gib
    for t, spec in LUSTRE_TIERS.items():
        for capacity in range(spec.step_gib, limit + 1, spec.step_gib):
            if _valid_and_enough(t, capacity, s):
                assert capacity == limit, (t, capacity)
                assert t >= s.throughput_mbps_per_tib, (t, capacity)
    assert isinstance(s.volume("sized"), LustreVolume)


def test_more_demand_never_shrinks_the_volume() -> None:
    for params in (1e9, 72e9, 405e9):
        sizes = [size_lustre(params=params, checkpoints_kept=k).capacity_gib for k in range(1, 12)]
        assert sizes == sorted(sizes)
        assert sizes[-1] >= sizes[0]
        faster = [size_lustre(params=params, target_write_seconds=t).capacity_gib for t in (3600, 600, 300, 60, 10)]
        assert faster == sorted(faster)
        roomier = [size_lustre(params=params, extra_gib=x).capacity_gib for x in (0, 1e3, 1e4, 1e5)]
        assert roomier == sorted(roomier)
    bigger = [size_lustre(params=p).capacity_gib for p in (1e9, 8e9, 72e9, 405e9, 1e12)]
    assert bigger == sorted(bigger)
    # 405B keeping 11: (11 + 2) x 6.48e12 B x 1.25 = 1.053e14 B ≈ 98,069 GiB → 99,000 GiB.
    assert (
        size_lustre(params=405e9, checkpoints_kept=11).capacity_gib
        == math.ceil(13 * 6.48e12 * 1.25 / GIB / 9000) * 9000
    )


def test_params_override_the_name_and_bytes_per_param_is_honoured() -> None:
    s = size_lustre("Llama-3.1-8B", params=72e9)
    assert s.params == 72_000_000_000
    assert s.model == "Llama-3.1-8B"
    assert size_lustre(params=72e9, bytes_per_param=2).checkpoint_bytes == 144 * 10**9


def test_volume_carries_the_choice() -> None:
    s = size_lustre("Qwen/Qwen2.5-72B-Instruct", target_write_seconds=60)
    vol = s.volume("rl-demo-lustre", filesystem="ckpt", labels={"team": "rl"})
    assert (vol.name, vol.capacity_gib, vol.throughput_mbps_per_tib) == ("rl-demo-lustre", 27000, 1000)
    assert vol.filesystem == "ckpt"
    assert vol.throughput_mbps == pytest.approx(s.aggregate_mbps)
    with pytest.raises(ConfigError) as info:
        s.volume("x", capacity_gib=9000)
    assert info.value.field == "capacity_gib"
    with pytest.raises(ConfigError):
        s.volume("Not_A_Valid_Name")


def test_str_explains_the_choice() -> None:
    text = str(size_lustre("Qwen/Qwen2.5-72B-Instruct"))
    for fact in (
        "Qwen/Qwen2.5-72B-Instruct",
        "72 B parameters",
        "1.15 TB",
        "16 B/param",
        "2 kept + 2 in flight",
        "1.25",
        "3,840 MB/s",
        "9,000 GiB",
        "1000 MB/s/TiB",
        "8,789 MB/s",
        "131 s",
        "500 → 18,000 GiB",
    ):
        assert fact in text, fact


def test_sizing_is_frozen() -> None:
    s = size_lustre(params=8e9)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        s.capacity_gib = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "params"),
        ({"model": "gpt2"}, "model"),
        ({"model": 72}, "model"),
        ({"params": 0}, "params"),
        ({"params": -8e9}, "params"),
        ({"params": float("nan")}, "params"),
        ({"params": float("inf")}, "params"),
        ({"params": "72e9"}, "params"),
        ({"params": 8e9, "checkpoints_kept": 0}, "checkpoints_kept"),
        ({"params": 8e9, "checkpoints_kept": 1.5}, "checkpoints_kept"),
        ({"params": 8e9, "checkpoints_kept": True}, "checkpoints_kept"),
        ({"params": 8e9, "target_write_seconds": 0}, "target_write_seconds"),
        ({"params": 8e9, "target_write_seconds": -1}, "target_write_seconds"),
        ({"params": 8e9, "bytes_per_param": 0}, "bytes_per_param"),
        ({"params": 8e9, "headroom": 0.9}, "headroom"),
        ({"params": 8e9, "headroom": 0}, "headroom"),
        ({"params": 8e9, "extra_gib": -1}, "extra_gib"),
        ({"params": 8e9, "extra_gib": float("inf")}, "extra_gib"),
    ],
)
def test_bad_input_names_the_argument(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        size_lustre(**kwargs)
    assert info.value.field == field
    assert info.value.owner == "size_lustre"
    assert isinstance(info.value, ValueError)
