"""A run's directory read back: what its records say about the run (both sides read it).

The supervisor writes the directory (:mod:`.runrecords`); the keeper reads it to know which
runs a lost head took with it and how to resubmit them, the resubmitted supervisor to go on
where its predecessor stopped (its restarts, attempts and place in the queue), and the
client to tell a run's story when the head that ran it is gone.

Standard library only (part of the on-cluster package).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from . import rundir
from .records import MARK, RESTART_MARK, RESUMED_MARK, SUBMISSION_LINE
from .runrecords import OWNER, RESTART, RESUMED

__all__ = [
    "ANSWER",
    "RunView",
    "as_log",
    "history",
    "main",
    "read_journal",
    "read_journal_file",
    "segment",
    "submission_log",
    "view",
]


def read_journal_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every record of the run's ``journal.jsonl`` (the run's directory), in order; torn lines left out."""
    return _records(Path(path) / rundir.JOURNAL)


def _records(path: Path) -> list[dict[str, Any]]:
    """The event records of a JSON-lines file, in order; torn lines left out, none when it is unreadable."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return read_journal(text)


def read_journal(text: str) -> list[dict[str, Any]]:
    """The records of a ``journal.jsonl``'s text (wherever it was read), in order; torn lines left out."""
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("event"), str):
            out.append(record)
    return out


def segment(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records since the run last began (a user's submission), resumptions included.

    Examples:
        >>> [r["event"] for r in segment([{"event": "owner", "resumes": False}, {"event": "end"},
        ...  {"event": "owner", "resumes": False}, {"event": "step"}, {"event": "owner", "resumes": True}])]
        ['owner', 'step', 'owner']
    """
    records = list(records)
    begins = [i for i, r in enumerate(records) if r.get("event") == OWNER and not r.get("resumes")]
    return records[begins[-1] :] if begins else records


def as_log(records: Iterable[dict[str, Any]]) -> str:
    """Journal records as the lines the supervisor printed them as (for the log parsers).

    Examples:
        >>> print(as_log([{"event": "restart", "restart": 1, "at": 2.0}, {"event": "step", "step": 3, "at": 4.0}]))
        RL_LUSTRE_RESTART {"at": 2.0, "restart": 1}
        RL_LUSTRE_EVENT {"at": 4.0, "event": "step", "step": 3}
        <BLANKLINE>
    """
    lines = []
    for record in records:
        event = record.get("event")
        if event == RESTART:
            lines.append(
                RESTART_MARK + json.dumps({k: v for k, v in record.items() if k not in ("event", "v")}, sort_keys=True)
            )
        elif event == RESUMED:
            lines.append(
                RESUMED_MARK + json.dumps({k: v for k, v in record.items() if k not in ("event", "v")}, sort_keys=True)
            )
        elif event != OWNER:
            lines.append(MARK + json.dumps(record, sort_keys=True))
    return "".join(line + "\n" for line in lines)


class RunView:
    """What a run's directory says about the run (read once, when made).

    Attributes:
        path: the run's directory.
        exists: whether any writer ever began there.
        records: the journal's records since the run last began (:func:`segment`).
        submission: ``submission.json`` (None when missing).
        stopped: the ``stopped`` marker's JSON (None when the run was not stopped).
        given_up: the ``given_up`` marker's JSON (None unless the keeper gave up on it).
        submissions: the submission ids of the run since it last began, oldest first.
        ended: the exit status of the last submission, once it recorded its end.
    """

    def __init__(self, path: str | os.PathLike[str], *, data: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self._log: str | None = None
        if data is not None:  # read elsewhere (on the cluster: see main) and sent here
            self.exists, self.records, self._log = bool(data["exists"]), list(data["records"]), str(data["log"])
            self.submission, self.stopped, self.given_up = data["submission"], data["stopped"], data["given_up"]
        else:
            self.exists = (self.path / rundir.OWNERS).is_dir()
            self.records = segment(read_journal_file(self.path))
            self.submission = _json_file(self.path / rundir.SUBMISSION)
            self.stopped = _json_file(self.path / rundir.STOPPED)
            self.given_up = _json_file(self.path / rundir.GIVEN_UP)
        self.submissions = [
            str(r["submission"]) for r in self.records if r.get("event") == OWNER and r.get("submission")
        ]
        self.ended: int | None = None
        for record in self.records:
            if record.get("event") == OWNER:
                self.ended = None
            elif record.get("event") == "end":
                self.ended = int(record.get("status") or 0)

    def to_json(self, *, log_lines: int = 400) -> dict[str, Any]:
        """What :class:`RunView` ``(path, data=...)`` is made from elsewhere: the records, the
        markers and the log's last ``log_lines`` lines."""
        tail = self.log().splitlines(keepends=True)[-log_lines:]
        return {
            "exists": self.exists,
            "records": self.records,
            "submission": self.submission,
            "stopped": self.stopped,
            "given_up": self.given_up,
            "log": "".join(tail),
        }

    @property
    def current(self) -> str | None:
        """The run's newest submission id."""
        return self.submissions[-1] if self.submissions else None

    @property
    def in_flight(self) -> bool:
        """Neither ended nor stopped nor given up: a head loss leaves it to be resubmitted."""
        return self.exists and self.ended is None and self.stopped is None and self.given_up is None

    @property
    def restarts(self) -> list[dict[str, Any]]:
        """The run's recoveries so far (the ``restart`` records), every cause."""
        return [r for r in self.records if r.get("event") == RESTART]

    @property
    def attempts(self) -> int:
        """The attempts started so far."""
        return max((int(r.get("attempt") or 0) for r in self.records if r.get("event") == "attempt"), default=0)

    @property
    def held(self) -> bool:
        """Whether the run held its nodes in the queue when its records stop (admitted, not released)."""
        held = False
        for record in self.records:
            event = record.get("event")
            if event == "granted" or (event in ("queued", "waiting") and record.get("state") == "recovering"):
                held = True
            elif event in ("released", OWNER):
                held = False
        return held

    @property
    def last_step(self) -> int:
        """The last step header recorded."""
        return max((int(r.get("step") or 0) for r in self.records if r.get("event") == "step"), default=0)

    @property
    def last_at(self) -> float | None:
        """When the last record was written."""
        return max((float(r["at"]) for r in self.records if isinstance(r.get("at"), (int, float))), default=None)

    def log(self) -> str:
        """The run's log as its supervisors printed it (``driver.log.1`` then ``driver.log``)."""
        if self._log is not None:
            return self._log
        parts = []
        for name in (rundir.DRIVER_LOG_PREVIOUS, rundir.DRIVER_LOG):
            with contextlib.suppress(OSError):
                parts.append((self.path / name).read_text(encoding="utf-8", errors="replace"))
        return "".join(parts)


def history(mount_path: str, cluster: str) -> list[dict[str, Any]]:
    """The keeper's records of the cluster's heads (``heads.jsonl``), oldest first."""
    return _records(Path(rundir.keeper_dir(mount_path, cluster)) / rundir.HEADS)


def submission_log(log: str, submission: str) -> list[str]:
    r"""The lines of ``submission``'s part of a run's ``driver.log`` (:meth:`RunView.log`).

    Examples:
        >>> log = SUBMISSION_LINE + "a ---\nstep 1\n" + SUBMISSION_LINE + "b ---\nstep 2\n"
        >>> submission_log(log, "a"), submission_log(log, "b")
        (['step 1'], ['step 2'])
    """
    lines, mine = [], False
    for line in log.splitlines():
        if line.startswith(SUBMISSION_LINE):
            mine = line == f"{SUBMISSION_LINE}{submission} ---"
        elif mine:
            lines.append(line)
    return lines


def view(path: str | os.PathLike[str]) -> RunView:
    """What the run's directory at ``path`` says now."""
    return RunView(path)


# The line main prints its answer on (the helper job's log has Ray's lines too).
ANSWER = "RL_LUSTRE_RUNVIEW "


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rl_lustre_oncluster.runview RUN_DIR --mount M --cluster C``: the run's
    directory and the cluster's head losses, as one JSON line (for a client that does not see
    the volume: it runs this as a helper job on the head)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m rl_lustre_oncluster.runview", allow_abbrev=False)
    p.add_argument("run_dir")
    p.add_argument("--mount", required=True)
    p.add_argument("--cluster", required=True)
    args = p.parse_args(argv)
    losses = [r for r in history(args.mount, args.cluster) if r.get("event") == "lost"]
    print(ANSWER + json.dumps({"view": RunView(args.run_dir).to_json(), "losses": losses}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def _json_file(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
