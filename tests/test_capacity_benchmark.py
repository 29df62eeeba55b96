"""The capacity benchmark: a scenario end to end in the default run, the whole output in the slow set."""

from __future__ import annotations

import re

import pytest

from benchmarks import capacity


def test_spot_stocked_out_in_one_zone_reacts_within_two_simulated_minutes() -> None:
    [scenario] = [s for s in capacity.SCENARIOS if s.name == "spot-moves-zone"]
    outcome = capacity.run_one(scenario, unit=0.25)  # the benchmark's default
    assert outcome.ok, outcome
    assert outcome.lane.startswith("spot in us-east1-c")
    assert outcome.attempts == 2  # the pool in us-east1-b, then the one in us-east1-c
    # Each stock-out of the first (the autoscaler may ask it once per pending worker) is met
    # by the next rule within the target.
    assert outcome.reactions
    assert all(0 < r <= capacity.REACTION_TARGET_MINUTES for r in outcome.reactions)


@pytest.mark.slow
def test_the_benchmark_prints_its_table_then_the_four_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert capacity.main([]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:2] == ["scenario", "ok"]
    assert [line.split()[0] for line in lines[1:6]] == [s.name for s in capacity.SCENARIOS]
    assert lines[-4] == "scenarios_ok=5/5"
    figures = {}
    for line in lines[-3:]:
        m = re.fullmatch(r"(\w+)=(\d+\.\d\d)", line)
        assert m is not None, line
        figures[m[1]] = float(m[2])
    assert list(figures) == ["stockout_to_fallback_minutes", "midrun_fallback_minutes", "idle_spot_node_minutes"]
    assert 0 < figures["stockout_to_fallback_minutes"] <= capacity.REACTION_TARGET_MINUTES
    assert 0 < figures["midrun_fallback_minutes"] <= capacity.REACTION_TARGET_MINUTES
    assert 0 < figures["idle_spot_node_minutes"] <= capacity.IDLE_TARGET_MINUTES
