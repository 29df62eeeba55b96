"""The sweep benchmark runs end to end at a tiny scale (4 short jobs, the head declaring the
GPUs) and prints what it promises; its ratio is the benchmark's business (``nox -s bench``),
not this test's."""

from __future__ import annotations

import re

import pytest

from benchmarks import sweep


def test_strict_fifo_is_replayed_as_it_schedules() -> None:
    # The 1-node job waits behind the first 8-node one, and the second waits for it.
    assert sweep.strict_fifo([(8, 10.0), (1, 5.0), (8, 10.0)], 8, 0.0) == 25.0
    # Two that fit side by side start together; a gap is paid before each start that waited.
    assert sweep.strict_fifo([(4, 10.0), (4, 6.0), (8, 1.0)], 8, 0.5) == 11.5


@pytest.mark.slow
def test_a_quick_run_prints_the_table_and_the_lines_it_promises() -> None:
    result = sweep.run(head_only=True, step_seconds=0.1, n=4, longest=8)
    assert result.sweep.ok, str(result.sweep)
    assert [o.nodes for o in result.sweep] == [1, 2, 4, 8]
    assert result.failed_for_resources == 0
    lines = result.table().splitlines()
    assert lines[-2] == "failed_for_resources=0"
    assert re.fullmatch(r"sweep_makespan_ratio=\d+\.\d{3}", lines[-1])
    assert float(lines[-1].split("=")[1]) == pytest.approx(result.sweep.makespan_ratio, abs=1e-3)
    assert result.sweep.makespan_ratio >= 1.0
    assert any(line.startswith("strict_fifo_ratio_whatif=") for line in lines)
