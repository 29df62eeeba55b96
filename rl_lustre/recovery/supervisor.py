"""The run supervisor: the Ray job's entrypoint, on the Ray head, that reruns NeMo-RL after lost nodes.

It runs on the cluster, not in the user's process: the submitted Ray job is
``python -m rl_lustre_supervisor [options] -- <NeMo-RL's command>``, and this file is
shipped with the job (inside the ``rl_lustre_supervisor`` package in the job's
``py_modules``, with :mod:`rl_lustre.nemo_rl.formats`, the log and checkpoint formats
it reads), so the cluster's image needs nothing of rl_lustre. It uses the
standard library and, to read the node table, Ray's public state API
(``ray.util.state.list_nodes``, in Ray 2.46 as in later versions), imported only when
the job has worker nodes to watch.

One attempt
    The command runs as a child in a process group of its own; its output (stdout and
    stderr) is copied line by line to the supervisor's stdout, so the job keeps one log.
    Meanwhile the Ray node table is read every ``--poll`` seconds: a worker node (never
    the head) that was alive at the start of the attempt, or joined during it, and is
    now dead or gone, is *lost*, with the reason Ray gives. When a node is lost and the
    command has not ended ``--hang-grace`` seconds later (a collective that waits for
    ever on a dead peer), the attempt is killed.

After an attempt
    exit 0: the run succeeded. A failure with no worker node lost is the run's own
    (a code error, a bad config, out of memory): the job fails at once, with the
    command's exit code. A failure after a loss is recovered, unless ``--max-restarts``
    recoveries were made already: wait up to ``--capacity-timeout`` seconds until the
    node table again has ``--nodes`` live worker nodes with ``--gpus-per-node`` GPUs
    each, then run the same command again. It uses the same checkpoint directory, so
    NeMo-RL resumes from the newest complete ``step_N`` (a ``tmp_step_N`` is an
    interrupted save, never a checkpoint).

Records
    Each recovery prints a line for people and one for programs:
    :data:`RESTART_MARK` + JSON when the rerun is decided (when, which nodes and why,
    the step resumed from) and :data:`RESUMED_MARK` + JSON when the rerun prints its
    first step header (seconds from the loss to that step). ``Run.restarts()`` reads them
    back from the job's log, from any process.

Stopping
    Ray stops a job with SIGTERM to the entrypoint and its descendants (SIGKILL after a
    few seconds). On SIGTERM or SIGINT the supervisor passes the signal on to the
    command's process group, waits for it, and exits without a rerun.
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

# Shipped with this file to the cluster, at the same place relative to it (see shipped_module).
from ..nemo_rl.formats import STEP_HEADER, checkpoint_step

__all__ = ["PREFIX", "RESTART_MARK", "RESUMED_MARK", "main"]

PREFIX = "rl_lustre supervisor:"
RESTART_MARK = "RL_LUSTRE_RESTART "
RESUMED_MARK = "RL_LUSTRE_RESUMED "
# Ray's job stop waits 3 s before its SIGKILL; the command gets most of that.
_STOP_GRACE = 2.5


def _say(text: str) -> None:
    sys.stdout.write(f"{PREFIX} {text}\n")
    sys.stdout.flush()


def _record(mark: str, record: dict[str, Any]) -> None:
    sys.stdout.write(mark + json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def _stamp(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 10)} UTC"


class NodeTable:
    """Ray's node table, as ``{node_id: record}`` of the worker nodes (the head left out)."""

    def __init__(self, timeout: int = 10) -> None:
        from ray.util.state import list_nodes

        self._list = list_nodes
        self._timeout = timeout

    def workers(self) -> dict[str, dict[str, Any]]:
        nodes = self._list(detail=True, limit=10000, timeout=self._timeout, raise_on_missing_output=False)
        out = {}
        for node in nodes:
            if getattr(node, "is_head_node", False):
                continue
            end = getattr(node, "end_time_ms", None)
            out[str(node.node_id)] = {
                "node_id": str(node.node_id),
                "address": str(getattr(node, "node_ip", "") or ""),
                "name": str(getattr(node, "node_name", "") or ""),
                "alive": str(getattr(node, "state", "")) == "ALIVE",
                "gpus": float((getattr(node, "resources_total", None) or {}).get("GPU", 0) or 0),
                "reason": str(getattr(node, "state_message", "") or ""),
                "dead_at": end / 1000 if end else None,
            }
        return out


class Supervisor:
    """Runs attempts of one command until it succeeds, fails for a reason of its own, or gives up."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.command: str = args.command
        self.table: NodeTable | None = None
        if args.nodes > 0:
            try:
                self.table = NodeTable()
            except ImportError as exc:
                _say(f"cannot read Ray's node table ({exc}): this run is not watched for lost nodes")
        self.stopping = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        self.restarts: list[dict[str, Any]] = []
        # Set by the output copier: the first step header of the running attempt.
        self.first_step: tuple[int, float] | None = None
        self.last_step = 0
        # (restart number, when the nodes were lost, seconds waited for capacity) until the
        # rerun prints its first step header.
        self.pending: tuple[int, float, float] | None = None

    # -- the node table -----------------------------------------------------------------

    def _workers(self) -> dict[str, dict[str, Any]] | None:
        if self.table is None:
            return {}
        try:
            return self.table.workers()
        except Exception as exc:  # the state API answers through the dashboard, which may be busy
            _say(f"could not read Ray's node table ({type(exc).__name__}: {exc}); trying again")
            return None

    def _capacity(self, workers: dict[str, dict[str, Any]]) -> int:
        return sum(1 for n in workers.values() if n["alive"] and n["gpus"] >= self.args.gpus_per_node)

    # -- one attempt ----------------------------------------------------------------------

    def _copy_output(self, stream: Any) -> None:
        out = sys.stdout.buffer
        for raw in iter(stream.readline, b""):
            out.write(raw)
            out.flush()
            m = STEP_HEADER.search(raw.decode(errors="replace"))
            if m:
                step = int(m.group(1))
                self.last_step = step
                if self.first_step is None:
                    self.first_step = (step, time.time())
                    self._report_resumed(*self.first_step)

    def attempt(self) -> tuple[int, list[dict[str, Any]]]:
        """Run the command once; return its exit code and the nodes lost meanwhile."""
        # Nodes that are alive at the start or join later are watched (see _look).
        watched = {k: n for k, n in (self._workers() or {}).items() if n["alive"]}
        self.first_step, self.last_step = None, 0
        self.child = subprocess.Popen(
            ["/bin/sh", "-c", self.command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert self.child.stdout is not None
        copier = threading.Thread(target=self._copy_output, args=(self.child.stdout,), daemon=True)
        copier.start()
        lost: dict[str, dict[str, Any]] = {}
        killed_at: float | None = None
        while True:
            try:
                code = self.child.wait(timeout=self.args.poll)
                break
            except subprocess.TimeoutExpired:
                pass
            self._look(watched, lost)
            if lost and killed_at is None and not self.stopping.is_set():
                first = min(n["detected_at"] for n in lost.values())
                if time.time() - first >= self.args.hang_grace:
                    _say(f"the command is still running {self.args.hang_grace:g}s after losing a node; killing it")
                    self._signal_child(signal.SIGKILL)
                    killed_at = time.time()
        copier.join(timeout=5)
        if code != 0 and not self.stopping.is_set() and self.table is not None:
            # The command may fail a moment before the node table says why: look once more.
            deadline = time.monotonic() + self.args.settle
            while True:
                self._look(watched, lost)
                if lost or time.monotonic() >= deadline:
                    break
                time.sleep(min(0.5, self.args.poll))
        return code, sorted(lost.values(), key=lambda n: n["detected_at"])

    def _look(self, watched: dict[str, dict[str, Any]], lost: dict[str, dict[str, Any]]) -> None:
        now = self._workers()
        if now is None:
            return
        for node_id, node in now.items():
            if node["alive"] and node_id not in lost:
                watched[node_id] = node
        for node_id, node in watched.items():
            if node_id in lost:
                continue
            current = now.get(node_id)
            if current is None or not current["alive"]:
                record = dict(current or node)
                record["alive"] = False
                record["detected_at"] = time.time()
                if not record.get("reason"):
                    record["reason"] = "left Ray's node table"
                lost[node_id] = record
                _say(f"worker node {_node(record)} is lost: {record['reason']}")

    def _signal_child(self, sig: int) -> None:
        child = self.child
        if child is None or child.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)

    def stop(self, signum: int, frame: object) -> None:
        if not self.stopping.is_set():
            _say(f"{signal.Signals(signum).name} received: stopping the run; no rerun follows")
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
        steps = [step for name in names if (step := checkpoint_step(name)) is not None
                 and os.path.isdir(os.path.join(root, name))]
        return max(steps, default=None)

    def _wait_for_capacity(self) -> float | None:
        """Seconds waited until the GPUs are back, or None after the timeout."""
        need, gpus = self.args.nodes, self.args.gpus_per_node
        start = time.monotonic()
        said = -1
        while True:
            workers = self._workers()
            have = self._capacity(workers) if workers is not None else -1
            if have >= need:
                return time.monotonic() - start
            waited = time.monotonic() - start
            if waited >= self.args.capacity_timeout:
                return None
            if have != said and have >= 0:
                _say(f"waiting for GPU nodes: {have} of {need} (with {gpus:g} GPUs each) are up")
                said = have
            time.sleep(self.args.poll)

    def _describe_restarts(self) -> str:
        return "; ".join(
            f"#{r['restart']} at {_stamp(r['lost_at'])}: lost {', '.join(_node(n) for n in r['nodes'])}, "
            f"resumed from step {r['resume_step'] if r['resume_step'] is not None else 0}"
            for r in self.restarts
        ) or "none"

    def run(self) -> int:
        args = self.args
        watching = f"{args.nodes} worker node(s) with {args.gpus_per_node:g} GPU(s) each" if args.nodes else "no worker nodes"
        _say(f"running the command with recovery from lost nodes (max_restarts={args.max_restarts}; "
             f"watching {watching} in Ray's node table)")
        while True:
            code, lost = self.attempt()
            if self.stopping.is_set():
                _say(f"stopped; the command exited with code {code}")
                return 128 + signal.SIGTERM if code == 0 else code if code > 0 else 128 - code
            if code == 0:
                if self.restarts:
                    _say(f"the run succeeded after {len(self.restarts)} restart(s): {self._describe_restarts()}")
                return 0
            status = code if code > 0 else 128 - code
            if not lost:
                _say(f"the command failed with exit code {status} while every worker node was alive: not "
                     "restarted (the run failed for a reason of its own)")
                return status
            names = ", ".join(f"{_node(n)} ({n['reason']})" for n in lost)
            _say(f"the command exited with code {status} after losing worker node(s): {names}")
            if len(self.restarts) >= args.max_restarts:
                if args.max_restarts == 0:
                    _say("recovery is off (max_restarts=0): not restarted")
                else:
                    _say(f"max_restarts={args.max_restarts} is used up: not restarted. Restarts: "
                         f"{self._describe_restarts()}")
                return status
            number = len(self.restarts) + 1
            lost_at = min((n["dead_at"] or n["detected_at"]) for n in lost)
            resume = self._newest_checkpoint()
            record = {
                "restart": number,
                "max_restarts": args.max_restarts,
                "lost_at": lost_at,
                "nodes": [{k: n.get(k) for k in ("node_id", "address", "name", "reason")} for n in lost],
                "exit_code": status,
                "last_step": self.last_step,
                "resume_step": resume,
            }
            self.restarts.append(record)
            _say(f"recovery {number} of at most {args.max_restarts}: waiting up to {args.capacity_timeout:g}s "
                 f"for {args.nodes} GPU node(s), then rerunning from "
                 f"{'step_' + str(resume) if resume is not None else 'the start (no checkpoint yet)'}")
            _record(RESTART_MARK, record)
            waited = self._wait_for_capacity()
            if self.stopping.is_set():
                _say("stopped while waiting for capacity; no rerun follows")
                return 128 + signal.SIGTERM
            if waited is None:
                _say(f"the GPUs did not come back within capacity_timeout={args.capacity_timeout:g}s: giving up. "
                     f"Restarts: {self._describe_restarts()}")
                return status
            _say(f"capacity is back after {waited:.1f}s; rerunning (restart {number})")
            self.pending = (number, lost_at, waited)

    def _report_resumed(self, step: int, at: float) -> None:
        pending, self.pending = self.pending, None
        if pending is None:
            return
        number, lost_at, waited = pending
        _say(f"recovered: the rerun reached step {step} {at - lost_at:.1f}s after the loss")
        _record(RESUMED_MARK, {"restart": number, "first_step": step, "first_step_at": at,
                               "seconds_lost": at - lost_at, "capacity_seconds": waited})


def _node(n: dict[str, Any]) -> str:
    where = n.get("name") or n.get("address") or "?"
    return f"{str(n.get('node_id', ''))[:8]} ({where})"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rl_lustre_supervisor", allow_abbrev=False,
                                description="Run a command; rerun it after Ray worker nodes were lost.")
    p.add_argument("--max-restarts", type=int, default=3)
    p.add_argument("--nodes", type=int, default=0, help="worker nodes the run needs (0: watch none)")
    p.add_argument("--gpus-per-node", type=float, default=0)
    p.add_argument("--capacity-timeout", type=float, default=1800.0)
    p.add_argument("--checkpoint-dir", default="")
    p.add_argument("--poll", type=float, default=1.0)
    p.add_argument("--hang-grace", type=float, default=60.0)
    p.add_argument("--settle", type=float, default=3.0,
                   help="seconds to look for a lost node after the command failed")
    p.add_argument("command", help="the shell command (after --)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and supervise; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.max_restarts < 0 or args.nodes < 0:
        _parser().error("--max-restarts and --nodes must be >= 0")
    supervisor = Supervisor(args)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, supervisor.stop)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
