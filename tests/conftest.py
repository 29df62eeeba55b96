"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# A real local Ray head shared by the whole session (and process-table helpers).
pytest_plugins = ["ray_fixtures", "preemption_report"]

# Upstream reference data, vendored as data only (provenance and licences in its README).
REF = Path(__file__).resolve().parent / "ref"


@pytest.fixture(autouse=True)
def _output_setting_restored() -> Iterator[None]:
    """A test that turns output on for its process (the CLI's verbs do) leaves it as it was."""
    from rl_lustre import _output

    saved = list(_output._forced)
    yield
    _output._forced[:] = saved


@pytest.fixture(scope="session")
def ref() -> Path:
    """``tests/ref``: upstream facts the tests compare with (part of the repository)."""
    return REF


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--live",
        action="store_true",
        help="run tests marked 'live' against real Google Cloud (needs Application Default "
        "Credentials and RL_LUSTRE_LIVE_PROJECT)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--live"):
        return
    skip = pytest.mark.skip(reason="talks to real Google Cloud: opt in with --live and credentials")
    for item in items:
        if "live" in item.keywords:
            item.add_marker(skip)
