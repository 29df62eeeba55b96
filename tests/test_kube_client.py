"""Kubernetes credentials: GKE endpoint + CA + refreshing token, kubeconfig, error mapping."""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator

import pytest

from rl_lustre.errors import ConfigError, GCPError, KubernetesError
from rl_lustre.kube.client import (
    ResourceClient,
    gke_api_client,
    kube_api_client,
    kube_api_client_from_kubeconfig,
    translate_errors,
)
from rl_lustre.kube.tokens import (
    EMULATOR_TOKEN,
    GoogleTokenSource,
    StaticTokenSource,
    default_token_source,
)
from rl_lustre.testing.kube import DEFAULT_TOKEN, KubeFake


@pytest.fixture(scope="module")
def fake() -> Iterator[KubeFake]:
    # The tokens this cluster issued: the fake's own, the emulator's, and the ones below.
    with KubeFake(tokens={DEFAULT_TOKEN, EMULATOR_TOKEN, "t", "ya29.token-1", "ya29.token-2"}) as server:
        yield server


@pytest.fixture(autouse=True)
def _clean(fake: KubeFake) -> None:
    fake.reset()


def _secret(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"K": "v"}}


class RotatingCredentials:
    """google-auth-shaped credentials whose token expires when told to."""

    def __init__(self) -> None:
        self.token: str | None = None
        self.valid = False
        self.refreshes = 0

    def refresh(self, request: object) -> None:
        self.refreshes += 1
        self.token = f"ya29.token-{self.refreshes}"
        self.valid = True


def test_refreshed_token_is_sent_on_the_next_request(fake: KubeFake) -> None:
    creds = RotatingCredentials()
    api = kube_api_client(fake.endpoint, fake.ca_b64, GoogleTokenSource(creds))
    secrets = ResourceClient(api, "Secret", "default")

    secrets.create(_secret("a"))
    secrets.get("a")
    assert [r.token for r in fake.requests] == ["ya29.token-1", "ya29.token-1"]
    assert creds.refreshes == 1, "a valid token must be reused, not refreshed per request"

    creds.valid = False  # the token reached google-auth's refresh margin
    secrets.get("a")
    assert fake.requests[-1].token == "ya29.token-2"
    assert creds.refreshes == 2


def test_token_is_not_fetched_before_the_first_request(fake: KubeFake) -> None:
    creds = RotatingCredentials()
    kube_api_client(fake.endpoint, fake.ca_pem, GoogleTokenSource(creds))
    assert creds.refreshes == 0


def test_ca_accepted_as_pem_text_bytes_or_gke_base64(fake: KubeFake) -> None:
    for ca in (fake.ca_pem, fake.ca_pem.decode(), fake.ca_b64):
        api = kube_api_client(fake.endpoint, ca, StaticTokenSource("t"))
        assert ResourceClient(api, "Secret", "default").get("missing") is None


def test_server_certificate_is_verified_against_the_given_ca(fake: KubeFake) -> None:
    with KubeFake() as other:  # another CA
        api = kube_api_client(fake.endpoint, other.ca_pem, StaticTokenSource("t"))
    with pytest.raises(KubernetesError, match=r"(?i)certificate"), translate_errors("read Secret default/x"):
        ResourceClient(api, "Secret", "default").get("x")


def test_without_a_ca_the_system_trust_store_verifies(fake: KubeFake) -> None:
    # The DNS endpoint's certificate is publicly signed: no cluster CA is given, and
    # verification stays on, so the fake's self-signed certificate is refused.
    api = kube_api_client(fake.endpoint, None, StaticTokenSource("t"))
    assert api.configuration.verify_ssl
    with pytest.raises(KubernetesError, match=r"(?i)certificate"), translate_errors("read Secret default/x"):
        ResourceClient(api, "Secret", "default").get("x")


def test_gke_clusters_are_reached_through_the_dns_endpoint_when_it_is_open(fake: KubeFake) -> None:
    from google.cloud import container_v1

    ca = base64.b64encode(fake.ca_pem).decode()
    ip_only = container_v1.Cluster(
        endpoint=fake.endpoint, master_auth=container_v1.MasterAuth(cluster_ca_certificate=ca)
    )
    api = gke_api_client(ip_only, StaticTokenSource("t"))
    assert api.configuration.host == fake.url
    assert ResourceClient(api, "Secret", "default").get("missing") is None

    dns_name = "gke-0123456789abcdef.us-east1.gke.goog"
    both = container_v1.Cluster(ip_only)
    both.control_plane_endpoints_config.dns_endpoint_config.endpoint = dns_name
    both.control_plane_endpoints_config.dns_endpoint_config.allow_external_traffic = True
    api = gke_api_client(both, StaticTokenSource("t"))
    assert api.configuration.host == f"https://{dns_name}"
    # Publicly signed: the cluster CA is not used, the system trust store is.
    assert api.configuration.ssl_ca_cert is None
    assert getattr(api.configuration, "ca_cert_data", None) is None

    closed = container_v1.Cluster(both)
    closed.control_plane_endpoints_config.dns_endpoint_config.allow_external_traffic = False
    assert gke_api_client(closed, StaticTokenSource("t")).configuration.host == fake.url


def test_a_token_the_cluster_did_not_issue_is_refused(fake: KubeFake) -> None:
    api = kube_api_client(fake.endpoint, fake.ca_pem, StaticTokenSource("made-up"))
    with pytest.raises(KubernetesError, match="401"), translate_errors("read Secret default/x"):
        ResourceClient(api, "Secret", "default").get("x")
    assert fake.requests[-1].status == 401


def test_rejected_token_is_a_kubernetes_error_naming_401() -> None:
    with KubeFake(tokens={"right"}) as fake:
        api = kube_api_client(fake.endpoint, fake.ca_pem, StaticTokenSource("wrong"))
        with pytest.raises(KubernetesError, match="401") as info, translate_errors("list Secrets"):
            ResourceClient(api, "Secret", "default").list()
        assert "wrong" not in str(info.value)
        ok = kube_api_client(fake.endpoint, fake.ca_pem, StaticTokenSource("right"))
        assert ResourceClient(ok, "Secret", "default").list()[0] == []


@pytest.mark.parametrize(
    ("endpoint", "ca", "field"),
    [
        ("http://10.0.0.1", None, "endpoint"),
        ("10.0.0.1:99999", None, "endpoint"),
        ("10.0.0.1/path", None, "endpoint"),
        ("10.0.0.1", "not a certificate", "ca_pem"),
        (
            "10.0.0.1",
            base64.b64encode(b"-----BEGIN CERTIFICATE-----\nxx\n-----END CERTIFICATE-----\n").decode(),
            "ca_pem",
        ),
    ],
)
def test_malformed_endpoint_or_ca_is_a_config_error(fake: KubeFake, endpoint: str, ca: str | None, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        kube_api_client(endpoint, fake.ca_pem if ca is None else ca, StaticTokenSource("t"))
    assert info.value.field == field
    assert isinstance(info.value, ValueError)


def test_endpoint_forms_reach_the_same_server(fake: KubeFake) -> None:
    for endpoint in (fake.endpoint, fake.url, fake.url + "/"):
        api = kube_api_client(endpoint, fake.ca_pem, StaticTokenSource("t"))
        assert api.configuration.host == fake.url


def test_default_token_source_under_the_gcp_emulator(monkeypatch: pytest.MonkeyPatch, fake: KubeFake) -> None:
    monkeypatch.setenv("RL_LUSTRE_GCP_EMULATOR_HOST", "127.0.0.1:1")
    api = kube_api_client(fake.endpoint, fake.ca_b64)
    ResourceClient(api, "Secret", "default").list()
    assert fake.requests[-1].token == EMULATOR_TOKEN
    monkeypatch.delenv("RL_LUSTRE_GCP_EMULATOR_HOST")
    assert isinstance(default_token_source(), GoogleTokenSource)


def test_missing_google_credentials_is_a_gcp_error_with_advice(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import google.auth
    import google.auth.exceptions

    def no_credentials(**kwargs: object) -> None:
        raise google.auth.exceptions.DefaultCredentialsError("none found")

    monkeypatch.setattr(google.auth, "default", no_credentials)
    with pytest.raises(GCPError, match="application-default login"):
        GoogleTokenSource()()


def test_token_never_appears_in_reprs() -> None:
    assert "s3cret" not in repr(StaticTokenSource("s3cret"))
    creds = RotatingCredentials()
    source = GoogleTokenSource(creds)
    source()
    assert creds.token is not None
    assert creds.token not in repr(source)


def test_kubeconfig_with_context(fake: KubeFake, tmp_path) -> None:
    path = fake.write_kubeconfig(tmp_path / "config", token="from-kubeconfig", context="fake-ctx")
    api = kube_api_client_from_kubeconfig(path, context="fake-ctx")
    ResourceClient(api, "Secret", "default").create(_secret("k"))
    assert fake.requests[-1].token == "from-kubeconfig"
    assert fake.get("Secret", "k") is not None


def test_kubeconfig_from_environment(fake: KubeFake, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = fake.write_kubeconfig(tmp_path / "config", token="env-token")
    monkeypatch.setenv("KUBECONFIG", str(path))
    api = kube_api_client_from_kubeconfig()
    ResourceClient(api, "Secret", "default").list()
    assert fake.requests[-1].token == "env-token"


def test_kubeconfig_errors_name_the_field(fake: KubeFake, tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        kube_api_client_from_kubeconfig(tmp_path / "absent")
    assert info.value.field == "path"
    path = fake.write_kubeconfig(tmp_path / "config")
    with pytest.raises(ConfigError) as info:
        kube_api_client_from_kubeconfig(path, context="no-such-context")
    assert (info.value.field, info.value.value) == ("context", "no-such-context")


def test_unreachable_server_is_a_kubernetes_error(fake: KubeFake) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api = kube_api_client(f"127.0.0.1:{port}", fake.ca_pem, StaticTokenSource("t"))
    api.configuration.retries = 0
    with pytest.raises(KubernetesError, match="list Secret") as info, translate_errors("list Secret default"):
        ResourceClient(api, "Secret", "default").list()
    assert info.value.__cause__ is not None


def test_schema_error_message_never_quotes_secret_values(fake: KubeFake) -> None:
    api = fake.api_client()
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "stringData": {"HF_TOKEN": "hf_do_not_leak"},
        "unexpected": "hf_do_not_leak",
    }
    with pytest.raises(KubernetesError) as info, translate_errors("create Secret default/s"):
        ResourceClient(api, "Secret", "default").create(body)
    assert "unexpected" in str(info.value)
    assert "hf_do_not_leak" not in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_a_server_that_never_answers_costs_a_bounded_time(fake: KubeFake, monkeypatch: pytest.MonkeyPatch) -> None:
    """It accepts the connection and then says nothing: every call ends with a clear error."""
    import threading

    from rl_lustre.kube import client as kube_client
    from rl_lustre.kube.portforward import PortForward

    monkeypatch.setattr(kube_client, "REQUEST_TIMEOUT", (0.3, 0.3))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.extend(iter(lambda: silent.accept()[0], None)), daemon=True).start()
    api = kube_api_client(f"127.0.0.1:{silent.getsockname()[1]}", fake.ca_pem, StaticTokenSource("t"))
    secrets = ResourceClient(api, "Secret", "default")
    calls = {
        "get": lambda: secrets.get("x"),
        "list": lambda: secrets.list(),
        "create": lambda: secrets.create(_secret("x")),
        "port-forward resolution": lambda: PortForward(api, "demo-head-svc", resolve_timeout=0.1)._resolve_once(),
    }
    outcomes: dict[str, BaseException | None] = {}

    def run(name: str) -> None:
        try:
            with translate_errors(name):
                calls[name]()
            outcomes[name] = None
        except BaseException as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=run, args=(name,), daemon=True) for name in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    try:
        assert set(outcomes) == set(calls), f"still blocked: {set(calls) - set(outcomes)}"
        for name, exc in outcomes.items():
            assert isinstance(exc, KubernetesError), (name, exc)
            assert "did not answer in time" in str(exc), (name, exc)
    finally:
        silent.close()
        for conn in held:
            conn.close()
