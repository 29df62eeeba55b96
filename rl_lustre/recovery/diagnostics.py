"""A run's diagnostics bundles as the client reads them: :class:`Diagnostics`, one per stall,
from the supervisor's ``diagnostics`` journal records in the job's log, for
:meth:`rl_lustre.Run.diagnostics` and ``rl-lustre diagnose``.

The bundle itself is a directory in the run's directory on the volume
(:mod:`rl_lustre.oncluster.diagnostics` names its files); the record carries its path and its
summary, so the summary reads the same from any process, and the files read where the volume
is (a local cluster's directory, or the exported run).
"""

from __future__ import annotations

import datetime as _dt
import os

import attrs

from .._public import public
from ..oncluster.diagnostics import DIAGNOSTICS_MARK, SUMMARY
from ..oncluster.records import read_journal

__all__ = ["Diagnostics", "parse_diagnostics"]


@public("rl_lustre")
@attrs.frozen
class Diagnostics:
    """The evidence kept when the run stalled, before it was stopped and rerun.

    Attributes:
        path: the bundle's directory on the volume (``<run dir>/diagnostics/<when>-attempt<N>-step<S>``).
        at: when it was written (seconds since the epoch, the head's clock).
        attempt: the stalled attempt.
        step: the step it stalled at.
        phase: where: ``startup``, ``step``, ``save``, ``validation`` or ``finishing``.
        silence: seconds without progress when the stall was found.
        summary: who was where, one line each ("7 of 8 processes in all_reduce (...) (step 143):
            ...", then every other process with its node).
    """

    path: str
    at: float
    attempt: int
    step: int
    phase: str
    silence: float
    summary: tuple[str, ...]

    @property
    def when(self) -> _dt.datetime:
        """``at`` as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.at, tz=_dt.timezone.utc)

    def files(self) -> list[str]:
        """The bundle's files (relative paths), where its directory is readable from here (a local
        cluster's volume, an exported run); empty elsewhere."""
        out = []
        for top, _dirs, names in os.walk(self.path):
            out += [os.path.relpath(os.path.join(top, n), self.path) for n in names]
        return sorted(out)

    def read(self, name: str = SUMMARY) -> str:
        """A file of the bundle (by default its ``summary.txt``), where its directory is readable.

        Raises:
            FileNotFoundError: the bundle is not readable from here (on GKE it is on the volume:
                read it on the cluster, or from the run's exported results).
        """
        with open(os.path.join(self.path, name), encoding="utf-8") as f:
            return f.read()

    def __str__(self) -> str:
        head = (
            f"{self.when:%Y-%m-%d %H:%M:%S} UTC: attempt {self.attempt} stalled at step {self.step} "
            f"({self.phase}; no progress for {self.silence:.0f}s)"
        )
        return "\n".join([head, *(f"  {line}" for line in self.summary), f"  evidence: {self.path}"])


def parse_diagnostics(log: str) -> list[Diagnostics]:
    """The bundles the supervisor announced in a job's log (with its journal records), oldest first.

    Examples:
        >>> log = ('RL_LUSTRE_EVENT {"v": 1, "at": 100.0, "event": "diagnostics", "attempt": 1, "step": 5, '
        ...        '"phase": "step", "silence": 61.2, "bundle": "/lustre/rl_lustre/runs/r/diagnostics/b1", '
        ...        '"summary": ["1 of 2 processes in all_reduce (x.py) (step 5): driver pid 7 on node head"]}\\n')
        >>> [(d.step, d.phase, d.path) for d in parse_diagnostics(log)]
        [(5, 'step', '/lustre/rl_lustre/runs/r/diagnostics/b1')]
    """
    out = []
    for r in read_journal(log):
        if r.get("event") != DIAGNOSTICS_MARK or not r.get("bundle"):
            continue
        out.append(
            Diagnostics(
                path=str(r["bundle"]),
                at=float(r.get("at") or 0.0),
                attempt=int(r.get("attempt") or 0),
                step=int(r.get("step") or 0),
                phase=str(r.get("phase") or ""),
                silence=float(r.get("silence") or 0.0),
                summary=tuple(str(line) for line in r.get("summary") or ()),
            )
        )
    return out
