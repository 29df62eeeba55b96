"""The lost time of every recovery the preemption tests measured, reported at the end of the session."""

from __future__ import annotations

import pytest

_KEY = pytest.StashKey[list[str]]()


@pytest.fixture
def preemption_report(request: pytest.FixtureRequest) -> list[str]:
    """Append a line per measured recovery; the session's summary lists them."""
    return request.config.stash.setdefault(_KEY, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    lines = config.stash.get(_KEY, [])
    if lines:
        terminalreporter.section("preemption recovery: time lost per recovery (loss to the rerun's first step)")
        for line in lines:
            terminalreporter.write_line(line)
