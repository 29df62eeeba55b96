"""The hang benchmark runs end to end on the session's frozen-worker deployment, once, and
reports what it promises (its figure is the benchmark's business, not this test's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import hang
from rl_lustre import Cluster

# One frozen run (tens of seconds) on real worker raylets: the slow set (nox -s tests-slow).
pytestmark = pytest.mark.slow


def test_one_stall_is_measured_from_its_bundle_and_the_report_ends_with_the_figure(hang_cluster: Cluster) -> None:
    result = hang.run(1, hang_timeout=3.0, cluster=hang_cluster)
    [sample] = result.samples
    record = json.loads((Path(sample.bundle) / "bundle.json").read_text())
    assert sample.detected_at == record["detected_at"]
    assert sample.detected_at > sample.frozen_at
    assert sample.silence >= 3.0
    assert sample.node.startswith("worker-")
    assert result.table().splitlines()[-1] == f"hang_detect_seconds_over_timeout={result.worst:.2f}"
    assert result.worst == sample.over(3.0)
