"""The submission benchmark runs end to end at a tiny scale on the session's Ray head and
reports what it promises (its timings are the benchmark's business, not this test's)."""

from __future__ import annotations

import pytest

from benchmarks import submit
from rl_lustre import Cluster

# One benchmark run (tens of seconds) feeds both tests: the slow set (nox -s tests-slow).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def result(local_cluster: Cluster) -> submit.Result:
    return submit.run(3, cluster=local_cluster)


def test_both_ways_send_the_same_commands_and_envs(result: submit.Result, local_cluster: Cluster) -> None:
    assert result.jobs == 3
    assert len(result.sdk_ids) == len(result.raw_ids) == 3
    jobs = local_cluster._backend().jobs  # type: ignore[attr-defined]
    for sdk_id, raw_id in zip(result.sdk_ids, result.raw_ids, strict=True):
        sdk, raw = jobs.info(sdk_id), jobs.info(raw_id)
        assert sdk is not None
        assert raw is not None
        # The same sweep under other run names; both were stopped once timed.
        assert "rl_lustre.rehearsal" in sdk.entrypoint
        assert "rl_lustre.rehearsal" in raw.entrypoint
        twin = sdk.metadata["rl_lustre.job"].replace("-sdk-", "-raw-")
        assert f"/checkpoints/{twin}" in raw.entrypoint
        assert sdk.terminal
        assert raw.terminal
        assert f"/checkpoints/{sdk.metadata['rl_lustre.job']}" in sdk.entrypoint


def test_the_report_ends_with_the_ratio(result: submit.Result) -> None:
    assert result.sdk > 0
    assert result.raw > 0
    assert result.ratio == pytest.approx(result.sdk / result.raw)
    lines = result.table().splitlines()
    assert lines[-1] == f"sweep_submit_ratio={result.ratio:.3f}"
    assert any(line.startswith("run_sweep") for line in lines)
    assert bool(result.missed()) == (result.ratio > submit.RATIO_TARGET)
