"""Waiting: capped exponential backoff, deadlines that carry the last state, progress
and logging; and what that costs in requests against the fake."""

from __future__ import annotations

import itertools
import logging

import pytest

from rl_lustre import LustreVolume
from rl_lustre.errors import WaitTimeoutError
from rl_lustre.gcp._wait import Backoff, WaitProgress, progress_hook, wait_for
from rl_lustre.gcp.lustre import LustreInstances
from rl_lustre.testing import FAST_RETRY, FakeGCP


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_backoff_grows_to_its_cap() -> None:
    clock = FakeClock()
    states = iter(["CREATING"] * 8 + ["ACTIVE"])
    result = wait_for(
        "x",
        lambda: next(states),
        done=lambda s: s == "ACTIVE",
        timeout=1000,
        backoff=Backoff(initial=1, maximum=10, multiplier=2),
        clock=clock,
        sleep=clock.sleep,
    )
    assert result == "ACTIVE"
    assert clock.sleeps == [1, 2, 4, 8, 10, 10, 10, 10]


def test_timeout_carries_the_last_state_and_never_oversleeps() -> None:
    clock = FakeClock()
    polls = []

    def poll() -> str:
        polls.append(clock.now)
        return f"CREATING ({len(polls)} polls)"

    with pytest.raises(WaitTimeoutError) as info:
        wait_for(
            "instance x to be ACTIVE",
            poll,
            done=lambda s: False,
            timeout=30,
            backoff=Backoff(initial=4, maximum=16),
            clock=clock,
            sleep=clock.sleep,
        )
    err = info.value
    assert err.last_state == f"CREATING ({len(polls)} polls)"
    assert err.timeout == 30
    assert "instance x to be ACTIVE" in str(err)
    assert isinstance(err, TimeoutError)
    # The last poll happens exactly at the deadline, not after it.
    assert polls[-1] == 30
    assert sum(clock.sleeps) == 30


def test_progress_goes_to_the_callback_and_the_context_hook() -> None:
    clock = FakeClock()
    states = iter(["PENDING", "RUNNING", "DONE"])
    direct: list[WaitProgress] = []
    hooked: list[WaitProgress] = []
    with progress_hook(hooked.append):
        wait_for(
            "op",
            lambda: next(states),
            done=lambda s: s == "DONE",
            timeout=100,
            progress=direct.append,
            backoff=Backoff(initial=1, maximum=1),
            clock=clock,
            sleep=clock.sleep,
        )
    assert [(p.state, p.polls, p.done) for p in direct] == [
        ("PENDING", 1, False),
        ("RUNNING", 2, False),
        ("DONE", 3, True),
    ]
    assert hooked == direct
    assert [p.elapsed for p in direct] == [0, 1, 2]


def test_logs_debug_per_poll_and_info_per_change(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    states = iter(["CREATING", "CREATING", "CREATING", "ACTIVE"])
    with caplog.at_level(logging.DEBUG, logger="rl_lustre.gcp.wait"):
        wait_for(
            "vol",
            lambda: next(states),
            done=lambda s: s == "ACTIVE",
            timeout=100,
            backoff=Backoff(initial=1, maximum=1),
            clock=clock,
            sleep=clock.sleep,
        )
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(debug) == 4
    assert info == ["vol: CREATING -> ACTIVE after 3.0s"]


def test_a_long_wait_costs_few_requests() -> None:
    """A 1.5 s Lustre creation awaited with a 0.4 s cap: about a dozen polls, where a
    20 ms poll tick would have sent 75."""
    with FakeGCP(latency={"lustre.create": 1.5}) as gcp:
        gcp.seed_network("my-project", "lab-net")
        api = LustreInstances(backoff=Backoff(initial=0.02, maximum=0.4, multiplier=2), retry=FAST_RETRY)
        LustreVolume(name="slow", project="my-project", zone="us-east1-b", network="lab-net").create(api=api)
        polls = gcp.request_counts()["longrunning.GetOperation"]
        assert 4 <= polls <= 12
        times = [r.time for r in gcp.requests if r.method == "longrunning.GetOperation"]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert max(gaps) < 0.6  # capped: never more than the cap (plus scheduling slack)
