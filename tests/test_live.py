"""Read-only checks against real Google Cloud; opt in with ``pytest --live``.

They need Application Default Credentials and ``RL_LUSTRE_LIVE_PROJECT`` (a project
with the Lustre and GKE APIs enabled). They create nothing: they ask for a resource
that does not exist and check that the real APIs answer the way the fakes do.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def project() -> str:
    project = os.environ.get("RL_LUSTRE_LIVE_PROJECT")
    if not project:
        pytest.skip("set RL_LUSTRE_LIVE_PROJECT to the project the live tests may read")
    # Look for credentials on disk only: probing the metadata server would send traffic
    # off this machine before we know the user has any.
    adc = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or str(
        Path.home() / ".config" / "gcloud" / "application_default_credentials.json"
    )
    if not Path(adc).is_file():
        pytest.skip(f"no Application Default Credentials at {adc}")
    for var in ("RL_LUSTRE_GCP_EMULATOR_HOST", "RL_LUSTRE_GCP_REST_EMULATOR"):
        if os.environ.get(var):
            pytest.skip(f"{var} is set: live tests must reach Google Cloud itself")
    return project


def test_a_missing_lustre_instance_reads_as_none(project: str) -> None:
    from rl_lustre.gcp.lustre import LustreInstances

    name = f"projects/{project}/locations/us-central1-a/instances/rl-lustre-absent-{uuid.uuid4().hex[:8]}"
    assert LustreInstances().get_or_none(name) is None


def test_a_missing_gke_cluster_reads_as_none(project: str) -> None:
    from rl_lustre.gcp.container import GkeClusters

    name = f"projects/{project}/locations/us-central1/clusters/rl-lustre-absent-{uuid.uuid4().hex[:8]}"
    assert GkeClusters().get_or_none(name) is None
