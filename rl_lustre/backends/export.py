"""Exporting sealed runs to their results location, one transfer after another, each verified.

The runs were sealed on the volume first (:mod:`rl_lustre.oncluster.seal`: every run's
``export.json`` lists its directories to export). Then:

1. a transfer left running by an interrupted ``down()`` is waited for (the service runs one
   per instance at a time);
2. ``<mount>/rl_lustre/runs/`` goes to the location's root: every run's records, its
   ``export.json`` among them, so a teardown without the cluster reads the lists there;
3. per run of this volume (its ``export.json`` names the volume), each listed directory
   (complete checkpoints, NeMo-RL's logs) to ``<run id>/<to>/``; checkpoints the volume no
   longer holds (``keep_top_k`` deleted them after an earlier export) are deleted from the
   results; then the run's manifest (:data:`~rl_lustre.catalog.RESULTS_MANIFEST`);
4. the warm-start export, if any, is the teardown's next transfer.

Every transfer is verified by its counters: every file found was copied or was there
already, none failed, and as many as the seal listed. Transfers are incremental: what the
location holds already is not copied again. The estimate (bytes, files, time) comes first;
progress (bytes, rate, time left) while it runs.

A *mover* does the copying: :class:`~rl_lustre.provision.results.LustreMover` (Managed
Lustre's ExportData) on GKE, :class:`DirectoryMover` (file copies, in a thread) locally.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import posixpath
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

from ..catalog import RESULTS_FORMAT, RESULTS_MANIFEST
from ..errors import ExportError
from ..oncluster import rundir
from ..oncluster.nemo_formats import checkpoint_name
from ..oncluster.seal import CHECKPOINTS, EXPORT_FORMAT
from ..oncluster.secretpaths import secret_path
from ..results_store import ResultsStore

__all__ = [
    "DirectoryMover",
    "ExportPlan",
    "Exported",
    "ModelExport",
    "Mover",
    "Transfer",
    "TransferState",
    "export_runs",
]

logger = logging.getLogger("rl_lustre.export")

# Seconds between progress lines.
_PROGRESS_EVERY = 10.0


@attrs.frozen
class Transfer:
    """One directory to copy: ``source`` (an absolute path on the volume) to the location's
    names under ``dest`` (ending with ``/``; ``""`` is the location's root)."""

    source: str
    dest: str
    what: str
    files: int | None = None
    bytes: int | None = None


@attrs.frozen
class TransferState:
    """A transfer as its mover sees it now (a Lustre operation's counters, or a copy's)."""

    done: bool
    found: int = 0
    bytes_found: int = 0
    copied: int = 0
    bytes_copied: int = 0
    skipped: int = 0
    failed: int = 0
    error: str = ""
    missing: bool = False  # the source directory does not exist
    source: str = ""
    bytes_skipped: int = 0


class Mover(Protocol):
    """What copies a directory of the volume to the results location."""

    def start(self, transfer: Transfer) -> Any: ...

    def state(self, handle: Any) -> TransferState: ...

    def running(self) -> list[tuple[Any, TransferState]]: ...

    def bytes_per_second(self) -> float | None: ...

    def describe(self) -> str: ...


@attrs.define
class _Copy:
    transfer: Transfer
    found: int = 0
    bytes_found: int = 0
    copied: int = 0
    bytes_copied: int = 0
    skipped: int = 0
    failed: int = 0
    error: str = ""
    missing: bool = False
    done: bool = False
    bytes_skipped: int = 0


class DirectoryMover:
    """Copies a directory of the local volume into a results directory, file by file, in a
    thread; a file already there with its size, not older than the source, is skipped."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def describe(self) -> str:
        return f"file copies into {self.root}"

    def bytes_per_second(self) -> float | None:
        return None

    def running(self) -> list[tuple[Any, TransferState]]:
        return []

    def start(self, transfer: Transfer) -> _Copy:
        copy = _Copy(transfer)
        threading.Thread(target=self._run, args=(copy,), name="rl-lustre-export", daemon=True).start()
        return copy

    def state(self, handle: Any) -> TransferState:
        c: _Copy = handle
        return TransferState(
            c.done,
            c.found,
            c.bytes_found,
            c.copied,
            c.bytes_copied,
            c.skipped,
            c.failed,
            c.error,
            c.missing,
            str(c.transfer.source),
            c.bytes_skipped,
        )

    def _run(self, c: _Copy) -> None:
        try:
            src = Path(c.transfer.source)
            if not src.is_dir():
                c.missing = True
                return
            target = self.root / c.transfer.dest
            for dirpath, _dirs, names in os.walk(src):
                for name in sorted(names):
                    path = Path(dirpath) / name
                    if not path.is_file() or path.is_symlink():
                        continue
                    size = path.stat().st_size
                    c.found += 1
                    c.bytes_found += size
                    dest = target / path.relative_to(src)
                    try:
                        if (
                            dest.is_file()
                            and dest.stat().st_size == size
                            and dest.stat().st_mtime >= path.stat().st_mtime
                        ):
                            c.skipped += 1
                            c.bytes_skipped += size
                            continue
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        tmp = dest.with_name(f".rl-lustre-partial-{dest.name}")
                        shutil.copy2(path, tmp)
                        tmp.replace(dest)
                        c.copied += 1
                        c.bytes_copied += size
                    except OSError as exc:
                        c.failed += 1
                        c.error = f"{dest}: {exc}"
        except OSError as exc:
            c.error = str(exc)
        finally:
            c.done = True


@attrs.frozen
class ModelExport:
    """What :meth:`rl_lustre.Run.export_model` did, or (``dry_run``) would do.

    Attributes:
        run_id: the run.
        step: the checkpoint's step.
        format: ``"checkpoint"`` (as NeMo-RL saved it) or ``"hf"`` (Hugging Face).
        source: what is copied: the ``step_N`` directory, or its conversion, on the volume.
        destination: where it goes.
        command: the converter's command (``"hf"`` only).
        memory_bytes: the memory the converter's node needs (``"hf"`` only).
        dry_run: nothing ran.
        files: files copied or there already.
        bytes: their bytes.
    """

    run_id: str
    step: int
    format: str
    source: str
    destination: str
    command: str | None = None
    memory_bytes: int | None = None
    dry_run: bool = False
    files: int | None = None
    bytes: int | None = None

    def __str__(self) -> str:
        verb = "would copy" if self.dry_run else "copied"
        lines = [
            f"{self.run_id} {checkpoint_name(self.step)} ({self.format}): {verb} {self.source} -> {self.destination}"
        ]
        if self.command is not None:
            lines.append(f"  convert ({(self.memory_bytes or 0) / 1e9:,.0f} GB of memory): {self.command}")
        if self.files is not None:
            lines.append(f"  {self.files} file(s), {(self.bytes or 0) / 1e9:,.3f} GB")
        return "\n".join(lines)


@attrs.frozen
class ExportPlan:
    """What is about to be exported: the runs, their bytes and files, and the transfers."""

    runs: tuple[dict[str, Any], ...]
    bytes: int
    files: int


@attrs.define
class Exported:
    """What an export did: per run, its manifest; the bytes copied, and the transfers made."""

    runs: list[dict[str, Any]] = attrs.field(factory=list)
    bytes_copied: int = 0
    transfers: int = 0
    done: list[str] = attrs.field(factory=list)


def _gb(n: float) -> str:
    return f"{n / 1e9:,.2f} GB" if n >= 1e7 else f"{n / 1e6:,.2f} MB"


def _seconds(s: float) -> str:
    if s < 90:
        return f"{s:.0f}s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def estimate_text(total_bytes: int, files: int, runs: int, rate: float | None) -> str:
    """The estimate said before an export starts.

    Examples:
        >>> estimate_text(2_000_000_000_000, 1200, 3, 8e9)
        'exporting 3 run(s): 2,000.00 GB in 1200 file(s), about 4 min at 8.0 GB/s'
    """
    line = f"exporting {runs} run(s): {_gb(total_bytes)} in {files} file(s)"
    if rate:
        line += f", about {_seconds(total_bytes / rate)} at {rate / 1e9:.1f} GB/s"
    return line


class _Progress:
    """Progress lines of one transfer: bytes, rate, time left (throttled)."""

    def __init__(self, what: str, expected: int | None, echo: Callable[[str], None]) -> None:
        self.what, self.expected, self.echo = what, expected, echo
        self.start = time.monotonic()
        self.last = self.start

    def update(self, state: TransferState, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < _PROGRESS_EVERY:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-6)
        rate = state.bytes_copied / elapsed
        total = self.expected if self.expected is not None else state.bytes_found
        done = state.bytes_copied + state.bytes_skipped
        line = f"export {self.what}: {_gb(done)} of {_gb(total)}"
        if rate > 0:
            line += f", {rate / 1e6:,.1f} MB/s"
            if not final and total > done:
                line += f", ~{_seconds((total - done) / rate)} left"
        if final:
            line += f" in {_seconds(elapsed)} ({state.copied} copied, {state.skipped} already there)"
        self.echo(line)


def _run_transfer(
    mover: Mover,
    transfer: Transfer,
    *,
    abandon: threading.Event,
    poll: Callable[[], None],
    echo: Callable[[str], None],
    missing_ok: bool = False,
) -> TransferState:
    """Start ``transfer``, follow it to its end, verify its counters."""
    handle = mover.start(transfer)
    progress = _Progress(transfer.what, transfer.bytes, echo)
    while not (state := mover.state(handle)).done:
        if abandon.is_set():
            raise ExportError(f"the export of {transfer.what} was given up while it ran", transfer.what)
        progress.update(state)
        poll()
    if state.missing:
        if missing_ok:
            return state
        raise ExportError(f"{transfer.source} is not on the volume: {transfer.what} cannot be exported", transfer.what)
    if state.error or state.failed:
        why = state.error or f"{state.failed} file(s) failed"
        raise ExportError(f"the export of {transfer.what} ({transfer.source}) failed: {why}", transfer.what)
    if state.copied + state.skipped != state.found:
        raise ExportError(
            f"the export of {transfer.what} does not verify: {state.found} file(s) found, {state.copied} copied, "
            f"{state.skipped} already there",
            transfer.what,
        )
    if transfer.files is not None and state.found != transfer.files:
        raise ExportError(
            f"the export of {transfer.what} does not verify: {state.found} file(s) found, {transfer.files} listed "
            "when the run was sealed",
            transfer.what,
        )
    progress.update(state, final=True)
    return state


def _wait_for_leftover(
    mover: Mover, abandon: threading.Event, poll: Callable[[], None], echo: Callable[[str], None]
) -> None:
    for handle, state in mover.running():
        echo(
            f"an export left running by an interrupted down() ({state.source or handle}) is still going: "
            "waiting for it to end first"
        )
        while not (state := mover.state(handle)).done:
            if abandon.is_set():
                raise ExportError("the wait for an export left running was given up", "a previous export")
            poll()


def _sealed_runs(store: ResultsStore, volume_id: str) -> list[dict[str, Any]]:
    """The ``export.json`` of every run of this volume in the location."""
    found = []
    for name in store.runs():
        data = store.read(f"{name}/{rundir.EXPORT}")
        if data is None:
            continue
        try:
            record = json.loads(data)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("format") == EXPORT_FORMAT and record.get("volume_id") == volume_id:
            found.append(record)
    return sorted(found, key=lambda r: str(r.get("run_id")))


def export_runs(
    store: ResultsStore,
    mover: Mover,
    *,
    mount: str,
    volume_id: str,
    sealed: Sequence[dict[str, Any]] | None,
    deployment: str,
    abandon: threading.Event,
    poll: Callable[[], None] = lambda: time.sleep(0.2),
    echo: Callable[[str], None] = logger.info,
    volume_path: Callable[[str], str] = lambda p: p,
    out: Exported | None = None,
) -> Exported:
    """Export every sealed run of the volume mounted at ``mount`` to ``store`` (see the module).

    Args:
        store: the results location.
        mover: what copies (Lustre's ExportData, or file copies).
        mount: the volume's mount path (the seal's paths start with it).
        volume_id: the volume's identity, as the seal wrote it.
        sealed: what the seal reported now (None: sealed by an earlier down()).
        deployment: the cluster's name (in each manifest).
        abandon: set to give up (the transfer under way goes on, on the service).
        poll: called between looks at a transfer (a sleep).
        echo: where the estimate and progress lines go.
        volume_path: a seal's path as the mover wants it (default: as it is).
        out: where to keep what was done as it goes (for a message while it runs).

    Raises:
        ExportError: a transfer failed, did not verify, or was given up; ``.what`` names it.
    """
    out = out if out is not None else Exported()
    _wait_for_leftover(mover, abandon, poll, echo)
    rate = mover.bytes_per_second()
    if sealed is not None:
        total = sum(int(s.get("bytes") or 0) for s in sealed)
        files = sum(int(s.get("files") or 0) for s in sealed)
        echo(estimate_text(total, files, len(sealed), rate) + f" to {store.uri} ({mover.describe()})")
    records = Transfer(volume_path(posixpath.join(mount, rundir.RUNS)), "", "the runs' records")
    state = _run_transfer(mover, records, abandon=abandon, poll=poll, echo=echo, missing_ok=True)
    out.transfers += 1
    out.bytes_copied += state.bytes_copied
    out.done.append(records.what)
    if state.missing:
        return out
    runs = _sealed_runs(store, volume_id)
    if sealed is not None:
        missing = sorted({str(s["run_id"]) for s in sealed} - {str(r["run_id"]) for r in runs})
        if missing:
            raise ExportError(f"the records of {', '.join(missing)} did not arrive in {store.uri}", "the runs' records")
    else:
        total = sum(int(u.get("bytes") or 0) for r in runs for u in r.get("units") or [])
        files = sum(int(u.get("files") or 0) for r in runs for u in r.get("units") or [])
        echo(estimate_text(total, files, len(runs), rate) + f" more to {store.uri} ({mover.describe()})")
    for run in runs:
        sealed_at = str(run.get("mount") or mount)

        def path(p: str, sealed_at: str = sealed_at) -> str:
            # The volume as the seal saw it mounted, as this teardown sees it.
            return volume_path(posixpath.join(mount, posixpath.relpath(p, sealed_at)))

        out.runs.append(
            _export_run(store, mover, run, deployment, abandon=abandon, poll=poll, echo=echo, path=path, out=out)
        )
    return out


def _export_run(
    store: ResultsStore,
    mover: Mover,
    run: dict[str, Any],
    deployment: str,
    *,
    abandon: threading.Event,
    poll: Callable[[], None],
    echo: Callable[[str], None],
    path: Callable[[str], str],
    out: Exported,
) -> dict[str, Any]:
    run_id = str(run["run_id"])
    units = list(run.get("units") or [])
    for unit in units:
        t = Transfer(
            path(str(unit["path"])),
            f"{run_id}/{unit['to'].strip('/')}/",
            f"{run_id} {unit['to']}",
            unit.get("files"),
            unit.get("bytes"),
        )
        state = _run_transfer(mover, t, abandon=abandon, poll=poll, echo=echo)
        out.transfers += 1
        out.bytes_copied += state.bytes_copied
        out.done.append(t.what)
    kept = {posixpath.basename(str(u["to"])) for u in units if "step" in u}
    removed = sorted(
        {
            f.name.split("/")[2]
            for f in store.list(f"{run_id}/{CHECKPOINTS}/")
            if len(f.name.split("/")) > 3 and f.name.split("/")[2] not in kept
        }
    )
    for name in removed:
        for f in store.list(f"{run_id}/{CHECKPOINTS}/{name}/"):
            store.delete(f.name)
    if removed:
        echo(f"export {run_id}: removed {', '.join(removed)} from the results (keep_top_k deleted it on the volume)")
    files = store.list(f"{run_id}/")
    leaked = [f.name for f in files if secret_path(f.name.split("/", 1)[-1])]
    for name in leaked:
        store.delete(name)
        logger.warning("results: deleted %s: it looks like a credential and must never be exported", store.uri_of(name))
    checkpoints = [
        {
            "step": u["step"],
            "uri": store.uri_of(f"{run_id}/{u['to']}"),
            "bytes": u.get("bytes"),
            "files": u.get("files"),
            "finished_at": u.get("finished_at"),
            "training_info": u.get("training_info") or {},
            "volume_path": u.get("path"),
        }
        for u in units
        if "step" in u
    ]
    files = [f for f in files if f.name not in leaked]
    manifest = {
        "format": RESULTS_FORMAT,
        "run_id": run_id,
        "deployment": deployment,
        "volume_id": run.get("volume_id"),
        "exported_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "checkpoints": checkpoints,
        "logs": any(u.get("to") == "logs" for u in units),
        "withheld": run.get("withheld") or [],
        "objects": len(files),
        "bytes": sum(f.size for f in files),
    }
    store.write(f"{run_id}/{RESULTS_MANIFEST}", json.dumps(manifest, indent=1, sort_keys=True).encode())
    newest = f"newest {checkpoint_name(checkpoints[-1]['step'])}" if checkpoints else "no checkpoint"
    echo(f"exported {run_id} to {store.uri_of(run_id)}: {len(checkpoints)} checkpoint(s), {newest}, verified")
    return manifest
