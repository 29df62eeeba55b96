"""The supervisor's side of hangs: the watchdog over each attempt, the evidence, the stop.

An attempt the supervisor runs can end three ways besides success: it fails on its own (a
code error: the run fails), it fails after one of its nodes was lost (a preemption: it is
rerun), or it stops moving. :class:`HangWatch` handles the last, and the end of an attempt
that outlives a lost node:

- it feeds the attempt's output and its checkpoint directory to a :class:`~.watchdog.Watchdog`
  and asks it, every poll, whether the attempt is stalled;
- when it is, :meth:`HangWatch.collect` writes the evidence, before anything is stopped: the
  bundle (:mod:`.diagnostics`, collected by :mod:`.evidence` in a process of its own, within
  :data:`COLLECT_TIMEOUT`), announced by a ``diagnostics`` journal record; then the
  supervisor kills the attempt's command, and :meth:`HangWatch.finish` makes sure Ray ended its
  workers on every node and released its placement groups;
- NeMo-RL's own NCCL watchdog may end the attempt first (a rank's collective ran past
  PyTorch's timeout: "Watchdog caught collective operation timeout"); that is a hang too, not
  a failure of the run's own (:meth:`HangWatch.nccl_timeout`), and its evidence is collected
  after the fact (the processes are gone; the flight recorder dumped what they held);
- it absorbs the supervisor's ``--hang-grace``: an attempt still running ``hang_grace``
  seconds after one of its nodes was lost (a collective waiting for ever on a dead peer) is
  killed (:meth:`HangWatch.lost_node_overdue`); that is a preemption, not a hang.

The rerun is a restart like any other (``cause="hung"``), from the newest checkpoint, within
``--max-restarts``; a second stall at the step the first stalled at ends the run.

It runs on the cluster (shipped with the supervisor; standard library only).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from . import records
from .diagnostics import (
    BUNDLE_JSON,
    DIAGNOSTICS_MARK,
    LOGS,
    NCCL,
    SUMMARY,
    Scrubber,
    bundle_name,
    write_json,
    write_text,
)
from .evidence import command
from .nccl import dump_prefix, pipe_stem, take_dumps
from .rundir import DIAGNOSTICS
from .watchdog import Stall, Watchdog

__all__ = ["COLLECT_TIMEOUT", "HangWatch"]

# The evidence must not take longer than this; what is there by then is kept.
COLLECT_TIMEOUT = 180.0
# Ray's own end of a killed driver's actors and groups, before they are ended by force.
STOP_GRACE = 20.0
_TAIL = 300


class HangWatch:
    """The watchdog of one supervisor's attempts (see the module).

    Args:
        args: the supervisor's command line (``--hang-timeout``, ``--startup-timeout``,
            ``--hang-floor``, ``--hang-grace``, ``--checkpoint-dir``, ``--run-dir``, ``--run-id``,
            ``--kube-raycluster``, ``--kube-namespace``, ``--poll``).
        submission_id: the Ray job's submission id.
        dashboard: the dashboard's address from the job's metadata (None: the head's own).
        say: prints a line for people.
    """

    def __init__(
        self,
        args: argparse.Namespace,
        *,
        submission_id: str | None,
        dashboard: str | None,
        say: Callable[[str], None],
    ) -> None:
        self.args = args
        self.submission_id = submission_id
        self.dashboard = dashboard
        self.say = say
        self.watchdog = Watchdog(
            hang_timeout=args.hang_timeout, startup_timeout=args.startup_timeout, floor=args.hang_floor
        )
        self.run_dir: str | None = args.run_dir or None
        self.tail: collections.deque[str] = collections.deque(maxlen=_TAIL)
        # Seconds between reads of the checkpoint directory (a walk of the save in progress);
        # it is read again before any stall is declared.
        self.look_every = max(args.poll, 10.0)
        self.attempt = 0
        self.session = 0
        self.started_at = 0.0
        self.stall: Stall | None = None
        self.stopped_at: float | None = None
        self.bundle: str | None = None
        self.job_id: str | None = None
        self._next_look = 0.0
        if self.run_dir:
            os.makedirs(os.path.dirname(dump_prefix(self.run_dir)), exist_ok=True)

    def describe(self) -> str:
        """The watchdog's settings, for the supervisor's first line."""
        if self.args.hang_timeout is not None:
            rule = f"hang_timeout={self.args.hang_timeout:g}s"
        else:
            rule = (
                f"adaptive: {self.watchdog.factor:g} x the longest step, save or validation, at least "
                f"{self.args.hang_floor:g}s"
            )
        return f"a stall is no progress for {rule}; start-up and the first step may take {self.args.startup_timeout:g}s"

    # -- one attempt ----------------------------------------------------------------------

    def start(self, attempt: int, session: int) -> None:
        """Attempt ``attempt`` starts; its command leads session ``session``."""
        self.attempt, self.session, self.started_at = attempt, session, time.time()
        self.stall, self.stopped_at, self.bundle, self.job_id = None, None, None, None
        self.tail.clear()
        self.watchdog.start(now=self.started_at)
        self._next_look = 0.0

    def feed(self, line: str, record: dict[str, Any] | None, at: float) -> None:
        """One line of the attempt's output (with its stamped record, if any)."""
        self.tail.append(line.rstrip("\n"))
        self.watchdog.feed(line, record, now=at)

    def check(self, now: float) -> Stall | None:
        """The attempt's stall, the first time it is found (None otherwise)."""
        if self.stall is not None:
            return None
        directory = self.args.checkpoint_dir
        if directory and now >= self._next_look:
            self.watchdog.look(directory, now=now)
            self._next_look = now + self.look_every
        stall = self.watchdog.stall(now=now)
        if stall is not None and directory:  # a save may have written since the last look
            self.watchdog.look(directory, now=now)
            stall = self.watchdog.stall(now=now)
        self.stall = stall
        return stall

    def lost_node_overdue(self, first_loss: float | None, now: float) -> bool:
        """Whether the attempt still runs ``--hang-grace`` seconds after it lost one of its nodes."""
        return first_loss is not None and now - first_loss >= self.args.hang_grace

    def nccl_timeout(self) -> str | None:
        """The line of NeMo-RL's NCCL watchdog ending a collective that timed out, if printed."""
        return self.watchdog.nccl_timeout

    def after_exit(self, now: float) -> Stall:
        """The attempt ended by NeMo-RL's NCCL watchdog: a stall, found at its end."""
        found = self.watchdog.stall(now=now)
        base = found or Stall("step", self.watchdog.step, self.watchdog.last_progress, now, 0.0, "")
        self.stall = Stall(
            base.phase,
            base.step,
            base.since,
            now,
            base.allowance,
            f"ended by NeMo-RL's NCCL watchdog: {self.nccl_timeout()}",
            base.saving,
        )
        return self.stall

    def ended_stalled(self, now: float) -> Stall | None:
        """After the attempt failed with its nodes alive: its stall, if it was one (found by the
        watchdog, or NeMo-RL's NCCL watchdog ended it: its evidence is collected now); its
        workers and groups are then made sure to be gone. None: a failure of the run's own."""
        if self.stall is None and self.nccl_timeout() is not None:
            self.stopped_at = now
            self.collect(self.after_exit(now))
        if self.stall is None:
            return None
        self.finish()
        return self.stall

    def stalled_again(self, restarts: list[dict[str, Any]]) -> str | None:
        """Why the run is not restarted when it stalled where an earlier hung restart stalled, or None."""
        stall = self.stall
        if stall is None:
            return None
        for r in reversed(restarts):
            if r.get("cause") == "hung" and r.get("step") == stall.step:
                return (
                    f"the run stalled again at step {stall.step} (restart {r['restart']} followed a stall there): "
                    f"not restarted. The evidence: {self.bundle or 'not kept'} (and {r.get('bundle')})"
                )
        return None

    def restart_fields(self) -> dict[str, Any]:
        """What a hung restart's record adds: the step, the silence, the bundle."""
        stall = self.stall
        assert stall is not None
        return {
            "step": stall.step,
            "phase": stall.phase,
            "silence": round(stall.silence, 3),
            "last_progress_at": round(stall.since, 3),
            "bundle": self.bundle,
        }

    # -- the evidence, then the stop ------------------------------------------------------

    def collect(self, stall: Stall) -> str | None:
        """Write the stalled attempt's bundle (see the module); returns its path (None
        without a run directory) and announces it in the journal."""
        if not self.run_dir:
            self.say("no run directory on the volume: no diagnostics bundle is kept")
            self.stopped_at = self.stopped_at or time.time()
            return None
        root = os.path.join(self.run_dir, DIAGNOSTICS)
        bundle = os.path.join(root, bundle_name(stall.detected_at, self.attempt, stall.step))
        scrub = Scrubber()
        os.makedirs(bundle, exist_ok=True)
        write_text(bundle, f"{LOGS}/driver.log", "\n".join(self.tail) + "\n", scrub)
        stalled = {
            "phase": stall.phase,
            "step": stall.step,
            "since": round(stall.since, 3),
            "detected_at": round(stall.detected_at, 3),
            "silence": round(stall.silence, 3),
            "allowance": stall.allowance,
            "why": stall.why,
            "saving": stall.saving,
        }
        headline = f"Attempt {self.attempt} of the run stalled at step {stall.step}: {stall.describe()}"
        request = {
            "bundle": bundle,
            "dashboard": self.dashboard,
            "submission_id": self.submission_id,
            "session": self.session,
            "since": self.started_at,
            "attempt": self.attempt,
            "step": stall.step,
            "stall": stalled,
            "headline": headline,
            "nccl": {"stem": pipe_stem(os.path.basename(self.run_dir)), "prefix": dump_prefix(self.run_dir)},
            "kube": {"cluster": self.args.kube_raycluster, "namespace": self.args.kube_namespace or None}
            if self.args.kube_raycluster
            else None,
        }
        result = self._run("collect", request, COLLECT_TIMEOUT)
        record: dict[str, Any] = {}
        try:
            with open(os.path.join(bundle, BUNDLE_JSON), encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
            record = {**stalled, "attempt": self.attempt, "summary": [], "errors": {"collect": result or "no result"}}
            write_json(bundle, BUNDLE_JSON, record, scrub)
            missing = f"{headline}\n\n(the evidence could not be collected: see {BUNDLE_JSON})\n"
            write_text(bundle, SUMMARY, missing, scrub)
        self.job_id = record.get("job_id") or None
        self.bundle = bundle
        summary = [str(line) for line in record.get("summary") or []]
        records.write(
            {
                "event": DIAGNOSTICS_MARK,
                "attempt": self.attempt,
                "bundle": bundle,
                "step": stall.step,
                "phase": stall.phase,
                "silence": round(stall.silence, 3),
                "summary": [scrub(line) for line in summary],
            }
        )
        self.say(f"evidence kept in {bundle}: " + ("; ".join(summary[:3]) or "see its summary.txt"))
        self.stopped_at = self.stopped_at or time.time()
        return bundle

    def finish(self) -> None:
        """After the attempt's command was killed: Ray's end of its workers and groups, checked
        (and forced); the flight recorder's late dumps moved into the bundle."""
        self.stopped_at = self.stopped_at or time.time()
        if self.job_id:
            done = self._run("stop", {"dashboard": self.dashboard, "job_id": self.job_id, "grace": STOP_GRACE}, 120.0)
            if isinstance(done, dict) and done.get("forced"):
                self.say(
                    f"Ray had not ended the stalled attempt's {len(done.get('actors') or [])} worker(s) and "
                    f"{len(done.get('groups') or [])} placement group(s) {STOP_GRACE:g}s after its command was "
                    "killed: ended them"
                )
        if self.bundle and self.run_dir:
            take_dumps(dump_prefix(self.run_dir), self.started_at, os.path.join(self.bundle, NCCL))

    def _run(self, verb: str, request: dict[str, Any], timeout: float) -> Any:
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="rl-lustre-evidence-", delete=False) as f:
            json.dump(request, f)
        argv, env = command(verb, f.name)
        try:
            done = subprocess.run(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            self.say(f"the evidence's {verb} took longer than {timeout:g}s: cut short")
            return None
        finally:
            os.unlink(f.name)
        for line in reversed(done.stdout.splitlines()):
            if line.startswith('{"result"'):
                try:
                    return json.loads(line)["result"]
                except ValueError:
                    break
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        self.say(f"the evidence's {verb} failed (exit {done.returncode}): {' | '.join(tail)}")
        return None
