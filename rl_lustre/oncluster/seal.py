"""Sealing a stopped run for export: what of it leaves the volume, and under which names.

Teardown runs this on the cluster (``python -m rl_lustre_oncluster.seal``, a helper job on
the Ray head; locally in the client's process) once the runs are stopped, before anything is
exported. For each run it

- writes the client's summary of the run (:data:`~.rundir.SUMMARY`: status, attempts, the
  goodput ledger) and, when the run's directory has no driver log yet, the attempts' logs
  read from the Ray dashboard (:data:`~.rundir.DRIVER_LOG`);
- moves aside every file that may hold a credential, by its name or place
  (:func:`.secretpaths.secret_path`) or because it contains the value of one of the
  cluster's secrets, into ``<mount>/rl_lustre/withheld/<run id>/`` (never exported; it
  stays on the volume and goes with it);
- lists what is exported, one directory each (Managed Lustre's ExportData copies
  directories): every complete checkpoint ``step_N`` of its checkpoint directory (a
  ``tmp_step_N``, a save cut short, never is) to ``checkpoints/step_N/``, NeMo-RL's log
  directory to ``logs/``, and writes the list (:data:`~.rundir.EXPORT`, with the volume's
  id, the checkpoints and their sizes) into the run's directory.

The run's directory itself (its records, its driver log, its hang bundles and the two files
above) is exported whole with the others, ``<mount>/rl_lustre/runs/`` to the results
location, so that a later teardown without the cluster finds every run's list there.

A run's files in the results location, under ``<run id>/``::

    submission.json journal.jsonl driver.log stopped diagnostics/ summary.json export.json
    checkpoints/step_N/...      logs/...

Standard library only (part of the on-cluster package).

Examples:
    >>> import json, tempfile, pathlib
    >>> mount = pathlib.Path(tempfile.mkdtemp())
    >>> (mount / "ckpt" / "step_2").mkdir(parents=True)
    >>> _ = (mount / "ckpt" / "step_2" / "training_info.json").write_text('{"step": 2}')
    >>> (mount / "ckpt" / "tmp_step_4").mkdir()
    >>> run = {"run_id": "r1", "run_dir": str(mount / "rl_lustre/runs/r1"), "checkpoint_dir": str(mount / "ckpt")}
    >>> [s["newest"] for s in seal_runs(str(mount), [run], volume_id="v")]
    [{'step': 2, 'bytes': 11, 'files': 1}]
    >>> export = json.loads((mount / "rl_lustre/runs/r1/export.json").read_text())
    >>> [(u["to"], u["bytes"]) for u in export["units"]], [w["why"] for w in export["withheld"]]
    ([('checkpoints/step_2', 11)], ['a save cut short (tmp_step_4): never a checkpoint'])
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import shutil
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import rundir
from .nemo_formats import COMPLETE, SAVING, checkpoint_step, scan_checkpoints
from .runrecords import mark_stopped
from .runview import RunView, history
from .secretpaths import secret_path

__all__ = [
    "CHECKPOINTS",
    "EXPORT_FORMAT",
    "LOGS",
    "SEAL_MARK",
    "SUMMARY_FORMAT",
    "WITHHELD",
    "seal_runs",
]

# Under a run's place in the results location.
CHECKPOINTS = "checkpoints"
LOGS = "logs"
# Under the volume's mount path: what was held back from the export.
WITHHELD = "rl_lustre/withheld"
EXPORT_FORMAT = "rl-lustre-export/v1"
SUMMARY_FORMAT = "rl-lustre-run-summary/v1"
# The line the seal prints for the client: this mark, then JSON.
SEAL_MARK = "RL_LUSTRE_SEAL "
# Files larger than this are not searched for a secret's value (checkpoint shards).
_SCAN_LIMIT = 64 << 20
# Shorter values would be found by chance.
_MIN_SECRET = 8


def _write_json(path: str, data: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _files(top: str) -> dict[str, int]:
    """Every regular file below ``top``: its path relative to ``top`` -> size."""
    out: dict[str, int] = {}
    for dirpath, _dirs, names in os.walk(top):
        for name in names:
            full = os.path.join(dirpath, name)
            if os.path.isfile(full) and not os.path.islink(full):
                out[os.path.relpath(full, top)] = os.path.getsize(full)
    return dict(sorted(out.items()))


def _holds(path: str, values: Sequence[bytes]) -> bool:
    if not values or os.path.getsize(path) > _SCAN_LIMIT:
        return False
    with open(path, "rb") as f:
        data = f.read()
    return any(v in data for v in values)


def _withhold(mount: str, run_id: str, top: str, values: Sequence[bytes]) -> list[dict[str, str]]:
    """Move the files under ``top`` that may hold a credential out of the export."""
    out = []
    for rel in _files(top):
        full = os.path.join(top, rel)
        why = secret_path(rel) or ("holds the value of one of the cluster's secrets" if _holds(full, values) else None)
        if why is None:
            continue
        aside = os.path.join(mount, WITHHELD, run_id, os.path.relpath(full, mount))
        os.makedirs(os.path.dirname(aside), exist_ok=True)
        shutil.move(full, aside)
        out.append({"path": full, "why": f"{why}: moved to {aside}, never exported"})
    return out


def _checkpoints(checkpoint_dir: str) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The complete checkpoints of ``checkpoint_dir`` as export units (as the one scanner of
    checkpoint directories sees them), and what is not exported there, with why."""
    units: list[dict[str, Any]] = []
    for c in scan_checkpoints(checkpoint_dir):
        files = _files(c["path"])
        units.append(
            {
                "path": c["path"],
                "to": posixpath.join(CHECKPOINTS, os.path.basename(c["path"])),
                "step": c["step"],
                "files": len(files),
                "bytes": sum(files.values()),
                "finished_at": c["finished_at"],
                "save_seconds": c["save_seconds"],
                "training_info": c["training_info"],
            }
        )
    listed = {os.path.basename(u["path"]) for u in units}
    withheld: list[dict[str, str]] = []
    for name in sorted(os.listdir(checkpoint_dir)) if os.path.isdir(checkpoint_dir) else ():
        if name in listed:
            continue
        if checkpoint_step(name, SAVING) is not None:
            why = f"a save cut short ({name}): never a checkpoint"
        else:
            why = f"not a checkpoint ({COMPLETE}N) of the run"
        withheld.append({"path": os.path.join(checkpoint_dir, name), "why": why})
    return units, withheld


def _on_volume(mount: str, run_dir: Any) -> bool:
    """Whether a run's directory lies on the volume mounted at ``mount`` (a head can know runs
    whose directories were on another volume: those are that volume's to seal, never this one's).

    >>> _on_volume("/mnt/lustre", "/mnt/lustre/rl_lustre/runs/r1"), _on_volume("/mnt/lustre", "/mnt/other/r1")
    (True, False)
    """
    if not isinstance(run_dir, str) or not run_dir:
        return False
    top = os.path.normpath(mount)
    return os.path.normpath(run_dir).startswith(top.rstrip(os.sep) + os.sep)


def _runs(mount: str, given: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs the client named whose directories are on this volume, and those whose
    directories are on it besides."""
    from .records import CHECKPOINT_DIR, LOG_DIR

    runs = {r["run_id"]: dict(r) for r in given if _on_volume(mount, r.get("run_dir"))}
    root = os.path.join(mount, rundir.RUNS)
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        if name in runs or not os.path.isdir(os.path.join(root, name)):
            continue
        meta = (RunView(os.path.join(root, name)).submission or {}).get("metadata") or {}
        runs[name] = {
            "run_id": name,
            "run_dir": os.path.join(root, name),
            "checkpoint_dir": meta.get(CHECKPOINT_DIR),
            "log_dir": meta.get(LOG_DIR),
        }
    return [runs[k] for k in sorted(runs)]


def seal_runs(
    mount: str,
    runs: Iterable[dict[str, Any]],
    *,
    volume_id: str,
    logs_of: Callable[[str], str | None] | None = None,
    secret_values: Sequence[str] = (),
    now: float | None = None,
    cluster: str | None = None,
) -> list[dict[str, Any]]:
    """Seal every run (see the module): returns, per run, what the client reports.

    Args:
        mount: the volume's mount path.
        runs: ``{"run_id", "run_dir", "checkpoint_dir", "log_dir", "attempts", "summary"}``
            per run the cluster knows; the run directories on the volume are sealed too.
        volume_id: the volume's identity (the Lustre instance's uid), written into each
            list so that a later teardown tells this volume's runs from others in the bucket.
        logs_of: a Ray submission id -> its log (for a run without a driver log).
        secret_values: the cluster's secrets' values: a file holding one is withheld.
        now: the time written as ``sealed_at``.
        cluster: the cluster's name: the head losses its keeper recorded go into each list
            (``head_losses``), so that a run read back from its results is told as it was.
    """
    values = [v.encode() for v in secret_values if len(v) >= _MIN_SECRET]
    losses = [r for r in history(mount, cluster) if r.get("event") == "lost"] if cluster else []
    out = []
    for run in _runs(mount, runs):
        run_id, run_dir = rundir.check_run_id(run["run_id"]), run["run_dir"]
        os.makedirs(run_dir, exist_ok=True)
        summary = run.get("summary")
        if isinstance(summary, dict):
            _write_json(os.path.join(run_dir, rundir.SUMMARY), {"format": SUMMARY_FORMAT, **summary})
        log_path = os.path.join(run_dir, rundir.DRIVER_LOG)
        if logs_of is not None and not os.path.exists(log_path) and run.get("attempts"):
            parts = [logs_of(a) for a in run["attempts"]]
            if all(p is not None for p in parts):  # never a driver log with an attempt missing
                with open(log_path, "w", encoding="utf-8") as f:
                    f.write("".join(p or "" for p in parts))
        withheld = _withhold(mount, run_id, run_dir, values)
        units: list[dict[str, Any]] = []
        checkpoint_dir, log_dir = run.get("checkpoint_dir"), run.get("log_dir")
        if checkpoint_dir:
            withheld += _withhold(mount, run_id, checkpoint_dir, values) if os.path.isdir(checkpoint_dir) else []
            found, skipped = _checkpoints(checkpoint_dir)
            units += found
            withheld += skipped
        if log_dir and os.path.isdir(log_dir):
            withheld += _withhold(mount, run_id, log_dir, values)
            files = _files(log_dir)
            units.append({"path": log_dir, "to": LOGS, "files": len(files), "bytes": sum(files.values())})
        checkpoints = [u for u in units if "step" in u]
        newest = checkpoints[-1] if checkpoints else None
        record = {
            "format": EXPORT_FORMAT,
            "run_id": run_id,
            "volume_id": volume_id,
            "sealed_at": round(time.time() if now is None else now, 3),
            "mount": mount,
            "run_dir": run_dir,
            "checkpoint_dir": checkpoint_dir,
            "log_dir": log_dir,
            "units": units,
            "withheld": withheld,
            "head_losses": losses,
        }
        _write_json(os.path.join(run_dir, rundir.EXPORT), record)
        records = _files(run_dir)
        out.append(
            {
                "run_id": run_id,
                "newest": None
                if newest is None
                else {"step": newest["step"], "bytes": newest["bytes"], "files": newest["files"]},
                "checkpoints": len(checkpoints),
                "bytes": sum(u["bytes"] for u in units) + sum(records.values()),
                "files": sum(u["files"] for u in units) + len(records),
                "units": len(units),
                "withheld": withheld,
            }
        )
    return out


def _dashboard_logs(url: str | None, given: str | None = None) -> Callable[[str], str | None]:
    """A Ray job's log: the copy the client passed (``given/<submission id>.log``), else read
    from the head's dashboard (its Jobs REST API)."""
    from .raystate import StateApi

    api = StateApi.for_job(url)

    def logs(submission_id: str) -> str | None:
        if given is not None:
            try:
                with open(os.path.join(given, f"{submission_id}.log"), encoding="utf-8") as f:
                    return f.read()
            except OSError:
                pass
        request = urllib.request.Request(f"{api.url}/api/jobs/{submission_id}/logs", headers=api._headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return str(json.loads(response.read()).get("logs") or "")
        except (OSError, ValueError):
            return None

    return logs


def main(argv: Sequence[str] | None = None) -> int:
    """``stop RUN_DIR...`` or ``seal --mount M --volume-id V --records FILE [--dashboard URL]
    [--secret NAME...]``; the seal prints :data:`SEAL_MARK` + JSON."""
    parser = argparse.ArgumentParser(prog="python -m rl_lustre_oncluster.seal")
    verbs = parser.add_subparsers(dest="verb", required=True)
    stop = verbs.add_parser("stop", help="record runs as stopped by teardown")
    stop.add_argument("run_dirs", nargs="+")
    seal = verbs.add_parser("seal", help="seal the runs for export")
    seal.add_argument("--mount", required=True)
    seal.add_argument("--volume-id", required=True)
    seal.add_argument("--cluster", default=None, help="the cluster's name (its keeper's head losses)")
    seal.add_argument("--records", required=True, help="a JSON file: {'runs': [...]}")
    seal.add_argument("--dashboard", default=None)
    seal.add_argument("--logs", default=None, help="a directory of the attempts' logs, <submission id>.log")
    seal.add_argument("--secret", action="append", default=[], help="a secret's NAME (its value is read here)")
    args = parser.parse_args(argv)
    if args.verb == "stop":
        for run_dir in args.run_dirs:
            mark_stopped(run_dir, "teardown")
        return 0
    with open(args.records, encoding="utf-8") as f:
        given = json.load(f).get("runs") or []
    sealed = seal_runs(
        args.mount,
        given,
        volume_id=args.volume_id,
        cluster=args.cluster,
        logs_of=_dashboard_logs(args.dashboard, args.logs),
        secret_values=[os.environ.get(name, "") for name in args.secret],
    )
    print(SEAL_MARK + json.dumps(sealed, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
