"""A stand-in for PyTorch's NCCL flight recorder, in the rehearsal's ranks: not PyTorch's, and it says so.

No GPU and no PyTorch run here, so nothing records real collectives. To rehearse what a
stalled run's evidence holds, each rehearsal rank (:class:`~rl_lustre.rehearsal.placement.NodeWorkers`)
does with the job's environment what ``ProcessGroupNCCL`` does with it
(:mod:`rl_lustre.oncluster.nccl`): with ``TORCH_NCCL_TRACE_BUFFER_SIZE`` above 0 it keeps its
last collectives in a ring buffer; with ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` it makes the named
pipe ``<value><rank>.pipe`` and, when something is written to it, dumps the buffer to
``<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>``. PyTorch writes a pickle of its own entries; the
stand-in writes JSON with a field saying it is one. What is tested with it is the part
rl_lustre owns: the environment, the trigger, and the dumps reaching the bundle.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import threading
import time
from typing import Any

from ..oncluster.nccl import DUMP_FILE, PIPE_FILE, PIPE_SUFFIX, TRACE_BUFFER_SIZE

__all__ = ["StandInRecorder"]

STAND_IN = "rl_lustre rehearsal: a stand-in for PyTorch's NCCL flight recorder (no PyTorch, no GPU)"
_POLL = 0.2


class StandInRecorder:
    """One rank's buffer and pipe, when the environment asks for them (else it records nothing)."""

    def __init__(self, rank: int, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.rank = rank
        try:
            size = int(env.get(TRACE_BUFFER_SIZE, "0") or 0)
        except ValueError:
            size = 0
        self.entries: collections.deque[dict[str, Any]] = collections.deque(maxlen=max(size, 1))
        self.enabled = size > 0
        self.dump_to = f"{env.get(DUMP_FILE, '/tmp/nccl_trace_rank_')}{rank}"
        self.pipe: str | None = None
        self._seq = 0
        stem = env.get(PIPE_FILE)
        if self.enabled and stem:
            self.pipe = f"{stem}{rank}{PIPE_SUFFIX}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.pipe)
            os.mkfifo(self.pipe, 0o666)
            fd = os.open(self.pipe, os.O_RDONLY | os.O_NONBLOCK)
            threading.Thread(target=self._watch, args=(fd,), name="rehearsal-flight-recorder", daemon=True).start()

    def started(self, op: str, step: int) -> dict[str, Any]:
        """A collective begins; its entry is completed by :meth:`completed`."""
        self._seq += 1
        entry = {"seq": self._seq, "op": op, "step": step, "state": "started", "started_at": time.time()}
        if self.enabled:
            self.entries.append(entry)
        return entry

    def completed(self, entry: dict[str, Any]) -> None:
        entry.update(state="completed", completed_at=time.time())

    def dump(self) -> None:
        """Write the buffer to ``<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>``."""
        record = {"stand_in": STAND_IN, "rank": self.rank, "entries": list(self.entries), "dumped_at": time.time()}
        with open(self.dump_to, "w") as f:
            json.dump(record, f)

    def _watch(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 128)
            except BlockingIOError:
                data = b""
            except OSError:
                return
            if data:
                with contextlib.suppress(OSError):
                    self.dump()
            time.sleep(_POLL)
