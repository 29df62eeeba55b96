"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# A real local Ray head shared by the whole session (and process-table helpers).
pytest_plugins = [
    "helpers.ray_fixtures",
    "helpers.preemption_report",
    "helpers.kube_plane",
    "helpers.kube_both",
    "helpers.spot_gke",
    "helpers.hang_cluster",
]

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
    parser.addoption(
        "--kube",
        action="store_true",
        help="run tests marked 'kube' against a real Kubernetes control plane (built from Go "
        "modules by tools/kube/build.sh, which needs Go >= 1.26; nox -s tests-kube does both)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skips = {
        "live": None
        if config.getoption("--live")
        else pytest.mark.skip(reason="talks to real Google Cloud: opt in with --live and credentials"),
        "kube": None
        if config.getoption("--kube")
        else pytest.mark.skip(reason="needs the real Kubernetes control plane: nox -s tests-kube (or --kube)"),
    }
    for item in items:
        for marker, skip in skips.items():
            if skip is not None and item.get_closest_marker(marker) is not None:
                item.add_marker(skip)
