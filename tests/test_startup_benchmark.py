"""The start-up benchmark runs its orders end to end at a tiny scale and reports what it
promises (its ratios at full scale are the benchmark's business, not this test's)."""

from __future__ import annotations

import pytest

from benchmarks import startup


def test_the_orders_run_and_the_last_lines_are_the_replacement_and_the_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = startup.main(["--unit", "0.02"])
    captured = capsys.readouterr()
    out = captured.out.strip().splitlines()
    names = [line.split("=", 1)[0] for line in out[-4:]]
    assert names == [
        "replacement_image_running_minutes",
        "time_to_first_step_ratio",
        "time_to_first_step_ratio_cold",
        "time_to_first_step_ratio_warm",
    ]
    replacement, ratio, cold, warm = (float(line.split("=", 1)[1]) for line in out[-4:])
    missed = (
        ratio > startup.RATIO_TARGET
        or cold > startup.COLD_TARGET
        or warm > startup.WARM_TARGET
        or replacement > startup.REPLACEMENT_TARGET_MIN
    )
    assert code == (1 if missed else 0)
    assert ("MISSED" in captured.err) == missed
    text = "\n".join(out)
    # The reference order has neither start-up node and downloads in the job; ours has both.
    assert "reference  image-prepull" not in text
    assert "ours       image-prepull" in text
    assert "ours       model-prefetch" in text
    assert "download 24.2" in text
    # Cold: the preload image is built, and the GPU pool waits for it; the others build none.
    assert "cold       preload-image" in text
    assert "ours       preload-image" not in text
    assert "reference  preload-image" not in text
    # Warm: the export is imported, no prefetch Job runs (the benchmark checks) and nothing is exported again; no
    # download, no conversion in the job.
    assert "warm       warm-import" in text
    assert "cold       warm-import" not in text
    totals = [line for line in out if line.startswith("warm ") and "start-up" in line]
    assert len(totals) == 1
    assert "conversion" not in totals[0]
    assert "download" not in totals[0]
    assert warm > 0
    # At this scale the fakes' own overhead dominates: the ratios are reported, not judged here.
    assert ratio > 0
    assert cold > 0
    assert replacement > 0
