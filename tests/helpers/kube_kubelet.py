"""What GKE and its kubelets do that kwok does not, for :class:`kube_plane.ControlPlane`.

kwok plays the kubelets of the plane's Nodes by its Stage objects: pods go Running and
Ready at once, Job pods complete at once, a deleted pod goes at once. The tests need a few
more things a real GKE node does, each done through the API as the real component does it:

- Job pods that run for a while or fail (:meth:`KubeletSim.hold_job_pods`,
  :meth:`KubeletSim.fail_job_pods`): by editing kwok's ``pod-complete`` Stage (kwok reloads
  Stage objects; a pod it already passed over is looked at again once it changes, which
  :meth:`KubeletSim.release_job_pods` does by annotating it);
- a pod the kubelet evicts (:meth:`KubeletSim.evict`): ``Failed``, reason ``Evicted``;
- Ray worker pods backed by real raylets joined to a local Ray head
  (:attr:`KubeletSim.raylets`), each with the CPUs and GPUs the operator's ``ray start``
  gives the pod (:func:`operator_ray_start_resources`), killed with their pod;
- a Spot preemption (:meth:`KubeletSim.preempt`), as GKE does it: the node's
  ``cloud.google.com/impending-node-termination`` taint, the kubelet's graceful shutdown
  marking its pods ``Failed`` (``Terminated``, ``DisruptionTarget``), the VM and its Node
  gone; after ``back_after`` seconds the managed instance group brings a VM of the same
  name back, and the pool's Node registers again.

What this does not do: a real node's Ready condition going False before the VM goes (kwok
re-initialises a NotReady node at once; the Node is deleted right after anyway), and pod
readiness that waits for the container's probes (a kwok pod is Ready at once, before the
raylet behind it has joined).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rl_lustre.testing import HeadLoss, Preemption
from rl_lustre.testing._kube_spot import IMPENDING_TERMINATION_TAINT, SHUTDOWN_MESSAGE

logger = logging.getLogger("tests.helpers.kube_kubelet")

KWOK = ("kwok.x-k8s.io", "v1alpha1")
_POD_COMPLETE = "pod-complete"
_FAILED_TEMPLATE = """\
{{ $now := Now }}
containerStatuses:
{{ range $index, $item := .spec.containers }}
- image: {{ $item.image | Quote }}
  name: {{ $item.name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 1
      finishedAt: {{ $now | Quote }}
      reason: Error
      message: %s
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Failed
"""


def operator_ray_start_resources(pod: Any) -> dict[str, int]:
    """What the KubeRay operator's ``ray start`` declares for ``pod``: ``CPU``, ``GPU`` and
    ``memory`` from the ``--num-cpus``, ``--num-gpus`` and ``--memory`` of the command it
    generated into the container's ``KUBERAY_GEN_RAY_START_CMD`` (it takes them from
    ``rayStartParams``, else from the container's limits); a flag it left out is left out
    (the KubeFake's twin, which computes them, is ``rl_lustre.testing._kube_spot.ray_start_resources``)."""
    container = pod.spec.containers[0]
    env = {e.name: e.value for e in container.env or []}
    command = env.get("KUBERAY_GEN_RAY_START_CMD")
    if command is None:
        raise ValueError(
            f"pod {pod.metadata.name}: its container {container.name!r} has no KUBERAY_GEN_RAY_START_CMD "
            "(the KubeRay operator writes it into every Ray pod it creates)"
        )
    found = {}
    for flag, key in (("num-cpus", "CPU"), ("num-gpus", "GPU"), ("memory", "memory")):
        m = re.search(rf"--{flag}[= ]['\"]?(\d+)", command)
        if m:
            found[key] = int(m[1])
    return found


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class KubeletSim:
    """The mixin of :class:`kube_plane.ControlPlane` that plays GKE's nodes where kwok does not."""

    api_client: Callable[..., Any]
    _stopping: threading.Event

    def _kubelet_init(self) -> None:
        # start(pod name, node name, resources) -> a handle with kill(): a raylet for a worker
        # pod (the same call as KubeFake(raylets=start)).
        self.raylets: Callable[[str, str, dict[str, int]], Any] | None = None
        self._raylets: dict[str, Future[Any]] = {}
        self._raylet_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kube-plane-raylet")
        self._raylet_lock = threading.Lock()
        self._stage_saved: dict[str, Any] | None = None
        self._pools: dict[str, tuple[Any, str, str]] = {}
        self._baseline: set[str] = set()
        self.deleted_clusters: list[str] = []
        # The Ray heads behind head pods (kill(), start_head(): see rl_lustre.testing._kube_headloss),
        # and whether the pods of the on-cluster package's programs run (pod uid -> process, log).
        self.ray_heads: Any = None
        self.programs = False
        self._programs: dict[str, tuple[Any, Any]] = {}
        self._service: Any = None

    # -- what deleting the GKE cluster does --------------------------------------------------
    _SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")

    def _take_baseline(self) -> None:
        """Remember what the plane holds once started (its own objects, kept by :meth:`cluster_deleted`)."""
        from .kube_inventory import inventory

        self._baseline = {item.uid for item in inventory(self.api_client())}

    def cluster_deleted(self, name: str) -> None:
        """What deleting GKE cluster ``name`` does to its API server (``FakeGCP(kube=plane)``
        calls this): its VMs (Nodes) and every object in it go. down() relies on that
        (in-cluster objects are deleted "with gke-cluster"). The plane is the test session's,
        so it stays: what was made in it since it started goes instead (the system
        namespaces' own objects stay), at once: no kubelet or controller is left to wait
        for, so finalizers are dropped."""
        from kubernetes import client

        from .kube_inventory import delete, inventory

        name = name.rsplit("/", 1)[-1]  # (FakeGCP names it by its path: projects/P/locations/L/clusters/C)
        api = self.api_client()
        self.deleted_clusters.append(name)
        core = client.CoreV1Api(api)
        for node in core.list_node().items:
            if node.metadata.name.startswith(f"gke-{name}-"):
                with contextlib.suppress(client.ApiException):
                    core.delete_node(node.metadata.name)
        for item in inventory(api):
            if item.uid in self._baseline:
                continue
            if item.namespace in self._SYSTEM_NAMESPACES and "rl-lustre-deployment" not in item.labels:
                continue
            if item.kind in ("Namespace", "ServiceAccount") or (item.kind, item.name) in (
                ("ConfigMap", "kube-root-ca.crt"),
                ("Service", "kubernetes"),
            ):
                continue
            delete(api, item, force=True)

    # -- Job pods, by kwok's pod-complete Stage ----------------------------------------------
    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client())

    def _edit_stage(self, edit: Callable[[dict[str, Any]], None]) -> None:
        custom = self._custom()
        stage = custom.get_cluster_custom_object(*KWOK, "stages", _POD_COMPLETE)
        if self._stage_saved is None:
            self._stage_saved = copy.deepcopy(stage["spec"])
        spec = copy.deepcopy(self._stage_saved)
        edit(spec)
        stage["spec"] = spec
        custom.replace_cluster_custom_object(*KWOK, "stages", _POD_COMPLETE, stage)
        time.sleep(1.0)  # kwok reloads a changed Stage within a moment

    def hold_job_pods(self, *images: str) -> None:
        """Job pods whose first container runs one of ``images`` keep running (until released)."""
        self._edit_stage(
            lambda spec: spec["selector"]["matchExpressions"].append(
                {"key": ".spec.containers.[0].image", "operator": "NotIn", "values": list(images)}
            )
        )

    def fail_job_pods(self, message: str) -> None:
        """Running Job pods exit 1 with ``message`` as their termination message."""
        import json

        def fail(spec: dict[str, Any]) -> None:
            spec["next"] = {"statusTemplate": _FAILED_TEMPLATE % json.dumps(message)}

        self._edit_stage(fail)

    def release_job_pods(self) -> None:
        """kwok's own Stage again; the Job pods it held are looked at again (and complete)."""
        from kubernetes import client

        if self._stage_saved is None:
            return
        saved = self._stage_saved
        self._edit_stage(lambda spec: spec.update(copy.deepcopy(saved)))
        self._stage_saved = None
        core = client.CoreV1Api(self.api_client())
        for pod in core.list_pod_for_all_namespaces(label_selector="batch.kubernetes.io/job-name").items:
            if pod.status.phase == "Running":
                with contextlib.suppress(client.ApiException):
                    core.patch_namespaced_pod(
                        pod.metadata.name,
                        pod.metadata.namespace,
                        {"metadata": {"annotations": {"kube-plane/released": _now()}}},
                    )

    # -- what a kubelet does to a pod ----------------------------------------------------------
    def evict(
        self, pod: str, *, namespace: str = "default", message: str = "The node was low on resource: memory. "
    ) -> None:
        """The kubelet evicts ``pod``: it ends ``Failed``, reason ``Evicted``."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        current = core.read_namespaced_pod(pod, namespace)
        image_ids = {c.name: c.image_id for c in current.status.container_statuses or []}
        statuses = [
            {
                "name": c.name,
                "image": c.image,
                "imageID": image_ids.get(c.name, ""),
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {
                    "terminated": {"exitCode": 137, "reason": "Error", "startedAt": _now(), "finishedAt": _now()}
                },
            }
            for c in current.spec.containers
        ]
        core.patch_namespaced_pod_status(
            pod,
            namespace,
            {
                "status": {
                    "phase": "Failed",
                    "reason": "Evicted",
                    "message": message,
                    "containerStatuses": statuses,
                    "conditions": [
                        {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": _now()},
                        {
                            "type": "ContainersReady",
                            "status": "False",
                            "reason": "PodFailed",
                            "lastTransitionTime": _now(),
                        },
                    ],
                }
            },
        )

    # -- raylets behind worker pods -------------------------------------------------------------
    def _back_workers(self) -> None:
        """While :attr:`raylets` is set: a raylet for every Running Ray worker pod, killed with it."""
        from kubernetes import client, watch

        core = client.CoreV1Api(self.api_client())
        while not self._stopping.is_set():
            try:
                for event in watch.Watch().stream(
                    core.list_pod_for_all_namespaces, label_selector="ray.io/node-type=worker", timeout_seconds=5
                ):
                    pod = event["object"]
                    name = pod.metadata.name
                    gone = (
                        event["type"] == "DELETED"
                        or pod.metadata.deletion_timestamp is not None
                        or pod.status.phase in ("Failed", "Succeeded")
                    )
                    if gone:
                        self._release_raylet(name)
                    elif pod.status.phase == "Running" and self.raylets is not None:
                        with self._raylet_lock:
                            if name not in self._raylets:
                                resources = operator_ray_start_resources(pod)
                                logger.info("starting a raylet behind worker pod %s (%s)", name, resources)
                                self._raylets[name] = self._raylet_pool.submit(
                                    self.raylets, name, str(pod.spec.node_name), resources
                                )
            except Exception:  # the API server is going away, or a watch broke: look again
                if self._stopping.wait(0.5):
                    return

    def _release_raylet(self, pod: str) -> None:
        with self._raylet_lock:
            future = self._raylets.pop(pod, None)
        if future is not None:
            logger.info("killing the raylet behind worker pod %s", pod)
            future.add_done_callback(lambda f: f.exception() is None and f.result().kill())

    def release_raylets(self) -> None:
        """Kill every raylet started behind a pod (a test's end)."""
        with self._raylet_lock:
            names = list(self._raylets)
        for name in names:
            self._release_raylet(name)

    def raylet_ready(self, pod: str) -> bool:
        """Whether the raylet behind ``pod`` runs."""
        with self._raylet_lock:
            future = self._raylets.get(pod)
        return future is not None and future.done() and future.exception() is None

    # -- Spot preemption, as GKE does it --------------------------------------------------------
    def _terminated(self, pod: Any) -> dict[str, Any]:
        stamp = _now()
        conditions = [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": SHUTDOWN_MESSAGE,
                "lastTransitionTime": stamp,
            },
            {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": stamp},
            {"type": "ContainersReady", "status": "False", "reason": "PodFailed", "lastTransitionTime": stamp},
        ]
        image_ids = {c.name: c.image_id for c in pod.status.container_statuses or []}
        statuses = [
            {
                "name": c.name,
                "image": c.image,
                "imageID": image_ids.get(c.name, ""),
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"terminated": {"exitCode": 137, "reason": "Error", "startedAt": stamp, "finishedAt": stamp}},
            }
            for c in pod.spec.containers
        ]
        return {
            "status": {
                "phase": "Failed",
                "reason": "Terminated",
                "message": SHUTDOWN_MESSAGE,
                "conditions": conditions,
                "containerStatuses": statuses,
            }
        }

    def preempt(
        self, raycluster: str, *, nodes: int = 1, back_after: float | None = 5.0, namespace: str = "default"
    ) -> Preemption:
        """What GKE does to the Spot nodes of ``nodes`` Ready worker pods of ``raycluster``
        (the same call as :meth:`rl_lustre.testing.KubeFake.preempt`)."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        selector = f"ray.io/cluster={raycluster},ray.io/node-type=worker"

        def ready_workers() -> list[Any]:
            return sorted(
                (
                    p
                    for p in core.list_namespaced_pod(namespace, label_selector=selector).items
                    if p.status.phase == "Running"
                    and not p.metadata.deletion_timestamp
                    and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
                ),
                key=lambda p: p.metadata.name,
            )

        workers = ready_workers()
        if len(workers) < nodes:
            raise ValueError(
                f"cannot preempt {nodes} worker node(s) of RayCluster {raycluster!r}: "
                f"{len(workers)} worker pod(s) are Ready"
            )
        victims = workers[:nodes]
        before = {p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=selector).items}
        pools = []
        for pod in victims:
            node = core.read_node(pod.spec.node_name)
            pools.append(node.metadata.labels.get("cloud.google.com/gke-nodepool", ""))
            taints = [t.to_dict() for t in node.spec.taints or []]
            taints.append({"key": IMPENDING_TERMINATION_TAINT, "value": "true", "effect": "NoSchedule"})
            core.patch_node(node.metadata.name, {"spec": {"taints": taints}})
            core.patch_namespaced_pod_status(pod.metadata.name, namespace, self._terminated(pod))
            self._release_raylet(pod.metadata.name)
            core.delete_node(node.metadata.name)
        names = [p.metadata.name for p in victims]
        logger.info("preempted the Spot nodes of %s", names)
        preemption = Preemption(names, time.time(), back_after)
        if back_after is not None:

            def replacements() -> list[str]:
                for pool in pools:
                    known = self._pools.get(pool)
                    if known is not None:
                        proto, cluster, zone = known
                        self.add_pool_nodes(proto, cluster=cluster, zone=zone, count=1)  # type: ignore[attr-defined]
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    fresh = [
                        p.metadata.name
                        for p in ready_workers()
                        if p.metadata.name not in before
                        and (self.raylets is None or self.raylet_ready(p.metadata.name))
                    ]
                    if len(fresh) >= len(names):
                        return fresh[: len(names)]
                    time.sleep(0.2)
                raise TimeoutError(f"the replacements of {names} were not Ready after 300 s")

            preemption._bring_back(replacements)
        return preemption

    # -- the Ray head behind the head pod, lost and replaced ----------------------------------
    def lose_head(
        self, raycluster: str, *, reason: str = "Killed", back_after: float | None = 2.0, namespace: str = "default"
    ) -> HeadLoss:
        """The head pod of ``raycluster`` deleted as a user, a node drain or an eviction deletes
        it: its Ray head's processes die with it (:attr:`ray_heads`), the real KubeRay operator
        makes a new head pod, a new Ray head serves it after ``back_after`` seconds (its
        PortForward follows), and the worker pods' raylets, which exit once the old GCS is
        gone, restart and join the new head (the same call as :meth:`rl_lustre.testing.KubeFake.lose_head`)."""
        from kubernetes import client

        assert self.ray_heads is not None, "set ray_heads: the Ray heads behind the head pod"
        core = client.CoreV1Api(self.api_client())
        selector = f"ray.io/cluster={raycluster},ray.io/node-type=head"
        [pod] = [
            p
            for p in core.list_namespaced_pod(namespace, label_selector=selector).items
            if not p.metadata.deletion_timestamp
        ]
        at = time.time()
        self.ray_heads.kill()
        core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
        logger.info("deleted head pod %s (%s)", pod.metadata.name, reason)
        loss = HeadLoss(pod.metadata.name, reason, at, back_after)
        if back_after is None:
            return loss

        def back() -> float:
            assert self.ray_heads is not None
            self.head_target = self.ray_heads.start_head()
            ready = time.time()
            host, port = self.head_target
            custom = self._custom()
            for item in custom.list_namespaced_custom_object(*KWOK, namespace, "portforwards")["items"]:
                item["spec"]["forwards"] = [{"ports": [8265], "target": {"address": host, "port": port}}]
                custom.replace_namespaced_custom_object(
                    *KWOK, namespace, "portforwards", item["metadata"]["name"], item
                )
            self.restart_raylets()
            return ready

        loss._bring_back(back)
        return loss

    def restart_raylets(self) -> None:
        """Every worker pod's raylet killed and started again (its container restarting)."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        pods = core.list_pod_for_all_namespaces(label_selector="ray.io/node-type=worker").items
        for pod in pods:
            if pod.status.phase != "Running" or pod.metadata.deletion_timestamp or self.raylets is None:
                continue
            self._release_raylet(pod.metadata.name)
            with self._raylet_lock:
                self._raylets[pod.metadata.name] = self._raylet_pool.submit(
                    self.raylets, pod.metadata.name, str(pod.spec.node_name), operator_ray_start_resources(pod)
                )

    # -- pods that run the on-cluster package: the keeper, the teardown Job ------------------
    def _run_programs(self) -> None:
        """While :attr:`programs` is set: the keeper's pod (and the teardown Job's) get a real
        process running the on-cluster package from the pod's ConfigMap, as its container would:
        its service account's token from the TokenRequest API (so RBAC is the API server's), the
        API server and its CA, and the head Service's address (a local port forwarding to the
        current Ray head); killed with its pod."""
        from kubernetes import client, watch

        core = client.CoreV1Api(self.api_client())
        while not self._stopping.is_set():
            try:
                for event in watch.Watch().stream(
                    core.list_pod_for_all_namespaces, label_selector="rl-lustre-deployment", timeout_seconds=5
                ):
                    pod = event["object"]
                    command = (pod.spec.containers[0].command or []) if pod.spec.containers else []
                    if len(command) < 3 or not str(command[2]).startswith("rl_lustre_oncluster."):
                        continue
                    uid = pod.metadata.uid
                    if event["type"] == "DELETED" or pod.metadata.deletion_timestamp:
                        self._stop_program(uid)
                    elif self.programs and uid not in self._programs and pod.spec.node_name:
                        self._start_program(core, pod)
            except Exception:  # the API server is going away, or a watch broke: look again
                if self._stopping.wait(0.5):
                    return

    def _start_program(self, core: Any, pod: Any) -> None:
        import base64
        import os
        import subprocess
        import sys
        import tempfile
        from pathlib import Path

        from rl_lustre.testing._kube_programs import ServiceProxy

        ns, container = pod.metadata.namespace, pod.spec.containers[0]
        home = Path(tempfile.mkdtemp(prefix="kube-plane-pod-"))
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
        for e in container.env or []:
            ref = e.value_from.secret_key_ref if e.value_from else None
            if ref is not None:
                secret = core.read_namespaced_secret(ref.name, ns)
                if (secret.data or {}).get(ref.key):
                    env[e.name] = base64.b64decode(secret.data[ref.key]).decode()
            elif e.value is not None:
                env[e.name] = e.value
        mounts = {m.name: m.mount_path for m in container.volume_mounts or []}
        for volume in pod.spec.volumes or []:
            if volume.config_map is None or volume.name not in mounts:
                continue
            data = core.read_namespaced_config_map(volume.config_map.name, ns).data or {}
            target = home / mounts[volume.name].lstrip("/")
            for item in volume.config_map.items or []:
                path = target / item.path
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(data.get(item.key, ""))
            env["PYTHONPATH"] = str(target.parent)
        if self._service is None:
            self._service = ServiceProxy(lambda: self.head_target)
        args = [*container.command[1:], *(container.args or [])]
        args = [re.sub(r"http://\S+-head-svc\.\S+:8265", f"http://127.0.0.1:{self._service.port}", a) for a in args]
        if pod.spec.automount_service_account_token is not False and pod.spec.service_account_name:
            from kubernetes import client

            # The API server's audience is its service account issuer (kube_plane.ControlPlane).
            request = client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=["https://kubernetes.default.svc.cluster.local"])
            )
            token = core.create_namespaced_service_account_token(
                pod.spec.service_account_name, ns, request
            ).status.token
            creds = home / "serviceaccount"
            creds.mkdir()
            (creds / "token").write_text(token)
            (creds / "ca.crt").write_bytes(self.ca_pem)  # type: ignore[attr-defined]
            env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(self.port))  # type: ignore[attr-defined]
            args += ["--kube-credentials", str(creds)]
        with open(home / "log", "ab") as out:
            process = subprocess.Popen(
                [sys.executable, *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=home
            )
        logger.info("pod %s/%s runs %s (pid %d)", ns, pod.metadata.name, args[1], process.pid)
        self._programs[pod.metadata.uid] = (process, home / "log")

    def _stop_program(self, uid: str) -> None:
        import os
        import signal
        import subprocess

        entry = self._programs.pop(uid, None)
        if entry is None:
            return
        process = entry[0]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def program_logs(self) -> list[str]:
        """What the programs run behind pods printed (the keeper's log, for assertions)."""
        out = []
        for _, log in self._programs.values():
            with contextlib.suppress(OSError):
                out.append(log.read_text(errors="replace"))
        return out

    def close_kubelets(self) -> None:
        self.release_raylets()
        self._raylet_pool.shutdown(wait=True)
        for uid in list(self._programs):
            self._stop_program(uid)
        if self._service is not None:
            self._service.close()


@contextlib.contextmanager
def job_pods_held(kube: Any, *images: str) -> Iterator[None]:
    """Job pods of ``images`` keep running inside the block, on the plane or on a KubeFake."""
    import math

    from rl_lustre.testing import KubeFake

    if isinstance(kube, KubeFake):
        saved = dict(kube.timings.job_runs)
        kube.timings.job_runs = {**saved, **dict.fromkeys(images, math.inf)}
        try:
            yield
        finally:
            kube.timings.job_runs = saved
        return
    kube.hold_job_pods(*images)
    try:
        yield
    finally:
        kube.release_job_pods()


@contextlib.contextmanager
def job_pods_failing(kube: Any, message: str) -> Iterator[None]:
    """Job pods exit 1 with ``message`` inside the block, on the plane or on a KubeFake."""
    from rl_lustre.testing import KubeFake

    if isinstance(kube, KubeFake):
        kube.faults.job_failure = message
        try:
            yield
        finally:
            kube.faults.job_failure = None
        return
    kube.fail_job_pods(message)
    try:
        yield
    finally:
        kube.release_job_pods()
