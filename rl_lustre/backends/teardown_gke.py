"""The GKE teardown (see :mod:`rl_lustre.backends.teardown` for the whole story):

0. the keeper first (plan node ``keeper``: its Deployment, then its teardown Job, which marks
   the runs in flight stopped by teardown): nothing resubmits a run from then on;
1. with the RayCluster reachable: the runs are stopped (recorded as stopped by teardown),
   summarised and sealed on the volume by helper jobs on the head
   (``python -m rl_lustre_oncluster.seal``: ``rl-lustre-stop-<id>``, ``rl-lustre-seal-<id>``);
2. everything but the storage branch (the Lustre instance, its network and peering) is
   deleted: the GPU nodes stop billing while the export runs;
3. the volume's runs are exported to ``Cluster.results`` with ExportData, then the warm
   start's caches, one transfer after another, each verified; a transfer left running by an
   interrupted ``down()`` is waited for first. A first Ctrl-C says what giving up would
   leave only on the volume; a second gives up (the volume is kept);
4. the storage branch is deleted, unless the volume holds results that exist nowhere else
   and ``discard_results`` was not said: then it is kept, labelled
   ``rl-lustre-results=not-exported``, and a :class:`~rl_lustre.errors.ResultsKeptWarning`
   says why and what next.

Without the cluster (a second ``down()`` after a kept volume, ``rl-lustre down NAME``) step
1 is skipped: the runs were sealed before, and their lists travel with their records. The
volume's label (``on-volume`` once a job was submitted) says whether it may hold results.
"""

from __future__ import annotations

import json
import logging
import posixpath
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..catalog import LABEL_RESULTS, RESULTS_NOT_EXPORTED
from ..errors import ExportError, RayError, RLLustreError, TeardownError
from ..plankeys import KEEPER_KEY, LUSTRE_KEY, RESULTS_EXPORT_KEY, WARM_EXPORT_KEY
from ..provision.executor import storage_keys
from ..provision.records import NodeRecord, Report
from ..provision.results import RESULTS_ON_VOLUME, RESULTS_SEALED, label_volume
from ..provision.signals import cancel_on_signals
from .export import Transfer, TransferState
from .teardown import RunOnCluster, kept_message, runs_on_cluster, stop_runs, summaries, warn_kept

if TYPE_CHECKING:
    from ..gcp.lustre import LustreInstances
    from ..plan.results import ResultsLocation
    from ..provision.context import Context
    from ..ray.jobs import JobsClient
    from .export import Exported
    from .gke import GKEBackend

__all__ = ["LustreMover", "gke_down"]

logger = logging.getLogger("rl_lustre.teardown")

_SEAL_TIMEOUT = 1800.0
# Ray uploads a job's working directory whole: logs above this are read on the head.
_LOG_LIMIT = 50 * 1024**2
_NOT_FOUND = 5


class LustreMover:
    """Exports directories of the Lustre instance ``instance`` (mounted at ``mount``) to
    ``location`` with ExportData, one at a time.

    Args:
        lustre: the Lustre adapter.
        instance: the instance's full name.
        mount: where the pods mount it (the seal's paths start with it).
        location: the results location (a bucket).
        throughput_mbps: the instance's aggregate throughput, for the time estimate.
    """

    def __init__(
        self,
        lustre: LustreInstances,
        instance: str,
        mount: str,
        location: ResultsLocation,
        throughput_mbps: float | None = None,
    ) -> None:
        self.lustre, self.instance, self.mount, self.location = lustre, instance, mount, location
        self.throughput_mbps = throughput_mbps

    def describe(self) -> str:
        return f"Managed Lustre ExportData from {self.instance.rsplit('/', 1)[-1]}"

    def bytes_per_second(self) -> float | None:
        # Transfers run at up to the instance's throughput (and at most ~100 GB/s).
        return None if not self.throughput_mbps else min(self.throughput_mbps * 1e6, 100e9)

    def lustre_path(self, source: str) -> str:
        """A path under the mount as ExportData names it (from the volume's root)."""
        rel = posixpath.relpath(source, self.mount)
        if rel == "." or rel.startswith(".."):
            raise ValueError(f"{source} is not under the volume's mount path {self.mount}")
        return "/" + rel

    def start(self, transfer: Transfer) -> str:
        uri = f"gs://{self.location.bucket}/{self.location.prefix}{transfer.dest}"
        return self.lustre.start_export(
            self.instance, self.lustre_path(transfer.source), uri, request_id=str(uuid.uuid4())
        )

    def state(self, handle: Any) -> TransferState:
        s = self.lustre.transfer_status(str(handle), resource=self.instance)
        missing = s.done and s.error_code == _NOT_FOUND
        return TransferState(
            s.done,
            s.objects_found,
            s.bytes_found,
            s.objects_copied,
            s.bytes_copied,
            s.objects_skipped,
            s.objects_failed,
            "" if missing else s.error,
            missing,
            s.source,
            s.bytes_skipped,
        )

    def running(self) -> list[tuple[Any, TransferState]]:
        return [(t.operation, self.state(t.operation)) for t in self.lustre.running_transfers(self.instance)]


def _helper(backend: GKEBackend, jobs: JobsClient, verb: str, args: list[str], files: dict[str, str]) -> str:
    """Run the seal program on the head as a helper job, ``files`` (name -> text) in its
    working directory; returns its log."""
    import shlex

    from ..recovery import shipped_package
    from ..recovery.shipping import PACKAGE

    with tempfile.TemporaryDirectory(prefix="rl-lustre-seal-") as work:
        for name, text in files.items():
            Path(work, name).parent.mkdir(parents=True, exist_ok=True)
            Path(work, name).write_text(text)
        runtime_env: dict[str, Any] = {"py_modules": [shipped_package()]}
        if files:
            runtime_env["working_dir"] = work
        command = " ".join(["python", "-m", f"{PACKAGE}.seal", verb, *(shlex.quote(a) for a in args)])
        info, log = jobs.run(
            command,
            submission_id=f"rl-lustre-{verb}-{uuid.uuid4().hex[:12]}",
            metadata={"rl_lustre.cluster": backend.cluster.name, "rl_lustre.helper": f"{verb}-runs"},
            timeout=_SEAL_TIMEOUT,
            runtime_env=runtime_env,
        )
    if info.status != "SUCCEEDED":
        tail = "\n".join(f"  | {line}" for line in log.splitlines()[-10:])
        raise RayError(f"the {verb} helper job on the Ray head ended {info.status}:\n{tail}")
    return log


def _seal_on_head(
    backend: GKEBackend, jobs: JobsClient, runs: list[RunOnCluster], volume_id: str
) -> list[dict[str, Any]]:
    """Stop, summarise and seal the runs through helper jobs on the head (see the module)."""
    from ..oncluster.seal import SEAL_MARK

    cluster = backend.cluster

    def mark(dirs: list[str]) -> None:
        _helper(backend, jobs, "stop", dirs, {})

    stopped = stop_runs(jobs, runs, mark)
    records = summaries(cluster, runs, stopped, lambda job_id: backend.run_goodput(job_id))
    args = ["--mount", cluster.mount_path, "--volume-id", volume_id, "--records", "records.json"]
    args += ["--cluster", cluster.name]
    dashboard = backend.dashboard_on_head()
    if dashboard:
        args += ["--dashboard", dashboard]
    for name in cluster.secrets:
        args += ["--secret", name]
    # The attempts' logs travel with the records (the client reads them with its own token);
    # one too large for a job's working directory is read on the head instead.
    files = {"records.json": json.dumps({"runs": records})}
    for r in runs:
        for a in r.attempts:
            text = jobs.logs(a.submission_id)
            if len(text) < _LOG_LIMIT:
                files[f"logs/{a.submission_id}.log"] = text
    args += ["--logs", "logs"]
    log = _helper(backend, jobs, "seal", args, files)
    lines = [line for line in log.splitlines() if line.startswith(SEAL_MARK)]
    if not lines:
        raise RayError("the seal helper job printed no record of the runs it sealed")
    sealed: list[dict[str, Any]] = json.loads(lines[-1][len(SEAL_MARK) :])
    return sealed


def _merge(operation: str, *reports: Report | None, extra: Sequence[NodeRecord] = ()) -> Report:
    records: dict[str, NodeRecord] = {}
    for report in reports:
        if report is None:
            continue
        for key, rec in report.records.items():
            if rec.outcome not in ("kept", "used") or key not in records:
                records[key] = rec
    for rec in extra:
        records[rec.key] = rec
    wall = sum(r.wall for r in reports if r is not None)
    return Report(operation, records, wall=wall)


def _record(ctx: Context, key: str, outcome: str, note: str) -> NodeRecord | None:
    if key not in ctx.plan:
        return None
    node = ctx.plan.get(key)
    return NodeRecord(key, node.kind, node.name, node.action, outcome=outcome, note=note)  # type: ignore[arg-type]


def gke_down(backend: GKEBackend, *, delete_preload_image: bool = False, discard_results: bool = False) -> Report:
    """Tear the GKE deployment down, results first (see the module)."""
    from ..plan.results import results_location

    cluster = backend.cluster
    ctx = backend.context()
    plan, lustre = ctx.plan, ctx.apis.lustre
    instance_name = cluster.volume.resource_name() if cluster.volume is not None and LUSTRE_KEY in plan else None
    ours = instance_name is not None and plan.get(LUSTRE_KEY).action == "create"
    instance = lustre.get_or_none(instance_name) if instance_name else None
    sealed: list[dict[str, Any]] | None = None
    unsealed = ""
    executor = backend.executor(ctx)
    abandon = threading.Event()
    stages = (
        (None, "down() keeps going so that nothing is left half-deleted; one more signal abandons it"),
        (abandon, "abandoning down(); run it again later to remove what is left"),
    )
    keeper: Report | None = None
    if KEEPER_KEY in plan and not backend.gcp_only:
        # The keeper first: from here on nothing resubmits a run (its teardown Job marks the
        # runs in flight stopped by teardown, oncluster/teardown.py), then the runs are stopped.
        with cancel_on_signals(*stages):
            try:
                keeper = executor.down([KEEPER_KEY], abandon=abandon)
            except TeardownError as exc:
                keeper = exc.report
                logger.warning("teardown: the keeper could not be stopped first (%s); the runs' stopped markers "
                               "keep it from resubmitting them", exc)  # fmt: skip
    if instance is not None and not backend.gcp_only and not abandon.is_set():
        try:
            jobs = backend.jobs
            runs = runs_on_cluster(jobs)
        except RLLustreError as exc:
            logger.info("teardown: the RayCluster is not reachable (%s): the runs were sealed before, if any", exc)
        else:
            try:
                sealed = _seal_on_head(backend, jobs, runs, str(instance.uid))
                if sealed:
                    label_volume(lustre, str(instance_name), RESULTS_SEALED)
                    instance = lustre.get_or_none(str(instance_name)) or instance
            except Exception as exc:  # the rest still goes (the GPUs stop billing); the volume stays
                unsealed = f"its runs could not be sealed for export ({type(exc).__name__}: {exc})"
                logger.warning("teardown: %s", unsealed)
    backend.disconnect()

    storage = storage_keys(plan)
    skip = {RESULTS_EXPORT_KEY, WARM_EXPORT_KEY, *(keeper.keys("deleted", "absent") if keeper is not None else ())}
    first = [n.key for n in plan if n.key not in storage and n.key not in skip]
    left: TeardownError | None = None
    with cancel_on_signals(*stages):
        try:
            before = _merge("down", keeper, executor.down(first, abandon=abandon, cache=delete_preload_image))
        except TeardownError as exc:
            before, left = _merge("down", keeper, exc.report), exc
    if abandon.is_set():
        if left is not None:
            raise left
        return before

    labels = dict(instance.labels) if instance is not None else {}
    holds = bool(sealed) if sealed is not None else labels.get(LABEL_RESULTS) is not None
    if sealed is None and labels.get(LABEL_RESULTS) == RESULTS_ON_VOLUME and not unsealed:
        # Jobs ran, and no down() sealed their runs: what to export is not known without the cluster.
        unsealed = (
            "jobs ran on it and their runs were never sealed for export (the RayCluster was not reachable "
            "at down()); up() again and down() seals and exports them"
        )
    where = results_location(cluster)
    reason: str | None = unsealed or None
    exported, extra = None, []
    if reason is not None and instance is not None and ours and not discard_results:
        holds = True
    elif instance is not None and holds and where is not None:
        exported, reason = _export(backend, ctx, instance, sealed, where)
        note = (
            f"exported {len(exported.runs)} run(s), {exported.bytes_copied / 1e9:,.2f} GB copied, to {where.uri}"
            if reason is None
            else f"not exported: {reason}"
        )
        extra.append(_record(ctx, RESULTS_EXPORT_KEY, "kept", note))
    elif instance is not None and holds and ours and not discard_results:
        reason = "no results destination is set (Cluster.results)"
    if instance is not None and WARM_EXPORT_KEY in plan and (reason is None or discard_results):
        from ..provision.warmstart import WarmExportDriver

        try:
            WarmExportDriver(ctx).export_at_down()
            extra.append(_record(ctx, WARM_EXPORT_KEY, "kept", "exported the caches to the warm start (kept)"))
        except Exception as exc:
            extra.append(_record(ctx, WARM_EXPORT_KEY, "kept", f"the export at down() failed: {exc}"))
            if not discard_results:
                reason = f"the warm-start export failed ({exc})"
    if not ours and instance is not None and reason is not None:
        warn_kept(
            f"down(): the results on your volume {instance.name} were not exported ({reason}); it stays, "
            "as a volume this deployment did not create always does"
        )
    if ours and instance is not None and reason is not None and not discard_results:
        label_volume(lustre, str(instance_name), RESULTS_NOT_EXPORTED)
        rate = plan.cost().get(LUSTRE_KEY).usd_per_hour if LUSTRE_KEY in plan else None
        message = kept_message(cluster, reason, sealed, volume=plan.get(LUSTRE_KEY).name, usd_per_hour=rate)
        warn_kept(message)
        for key in storage:
            rec = before.records.get(key)
            if rec is not None:
                rec.outcome, rec.note = "kept", f"kept: the volume holds results not exported ({reason})"
        backend.last_kept = message
        report = _merge("down", before, extra=[r for r in extra if r is not None])
        if left is not None:
            raise TeardownError(left.left, left.errors, report)
        return report
    backend.last_kept = None
    with cancel_on_signals(*stages):
        try:
            after = executor.down(sorted(storage), abandon=abandon, cache=delete_preload_image)
        except TeardownError as exc:
            report = _merge("down", before, exc.report, extra=[r for r in extra if r is not None])
            raise TeardownError(
                [*(left.left if left else []), *exc.left], {**(left.errors if left else {}), **exc.errors}, report
            ) from exc
    report = _merge("down", before, after, extra=[r for r in extra if r is not None])
    if left is not None:
        raise TeardownError(left.left, left.errors, report)
    return report


def _export(
    backend: GKEBackend, ctx: Context, instance: Any, sealed: list[dict[str, Any]] | None, where: Any
) -> tuple[Exported, str | None]:
    """Export the volume's runs to ``where``; returns what was exported and why it stopped short (None: it did not)."""
    from ..gcp._wait import default_backoff
    from ..results_store import ResultsStore
    from .export import Exported, export_runs
    from .teardown import _echo

    cluster = backend.cluster
    lustre_node = ctx.plan.get(LUSTRE_KEY)
    mover = LustreMover(
        ctx.apis.lustre,
        instance.name,
        cluster.mount_path,
        where,
        lustre_node.settings.get("aggregate_throughput_mbps"),
    )
    done = Exported()
    give_up = threading.Event()
    backoff = ctx.backoff or default_backoff()

    def would_leave() -> str:
        return (
            f"the export to {where.uri} goes on ({len(done.done)} transfer(s) done: "
            f"{', '.join(done.done[-3:]) or 'none yet'}); one more signal gives it up: the volume "
            f"{instance.name.rsplit('/', 1)[-1]} is then KEPT, holding the results not yet exported (nothing is "
            "deleted; down() again finishes the export)"
        )

    stages = (
        (None, would_leave),
        (give_up, "giving up the export: the volume is kept (down() again finishes it, waiting for the transfer "
         "under way)"),
    )  # fmt: skip
    with cancel_on_signals(*stages):
        try:
            export_runs(
                ResultsStore(where, ctx.apis.storage),
                mover,
                mount=cluster.mount_path,
                volume_id=str(instance.uid),
                sealed=sealed,
                deployment=cluster.name,
                abandon=give_up,
                poll=lambda: time.sleep(max(backoff.initial * 5, 0.05)),
                echo=_echo,
                out=done,
            )
        except ExportError as exc:
            return done, ("the export was interrupted" if give_up.is_set() else f"the export failed: {exc}")
    return done, None
