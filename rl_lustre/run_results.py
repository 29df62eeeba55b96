"""A finished run read back from its results location, with no cluster: what
:meth:`rl_lustre.Run.from_results` and ``rl-lustre results ls`` read.

Teardown exported the run to ``<results>/<run id>/`` (:mod:`rl_lustre.plan.results`): its
records (the driver log, the summary with its attempts and goodput ledger), its complete
checkpoints and NeMo-RL's logs, and, once verified, the manifest. From those alone:

- the run's status, submissions, steps and metrics, restarts and logs from its records (the
  run's directory as the supervisor wrote it on the volume), read by the one reader of them,
  :class:`~rl_lustre.oncluster.runview.RunView`, and told as a run whose head is gone is told
  (:func:`rl_lustre.run_follow.story`); its log is parsed as the live run's is;
- its checkpoints from the manifest, each with its URI in the results and its size;
- its goodput ledger and cost from the summary (as the cluster told them at teardown), else
  from its records (:func:`~rl_lustre.goodput.records.records_goodput`).

:class:`StoredJobs` plays the cluster's Jobs API for the :class:`~rl_lustre.Run` handle, read
only (none to submit or stop); :class:`StoredRecords` is the run's directory read from the
results, for :class:`~rl_lustre.run_follow.RunFollow`.

Example::

    run = rl_lustre.Run.from_results("gs://my-bucket/rl/rl-lustre-grpo-0a1b2c3d")
    run.status(), run.progress, [c.uri for c in run.checkpoints()]
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .catalog import RESULTS_FORMAT, RESULTS_MANIFEST
from .errors import ConfigError, NotFoundError
from .oncluster import rundir
from .oncluster.records import TOTAL_STEPS
from .run_follow import RunFollow, story

if TYPE_CHECKING:
    from .gcp.storage import BucketObjects
    from .goodput import GoodputLedger
    from .nemo_rl.checkpoints import Checkpoint
    from .oncluster.runview import RunView
    from .outages import OutageBudget
    from .ray.jobs import JobInfo
    from .results_store import ResultsStore

__all__ = ["ResultsEntry", "StoredJobs", "StoredRecords", "StoredRun", "list_results", "read_results", "stored_view"]

logger = logging.getLogger("rl_lustre.run_results")


class StoredJobs:
    """The Jobs API of a run read from its results: no head knows it; its log is its records'."""

    def __init__(self, log: str, uri: str, attempts: Sequence[JobInfo] = ()) -> None:
        self._log = log
        self.address = uri
        # Only for a run whose directory holds no journal: the attempts teardown summarised.
        self._attempts = {a.submission_id: a for a in attempts}

    def __repr__(self) -> str:
        return f"StoredJobs({self.address!r})"

    def info(self, submission_id: str) -> JobInfo | None:
        # No head: the run's records tell (RunFollow.offline).
        return self._attempts.get(submission_id)

    def list(self) -> list[JobInfo]:
        return list(self._attempts.values())

    def logs(self, submission_id: str) -> str:
        # The run's log holds every submission's output, in order.
        return self._log

    def follow(self, submission_id: str, *, outage_budget: OutageBudget | None = None) -> Iterator[str]:
        yield from self._log.splitlines()

    def stop(self, submission_id: str) -> bool:
        return False


class StoredRecords:
    """The run's directory as exported (a :class:`~rl_lustre.run_follow.RunRecordsAccess`):
    read by :class:`~rl_lustre.oncluster.runview.RunView`, with no cluster up."""

    def __init__(self, view: RunView, losses: Sequence[dict[str, Any]] = ()) -> None:
        self._view = view
        self._losses = list(losses)

    def run_view(self, run_dir: str) -> RunView | None:
        return self._view

    def head_losses(self) -> list[dict[str, Any]]:
        """The cluster's head losses as its keeper recorded them, listed by the seal."""
        return list(self._losses)

    def cluster_up(self) -> bool | None:
        return False


def stored_view(store: ResultsStore, run_id: str) -> RunView:
    """The run's directory as exported to ``store``, read as on the volume (one reader)."""
    from .oncluster.runview import RunView, read_journal, segment

    def text(name: str) -> str:
        return (store.read(f"{run_id}/{name}") or b"").decode("utf-8", errors="replace")

    records = read_journal(text(rundir.JOURNAL))
    data = {
        "exists": bool(records),
        "records": segment(records),
        "submission": _json(store, f"{run_id}/{rundir.SUBMISSION}"),
        "stopped": _json(store, f"{run_id}/{rundir.STOPPED}"),
        "given_up": _json(store, f"{run_id}/{rundir.GIVEN_UP}"),
        "log": text(rundir.DRIVER_LOG_PREVIOUS) + text(rundir.DRIVER_LOG),
    }
    return RunView(store.uri_of(run_id), data=data)


@attrs.frozen
class StoredRun:
    """What :meth:`rl_lustre.Run.from_results` builds its handle from.

    Attributes:
        uri: where the run's results are.
        run_id: the run's id.
        job_id: its last attempt's Ray submission id.
        jobs: the read-only Jobs API over its records.
        follow: the run as its records tell it (status, submissions, log), as a run whose
            head is gone is told.
        total_steps: ``max_num_steps``, when known.
        checkpoints: its exported checkpoints, oldest first, each with its ``uri``.
        usd_per_hour: what its deployment cost per hour, when known.
        ledger: its goodput ledger as the cluster told it at teardown, or None.
        manifest: the export's manifest.
        summary: the summary teardown wrote (empty when there is none).
    """

    uri: str
    run_id: str
    job_id: str
    jobs: StoredJobs
    follow: RunFollow
    total_steps: int | None
    checkpoints: tuple[Checkpoint, ...]
    usd_per_hour: float | None
    ledger: GoodputLedger | None
    manifest: dict[str, Any]
    summary: dict[str, Any]


def _split(uri: str) -> tuple[str, str]:
    """``(location, run id)`` of a run's URI or path."""
    if not isinstance(uri, str) or not uri.strip():
        raise ConfigError(
            "Run.from_results", "uri", uri, "must be a run's results: 'gs://BUCKET/PREFIX/<run id>' or a path"
        )
    text = uri.strip().rstrip("/")
    if text.startswith("file://"):
        text = text[len("file://") :]
    parent, _, run_id = text.rpartition("/")
    try:
        rundir.check_run_id(run_id)
    except ValueError as exc:
        raise ConfigError("Run.from_results", "uri", uri, f"must end with the run's id ({exc})") from None
    if text.startswith("gs://") and "/" not in text.removeprefix("gs://"):
        raise ConfigError("Run.from_results", "uri", uri, "must name a run under a bucket: 'gs://BUCKET/.../<run id>'")
    if "://" in text and not text.startswith("gs://"):
        raise ConfigError("Run.from_results", "uri", uri, "must be 'gs://...' or a path of this machine")
    return parent or "/", run_id


def _json(store: ResultsStore, name: str) -> dict[str, Any] | None:
    data = store.read(name)
    if data is None:
        return None
    try:
        found = json.loads(data)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _attempts(summary: dict[str, Any], run_id: str) -> list[JobInfo]:
    from .ray.jobs import JobInfo

    out = [
        JobInfo(
            submission_id=str(a.get("submission_id") or run_id),
            status=str(a.get("status") or "UNKNOWN"),
            message=str(a.get("message") or ""),
            metadata={str(k): str(v) for k, v in (a.get("metadata") or {}).items()},
            start_time=a.get("start_time"),
            end_time=a.get("end_time"),
        )
        for a in summary.get("attempts") or []
        if isinstance(a, dict)
    ]
    # Without a summary (a run sealed with no Ray record), one attempt of unknown status.
    return out or [JobInfo(submission_id=run_id, status="UNKNOWN")]


def _checkpoints(store: ResultsStore, manifest: dict[str, Any]) -> tuple[Checkpoint, ...]:
    from .nemo_rl.checkpoints import Checkpoint

    out = []
    for c in manifest.get("checkpoints") or []:
        seconds = c.get("save_seconds")
        out.append(
            Checkpoint(
                step=int(c["step"]),
                path=Path(c.get("volume_path") or c["uri"]),
                size_bytes=int(c.get("bytes") or 0),
                finished_at=float(c.get("finished_at") or 0.0),
                save_seconds=None if seconds is None else float(seconds),
                training_info=dict(c.get("training_info") or {}),
                save_seconds_from=None if seconds is None else "files",
                uri=str(c["uri"]),
            )
        )
    return tuple(sorted(out, key=lambda c: c.step))


def read_results(uri: str, *, storage: BucketObjects | None = None) -> StoredRun:
    """Read the run exported to ``uri`` (``gs://BUCKET/PREFIX/<run id>``, or a directory).

    Raises:
        ConfigError: ``uri`` does not name a run's results (before any remote call).
        NotFoundError: there is no complete export there (no manifest: nothing exported,
            or the export did not finish).
    """
    from .goodput.stored import ledger_from_dict
    from .results_store import ResultsStore

    location, run_id = _split(uri)
    store = ResultsStore(location, storage)
    run_uri = store.uri_of(run_id)
    manifest = _json(store, f"{run_id}/{RESULTS_MANIFEST}")
    if manifest is None or manifest.get("format") != RESULTS_FORMAT:
        raise NotFoundError(
            f"no exported run at {run_uri}: its manifest {RESULTS_MANIFEST} is not there (nothing was exported "
            "there, or the export did not finish: down() again finishes it while the volume is kept)"
        )
    summary = _json(store, f"{run_id}/{rundir.SUMMARY}") or {}
    view = stored_view(store, run_id)
    meta = (view.submission or {}).get("metadata") or {}
    attempts = [] if view.exists else _attempts(summary, run_id)
    jobs = StoredJobs(view.log(), run_uri, attempts)
    job_id = view.current or (attempts[-1].submission_id if attempts else run_id)
    losses = (_json(store, f"{run_id}/{rundir.EXPORT}") or {}).get("head_losses") or []
    records = StoredRecords(view, losses)
    follow = RunFollow(lambda: jobs, job_id, run_id=run_id, run_dir=run_uri, records=records)  # type: ignore[arg-type,return-value]
    ledger = None
    if isinstance(summary.get("goodput"), dict):
        try:
            ledger = ledger_from_dict(summary["goodput"])
        except ValueError as exc:
            logger.warning("the goodput ledger of %s does not read back: %s", run_uri, exc)
    if ledger is None and view.exists:
        from .goodput.records import records_goodput

        told = follow.info(job_id)
        try:
            ledger = records_goodput(view, told.status if told is not None else "UNKNOWN")
        except ValueError as exc:
            logger.info("no goodput ledger for %s: %s", run_uri, exc)
    rate = summary.get("usd_per_hour")
    total = str(meta.get(TOTAL_STEPS, summary.get("total_steps") or ""))
    return StoredRun(
        uri=run_uri,
        run_id=run_id,
        job_id=job_id,
        jobs=jobs,
        follow=follow,
        total_steps=int(total) if total.isdigit() else None,
        checkpoints=_checkpoints(store, manifest),
        usd_per_hour=float(rate) if isinstance(rate, (int, float)) and rate else None,
        ledger=ledger,
        manifest=manifest,
        summary=summary,
    )


@attrs.frozen
class ResultsEntry:
    """One run a results location holds, as ``rl-lustre results ls`` shows it.

    Attributes:
        run_id: the run's id.
        uri: where its results are.
        state: its status at teardown (``SUCCEEDED``, ``STOPPED`` ...), ``INCOMPLETE`` when
            its export did not finish (no manifest).
        steps: the steps it completed, from its driver log.
        total_steps: ``max_num_steps``.
        newest: the newest exported checkpoint's step, or None.
        newest_bytes: its size.
        checkpoints: how many checkpoints are exported.
        bytes: what its results hold in the location.
        usd: what it cost (its goodput ledger's total, else its deployment's rate times its hours).
        exported_at: when (UTC), from its manifest.
    """

    run_id: str
    uri: str
    state: str
    steps: int | None = None
    total_steps: int | None = None
    newest: int | None = None
    newest_bytes: int | None = None
    checkpoints: int = 0
    bytes: int | None = None
    usd: float | None = None
    exported_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def list_results(where: str, *, storage: BucketObjects | None = None) -> list[ResultsEntry]:
    """Every run the results location ``where`` holds (``gs://BUCKET/PREFIX`` or a directory).

    Raises:
        ConfigError: ``where`` is not a results location.
    """
    from .nemo_rl.logs import LogParser
    from .results_store import ResultsStore

    if (
        not isinstance(where, str)
        or not where.strip()
        or ("://" in where and not where.startswith(("gs://", "file://")))
    ):
        raise ConfigError("rl-lustre results ls", "LOCATION", where, "must be 'gs://BUCKET[/PREFIX]' or a directory")
    store = ResultsStore(where.rstrip("/"), storage)
    out = []
    for run_id in store.runs():
        try:
            rundir.check_run_id(run_id)
        except ValueError:
            continue
        manifest = _json(store, f"{run_id}/{RESULTS_MANIFEST}")
        summary = _json(store, f"{run_id}/{rundir.SUMMARY}") or {}
        if manifest is None and not summary and _json(store, f"{run_id}/{rundir.EXPORT}") is None:
            continue  # not a run's results
        view = stored_view(store, run_id)
        parser = LogParser()
        for line in view.log().splitlines():
            parser.feed(line)
        losses = (_json(store, f"{run_id}/{rundir.EXPORT}") or {}).get("head_losses") or []
        told = story(view, losses, up=False).status if view.exists else summary.get("status")
        checkpoints = (manifest or {}).get("checkpoints") or []
        newest = checkpoints[-1] if checkpoints else None
        out.append(
            ResultsEntry(
                run_id=run_id,
                uri=store.uri_of(run_id),
                state=str(told or "UNKNOWN") if manifest is not None else "INCOMPLETE",
                steps=max(parser.completed_steps, (parser.current_step or 1) - 1) if parser.current_step else None,
                total_steps=summary.get("total_steps") if isinstance(summary.get("total_steps"), int) else None,
                newest=None if newest is None else int(newest["step"]),
                newest_bytes=None if newest is None else newest.get("bytes"),
                checkpoints=len(checkpoints),
                bytes=(manifest or {}).get("bytes"),
                usd=_usd(summary),
                exported_at=(manifest or {}).get("exported_at"),
            )
        )
    return out


def _usd(summary: dict[str, Any]) -> float | None:
    ledger = summary.get("goodput")
    if isinstance(ledger, dict) and isinstance(ledger.get("total"), dict):
        return float(ledger["total"].get("usd") or 0.0)
    rate = summary.get("usd_per_hour")
    spans = [
        (float(a["start_time"]), float(a["end_time"]))
        for a in summary.get("attempts") or []
        if isinstance(a, dict) and a.get("start_time") and a.get("end_time")
    ]
    if not isinstance(rate, (int, float)) or not spans:
        return None
    return sum(max(0.0, end - start) for start, end in spans) / 3600 * float(rate)
