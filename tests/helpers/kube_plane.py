"""A real Kubernetes control plane on loopback, for the tests marked ``kube`` (``nox -s tests-kube``).

:class:`ControlPlane` runs the binaries ``tools/kube/build.sh`` builds from Go modules:

- ``etcd``;
- ``kube-apiserver`` with a serving certificate from a throwaway CA (handed to clients
  separately, as GKE's ``master_auth.cluster_ca_certificate`` is) and bearer-token
  authentication: static tokens, among them :data:`rl_lustre.kube.tokens.EMULATOR_TOKEN`,
  the token our GKE path sends while the GCP emulators are in use (on GKE it is a Google
  access token; to the API server both are a bearer token naming a user);
- ``kube-controller-manager`` with the controllers our objects meet on GKE: the PV binder
  and protection, garbage collector, Job, DaemonSet, pod GC, node lifecycle and taint
  eviction, service accounts, namespaces, TTL-after-finished;
- ``kube-scheduler``;
- ``kwok``, playing the kubelets of Nodes shaped like GKE's (``rl_lustre.testing._gke_nodes``):
  pods go Running and Ready by kwok's own "fast" stages (Stage objects, editable at run
  time), pod logs come from files (kwok ``Logs`` objects), and port-forwards to a head pod's
  dashboard port reach a real local Ray head (kwok ``PortForward`` objects);
- the KubeRay operator, with the CRDs from its module;
- the GKE networking CRDs (``networking.gke.io/v1``) and GKE's ComputeClass CRD
  (``cloud.google.com/v1``), written from the schemas ``rl_lustre/kube/crds`` vendors.

Everything listens on 127.0.0.1 on free ports. Each component runs in a process group of
its own; :meth:`ControlPlane.stop` (also at interpreter exit) ends them, and a watchdog
process ends them too if this process dies without stopping them.

Why here and not in ``rl_lustre.testing``: it needs the repository's ``tools/kube`` and a Go
toolchain, neither of which a user of the package has; ``KubeFake`` stays what the package
offers.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from .kube_kubelet import KubeletSim

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "tools" / "kube" / "build.sh"
BIN_ENV = "RL_LUSTRE_KUBE_BUILD"
DASHBOARD_PORT = 8265
HEAD_LABEL = "ray.io/node-type=head"

# What the controller-manager runs: the controllers our objects meet on GKE.
CONTROLLERS = (
    "serviceaccount-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "job-controller",
    "daemonset-controller",
    "ttl-after-finished-controller",
    "persistentvolume-binder-controller",
    "persistentvolume-protection-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-expander-controller",
    "pod-garbage-collector-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "endpointslice-controller",
    "deployment-controller",
    "replicaset-controller",
    "root-ca-certificate-publisher-controller",
    "resourcequota-controller",
)
# kwok's objects it reads from the API server rather than from its config file.
KWOK_CRDS = ("Stage", "PortForward", "ClusterPortForward", "Logs", "ClusterLogs")


class ControlPlaneError(RuntimeError):
    """A component did not start; the message carries the tail of its log."""


def build() -> Path:
    """The build directory (``bin/``, ``crds/``, ``kwok-stages/``): ``$RL_LUSTRE_KUBE_BUILD``
    when set (``nox -s tests-kube`` sets it), else what ``tools/kube/build.sh`` prints (it
    reuses a finished build and builds what is missing, which the first time takes a while)."""
    given = os.environ.get(BIN_ENV, "").strip()
    if given:
        path = Path(given)
        if not (path / "bin" / "kube-apiserver").is_file():
            raise ControlPlaneError(f"${BIN_ENV}={given} holds no bin/kube-apiserver: run {BUILD_SCRIPT}")
        return path
    if shutil.which("go") is None:
        raise ControlPlaneError(
            f"the control plane is built with Go (go >= 1.26), and `go` is not on PATH: "
            f"install Go, then run {BUILD_SCRIPT} (or nox -s tests-kube)"
        )
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"{BUILD_SCRIPT} failed (exit {done.returncode}); its output is above")
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# Runs as its own process: ends the components' process groups when the test process is gone.
_WATCHDOG = r"""
import os, signal, sys, time, shutil
parent, started, pgids, workdir = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
def alive():
    try:
        with open(f"/proc/{parent}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19] == started
    except OSError:
        return False
def groups():
    try:
        with open(pgids) as f:
            return [int(line) for line in f if line.strip()]
    except OSError:
        return []
while alive() and os.path.exists(pgids):
    time.sleep(0.5)
for sig in (signal.SIGTERM, signal.SIGKILL):
    for pgid in groups():
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
    time.sleep(3)
shutil.rmtree(workdir, ignore_errors=True)
"""


def _start_time(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[19]


@attrs.define
class Component:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise ControlPlaneError(f"{self.name} exited with {self.proc.returncode}:\n{_tail(self.log)}")


def compute_class_crd() -> dict[str, Any]:
    """The ComputeClass CRD (``cloud.google.com/v1``, cluster-scoped), made from the schema
    ``rl_lustre/kube/crds`` vendors: the CRD itself ships only inside GKE (``crds/NOTICE``)."""
    v = json.loads((REPO / "rl_lustre" / "kube" / "crds" / "cloud.google.com_computeclasses.v1.json").read_text())
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{v['plural']}.{v['group']}"},
        "spec": {
            "group": v["group"],
            "scope": v["scope"],
            "names": {
                "kind": v["kind"],
                "listKind": f"{v['kind']}List",
                "plural": v["plural"],
                "singular": v["singular"],
            },
            "versions": [
                {
                    "name": v["version"],
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": v["openAPIV3Schema"]},
                    "subresources": v.get("subresources") or {},
                }
            ],
        },
    }


def networking_crds(schemas: Mapping[str, Any]) -> list[dict[str, Any]]:
    """CRDs for the vendored ``networking.gke.io/v1`` JSON Schemas (cluster-scoped, as on GKE).

    The JSON Schemas are stricter than a CRD can say in places (``additionalProperties:
    false``; a structural schema prunes unknown fields instead) and say ``const`` where a
    CRD says a one-value ``enum``.
    """

    def structural(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("$schema", "additionalProperties") and not isinstance(value, dict):
                continue
            if key == "const":
                out["enum"] = [value]
            elif key == "properties":
                out[key] = {k: structural(v) for k, v in value.items()}
            elif key == "additionalProperties":
                out[key] = structural(value)
            else:
                out[key] = value
        if "enum" in out and "type" not in out:
            out["type"] = "string"
        if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out

    crds = []
    for kind, schema in schemas["kinds"].items():
        plural = kind.lower() + "s"
        props = schema["properties"]
        openapi = {
            "type": "object",
            "required": [r for r in schema.get("required", []) if r in ("spec",)],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": structural(props["spec"]),
                "status": structural(props.get("status", {"type": "object"})),
            },
        }
        crds.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.networking.gke.io"},
                "spec": {
                    "group": "networking.gke.io",
                    "scope": "Cluster",
                    "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                    "versions": [
                        {
                            "name": "v1",
                            "served": True,
                            "storage": True,
                            "schema": {"openAPIV3Schema": openapi},
                            "subresources": {"status": {}},
                        }
                    ],
                },
            }
        )
    return crds


class ControlPlane(KubeletSim):
    """etcd, kube-apiserver, controller-manager, scheduler, kwok and the KubeRay operator.

    Examples:
        >>> with ControlPlane(build()) as plane:            # doctest: +SKIP
        ...     api = plane.api_client()
        ...     plane.add_pool_nodes(pool, cluster="c", zone="us-east1-b")

    Args:
        build_dir: what :func:`build` returns.
        head_target: ``(host, port)`` of a real Ray dashboard; every head pod's port 8265
            is forwarded there.
    """

    def __init__(self, build_dir: Path, *, head_target: tuple[str, int] | None = None) -> None:
        self.build_dir = Path(build_dir)
        self.bin = self.build_dir / "bin"
        self.head_target = head_target
        self.versions = dict(
            line.split("=", 1) for line in (self.build_dir / "versions.env").read_text().split() if "=" in line
        )
        self.token = "admin-" + uuid.uuid4().hex
        self.components: list[Component] = []
        self.workdir: Path | None = None
        self.port = 0
        self.ca_pem = b""
        self._pgids: Path | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._forwarder: threading.Thread | None = None
        self._stopping = threading.Event()
        self.logs_dir: Path | None = None
        self._kubelet_init()

    # -- what clients need -------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        """``127.0.0.1:<port>``: what a (fake) GKE cluster reports as its endpoint."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"https://{self.endpoint}"

    @property
    def ca_b64(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    def api_client(self, token: str | None = None) -> Any:
        """A Kubernetes ``ApiClient`` made the way our GKE path makes one."""
        from rl_lustre.kube.client import kube_api_client
        from rl_lustre.kube.tokens import StaticTokenSource

        return kube_api_client(self.endpoint, self.ca_pem, StaticTokenSource(token or self.token))

    def write_kubeconfig(self, path: Path, *, token: str | None = None, context: str = "kube-real") -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": context,
                    "clusters": [
                        {"name": context, "cluster": {"server": self.url, "certificate-authority-data": self.ca_b64}}
                    ],
                    "users": [{"name": context, "user": {"token": token or self.token}}],
                    "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
                }
            )
        )
        return path

    # -- start and stop ------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 180.0) -> None:
        from rl_lustre.kube.tokens import EMULATOR_TOKEN
        from rl_lustre.testing._kube_certs import make_certs

        self.workdir = Path(tempfile.mkdtemp(prefix="rl-kube-"))
        self.logs_dir = self.workdir / "pod-logs"
        self.logs_dir.mkdir()
        atexit.register(self.stop)
        self._pgids = self.workdir / "pgids"
        self._pgids.write_text("")
        self._watchdog = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WATCHDOG,
                str(os.getpid()),
                _start_time(os.getpid()),
                str(self._pgids),
                str(self.workdir),
            ],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        try:
            certs = make_certs("127.0.0.1")
            self.ca_pem = certs.ca_pem
            pki = self.workdir / "pki"
            pki.mkdir()
            (pki / "ca.crt").write_bytes(certs.ca_pem)
            (pki / "apiserver.crt").write_bytes(certs.cert_pem)
            (pki / "apiserver.key").write_bytes(certs.key_pem)
            (pki / "sa.key").write_bytes(_service_account_key())
            users = {
                self.token: ("admin", "system:masters"),
                EMULATOR_TOKEN: ("rl-lustre", "system:masters"),
                **{
                    f"{name}-{uuid.uuid4().hex}": (name, "system:masters")
                    for name in ("kube-controller-manager", "kube-scheduler", "kwok", "kuberay-operator")
                },
            }
            (pki / "tokens.csv").write_text(
                "".join(f'{token},{user},{user},"{group}"\n' for token, (user, group) in users.items())
            )
            self.port = free_port()
            kubeconfigs = {
                user: self.write_kubeconfig(self.workdir / f"{user}.kubeconfig", token=token)
                for token, (user, _) in users.items()
            }

            self._start_etcd(deadline)
            self._start_apiserver(pki, deadline)
            self._install_crds()
            self._start(
                "kube-controller-manager",
                [
                    f"--kubeconfig={kubeconfigs['kube-controller-manager']}",
                    f"--controllers={','.join(CONTROLLERS)}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    "--use-service-account-credentials=false",
                    f"--service-account-private-key-file={pki / 'sa.key'}",
                    f"--root-ca-file={pki / 'ca.crt'}",
                    "--cluster-name=kube-real",
                    "--v=1",
                ],
            )
            self._start(
                "kube-scheduler",
                [
                    f"--kubeconfig={kubeconfigs['kube-scheduler']}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    "--v=1",
                ],
            )
            self._start_kwok(kubeconfigs["kwok"], pki, certs)
            probe = free_port()
            self._start(
                "kuberay-operator",
                [
                    f"--kubeconfig={kubeconfigs['kuberay-operator']}",
                    "--enable-leader-election=false",
                    "--metrics-addr=0",
                    f"--health-probe-bind-address=127.0.0.1:{probe}",
                    "--log-stdout-encoder=console",
                ],
            )
            self._wait("the KubeRay operator", deadline, lambda: _http_ok(f"http://127.0.0.1:{probe}/readyz"))
            self._wait("the default ServiceAccount", deadline, self._default_service_account)
            self._take_baseline()
            if self.head_target is not None:
                self._forwarder = threading.Thread(target=self._forward_heads, name="kube-plane-forwards", daemon=True)
                self._forwarder.start()
            threading.Thread(target=self._back_workers, name="kube-plane-raylets", daemon=True).start()
            threading.Thread(target=self._run_programs, name="kube-plane-programs", daemon=True).start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """End every component (SIGTERM to its process group, SIGKILL after 10 s) and the watchdog."""
        atexit.unregister(self.stop)
        self._stopping.set()
        self.close_kubelets()
        for component in reversed(self.components):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(component.proc.pid, signal.SIGTERM)
        for component in reversed(self.components):
            try:
                component.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(component.proc.pid, signal.SIGKILL)
                component.proc.wait(timeout=10)
        self.components.clear()
        if self._pgids is not None:
            with contextlib.suppress(OSError):
                self._pgids.unlink()  # the watchdog's cue that all is done
        if self._watchdog is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=15)
            self._watchdog = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def pids(self) -> list[int]:
        """Process ids of the running components (for the tests that check nothing is left)."""
        return [c.proc.pid for c in self.components if c.proc.poll() is None]

    # -- components ----------------------------------------------------------------------
    def _start(self, name: str, args: list[str]) -> Component:
        assert self.workdir is not None
        assert self._pgids is not None
        log = self.workdir / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [str(self.bin / name), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.workdir,
            )
        with open(self._pgids, "a") as f:
            f.write(f"{proc.pid}\n")
        component = Component(name, proc, log)
        self.components.append(component)
        return component

    def _wait(self, what: str, deadline: float, ready: Callable[[], bool]) -> None:
        while True:
            for component in self.components:
                component.check()
            with contextlib.suppress(Exception):
                if ready():
                    return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {c.name}\n{_tail(c.log, 15)}" for c in self.components)
                raise ControlPlaneError(f"timed out waiting for {what}\n{logs}")
            time.sleep(0.2)

    def _start_etcd(self, deadline: float) -> None:
        assert self.workdir is not None
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._start(
            "etcd",
            [
                "--name=kube-real",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=kube-real=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", deadline, lambda: _http_ok(f"{self.etcd_url}/health"))

    def _start_apiserver(self, pki: Path, deadline: float) -> None:
        self._start(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.key'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--allow-privileged=true",
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                f"--cert-dir={pki}",
                "--profiling=false",
                "--v=1",
            ],
        )
        context = ssl.create_default_context(cadata=self.ca_pem.decode())

        def ready() -> bool:
            request = urllib.request.Request(f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.token}"})
            with urllib.request.urlopen(request, context=context, timeout=5) as response:
                return bool(response.status == 200)

        self._wait("kube-apiserver", deadline, ready)

    def _install_crds(self) -> None:
        from kubernetes import client

        schemas = json.loads((REPO / "rl_lustre" / "kube" / "crds" / "networking.gke.io_v1.json").read_text())
        crds = [
            doc
            for path in sorted((self.build_dir / "crds").glob("*/*.yaml"))
            for doc in yaml.safe_load_all(path.read_text())
            if doc
        ]
        crds += networking_crds(schemas)
        crds.append(compute_class_crd())
        ext = client.ApiextensionsV1Api(self.api_client())
        for crd in crds:
            ext.create_custom_resource_definition(crd)
        deadline = time.monotonic() + 60
        pending = {crd["metadata"]["name"] for crd in crds}
        while pending:
            for name in list(pending):
                status = ext.read_custom_resource_definition(name).status
                if any(c.type == "Established" and c.status == "True" for c in (status.conditions or [])):
                    pending.discard(name)
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"CRDs not established: {sorted(pending)}")
            time.sleep(0.1)

    def _start_kwok(self, kubeconfig: Path, pki: Path, certs: Any) -> None:
        from kubernetes import client

        assert self.workdir is not None
        port = free_port()
        # kwok serves the kubelet API (logs, port-forward) for every node it plays, with a
        # certificate of the cluster's CA, which the API server verifies.
        (pki / "kwok.crt").write_bytes(certs.cert_pem)
        (pki / "kwok.key").write_bytes(certs.key_pem)
        api = client.CustomObjectsApi(self.api_client())
        for path in sorted((self.build_dir / "kwok-stages").glob("*.yaml")):
            stage = yaml.safe_load(path.read_text())
            api.create_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "stages", stage)
        self._start(
            "kwok",
            [
                f"--kubeconfig={kubeconfig}",
                "--manage-all-nodes=true",
                "--node-lease-duration-seconds=40",
                "--node-ip=127.0.0.1",
                f"--node-port={port}",
                f"--server-address=127.0.0.1:{port}",
                f"--tls-cert-file={pki / 'kwok.crt'}",
                f"--tls-private-key-file={pki / 'kwok.key'}",
                "--cidr=10.64.0.0/16",
                f"--enable-crds={','.join(KWOK_CRDS)}",
                "--v=INFO",
            ],
        )

    def _default_service_account(self) -> bool:
        from kubernetes import client

        client.CoreV1Api(self.api_client()).read_namespaced_service_account("default", "default")
        return True

    def _forward_heads(self) -> None:
        """Give every head pod a kwok ``PortForward`` of its port 8265 to :attr:`head_target`."""
        from kubernetes import client, watch

        api = self.api_client()
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        while not self._stopping.is_set():
            try:
                for event in watch.Watch().stream(
                    core.list_pod_for_all_namespaces, label_selector=HEAD_LABEL, timeout_seconds=5
                ):
                    pod = event["object"]
                    if event["type"] != "ADDED" or self.head_target is None:
                        continue
                    host, port = self.head_target  # (read each time: a test may point it elsewhere)
                    body = {
                        "apiVersion": "kwok.x-k8s.io/v1alpha1",
                        "kind": "PortForward",
                        "metadata": {
                            "name": pod.metadata.name,
                            "namespace": pod.metadata.namespace,
                            "ownerReferences": [
                                {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name, "uid": pod.metadata.uid}
                            ],
                        },
                        "spec": {"forwards": [{"ports": [DASHBOARD_PORT], "target": {"address": host, "port": port}}]},
                    }
                    with contextlib.suppress(client.ApiException):
                        custom.create_namespaced_custom_object(
                            "kwok.x-k8s.io", "v1alpha1", pod.metadata.namespace, "portforwards", body
                        )
            except Exception:  # the API server is going away, or a watch broke: look again
                if self._stopping.wait(0.5):
                    return

    # -- nodes, as GKE registers them ------------------------------------------------------
    def add_pool_nodes(self, pool: Any, *, cluster: str, zone: str, count: int | None = None) -> list[str]:
        """Register the Nodes of GKE node pool ``pool`` (a ``container_v1.NodePool``)."""
        from kubernetes import client

        from rl_lustre.testing._gke_nodes import gke_node

        core = client.CoreV1Api(self.api_client())
        self._pools[pool.name] = (pool, cluster, zone)
        existing = {n.metadata.name for n in core.list_node().items}
        names = []
        index = 0
        if count is None:
            count = pool.initial_node_count
            if count == 0 and pool.autoscaling.enabled and pool.name == "gpu-pool":
                # The real plane runs no cluster autoscaler: the ComputeClass's first pool (Spot, from 0)
                # gets at once the nodes the autoscaler would bring for the RayCluster's workers.
                count = pool.autoscaling.total_max_node_count or pool.autoscaling.max_node_count
        for _ in range(count):
            while (node := gke_node(pool, cluster=cluster, zone=zone, index=index))["metadata"]["name"] in existing:
                index += 1
            core.create_node(node)
            existing.add(node["metadata"]["name"])
            names.append(node["metadata"]["name"])
        return names

    # what GKE does to the cluster's Kubernetes API (FakeGCP(kube=plane) calls these)
    def node_pool_ready(self, pool: Any) -> list[str]:
        """Register the Nodes of a RUNNING GKE node pool (its ``self_link`` names the cluster)."""
        import re

        m = re.search(r"projects/([^/]+)/locations/([^/]+)/clusters/([^/]+)", pool.self_link or "")
        cluster, location = (m[3], m[2]) if m else ("cluster", "us-east1-b")
        return self.add_pool_nodes(pool, cluster=cluster, zone=pool.locations[0] if pool.locations else location)

    def node_pool_deleted(self, name: str) -> None:
        self.remove_pool_nodes(name)

    def remove_pool_nodes(self, pool: str) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        for node in core.list_node(label_selector=f"cloud.google.com/gke-nodepool={pool}").items:
            with contextlib.suppress(client.ApiException):
                core.delete_node(node.metadata.name)

    def wait_nodes_ready(self, timeout: float = 60) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        deadline = time.monotonic() + timeout
        while True:
            nodes = core.list_node().items
            # Ready, and the node lifecycle controller has taken its not-ready taint off again.
            if nodes and all(
                any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
                and not any(t.key.startswith("node.kubernetes.io/") for t in n.spec.taints or [])
                for n in nodes
            ):
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"nodes not Ready after {timeout} s")
            time.sleep(0.2)

    # -- pod logs, as kwok serves them --------------------------------------------------
    def write_log(self, pod: str, text: str, *, namespace: str = "default") -> None:
        """What ``pods/<pod>/log`` returns from now on (a kwok ``Logs`` object over a file)."""
        from kubernetes import client

        assert self.logs_dir is not None
        path = self.logs_dir / f"{namespace}_{pod}.log"
        path.write_text(text)
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {"logs": [{"logsFile": str(path), "follow": False}]},
        }
        custom = client.CustomObjectsApi(self.api_client())
        try:
            custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "logs", body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _service_account_key() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


@contextlib.contextmanager
def control_plane(head_target: tuple[str, int] | None = None) -> Iterator[ControlPlane]:
    with ControlPlane(build(), head_target=head_target) as plane:
        yield plane


# -- pytest fixtures (registered from conftest.py) --------------------------------------------


@pytest.fixture(scope="session")
def kube_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """One control plane for the session's ``kube`` tests; head pods' port 8265 reaches the
    session's real local Ray head."""
    cluster = request.getfixturevalue("local_cluster")
    host, port = cluster._backend().head.dashboard_url.removeprefix("http://").rsplit(":", 1)
    with control_plane(head_target=(host, int(port))) as plane:
        yield plane
