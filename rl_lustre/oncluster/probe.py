"""What only a node itself can see: its process tree, a stack py-spy must take without
stopping the process, the flight recorder's pipes; and what only it can end: a process.

The dashboard's state API names the run's Ray workers (actors, with their node and pid),
and its agent on each node takes a Ray worker's stack by pid. Three things need more, on
the node: the processes the run's workers started themselves (vLLM's engine processes, a
data loader's workers) -- a walk of the node's process tree from the workers' pids; the
stack of a process stopped with SIGSTOP, which ``py-spy dump`` (as the agent runs it)
cannot take since it stops the process first, and ``py-spy dump --nonblocking`` can; and
writing to the NCCL flight recorder's pipes, which work only on their own node
(:mod:`.nccl`).

:func:`node_report` does those on one node, as a Ray task placed there
(:func:`on_nodes`: zero CPUs, so a node whose CPUs the run's placement groups hold
still runs it; it runs beside the raylet, never through the stuck processes). The process
tree and the stacks are read from ``/proc``, so the task runs in the node's process
namespace (a container's: on GKE each Ray pod's).

Standard library at module level; Ray only inside :func:`on_nodes`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from .nccl import trigger

__all__ = ["descendants", "node_report", "on_nodes", "proc_table", "py_spy", "spy_dump"]

# What a process's command line may show of itself in a bundle.
_CMDLINE_CHARS = 400
_SPY_TIMEOUT = 20.0


def proc_table() -> dict[int, tuple[int, str, str]]:
    """Every process of this node's ``/proc``: ``{pid: (ppid, state, name)}``."""
    out: dict[int, tuple[int, str, str]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        head, _, tail = stat.rpartition(b")")
        fields = tail.split()
        if len(fields) < 2:
            continue
        comm = head.split(b"(", 1)[-1].decode(errors="replace")
        out[int(name)] = (int(fields[1]), fields[0].decode(), comm)
    return out


def descendants(roots: Iterable[int], table: dict[int, tuple[int, str, str]]) -> list[int]:
    """``roots`` (those alive) and every process below them, in tree order.

    Examples:
        >>> descendants([1], {1: (0, "S", "a"), 2: (1, "S", "b"), 3: (2, "T", "c"), 4: (0, "S", "d")})
        [1, 2, 3]
    """
    children: dict[int, list[int]] = {}
    for pid, (ppid, _state, _name) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: list[int] = []
    stack = [r for r in sorted(set(roots), reverse=True) if r in table]
    while stack:
        pid = stack.pop()
        if pid in out:
            continue
        out.append(pid)
        stack += sorted(children.get(pid, []), reverse=True)
    return out


def cmdline(pid: int) -> str:
    """The command line of ``pid`` (cut short), or '' when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:_CMDLINE_CHARS]
    except OSError:
        return ""


def describe_processes(pids: Iterable[int], table: dict[int, tuple[int, str, str]]) -> list[dict[str, Any]]:
    """``pids`` as a bundle records them: pid, parent, ``/proc`` state, name, command line."""
    return [
        {"pid": pid, "ppid": table[pid][0], "state": table[pid][1], "name": table[pid][2], "cmdline": cmdline(pid)}
        for pid in pids
        if pid in table
    ]


def py_spy() -> str | None:
    """The py-spy that ships with Ray (``ray[default]``): on ``PATH`` or beside this Python."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else None


def spy_dump(pid: int, *, timeout: float = _SPY_TIMEOUT) -> tuple[bool, str]:
    """``py-spy dump --nonblocking`` of ``pid``: (whether it worked, the dump or why not).

    Without ``--nonblocking`` py-spy stops the process to read it, which fails on a process
    already stopped (SIGSTOP); reading without stopping works on any process."""
    spy = py_spy()
    if spy is None:
        return False, "py-spy is not installed on this node (it ships with ray[default])"
    try:
        done = subprocess.run(
            [spy, "dump", "--nonblocking", "-p", str(pid)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return False, f"py-spy dump took longer than {timeout:g}s"
    except OSError as exc:
        return False, f"py-spy could not run: {exc}"
    if done.returncode != 0:
        return False, (done.stderr or done.stdout).strip().splitlines()[0] if (done.stderr or done.stdout) else "failed"
    return True, done.stdout


def node_report(
    roots: Sequence[int],
    *,
    dump: Sequence[int] = (),
    pipe_stem: str | None = None,
    kill: Sequence[int] = (),
) -> dict[str, Any]:
    """What one node sees of a run (runs there): the processes under ``roots`` (the run's
    Ray workers on it), the stacks of ``dump`` taken with py-spy, the flight recorder's pipes
    written to (``pipe_stem``), and ``kill`` ended with SIGKILL (those still alive)."""
    table = proc_table()
    report: dict[str, Any] = {
        "host": socket.gethostname(),
        "processes": describe_processes(descendants(roots, table), table),
        "stacks": {},
        "pipes": [],
        "killed": [],
    }
    for pid in dump:
        ok, text = spy_dump(pid)
        report["stacks"][str(pid)] = {"ok": ok, "text": text}
    if pipe_stem:
        try:
            report["pipes"] = trigger(pipe_stem)
        except OSError as exc:
            report["pipes_error"] = str(exc)
    for pid in kill:
        if pid in table:
            try:
                os.kill(pid, signal.SIGKILL)
                report["killed"].append(pid)
            except OSError:
                pass
    return report


def on_nodes(requests: dict[str, dict[str, Any]], *, timeout: float) -> dict[str, dict[str, Any]]:
    """Run :func:`node_report` on each node of ``requests`` (Ray node id -> its keyword
    arguments) at once, in this process's Ray connection; a node that does not answer within
    ``timeout`` seconds gets ``{"error": ...}``."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote: Any = ray.remote(num_cpus=0, max_retries=0)(node_report)
    refs = {
        node: remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(**kwargs)
        for node, kwargs in requests.items()
    }
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
    done = set(ready)
    out: dict[str, dict[str, Any]] = {}
    for node, ref in refs.items():
        if ref not in done:
            out[node] = {"error": f"the node did not answer within {timeout:g}s"}
            ray.cancel(ref, force=True)
            continue
        try:
            out[node] = ray.get(ref)
        except Exception as exc:  # the node's own failure, reported as evidence
            out[node] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return out
