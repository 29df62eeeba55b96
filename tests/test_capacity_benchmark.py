"""The capacity benchmark: a scenario end to end in the default run, the whole output in the slow set."""

from __future__ import annotations

import re

import pytest

from benchmarks import capacity


def test_spot_stocked_out_in_one_zone_reacts_within_two_simulated_minutes() -> None:
    [scenario] = [s for s in capacity.SCENARIOS if s.name == "spot-moves-zone"]
    outcome = capacity.run_one(scenario, unit=0.15)
    assert outcome.ok, outcome
    assert outcome.lane.startswith("spot in us-east1-c")
    assert outcome.attempts == 2
    assert len(outcome.reactions) == 1
    assert 0 < outcome.reactions[0] <= capacity.REACTION_TARGET_MINUTES


@pytest.mark.slow
def test_the_benchmark_prints_its_table_then_the_two_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert capacity.main([]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:2] == ["scenario", "ok"]
    assert [line.split()[0] for line in lines[1:4]] == [s.name for s in capacity.SCENARIOS]
    assert lines[-2] == "scenarios_ok=3/3"
    m = re.fullmatch(r"stockout_to_fallback_minutes=(\d+\.\d\d)", lines[-1])
    assert m is not None
    assert 0 < float(m[1]) <= capacity.REACTION_TARGET_MINUTES
