"""The emulator hooks: gRPC and REST clients go to the addresses in the environment,
over plain connections with anonymous credentials, cached per endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from rl_lustre.errors import ConfigError
from rl_lustre.gcp import _clients
from rl_lustre.testing import FakeGCP

REPO = Path(__file__).resolve().parents[1]


def test_emulator_variables_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_clients.GRPC_EMULATOR_ENV, "http://127.0.0.1:1234")
    with pytest.raises(ConfigError, match="host:port"):
        _clients.grpc_emulator()
    monkeypatch.setenv(_clients.REST_EMULATOR_ENV, "127.0.0.1:1234")
    with pytest.raises(ValueError, match="base URL"):
        _clients.rest_emulator()
    monkeypatch.setenv(_clients.REST_EMULATOR_ENV, "http://127.0.0.1:1234/")
    assert _clients.rest_emulator() == "http://127.0.0.1:1234"


def test_fake_sets_and_restores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_clients.REST_EMULATOR_ENV, "http://127.0.0.1:9")
    monkeypatch.delenv(_clients.GRPC_EMULATOR_ENV, raising=False)
    with FakeGCP() as gcp:
        assert os.environ[_clients.GRPC_EMULATOR_ENV] == gcp.grpc_address
        assert os.environ[_clients.REST_EMULATOR_ENV] == gcp.rest_url == gcp.env[_clients.REST_EMULATOR_ENV]
    assert os.environ[_clients.REST_EMULATOR_ENV] == "http://127.0.0.1:9"
    assert _clients.GRPC_EMULATOR_ENV not in os.environ


def test_grpc_clients_use_the_emulator_with_anonymous_credentials() -> None:
    with FakeGCP() as gcp:
        lustre, gke = _clients.lustre(), _clients.cluster_manager()
        assert lustre is _clients.lustre()
        assert gke is _clients.cluster_manager()
        assert list(lustre.list_instances(parent="projects/p/locations/-")) == []
        assert list(gke.list_clusters(parent="projects/p/locations/-").clusters) == []
        assert gcp.request_counts() == {"lustre.ListInstances": 1, "gke.ListClusters": 1}
        with FakeGCP() as other:  # another endpoint, another client
            assert _clients.lustre() is not lustre
            _clients.lustre().list_instances(parent="projects/p/locations/-")
            assert other.request_counts() == {"lustre.ListInstances": 1}
        assert gcp.request_counts()["lustre.ListInstances"] == 1


def test_rest_clients_use_the_emulator_over_http() -> None:
    with FakeGCP() as gcp:
        client = _clients.compute(compute_v1.ProjectsClient)
        assert isinstance(client.transport._credentials, AnonymousCredentials)
        assert client.get(project="my-project").name == "my-project"
        session, base = _clients.http_session("servicenetworking", _clients.SERVICE_NETWORKING_URL)
        assert base == gcp.rest_url
        assert session.get(f"{base}/v1/operations/none").status_code == 404
        assert gcp.request_counts() == {"compute.projects.get": 1, "servicenetworking.operations.get": 1}


def test_a_subprocess_reaches_the_fake_through_its_env() -> None:
    script = textwrap.dedent("""
        import json
        from rl_lustre import LustreVolume
        from rl_lustre.gcp.lustre import LustreInstances
        from rl_lustre.testing import FAST_BACKOFF
        vol = LustreVolume(name="sub", project="my-project", zone="us-east1-b", network="sub-net")
        vol.create(api=LustreInstances(backoff=FAST_BACKOFF))
        print(json.dumps({"state": vol.state, "mount_point": vol.mount_point}))
    """)
    with FakeGCP(set_env=False) as gcp:
        gcp.seed_network("my-project", "sub-net")
        env = {**os.environ, **gcp.env, "PYTHONPATH": str(REPO)}
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"state": "ACTIVE", "mount_point": "10.90.1.4@tcp:/lustrefs"}
        assert gcp.leaked("sub") == ["lustre.instances projects/my-project/locations/us-east1-b/instances/sub"]
