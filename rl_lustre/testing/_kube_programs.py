"""Pods that run the on-cluster package, run for real by :class:`~rl_lustre.testing.kube.KubeFake`.

The keeper's Deployment and the teardown Job (:mod:`rl_lustre.kube.keeper`) run
``python -m rl_lustre_oncluster.<program>`` from a ConfigMap. With ``KubeFake(programs=True)``
such a pod, once the simulated kubelet runs it, gets a real process here, as a kubelet would
start its container: the ConfigMap's files laid out where the pod mounts them (and put on
``PYTHONPATH``), the container's environment (``secretKeyRef`` read from the Secret), the
service account's token and the fake's CA where the pod would find them
(``--kube-credentials``, ``KUBERNETES_SERVICE_HOST``/``PORT``), and the head Service's
address (``--dashboard http://<name>-head-svc.<ns>.svc:8265``) answered by a stand-in for the
Service: a local port that forwards to whatever :attr:`KubeFake.head_target` is now (a new head
listens elsewhere; the Service's name stays). The volume is the same directory here (the
fakes mount it at the cluster's mount path).

A Job's pod ends ``Succeeded`` or ``Failed`` with the process's exit code; a Deployment's pod
restarts its process (``restartCount``), as ``restartPolicy: Always`` does; a pod that goes
takes its process with it (SIGTERM, SIGKILL after its grace period). The output is the pod's log.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ._kube_store import Obj, Store, now_rfc3339

__all__ = ["Programs", "ServiceProxy"]

logger = logging.getLogger("rl_lustre.testing.kube")

_PACKAGE = "rl_lustre_oncluster"
_SERVICE = re.compile(r"http://[a-z0-9-]+-head-svc\.[a-z0-9-]+\.svc(?:\.cluster\.local)?:8265")


class ServiceProxy:
    """A local TCP port that forwards each connection to ``target()`` (read per connection)."""

    def __init__(self, target: Callable[[], tuple[str, int] | None]) -> None:
        self.target = target
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, name="kube-fake-service", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        where = self.target()
        try:
            if where is None:
                raise OSError("no head")
            upstream = socket.create_connection(where, timeout=5)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)

        def pump(a: socket.socket, b: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := a.recv(65536):
                    b.sendall(data)
            with contextlib.suppress(OSError):
                b.shutdown(socket.SHUT_WR)

        threading.Thread(target=pump, args=(upstream, conn), daemon=True).start()
        pump(conn, upstream)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()


class Programs:
    """The processes behind the pods that run the on-cluster package (see the module's docstring)."""

    def __init__(self, store: Store, *, api: tuple[str, int], ca_pem: bytes, token: str, head: ServiceProxy) -> None:
        self.store = store
        self.api = api
        self.ca_pem = ca_pem
        self.token = token
        self.head = head
        self.root = Path(tempfile.mkdtemp(prefix="kube-fake-pods-"))
        # pod uid -> (process, log)
        self.running: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        self._logged: dict[str, float] = {}
        self._lock = threading.Lock()

    @staticmethod
    def runs(pod: Obj) -> bool:
        """Whether ``pod``'s container runs a program of the on-cluster package."""
        command = (((pod.get("spec") or {}).get("containers") or [{}])[0]).get("command") or []
        return len(command) >= 3 and command[1] == "-m" and str(command[2]).startswith(f"{_PACKAGE}.")

    def step(self, write_log: Callable[[str, str, str], None]) -> None:
        """Start what runs, stop what went, end the pods whose process ended (on the server's loop)."""
        live: set[str] = set()
        for pod in self.store.find("Pod", match=self.runs):
            meta, status = pod["metadata"], pod.get("status") or {}
            uid = meta["uid"]
            if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
                continue
            live.add(uid)
            ns, name = meta.get("namespace") or "default", meta["name"]
            with self._lock:
                entry = self.running.get(uid)
            if entry is None:
                if status.get("phase") == "Running":
                    self._start(pod)
                continue
            if time.monotonic() - self._logged.get(uid, 0.0) >= 1.0:
                self._logged[uid] = time.monotonic()
                write_log(name, self.log_of(pod), ns)
            code = entry[0].poll()
            if code is None:
                continue
            write_log(name, self.log_of(pod), ns)
            self._ended(pod, code)
        with self._lock:
            gone = [uid for uid in self.running if uid not in live]
        for uid in gone:
            # Off the server's loop: the process gets its grace period.
            threading.Thread(target=self._stop, args=(uid,), daemon=True).start()

    def _start(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        ns = meta.get("namespace") or "default"
        container = (spec.get("containers") or [{}])[0]
        home = self.root / meta["uid"]
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
        for e in container.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref is not None:
                secret = self.store.get("Secret", ns, ref.get("name", "")) or {}
                raw = (secret.get("data") or {}).get(ref.get("key", ""))
                if raw is not None:
                    env[e["name"]] = base64.b64decode(raw).decode()
            elif "value" in e:
                env[e["name"]] = str(e["value"])
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts") or []}
        for volume in spec.get("volumes") or []:
            cm = volume.get("configMap")
            if cm is None or volume["name"] not in mounts:
                continue
            data = (self.store.get("ConfigMap", ns, cm.get("name", "")) or {}).get("data") or {}
            target = home / mounts[volume["name"]].lstrip("/")
            for item in cm.get("items") or [{"key": k, "path": k} for k in data]:
                path = target / item["path"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(data.get(item["key"], ""))
            # The container's code path, as the pod sees it, made local.
            env["PYTHONPATH"] = str(target.parent)
        args = [*container.get("command", [])[1:], *container.get("args", [])]
        args = [_SERVICE.sub(f"http://127.0.0.1:{self.head.port}", a) for a in args]
        if spec.get("automountServiceAccountToken", True) is not False and spec.get("serviceAccountName"):
            creds = home / "serviceaccount"
            creds.mkdir(parents=True, exist_ok=True)
            (creds / "token").write_text(self.token)
            (creds / "ca.crt").write_bytes(self.ca_pem)
            (creds / "namespace").write_text(ns)
            env.update(KUBERNETES_SERVICE_HOST=self.api[0], KUBERNETES_SERVICE_PORT=str(self.api[1]))
            args += ["--kube-credentials", str(creds)]
        log = home / "log"
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [sys.executable, *args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=home,
            )
        logger.info("pod %s/%s runs %s (pid %d)", ns, meta["name"], " ".join(args[:2]), process.pid)
        with self._lock:
            self.running[meta["uid"]] = (process, log)

    def log_of(self, pod: Obj) -> str:
        with self._lock:
            entry = self.running.get(pod["metadata"]["uid"])
        if entry is None:
            return ""
        with contextlib.suppress(OSError):
            return entry[1].read_text(errors="replace")
        return ""

    def _ended(self, pod: Obj, code: int) -> None:
        meta = pod["metadata"]
        ns, name, uid = meta.get("namespace") or "default", meta["name"], meta["uid"]
        stamp = now_rfc3339()
        terminated = {
            "exitCode": code if code >= 0 else 128 - code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": stamp,
            "finishedAt": stamp,
        }
        with self._lock:
            self.running.pop(uid, None)
        if (pod.get("spec") or {}).get("restartPolicy", "Always") == "Always":

            def restarted(o: Obj) -> None:
                for c in (o.get("status") or {}).get("containerStatuses") or []:
                    c["restartCount"] = int(c.get("restartCount") or 0) + 1
                    c["lastState"] = {"terminated": terminated}

            self.store.update("Pod", ns, name, restarted)
            self._start(self.store.get("Pod", ns, name) or pod)
            return

        def finished(o: Obj) -> None:
            status = dict(o.get("status") or {})
            status["phase"] = "Succeeded" if code == 0 else "Failed"
            for c in status.get("containerStatuses") or []:
                c.update(ready=False, started=False, state={"terminated": terminated})
            status["conditions"] = [
                {**c, "status": "False"} if c.get("type") in ("Ready", "ContainersReady") else c
                for c in status.get("conditions") or []
            ]
            o["status"] = status

        self.store.update("Pod", ns, name, finished)

    def _stop(self, uid: str, grace: float = 5.0) -> None:
        with self._lock:
            entry = self.running.pop(uid, None)
        if entry is None:
            return
        process = entry[0]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def close(self) -> None:
        with self._lock:
            uids = list(self.running)
        for uid in uids:
            self._stop(uid)
        shutil.rmtree(self.root, ignore_errors=True)

    def __repr__(self) -> str:
        return f"Programs({len(self.running)} running)"
