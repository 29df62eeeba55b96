"""The provisioning benchmark runs end to end at a tiny scale and reports what it
promises (its timings are the benchmark's business, not this test's)."""

from __future__ import annotations

import pytest

from benchmarks import provisioning


@pytest.fixture(scope="module")
def result() -> provisioning.Result:
    return provisioning.run(unit=0.01)


def test_both_phases_are_measured_against_the_critical_path(result: provisioning.Result) -> None:
    assert (result.up.name, result.down.name) == ("up", "down")
    for phase in (result.up, result.down):
        assert phase.wall > 0
        assert phase.bound > 0
        assert phase.ratio == pytest.approx(phase.wall / phase.bound)
        assert phase.requests > 0
    # Lustre is the long pole of both: created after the PSA peering, deleted before it.
    assert result.up.path[-1] == "lustre"
    assert result.up.path[0] == "network"
    assert result.down.path[0] == "lustre"
    assert result.down.path[-1] == "network"
    # network 0.5, the PSA range 0.5 (reserved beside the subnet, not after it), the peering 0.5,
    # Lustre 20: simulated minutes at the benchmark's unit.
    assert result.up.bound == pytest.approx(21.5 * 0.01)


def test_polls_are_counted_per_resource_that_waited(result: provisioning.Result) -> None:
    rates = result.up.polls_per_minute()
    assert {"lustre", "gke-cluster", "gpu-pool"} <= set(rates)
    assert all(n > 0 for n in result.up.polls.values())
    assert result.up.waited["lustre"] >= 20  # simulated minutes
    assert sum(result.up.polls.values()) <= result.up.requests


def test_the_table_shows_every_phase_and_resource(result: provisioning.Result) -> None:
    table = result.table()
    assert "one simulated minute = 0.01 s" in table
    for line in ("up ", "down "):
        assert any(row.startswith(line) for row in table.splitlines())
    for key in result.up.polls_per_minute():
        assert f" {key} " in table
    assert isinstance(result.missed(), list)


def test_main_prints_the_table_and_returns_an_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    status = provisioning.main(["--unit", "0.01"])
    out = capsys.readouterr().out
    assert status in (0, 1)
    assert "critical path" in out
    assert "requests" in out
