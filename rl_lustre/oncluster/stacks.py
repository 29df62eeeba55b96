"""Python stacks as py-spy prints them, and the summary of a stalled run: who is where.

``py-spy dump`` (which Ray's dashboard agent runs for a process's stack, and which
:mod:`.probe` runs where the agent cannot) prints, innermost frame first::

    Process 4242: python -m ... (the command line)
    Python v3.12.3 (/usr/bin/python3.12)

    Thread 4242 (idle): "MainThread"
        wait (threading.py:359)
        get (ray/_private/worker.py:2882)
        step (rl_lustre/rehearsal/placement.py:58)

:func:`parse_dump` reads that; :func:`where` finds the frame a process is *in*: the
innermost one that is not plumbing (threads, queues, sockets, Ray's own machinery), since
"in ``ray.get``" says nothing and "in ``all_reduce``" or "in ``data_loader.__next__``"
says a lot. A process whose every frame is plumbing is *idle* (a Ray worker waiting for its
next task). :func:`summarize` groups the processes by where they are: the largest group
first, then every other process by name, with its node.

    >>> dump = '''Process 7: python x.py
    ... Python v3.12.3 (/usr/bin/python3.12)
    ...
    ... Thread 7 (idle): "MainThread"
    ...     wait (threading.py:359)
    ...     all_reduce (torch/distributed/distributed_c10d.py:2806)
    ...     train (nemo_rl/algorithms/grpo.py:512)
    ... '''
    >>> where(parse_dump(dump))
    'all_reduce (torch/distributed/distributed_c10d.py)'

It runs on the cluster (shipped with the supervisor; standard library only).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["Frame", "Place", "Thread", "parse_dump", "summarize", "where"]

_THREAD = re.compile(r'Thread (?P<id>\S+) \((?P<status>[^)]*)\)(?::\s*"(?P<name>[^"]*)")?')
_FRAME = re.compile(r"(?P<func>.+?) \((?P<file>[^():]+)(?::(?P<line>\d+))?\)$")
# Frames that say nothing about where a process is: waiting, queueing, talking, Ray's machinery.
_PLUMBING = (
    "threading.py",
    "queue.py",
    "selectors.py",
    "socket.py",
    "ssl.py",
    "subprocess.py",
    "runpy.py",
    "/asyncio/",
    "/concurrent/futures/",
    "/multiprocessing/",
    "/grpc/",
    "<frozen",
    "ray/_private/",
    "ray/_raylet",
    "_raylet.pyx",
    "ray/actor.py",
    "ray/remote_function.py",
    "ray/util/",
    "ray/worker.py",
    "ray/autoscaler/",
    "ray/dashboard/",
    "ray/runtime_env/",
)
IDLE = "idle (waiting for work)"
# The frame of Ray's that runs a task or actor method, in whichever thread runs it.
_RAY_TASK = "function_manager.py"
# /proc's one-letter process states that say a process cannot run.
_STOPPED = {"T": "STOPPED (SIGSTOP)", "t": "STOPPED (being traced)", "Z": "a zombie", "D": "in uninterruptible I/O"}


@dataclasses.dataclass(frozen=True)
class Frame:
    """One frame: the function, its file (as py-spy shortens it) and line."""

    func: str
    file: str
    line: int | None = None

    @property
    def plumbing(self) -> bool:
        return any(part in self.file for part in _PLUMBING)

    def label(self) -> str:
        return f"{self.func} ({self.file})"


@dataclasses.dataclass(frozen=True)
class Thread:
    """One thread of a dump: its id, py-spy's status (``idle``, ``active``, ...), name, frames (innermost first)."""

    ident: str
    status: str
    name: str
    frames: tuple[Frame, ...]


def parse_dump(text: str) -> list[Thread]:
    """The threads of one ``py-spy dump`` (empty for anything else)."""
    threads: list[Thread] = []
    current: tuple[str, str, str] | None = None
    frames: list[Frame] = []
    for raw in text.splitlines():
        line = raw.strip()
        m = _THREAD.fullmatch(line)
        if m:
            if current is not None:
                threads.append(Thread(*current, tuple(frames)))
            current, frames = (m.group("id"), m.group("status"), m.group("name") or ""), []
            continue
        if current is None or not raw.startswith((" ", "\t")):
            continue
        f = _FRAME.fullmatch(line)
        if f:
            frames.append(Frame(f.group("func"), f.group("file"), int(f.group("line")) if f.group("line") else None))
    if current is not None:
        threads.append(Thread(*current, tuple(frames)))
    return threads


def _point(thread: Thread) -> str | None:
    for frame in thread.frames:
        if not frame.plumbing:
            return frame.label()
    return None


def where(threads: Sequence[Thread]) -> str:
    """Where a process is: its main thread's innermost frame that is not plumbing, else that of
    a thread running a Ray task (a threaded actor's), else :data:`IDLE`. Other threads (a
    garbage collector's, a watchdog's) say nothing of where the process is."""
    main = [t for t in threads if t.name == "MainThread"] or list(threads[:1])
    tasks = [t for t in threads if t not in main and any(_RAY_TASK in f.file for f in t.frames)]
    for thread in main + tasks:
        point = _point(thread)
        if point is not None:
            return point
    return IDLE


@dataclasses.dataclass(frozen=True)
class Place:
    """A process of the run, and where it is.

    Attributes:
        role: what it is: ``driver``, a Ray actor's class, or its program's name.
        pid: its process id on its node.
        node: the node's name (or id).
        at: :func:`where` it is, or None without a stack.
        state: its ``/proc`` state letter (``S``, ``R``, ``T``, ...), when known.
        error: why there is no stack, if there is none.
    """

    role: str
    pid: int
    node: str
    at: str | None
    state: str = ""
    error: str = ""

    def describe(self) -> str:
        who = f"{self.role} pid {self.pid} on node {self.node}"
        stopped = _STOPPED.get(self.state)
        text = f"{who}: no stack ({self.error or 'not taken'})" if self.at is None else f"{who}: in {self.at}"
        return f"{text}; {stopped}" if stopped else text


def summarize(places: Sequence[Place], *, step: int | None = None) -> list[str]:
    """Who is where, in a few lines: the largest group of processes in the same place, then
    every other process by name with its node (stopped processes always by name).

    Examples:
        >>> ps = [Place("Worker", 11, "w1", "all_reduce (placement.py)"),
        ...       Place("driver", 10, "head", "all_reduce (placement.py)"),
        ...       Place("Worker", 12, "w2", IDLE, state="T")]
        >>> print("\\n".join(summarize(ps, step=5)))
        2 of 3 processes in all_reduce (placement.py) (step 5): driver pid 10 on node head, Worker pid 11 on node w1
        Worker pid 12 on node w2: in idle (waiting for work); STOPPED (SIGSTOP)
    """
    if not places:
        return ["no process of the run was found"]
    ordered = sorted(places, key=lambda p: (p.node, p.pid))
    counts = Counter(p.at for p in ordered if p.at is not None and p.state not in _STOPPED)
    lines = []
    main = None
    if counts:
        main, k = counts.most_common(1)[0]
        if k >= 2 or len(ordered) == 1:
            at_step = f" (step {step})" if step else ""
            members = [p for p in ordered if p.at == main and p.state not in _STOPPED]
            names = ", ".join(f"{p.role} pid {p.pid} on node {p.node}" for p in members[:8])
            more = f", and {len(members) - 8} more" if len(members) > 8 else ""
            lines.append(f"{k} of {len(ordered)} processes in {main}{at_step}: {names}{more}")
        else:
            main = None
    stopped = [p for p in ordered if p.state in _STOPPED]
    others = [p for p in ordered if p.state not in _STOPPED and (main is None or p.at != main)]
    lines += [p.describe() for p in stopped + others]
    return lines
