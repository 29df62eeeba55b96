"""A run's records on the volume: written by its supervisor as things happen, read by everyone.

The supervisor of a run with a run directory (``--run-dir``, :mod:`.rundir`) owns that
directory while it lives, and writes into it:

- ``submission.json``: what a resubmission needs: the supervisor's own command line (never
  the ``fresh=True`` move that preceded it), the job's metadata and runtime env as Ray gave
  them (``RAY_JOB_CONFIG_JSON_ENV_VAR``; the client refused any secret in them before
  submitting);
- ``journal.jsonl``: every journal record of its log (:mod:`.records`), one JSON object a
  line, the recoveries' records as ``restart`` / ``resumed`` events, and an ``owner``
  record first, naming the submission and whether it resumes the run (a resubmission by
  the keeper after a head loss) or begins it again (a submission by the user);
- ``driver.log``: a copy of everything it prints (its log), rolling to ``driver.log.1`` at
  :data:`LOG_LIMIT` bytes, so at most twice that is kept;
- ``packages/``: what Ray uploaded with the job (this package, the job's working_dir), so
  that a resubmission on a new head can upload them again;
- ``stopped``: when the run is stopped (Ray's stop sends it SIGTERM; a head that dies
  takes its processes with SIGKILL, and is no stop).

One writer at a time (:class:`Generation`): each writer creates the next numbered file in
``owners/`` with ``O_CREAT | O_EXCL``, which one creator wins on any POSIX filesystem,
Lustre included, with no lock to leak when a holder dies; a writer whose successor's file
exists writes nothing more. So a stale supervisor (on an old head that came back) cannot
write over the records of the run's resubmission. Readers need no lock: files are replaced
atomically, or appended a line at a time.

Standard library only (part of the on-cluster package).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from . import rundir
from .records import HEAD_LOST, MARK, RESTART_MARK, RESUMED_MARK, SUBMISSION_LINE, VERSION

__all__ = ["LOG_LIMIT", "OWNER", "RESTART", "RESUMED", "Generation", "RunWriter", "Tee", "current", "mark_stopped"]

# Bytes of driver.log before it rolls to driver.log.1.
LOG_LIMIT = 32 * 1024 * 1024
# The journal's own records: a writer's first, and the recoveries' (RESTART_MARK, RESUMED_MARK).
OWNER, RESTART, RESUMED = "owner", "restart", "resumed"
_MARKS = ((MARK, None), (RESTART_MARK, RESTART), (RESUMED_MARK, RESUMED))


class Generation:
    """This process's turn as the writer of ``root``: the ``n``-th, until the ``n+1``-th begins.

    Examples:
        >>> import tempfile
        >>> root = tempfile.mkdtemp()
        >>> first = Generation.claim(root, {"who": "a"})
        >>> second = Generation.claim(root, {"who": "b"})
        >>> first.n, second.n, first.superseded(), second.superseded()
        (1, 2, True, False)
    """

    def __init__(self, root: str | os.PathLike[str], n: int) -> None:
        self.owners = Path(root) / rundir.OWNERS
        self.n = n

    @classmethod
    def claim(cls, root: str | os.PathLike[str], info: dict[str, Any]) -> Generation:
        """Become the writer of ``root`` (made if missing), after every earlier one."""
        owners = Path(root) / rundir.OWNERS
        owners.mkdir(parents=True, exist_ok=True)
        n = current(root) + 1
        body = json.dumps(
            {"v": VERSION, "at": round(time.time(), 3), "pid": os.getpid(), "host": socket.gethostname(), **info}
        )
        while True:
            try:
                fd = os.open(owners / _owner_name(n), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                n += 1  # another writer began at the same moment: come after it
                continue
            with os.fdopen(fd, "w") as f:
                f.write(body)
            return cls(root, n)

    def superseded(self) -> bool:
        """Whether a later writer began (one look at the file system)."""
        return (self.owners / _owner_name(self.n + 1)).exists()


def current(root: str | os.PathLike[str]) -> int:
    """The number of the newest writer of ``root``; 0 when none ever began."""
    try:
        names = os.listdir(Path(root) / rundir.OWNERS)
    except OSError:
        return 0
    return max((int(name.split(".")[0]) for name in names if name.split(".")[0].isdigit()), default=0)


def _owner_name(n: int) -> str:
    return f"{n:06d}.json"


class RunWriter:
    """The supervisor's writer of its run's directory (see the module's docstring)."""

    def __init__(self, path: str | os.PathLike[str], generation: Generation, *, err: TextIO | None = None) -> None:
        self.path = Path(path)
        self.generation = generation
        self.submission: str | None = None
        self._err = err if err is not None else sys.__stderr__
        self._lock = threading.Lock()
        self._pending = b""
        self._log_size = _size(self.path / rundir.DRIVER_LOG)
        self._failed = False
        self._stale = False
        self.limit = LOG_LIMIT

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        submission: str | None,
        metadata: dict[str, Any],
        runtime_env: dict[str, Any],
        argv: list[str],
        err: TextIO | None = None,
    ) -> RunWriter:
        """Become the run's writer and record what was submitted.

        A resubmission after a head loss (metadata :data:`~.records.HEAD_LOST`) *resumes*
        the run: its records go on from the earlier ones. Any other submission begins it
        again: an earlier ``stopped`` or ``given_up`` no longer holds, and the packages are
        copied afresh.
        """
        root = Path(path)
        resumes = HEAD_LOST in metadata
        generation = Generation.claim(root, {"submission": submission, "resumes": resumes})
        writer = cls(root, generation, err=err)
        writer.submission = submission
        python = sys.executable or "python"
        entrypoint = shlex.join([python, "-m", f"{rundir.PACKAGE}.supervisor", *argv])
        if not resumes:
            for name in (rundir.STOPPED, rundir.GIVEN_UP):
                with contextlib.suppress(FileNotFoundError):
                    (root / name).unlink()
        writer.replace(
            rundir.SUBMISSION,
            {
                "v": VERSION,
                "at": round(time.time(), 3),
                "submission": submission,
                "generation": generation.n,
                "entrypoint": entrypoint,
                "metadata": metadata,
                "runtime_env": runtime_env,
            },
        )
        writer.journal(
            {"event": OWNER, "submission": submission, "generation": generation.n, "resumes": resumes}, at=time.time()
        )
        with writer._lock:
            writer._append_log(f"{SUBMISSION_LINE}{submission} ---\n".encode())
        writer._keep_packages(runtime_env, fresh=not resumes)
        return writer

    # -- what the supervisor prints --------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Some of the supervisor's output: into driver.log, its records into the journal."""
        with self._lock:
            if not self._writable():
                return
            self._append_log(data)
            lines = (self._pending + data).split(b"\n")
            self._pending = lines.pop()
            for raw in lines:
                record = _record_of(raw.decode(errors="replace"))
                if record is not None:
                    self._append(rundir.JOURNAL, json.dumps(record, sort_keys=True) + "\n")

    def journal(self, record: dict[str, Any], *, at: float | None = None) -> None:
        """Write one record into the journal only (not into the log)."""
        full = {"v": VERSION, "at": round(time.time() if at is None else at, 3), **record}
        with self._lock:
            if self._writable():
                self._append(rundir.JOURNAL, json.dumps(full, sort_keys=True) + "\n")

    def replace(self, name: str, value: dict[str, Any]) -> None:
        """Write ``name`` atomically (a reader sees the old or the new file, never half)."""
        with self._lock:
            if not self._writable():
                return
            target = self.path / name
            tmp = target.with_name(f".{name}.{os.getpid()}.tmp")
            try:
                tmp.write_text(json.dumps(value, sort_keys=True, indent=1))
                os.replace(tmp, target)
            except OSError as exc:
                self._fail(exc)

    @property
    def stale(self) -> bool:
        """Whether a later writer took the run over (this one then writes nothing)."""
        with self._lock:
            return self._stale or self._check_stale()

    def _writable(self) -> bool:
        return not self._failed and not self._check_stale()

    def _check_stale(self) -> bool:
        if not self._stale and self.generation.superseded():
            self._stale = True
            self._say(
                f"a later submission of this run took over its records in {self.path}: this supervisor "
                "writes nothing more there"
            )
        return self._stale

    def _append_log(self, data: bytes) -> None:
        log = self.path / rundir.DRIVER_LOG
        try:
            if self._log_size + len(data) > self.limit and self._log_size > 0:
                os.replace(log, self.path / rundir.DRIVER_LOG_PREVIOUS)
                self._log_size = 0
            with open(log, "ab") as f:
                f.write(data)
            self._log_size += len(data)
        except OSError as exc:
            self._fail(exc)

    def _append(self, name: str, text: str) -> None:
        try:
            with open(self.path / name, "a", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self._failed = True
        self._say(f"cannot write the run's records in {self.path} ({exc}); going on without them")

    def _say(self, text: str) -> None:
        with contextlib.suppress(Exception):
            assert self._err is not None
            self._err.write(f"rl_lustre supervisor: {text}\n")
            self._err.flush()

    def _keep_packages(self, runtime_env: dict[str, Any], *, fresh: bool) -> None:
        """Copy this package (and the job's working_dir, Ray's cwd) into ``packages/``."""
        target = self.path / rundir.PACKAGES
        if target.exists() and not fresh:
            return
        try:
            staging = Path(tempfile.mkdtemp(prefix=".packages-", dir=self.path))
            here = Path(__file__).resolve().parent
            shutil.copytree(here, staging / rundir.PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            if runtime_env.get("working_dir"):
                shutil.copytree(os.getcwd(), staging / "working_dir", ignore=shutil.ignore_patterns("__pycache__"))
            old = self.path / f".packages-old-{os.getpid()}"
            if target.exists():
                os.replace(target, old)
            os.replace(staging, target)
            shutil.rmtree(old, ignore_errors=True)
        except OSError as exc:
            self._say(f"cannot keep the job's packages in {target} ({exc}): a head loss cannot resubmit the run")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _record_of(line: str) -> dict[str, Any] | None:
    """The journal record a printed line is, if it is one."""
    for mark, event in _MARKS:
        if line.startswith(mark):
            try:
                record = json.loads(line[len(mark) :])
            except ValueError:
                return None
            if not isinstance(record, dict):
                return None
            if event is None:
                return record if isinstance(record.get("event"), str) else None
            return {"v": VERSION, "at": round(time.time(), 3), **record, "event": event}
    return None


class Tee:
    """``sys.stdout`` for the supervisor: what is written goes on to ``inner``, and to the run's records.

    Its ``buffer`` does the same for bytes (the copier of the command's output writes those).
    """

    def __init__(self, inner: TextIO, writer: RunWriter) -> None:
        self._inner = inner
        self._writer = writer
        self.encoding = inner.encoding
        self.buffer = _TeeBytes(inner.buffer, writer)

    def write(self, text: str) -> int:
        n = self._inner.write(text)
        self._writer.feed(text.encode())
        return n

    def flush(self) -> None:
        self._inner.flush()

    def fileno(self) -> int:
        return self._inner.fileno()

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True


class _TeeBytes(io.RawIOBase):
    def __init__(self, inner: Any, writer: RunWriter) -> None:
        self._inner = inner
        self._writer = writer

    def write(self, data: Any) -> int:
        n = self._inner.write(data)
        self._writer.feed(bytes(data))
        return int(n) if n is not None else len(data)

    def flush(self) -> None:
        self._inner.flush()

    def writable(self) -> bool:
        return True


def mark_stopped(path: str | os.PathLike[str], by: str, **fields: Any) -> bool:
    """Leave the ``stopped`` marker in the run's directory (the first one stays); True if this made it.

    Any process may: the user's (locally), the supervisor on SIGTERM, teardown.
    """
    target = Path(path) / rundir.STOPPED
    body = json.dumps({"v": VERSION, "at": round(time.time(), 3), "by": by, "generation": current(path), **fields})
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except FileNotFoundError:
        return False  # no run directory: nothing was ever recorded of the run
    with os.fdopen(fd, "w") as f:
        f.write(body)
    return True
