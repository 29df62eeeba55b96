"""Drivers of the start-up nodes (:mod:`rl_lustre.plan.startup`): the image pre-pull
DaemonSet and the model prefetch Job.

Both go through :mod:`rl_lustre.kube.apply` like every other Kubernetes object of the
deployment (labels, adoption, deletion that waits until the object is gone) and wait with
the library's polling policy, so their progress reaches the live view and the log.

- ``image-prepull``: creates the DaemonSet, waits until every node holds the image,
  then until the RayCluster's workers run, then deletes it. A later ``up()`` that finds
  the workers already running skips it. An image that cannot exist fails the step.
- ``model-prefetch``: nothing when a warm-start import brought every model whole
  (:func:`rl_lustre.provision.warmstart.imported_models`); otherwise creates the Job, or
  adopts it (a Complete one of an earlier ``up()``
  for the same models is done already; a failed or outdated one is replaced), and waits
  until it completes, showing the newest progress line of its pod. A failed Job fails the
  step with its pod's reason, and the executor rolls back as for any step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from ..errors import KubernetesError
from ..plankeys import GKE_CLUSTER_KEY, IMAGE_PREPULL_KEY, MODEL_PREFETCH_KEY, WARM_IMPORT_KEY
from .gcp_drivers import GkeClusterDriver
from .kube_drivers import SkippedDriver
from .step import Done, Driver, Step

if TYPE_CHECKING:
    from .context import Context

__all__ = ["PrefetchDriver", "PrepullDriver", "startup_drivers"]

logger = logging.getLogger("rl_lustre.provision")


class _KubeNode:
    """What both drivers share: the API client, the manifest, deletion with the cluster."""

    deleted_with: str | None = GKE_CLUSTER_KEY
    interruptible = True

    def __init__(self, ctx: Context, manifest: Callable[[Any], dict[str, Any]]) -> None:
        self.ctx = ctx
        self.manifest = manifest(ctx.cluster)
        meta = self.manifest["metadata"]
        self.kind, self.name, self.namespace = self.manifest["kind"], meta["name"], meta["namespace"]

    def _api(self, step: Step) -> Any:
        return self.ctx.kube_api(step.records[GKE_CLUSTER_KEY].value)

    def _client(self, api: Any, kind: str | None = None) -> Any:
        from ..kube.client import ResourceClient

        return ResourceClient(api, kind or self.kind, self.namespace)

    def _read(self, api: Any, kind: str | None = None, name: str | None = None) -> dict[str, Any] | None:
        from ..kube.client import translate_errors

        client = self._client(api, kind)
        with translate_errors(f"read {client.describe(name or self.name)}"):
            found: dict[str, Any] | None = client.get(name or self.name)
            return found

    def _create(self, step: Step, api: Any) -> dict[str, Any]:
        from ..kube import apply

        if self._read(api) is None:
            step.requesting()
        return apply.apply_manifests(api, [self.manifest], deployment=self.ctx.deployment)[0].object

    def _remove(self, api: Any) -> bool:
        from ..kube import apply

        return bool(apply.delete_manifests(api, [self.manifest], deployment=self.ctx.deployment))

    def _wait(
        self, what: str, poll: Callable[[], Any], done: Callable[[Any], bool], describe: Callable[[Any], str]
    ) -> Any:
        from ..gcp._wait import wait_for

        return wait_for(
            what, poll, done=done, describe=describe, timeout=self.ctx.kube_timeout, backoff=self.ctx.backoff
        )

    def _pods(self, api: Any, selector: str) -> list[dict[str, Any]]:
        from ..kube.client import translate_errors

        client = self._client(api, "Pod")
        with translate_errors(f"list the pods of {self.kind} {self.namespace}/{self.name}"):
            pods, _ = client.list(label_selector=selector)
        return sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        gke = self.ctx.apis.clusters.get_or_none(GkeClusterDriver(self.ctx).path)
        if gke is None:
            return "absent"
        return "deleted" if self._remove(self.ctx.kube_api(gke)) else "absent"


class PrepullDriver(_KubeNode):
    """The image pre-pull DaemonSet on the GPU pool."""

    def __init__(self, ctx: Context) -> None:
        from ..kube.prepull import prepull_daemonset

        super().__init__(ctx, prepull_daemonset)
        self.selector = ",".join(f"{k}={v}" for k, v in self.manifest["spec"]["selector"]["matchLabels"].items())

    def _workers_run(self, api: Any) -> bool:
        from .. import naming

        rc = self._read(api, "RayCluster", naming.raycluster_name(self.ctx.cluster))
        status = (rc or {}).get("status") or {}
        desired = status.get("desiredWorkerReplicas")
        return desired is not None and int(status.get("readyWorkerReplicas") or 0) >= int(desired) > 0

    def ensure(self, step: Step) -> Done:
        from ..kube.diagnose import pod_problem
        from ..kube.prepull import daemonset_progress, prepull_node_count

        api = self._api(step)
        if self._read(api) is None and self._workers_run(api):
            return Done("skipped", note="the RayCluster's workers already run on every GPU node")
        self._create(step, api)
        image, nodes = self.ctx.cluster.image, prepull_node_count(self.ctx.cluster)

        def poll() -> tuple[int, int]:
            ready, want = daemonset_progress(self._read(api), nodes)
            if ready < want:
                for pod in self._pods(api, self.selector):
                    problem = pod_problem(pod)
                    if problem is not None and problem[1]:
                        raise KubernetesError(f"pre-pulling {image} failed: {problem[0]}")
            return ready, want

        self._wait(
            f"image {image} on the nodes",
            poll,
            done=lambda p: p[0] >= p[1] > 0,
            describe=lambda p: f"on {p[0]} of {p[1]} nodes",
        )
        step.check()
        self._wait(
            "the RayCluster's workers to run (then the pre-pull goes)",
            lambda: self._workers_run(api),
            done=bool,
            describe=lambda up: "workers running" if up else "workers starting",
        )
        self._remove(api)
        return Done("created", note=f"image pulled on {nodes} node(s); removed once the RayCluster's workers ran")


class PrefetchDriver(_KubeNode):
    """The model prefetch Job on the CPU pool."""

    def __init__(self, ctx: Context) -> None:
        from ..kube.prefetch import prefetch_job

        super().__init__(ctx, prefetch_job)
        self.models = list(ctx.cluster.prefetch_models)

    def _last_line(self, api: Any, pod: dict[str, Any]) -> str:
        """The newest progress line the pod printed ("" when it has none yet)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        from ..oncluster.prefetch import MARK

        try:
            text = client.CoreV1Api(api).read_namespaced_pod_log(
                pod["metadata"]["name"], self.namespace, tail_lines=20, _request_timeout=30
            )
        except ApiException:
            return ""  # not started yet, or gone: the pod's status says why
        lines = [line[len(MARK) :].strip() for line in str(text).splitlines() if line.startswith(MARK)]
        return lines[-1] if lines else ""

    def ensure(self, step: Step) -> Done:
        from ..kube.diagnose import pod_problem
        from ..kube.prefetch import job_state, models_of

        if WARM_IMPORT_KEY in step.node.depends_on:
            from .warmstart import imported_models

            brought = imported_models(self.ctx.cluster, step.dep(WARM_IMPORT_KEY))
            if set(self.models) <= set(brought):
                return Done(
                    "skipped",
                    note=f"the warm-start import brought {', '.join(self.models)} (prefetch "
                    "markers and snapshots): nothing to fetch, no Job",
                )
        api = self._api(step)
        found = self._read(api)
        outcome: Literal["created", "adopted"] = "created"
        if found is not None:
            from ..kube.apply import immutable_drift, is_owned

            state = job_state(found)
            same = models_of(found) == self.models
            ours = is_owned(found, self.ctx.deployment)
            if ours and same and state == "complete":
                return Done("adopted", found, note="models fetched by an earlier up()")
            # A Job's pod template cannot change: one whose image or command differs from
            # ours (another rl_lustre, another image) is replaced; its download resumes.
            drift = immutable_drift(self.manifest, found, deployment=self.ctx.deployment) if ours else []
            if ours and (state == "failed" or not same or drift):
                why = (
                    "it failed"
                    if state == "failed"
                    else "the models changed"
                    if not same
                    else (f"its {', '.join(drift)} differs (the image or the prefetch program changed)")
                )
                logger.info("replacing %s Job %s/%s (%s)", state, self.namespace, self.name, why)
                self._remove(api)
            else:
                outcome = "adopted"
        self._create(step, api)
        selector = f"job-name={self.name}"
        seen: dict[str, str] = {"line": ""}

        def poll() -> tuple[str, dict[str, Any] | None]:
            job = self._read(api)
            pods = self._pods(api, selector)
            state = job_state(job)
            pod = pods[-1] if pods else None
            if pod is not None and (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
                seen["line"] = self._last_line(api, pod) or seen["line"]
            if state == "failed":
                reasons = [p[0] for p in (pod_problem(p) for p in pods) if p is not None]
                why = (
                    reasons[-1]
                    if reasons
                    else "; ".join(
                        c.get("message", "")
                        for c in (job or {}).get("status", {}).get("conditions", [])
                        if c.get("type") == "Failed"
                    )
                )
                raise KubernetesError(
                    f"model prefetch Job {self.namespace}/{self.name} failed after {len(pods)} attempt(s): {why}"
                )
            problem = pod_problem(pod) if pod is not None else None
            if problem is not None and problem[1] and (pod or {}).get("status", {}).get("phase") == "Pending":
                raise KubernetesError(f"model prefetch Job {self.namespace}/{self.name} cannot run: {problem[0]}")
            return state, pod

        def describe(result: tuple[str, dict[str, Any] | None]) -> str:
            state, pod = result
            if state == "complete":
                return "complete" + (f": {seen['line']}" if seen["line"] else "")
            if pod is None:
                return "waiting for its pod"
            problem = pod_problem(pod)
            if problem is not None:
                return problem[0]
            return (pod.get("status") or {}).get("phase", "Pending") + (f": {seen['line']}" if seen["line"] else "")

        self._wait(
            f"model prefetch of {', '.join(self.models)}", poll, done=lambda r: r[0] == "complete", describe=describe
        )
        return Done(outcome, note=seen["line"] or "models in the volume's Hugging Face cache")


def startup_drivers(ctx: Context, *, kube: bool = True) -> dict[str, Driver]:
    """Drivers for the start-up nodes of ``ctx.plan`` (skipped ones when ``kube`` is off).

    Examples:
        >>> from rl_lustre import Cluster
        >>> from rl_lustre.provision.context import Apis, Context
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> sorted(startup_drivers(Context(c, c.plan(), Apis.from_env())))
        ['image-prepull', 'model-prefetch']
    """
    makers: dict[str, Callable[[Context], Driver]] = {
        IMAGE_PREPULL_KEY: PrepullDriver,
        MODEL_PREFETCH_KEY: PrefetchDriver,
    }
    return {
        key: make(ctx) if kube else SkippedDriver("Kubernetes part switched off (gcp_only=True)")
        for key, make in makers.items()
        if key in ctx.plan
    }
