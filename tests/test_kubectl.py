"""The reference client drives the KubeFake: the real ``kubectl`` (Debian's package; CI
installs it in ``.ci/run``) applies, reads, waits on, port-forwards to and deletes a
deployment's real manifests. What kubectl needs of a server (discovery, OpenAPI v3,
strategic merge patches, PUT, DELETE answered with a Status, watches by field selector,
its tunnelled SPDY port-forward) is what keeps the fake honest.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.specs import GKE

from rl_lustre import Cluster
from rl_lustre.kube.manifests import build_manifests
from rl_lustre.testing.kube import KubeFake, schema_validator

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (.ci/run installs it)")
NAME = "kc-demo"


class _Head(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"head dashboard {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def head() -> Iterator[tuple[str, int]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Head)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[:2]  # type: ignore[misc]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def fake(head: tuple[str, int]) -> Iterator[KubeFake]:
    with KubeFake(validate=schema_validator(), head_target=head) as server:
        yield server


@pytest.fixture(scope="module")
def kubectl(fake: KubeFake, tmp_path_factory: pytest.TempPathFactory):
    config = fake.write_kubeconfig(tmp_path_factory.mktemp("kubectl") / "config")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(config.parent), "KUBECONFIG": str(config)}

    def run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    run.env = env  # type: ignore[attr-defined]
    return run


@pytest.fixture(scope="module")
def manifest_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cluster = Cluster(
        **{**GKE, "name": NAME}, num_nodes=1, fabric="tcp"
    )  # the reference objects; the fabric's have their own tests
    cluster.volume._live.mount_point = "10.90.1.4@tcp:/lustrefs"  # as LustreVolume.refresh() would
    objects = json.loads(json.dumps(build_manifests(cluster, secret_values={"HF_TOKEN": "hf_kubectl"}, redact=False)))
    path = tmp_path_factory.mktemp("manifests") / "deployment.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


def test_kubectl_applies_waits_forwards_and_deletes(fake: KubeFake, kubectl, manifest_file: Path) -> None:
    resources = kubectl("api-resources", "-o", "name").stdout.split()
    assert {"pods", "persistentvolumes", "rayclusters.ray.io", "daemonsets.apps", "jobs.batch"} <= set(resources)

    created = kubectl("apply", "-f", str(manifest_file)).stdout
    assert created.split("\n")[:10] == [
        f"computeclass.cloud.google.com/{NAME}-gpus created",
        f"persistentvolume/{NAME}-lustre-pv created",
        f"persistentvolumeclaim/{NAME}-lustre-pvc created",
        f"secret/{NAME}-job-secrets created",
        f"serviceaccount/{NAME}-ray-head created",  # the head's read access to its pods' events
        f"role.rbac.authorization.k8s.io/{NAME}-ray-head created",
        f"rolebinding.rbac.authorization.k8s.io/{NAME}-ray-head created",
        f"clusterrole.rbac.authorization.k8s.io/{NAME}-ray-head.default created",  # ... and get Nodes
        f"clusterrolebinding.rbac.authorization.k8s.io/{NAME}-ray-head.default created",
        f"raycluster.ray.io/{NAME} created",
    ]
    # kubectl asked the server to validate (fieldValidation) and sent nothing the schemas reject.
    assert any("fieldValidation=Strict" in r.query for r in fake.requests if r.method == "POST")
    again = kubectl("apply", "-f", str(manifest_file)).stdout
    assert f"raycluster.ray.io/{NAME} unchanged" in again
    assert f"computeclass.cloud.google.com/{NAME}-gpus unchanged" in again
    # The capacity policy, as a user checks it (docs/getting-gpus.md).
    assert kubectl("get", "computeclass", "-o", "name").stdout.split() == [f"computeclass.cloud.google.com/{NAME}-gpus"]
    # A second apply patches built-in kinds with strategic merge patches.
    patches = {r.path.rsplit("/", 2)[-2] for r in fake.requests if r.method == "PATCH"}
    assert patches <= {"persistentvolumes", "secrets"}

    kubectl("wait", "--for=condition=HeadPodReady", f"raycluster/{NAME}", "--timeout=30s")
    kubectl("wait", "--for=jsonpath={.status.phase}=Bound", f"pvc/{NAME}-lustre-pvc", "--timeout=30s")
    pods = json.loads(kubectl("get", "pods", "-l", f"ray.io/cluster={NAME}", "-o", "json").stdout)["items"]
    assert sorted(p["metadata"]["labels"]["ray.io/node-type"] for p in pods) == ["head", "worker"]
    running = kubectl("get", "pods", "--field-selector", "status.phase=Running", "-o", "name").stdout.split()
    assert len(running) == 2
    unsupported = kubectl("get", "pods", "--field-selector", "spec.image=x", check=False)
    assert unsupported.returncode != 0
    assert "field label not supported: spec.image" in unsupported.stderr

    # PUT: kubectl replace sends the whole object back with its resourceVersion.
    secret = json.loads(kubectl("get", "secret", f"{NAME}-job-secrets", "-o", "json").stdout)
    secret["metadata"].setdefault("annotations", {})["note"] = "replaced"
    (manifest_file.parent / "secret.json").write_text(json.dumps(secret))
    replaced = kubectl("replace", "-f", str(manifest_file.parent / "secret.json"))
    assert f"secret/{NAME}-job-secrets replaced" in replaced.stdout
    assert fake.get("Secret", f"{NAME}-job-secrets")["metadata"]["annotations"]["note"] == "replaced"
    assert any(r.method == "PUT" for r in fake.requests)

    forward = subprocess.Popen(
        [KUBECTL, "port-forward", f"svc/{NAME}-head-svc", ":8265"],
        env=kubectl.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert forward.stdout is not None
        first = forward.stdout.readline()
        m = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> 8265", first)
        assert m is not None, first + (forward.stderr.read() if forward.poll() is not None and forward.stderr else "")
        for path in ("/api/version", "/api/jobs/"):
            with urllib.request.urlopen(f"http://127.0.0.1:{m[1]}{path}", timeout=20) as answer:
                assert answer.read().decode() == f"head dashboard {path}"
    finally:
        forward.terminate()
        forward.wait(10)

    deleted = kubectl("delete", "-f", str(manifest_file), "--timeout=60s").stdout
    assert f'raycluster.ray.io "{NAME}" deleted' in deleted
    assert fake.objects() == []
    assert fake.unhandled == []
    assert fake.rejected == []
