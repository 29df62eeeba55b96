"""The run supervisor: the Ray job's entrypoint, on the Ray head, that waits for the job's
nodes in the cluster's queue, runs NeMo-RL, and reruns it after lost nodes.

It runs on the cluster, not in the user's process: the submitted Ray job is
``python -m rl_lustre_oncluster.supervisor [options] -- <NeMo-RL's command>``, shipped
with the job as part of the on-cluster package (:mod:`rl_lustre.oncluster`, named
``rl_lustre_oncluster`` in the job's ``py_modules``), so the cluster's image needs nothing
of rl_lustre. It uses the standard library only, and reads Ray's node table and
placement groups from the dashboard's state API over HTTP (:mod:`.raystate`).

The queue (``--queue NAME``)
    Before anything runs, the job joins the cluster's queue (:mod:`rl_lustre.oncluster.queue`)
    for ``--nodes`` of the cluster's ``--cluster-nodes`` nodes, and waits, holding
    nothing, until its turn (``--priority``, then submission; ``--backfill-window``) and
    until Ray shows that many whole GPU nodes free. A stop while it waits removes it. It
    keeps its claim until it ends; a recovery (below) keeps it too.

One attempt
    The command runs as a child in a session of its own; its output (stdout and
    stderr) is copied line by line to the supervisor's stdout, so the job keeps one log.
    A watcher process kills the command should the supervisor die without a word (a
    SIGKILL), so no NeMo-RL is left holding GPUs. Meanwhile (unless ``--no-watch``) the
    Ray node table is read every ``--poll`` seconds (:mod:`.watch`): a worker node (never
    the head) that was alive at the start of the attempt, or joined during it, and is
    now dead or gone, is *lost*, with the reason Ray gives; it is this run's loss if it
    is one of the nodes its placement groups hold (or, before those are known, any
    worker node). Another job's lost node changes nothing here.

Hangs (:mod:`.hangs`)
    A watchdog follows the attempt's progress (:mod:`.watchdog`). No progress for the job's
    ``--hang-timeout`` (adaptive by default; ``--startup-timeout`` until the first step is
    done) is a stall: the evidence is written to the run's directory first (a diagnostics
    bundle), then the attempt is killed and rerun from the newest checkpoint like a
    preempted one (``cause="hung"``); a second stall at the same step ends the run. An
    attempt ended by NeMo-RL's NCCL watchdog is a hang too. The watchdog also kills an
    attempt still running ``--hang-grace`` seconds after one of its nodes was lost (a
    collective that waits for ever on a dead peer): that is a preemption.

After an attempt
    exit 0: the run succeeded. A failure with none of its nodes lost is the run's own
    (a code error, a bad config, out of memory): the job fails at once, with the
    command's exit code. A failure after a loss is recovered, unless ``--max-restarts``
    recoveries were made already: the claim turns ``recovering`` (ahead of every queued
    job) and the supervisor waits up to ``--capacity-timeout`` seconds until ``--nodes``
    usable GPU nodes with ``--gpus-per-node`` GPUs each exist again
    (:meth:`Supervisor._wait_for_capacity`), then runs the same command again. It uses
    the same checkpoint directory, so NeMo-RL resumes from the newest complete
    ``step_N`` (a ``tmp_step_N`` is an interrupted save, never a checkpoint).

Capacity that ends (``--capacity-end``, ``--lifetime``, ``--save-margin``)
    Before each attempt, NeMo-RL's ``checkpointing.checkpoint_must_save_by`` is set (or
    reset: a rerun starts NeMo-RL's clock again) from when the nodes it may run on go:
    the capacity ``up()`` was granted, or flex-start nodes a ComputeClass brought for lost Spot
    ones (:mod:`.lifetimes`, their ends read from their Nodes: :mod:`.nodeends`); a
    ``deadline`` journal line records it. Held nodes of an on-demand fallback (``--on-demand``)
    get an ``on_demand`` one (:mod:`.fallback`).

Records
    Each recovery prints a line for people and one for programs:
    :data:`RESTART_MARK` + JSON when the rerun is decided (when, which nodes and why,
    the step resumed from) and :data:`RESUMED_MARK` + JSON when the rerun prints its
    first step header (seconds from the loss to that step). ``Run.restarts()`` reads them
    back from the job's log, from any process. The queue's records are journal lines
    (:mod:`rl_lustre.oncluster.records`).

Journal
    The supervisor stamps NeMo-RL's own lines (step headers, saves, validations, ...)
    with the head's clock as it copies them (:mod:`rl_lustre.oncluster.stamps`), and
    records its attempts, waits and end, as journal lines (:mod:`rl_lustre.oncluster.records`):
    from them, and NeMo-RL's own timers, the goodput ledger knows when every step, save and
    wait happened (:mod:`rl_lustre.goodput.runlog`).

Stopping
    Ray stops a job with SIGTERM to the entrypoint and its descendants (SIGKILL after a
    few seconds). On SIGTERM or SIGINT the supervisor passes the signal on to the
    command's process group, waits for it, gives its nodes back, and exits without a rerun.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from . import fallback, lifetimes, nodeends, records
from .hangs import HangWatch
from .jobargs import PREFIX, claim_of, job_config, parser, store_of
from .nemo_formats import checkpoint_name, checkpoint_step, save_by_text
from .procs import orphan_watcher
from .queue.member import Member
from .raystate import StateApi, read_view
from .records import DASHBOARD, RESTART_MARK, RESUMED_MARK, TOTAL_STEPS
from .runhome import RunHome
from .stamps import Stamper
from .watch import NodeWatch, clock, describe, describe_restarts

__all__ = ["PREFIX", "RESTART_MARK", "RESUMED_MARK", "main"]

# Ray's job stop waits 3 s before its SIGKILL; the command gets most of that.
_STOP_GRACE = 2.5
# After NeMo-RL stopped at a capacity's deadline: how long past the end to wait for its nodes to go.
_END_GRACE = 600.0


def _say(text: str) -> None:
    with records.LOCK:
        sys.stdout.write(f"{PREFIX} {text}\n")
        sys.stdout.flush()


def _record(mark: str, record: dict[str, Any]) -> None:
    with records.LOCK:
        sys.stdout.write(mark + json.dumps(record, sort_keys=True) + "\n")
        sys.stdout.flush()


class Supervisor:
    """Runs attempts of one command until it succeeds, fails for a reason of its own, or gives up."""

    def __init__(self, args: argparse.Namespace, metadata: dict[str, Any] | None = None) -> None:
        self.args = args
        self.command: str = args.command
        meta = job_config() if metadata is None else metadata
        self.submission_id: str | None = meta.get("job_submission_id")
        steps = str(meta.get(TOTAL_STEPS, ""))
        self.total_steps: int | None = int(steps) if steps.isdigit() else None
        self.api = StateApi.for_job(meta.get(DASHBOARD))
        self.watch: NodeWatch | None = None
        if args.nodes > 0 and not args.no_watch:
            self.watch = NodeWatch(self.api, self.submission_id, say=_say, on_held=self._held)
        self.member: Member | None = None
        if args.queue:
            self.member = Member(
                store_of(args), claim_of(args, meta, self.submission_id), self.api, say=_say, poll=args.poll
            )
        # The run's directory on the volume (rundir.py), where its records go; None without one.
        self.run_dir: str | None = args.run_dir or None
        self.home = RunHome.open(self.run_dir, meta)
        self.hangs = HangWatch(args, submission_id=self.submission_id, dashboard=meta.get(DASHBOARD), say=_say)
        self.stopping = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        # After a head loss, the run goes on from its records: restarts and attempts so far.
        self.attempts = self.home.attempts if self.home is not None else 0
        self.restarts: list[dict[str, Any]] = list(self.home.restarts) if self.home is not None else []
        # Set by the output copier: the first step header of the running attempt.
        self.first_step: tuple[int, float] | None = None
        self.last_step = 0
        # (restart number, when the nodes were lost, seconds waited for capacity) until the
        # rerun prints its first step header.
        self.pending: tuple[int, float, float] | None = None
        # The running attempt's capacity end, when it has one (see _attempt_command), whether
        # NeMo-RL stopped for its save-by timeout, and nodes that outlived their estimated end.
        self.deadline: lifetimes.End | None = None
        self.timed_out = False
        self.outlived: set[str] = set()
        self.on_demand = fallback.OnDemand(args.on_demand, args.fallback_note)  # :mod:`.fallback`

    # -- one attempt ----------------------------------------------------------------------

    def _copy_output(self, stream: Any) -> None:
        out = sys.stdout.buffer
        stamper = Stamper()
        for raw in iter(stream.readline, b""):
            at = time.time()
            with records.LOCK:
                out.write(raw)
                out.flush()
            text = raw.decode(errors="replace")
            record = stamper.feed(text)
            self.hangs.feed(text, record, at)
            if record is None:
                continue
            records.write({**record, "attempt": self.attempts}, at=at)
            if record["event"] == "finished" and record.get("why") == "timeout":
                self.timed_out = True
            if record["event"] == "step":
                self.last_step = stamper.step
                if self.first_step is None:
                    self.first_step = (stamper.step, at)
                    self._report_resumed(*self.first_step)

    def _workers(self) -> list[Any]:
        """Ray's worker nodes now (one read of the node table, without placement groups)."""
        return list(read_view(self.api, groups=False).workers().values())

    def _attempt_command(self) -> str:
        """The command of the attempt about to start: on capacity that ends, with NeMo-RL told
        when to save (see :mod:`.lifetimes`)."""
        args = self.args
        if args.capacity_end is None and not args.lifetime:
            return self.command
        nodes: list[Any] = []
        if args.lifetime:
            try:
                nodes = [n for n in self._workers() if n.name not in self.outlived]
            except Exception as exc:  # the end granted at up(), if any, still holds
                _say(f"could not read Ray's node table to see which nodes end ({type(exc).__name__}: {exc})")
        lost_at = self.pending[1] if self.pending is not None else None
        read = nodeends.reader(args.kube_credentials or None, _say)  # each node's end as GKE put it, if it did
        found = lifetimes.attempt_end(
            nodes,
            args.lifetime,
            gpus_per_node=args.gpus_per_node,
            capacity_end=args.capacity_end,
            lost_at=lost_at,
            read=read,
        )
        if found is None:
            return self.command
        left = found.end - args.save_margin - time.time()
        value = save_by_text(left)
        record = {"attempt": self.attempts, "end": round(found.end, 3), "save_by": value, "nodes": found.nodes}
        records.write({"event": "deadline", **record, "read": found.read, "why": found.why})
        _say(
            f"the capacity this attempt may run on ends at {clock(found.end)} ({found.why}): NeMo-RL saves "
            f"within {value} (DD:HH:MM:SS), {args.save_margin:g}s before that"
        )
        if left <= 0:
            _say("too little time is left to save before those nodes go")
        self.deadline = found
        return lifetimes.with_save_by(self.command, value)

    def attempt(self) -> tuple[int, list[dict[str, Any]]]:
        """Run the command once; return its exit code and this run's nodes lost meanwhile."""
        self.attempts += 1
        self.first_step, self.last_step = None, 0
        self.deadline, self.timed_out = None, False
        command = self._attempt_command()
        records.write({"event": "attempt", "attempt": self.attempts})
        watch = self.watch
        if watch is not None:
            watch.start(None)
        self.child = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        orphans = orphan_watcher(self.child.pid)
        self.hangs.start(self.attempts, self.child.pid)
        if watch is not None:
            watch.session = self.child.pid
        assert self.child.stdout is not None
        copier = threading.Thread(target=self._copy_output, args=(self.child.stdout,), daemon=True)
        copier.start()
        killed = False
        try:
            while True:
                try:
                    code = self.child.wait(timeout=self.args.poll)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if killed or self.stopping.is_set():
                    continue
                if watch is not None:
                    watch.look()
                    if self.hangs.lost_node_overdue(watch.first_attributed_loss(), time.time()):
                        _say(
                            f"the command is still running {self.args.hang_grace:g}s after losing one of its "
                            "nodes; killing it"
                        )
                        self._signal_child(signal.SIGKILL)
                        killed = True
                        continue
                stall = None if watch is not None and watch.own_losses() else self.hangs.check(time.time())
                if stall is not None:
                    _say(f"the run is stalled: {stall.describe()}; keeping the evidence, then stopping it")
                    self.hangs.collect(stall)
                    self._signal_child(signal.SIGKILL)
                    killed = True
        finally:
            with contextlib.suppress(ProcessLookupError):
                orphans.kill()
            orphans.wait()
        copier.join(timeout=5)
        records.write({"event": "exit", "attempt": self.attempts, "code": code})
        if watch is None:
            return code, []
        if code != 0 and not self.stopping.is_set():
            # The command may fail a moment before the node table says why, and several nodes
            # taken at once are declared dead one by one: look on for a while.
            watch.settle(self.args.settle, self.args.poll, siblings=self.args.siblings)
        others = watch.others_losses()
        if others and code != 0:
            _say(
                f"other jobs' nodes were lost meanwhile ({', '.join(describe(n) for n in others)}); none of this run's"
            )
        return code, watch.own_losses()

    def _held(self, nodes: list[dict[str, Any]]) -> None:
        records.write({"event": "held", "job": self.submission_id, "attempt": self.attempts, "nodes": nodes})
        _say(f"this run's placement groups hold {len(nodes)} node(s): {', '.join(describe(n) for n in nodes)}")
        self.on_demand.held(self.attempts, nodes, say=_say)

    def _signal_child(self, sig: int) -> None:
        child = self.child
        if child is None or child.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)

    def stop(self, signum: int, frame: object) -> None:
        if not self.stopping.is_set():
            _say(f"{signal.Signals(signum).name} received: stopping the run; no rerun follows")
            if self.home is not None:
                self.home.stopped(signal.Signals(signum).name)
        self.stopping.set()
        self._signal_child(signum)
        threading.Thread(target=self._kill_later, daemon=True).start()

    def _kill_later(self) -> None:
        time.sleep(_STOP_GRACE)
        self._signal_child(signal.SIGKILL)

    # -- recovery -------------------------------------------------------------------------

    def _newest_checkpoint(self) -> int | None:
        root = self.args.checkpoint_dir
        if not root:
            return None
        try:
            names = os.listdir(root)
        except OSError:
            return None
        steps = [
            step
            for name in names
            if (step := checkpoint_step(name)) is not None and os.path.isdir(os.path.join(root, name))
        ]
        return max(steps, default=None)

    def _wait_for_capacity(self) -> float | None:
        """Seconds waited, after a loss, until the run's nodes are usable again; None after the timeout.

        In the queue the claim is kept (``recovering``: ahead of every queued job) and the
        wait ends when ``--nodes`` whole GPU nodes are up and held by no other job. Outside
        a queue, when Ray's node table has ``--nodes`` live worker nodes with
        ``--gpus-per-node`` GPUs.
        """
        start = time.monotonic()
        records.write({"event": "capacity_wait", "need": self.args.nodes})
        waited = self._await_nodes()
        end: dict[str, Any] = {"event": "capacity_back", "waited": round(time.monotonic() - start, 3)}
        if waited is None:
            end["stopped" if self.stopping.is_set() else "timeout"] = True
        records.write(end)
        return waited

    def _await_nodes(self) -> float | None:
        if self.member is not None:
            self.member.recovering()
            return self.member.wait(self.stopping, timeout=self.args.capacity_timeout)
        need, gpus = self.args.nodes, self.args.gpus_per_node
        if need <= 0:  # no GPU node to wait for (a rerun after a hang)
            return 0.0
        start = time.monotonic()
        said = -1
        while not self.stopping.is_set():
            try:
                have = sum(1 for n in self._workers() if n.alive and n.gpus >= gpus)
            except Exception as exc:  # the dashboard may be busy: try again
                _say(f"could not read Ray's node table ({type(exc).__name__}: {exc}); trying again")
                have = -1
            if have >= need:
                return time.monotonic() - start
            if time.monotonic() - start >= self.args.capacity_timeout:
                return None
            if have != said and have >= 0:
                _say(f"waiting for GPU nodes: {have} of {need} (with {gpus:g} GPUs each) are up")
                said = have
            self.stopping.wait(self.args.poll)
        return None

    def _describe_restarts(self) -> str:
        return describe_restarts(self.restarts)

    def run(self) -> int:
        """Wait in the queue, run, recover; returns the exit status. The claim is given back at the end.

        The journal has ``start`` first and ``end`` last."""
        args = self.args
        watching = (
            f"watching {args.nodes} worker node(s) with {args.gpus_per_node:g} GPU(s) each in Ray's node table"
            if self.watch is not None
            else "no worker nodes to watch"
        )
        _say(f"running the command with recovery from lost nodes (max_restarts={args.max_restarts}; {watching})")
        _say(f"watching its progress: {self.hangs.describe()}")
        records.write(
            {
                "event": "start",
                "nodes": args.nodes,
                "gpus_per_node": args.gpus_per_node,
                "max_restarts": args.max_restarts,
                "capacity_timeout": args.capacity_timeout,
            }
        )
        member = self.member
        reason, status = "stopped", 1
        # After a head loss: a restart like any other (the run's directory knows the ones before).
        lost = (
            self.home.resume(self.restarts, args.max_restarts, self._newest_checkpoint(), _say, _record)
            if (self.home is not None)
            else None
        )
        if lost is not None and lost[0] > args.max_restarts:
            records.write({"event": "end", "status": status})
            return status
        try:
            waited: float | None = 0.0
            if member is not None:
                member.join(recovering=self.home is not None and self.home.held)
                waited = member.wait(self.stopping)
                if waited is None:
                    _say("stopped while queued: nothing ran")
                    status = 128 + signal.SIGTERM
                    return status
            if lost is not None:
                self.pending = (lost[0], lost[1], waited or 0.0)
            status, reason = self._run()
            return status
        finally:
            if member is not None:
                member.release(reason)
            records.write({"event": "end", "status": status})

    def _run(self) -> tuple[int, str]:
        """The attempts: the exit status, and why the nodes are given back."""
        args = self.args
        while True:
            code, lost = self.attempt()
            if self.stopping.is_set():
                _say(f"stopped; the command exited with code {code}")
                return (128 + signal.SIGTERM if code == 0 else code if code > 0 else 128 - code), "stopped"
            if code == 0:
                ended = self._capacity_ended()
                if ended is None:
                    if self.restarts:
                        _say(f"the run succeeded after {len(self.restarts)} restart(s): {self._describe_restarts()}")
                    return 0, "succeeded"
                if self.stopping.is_set():
                    return 128 + signal.SIGTERM, "stopped"
                # Not done: the run goes on, on the capacity that comes next (or ends FAILED).
                status, lost, cause = 1, ended, "capacity-ended"
            else:
                status = code if code > 0 else 128 - code
                hung = None if lost else self.hangs.ended_stalled(time.time())
                if not lost and hung is None:
                    _say(
                        f"the command failed with exit code {status} while every worker node was alive: not "
                        "restarted (the run failed for a reason of its own)"
                        if self.watch is None or not self.watch.lost
                        else f"the command failed with exit code {status} while every node of its own was alive: not "
                        "restarted (the run failed for a reason of its own)"
                    )
                    return status, "failed"
                if hung is not None:
                    cause, again = "hung", self.hangs.stalled_again(self.restarts)
                    if again is not None:
                        _say(again)
                        return status, "failed"
                else:
                    names = ", ".join(f"{describe(n)} ({n['reason']})" for n in lost)
                    _say(f"the command exited with code {status} after losing worker node(s): {names}")
                    cause = "preempted"
            if len(self.restarts) >= args.max_restarts:
                kept = f". The stall's evidence: {self.hangs.bundle or 'not kept'}" if cause == "hung" else ""
                if args.max_restarts == 0:
                    _say(f"recovery is off (max_restarts=0): not restarted{kept}")
                else:
                    _say(
                        f"max_restarts={args.max_restarts} is used up: not restarted. Restarts: "
                        f"{self._describe_restarts()}{kept}"
                    )
                return status, "failed"
            number = len(self.restarts) + 1
            lost_at = (
                min((n["dead_at"] or n["detected_at"]) for n in lost) if lost else self.hangs.stopped_at or time.time()
            )
            resume = self._newest_checkpoint()
            record = {
                "restart": number,
                "cause": cause,
                "max_restarts": args.max_restarts,
                "lost_at": lost_at,
                "nodes": [{k: n.get(k) for k in ("node_id", "address", "name", "reason")} for n in lost],
                "exit_code": status,
                "last_step": self.last_step,
                "resume_step": resume,
                **(self.hangs.restart_fields() if cause == "hung" else {}),
            }
            self.restarts.append(record)
            _say(
                f"recovery {number} of at most {args.max_restarts}: waiting up to {args.capacity_timeout:g}s "
                f"for {args.nodes} GPU node(s), then rerunning from "
                f"{checkpoint_name(resume) if resume is not None else 'the start (no checkpoint yet)'}"
            )
            _record(RESTART_MARK, record)
            waited = self._wait_for_capacity()
            if self.stopping.is_set():
                _say("stopped while waiting for capacity; no rerun follows")
                return 128 + signal.SIGTERM, "stopped"
            if waited is None:
                _say(
                    f"the GPUs did not come back within capacity_timeout={args.capacity_timeout:g}s: giving up. "
                    f"Restarts: {self._describe_restarts()}"
                )
                return status, "gave-up"
            _say(f"capacity is back after {waited:.1f}s; rerunning (restart {number})")
            self.pending = (number, lost_at, waited)

    def _capacity_ended(self) -> list[dict[str, Any]] | None:
        """After an attempt that exited 0: None if the run is done; when NeMo-RL stopped at the
        deadline of the capacity it ran on with steps left, the nodes of that capacity, once
        gone (or past their end by ``_END_GRACE``), as lost nodes: the run goes on as after a
        preemption."""
        deadline = self.deadline
        if deadline is None or not self.timed_out:
            return None
        newest = self._newest_checkpoint()
        if self.total_steps is not None and newest is not None and newest >= self.total_steps:
            return None
        saved = checkpoint_name(newest) if newest is not None else "no checkpoint"
        records.write(
            {
                "event": "capacity_end",
                "attempt": self.attempts,
                "end": round(deadline.end, 3),
                "nodes": deadline.nodes,
                "resume_step": newest,
            }
        )
        if len(self.restarts) >= self.args.max_restarts:
            _say(
                f"NeMo-RL stopped at the deadline of the capacity it ran on ({saved} is the newest save), with "
                "steps left: the run is not done"
            )
            return [lifetimes.ended(name) for name in deadline.nodes or [""]]
        _say(
            f"NeMo-RL stopped at the deadline of the capacity it ran on ({saved} is the newest save; that "
            f"capacity ends at {clock(deadline.end)}): waiting for {', '.join(deadline.nodes) or 'its end'} "
            "to go, then for capacity to go on"
        )
        gone, outlived = lifetimes.await_gone(
            self._workers, deadline, self.stopping, poll=self.args.poll, grace=_END_GRACE, say=_say
        )
        if outlived:
            _say(
                f"{', '.join(outlived)} outlived the end estimated for them by {_END_GRACE:g}s: going on without "
                "counting them as ending"
            )
            self.outlived.update(outlived)
        return gone

    def _report_resumed(self, step: int, at: float) -> None:
        pending, self.pending = self.pending, None
        if pending is None:
            return
        number, lost_at, waited = pending
        _say(f"recovered: the rerun reached step {step} {at - lost_at:.1f}s after the loss")
        _record(
            RESUMED_MARK,
            {
                "restart": number,
                "first_step": step,
                "first_step_at": at,
                "seconds_lost": at - lost_at,
                "capacity_seconds": waited,
            },
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and supervise; returns the exit status."""
    args = parser().parse_args(argv)
    if args.max_restarts < 0 or args.nodes < 0:
        parser().error("--max-restarts and --nodes must be >= 0")
    if args.queue and args.nodes < 1:
        parser().error("--queue needs --nodes of at least 1")
    if (args.capacity_end is not None or args.lifetime) and args.save_margin is None:
        parser().error("--capacity-end and --lifetime need --save-margin")
    supervisor = Supervisor(args)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, supervisor.stop)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
