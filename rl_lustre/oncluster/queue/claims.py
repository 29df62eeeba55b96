"""The queue's ledger on the Ray head: one claim file per job, serialised by ``flock``.

Every job's supervisor runs on the head (Ray pins a job's entrypoint there), so they
all see one directory on the head's own disk (never a shared filesystem: ``flock``
must be local)::

    <root>/
      queue.lock            LOCK_EX while a supervisor reads, decides and writes (milliseconds)
      generation            a number, bumped on every release: wakes the waiting supervisors
      claims/<job>.lock     flock(LOCK_EX)ed by the job's supervisor for as long as it lives
      claims/<job>.json     the claim (:class:`Claim`), replaced atomically

A claim is alive exactly as long as its supervisor's lock: the kernel drops it the
moment the process dies (a SIGKILL, an OOM kill), and the next supervisor that reads
the ledger finds the lock free and removes the claim ("reaps" it). Nothing waits on
a lease timer. Lock and data are two files because replacing the data file would
move the lock to a dead inode.

It runs on the cluster (shipped with the supervisor; standard library only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["CLAIM_VERSION", "HELD", "Claim", "Store", "queue_root"]

CLAIM_VERSION = 1
# The states of a claim that hold nodes: admitted and running, or recovering after a loss.
HELD = ("holding", "recovering")


@dataclasses.dataclass
class Claim:
    """One job's place in the queue.

    Attributes:
        job: the Ray submission id.
        nodes: the GPU nodes the job takes.
        gpus_per_node: the GPUs of each.
        cluster_nodes: the cluster's nodes, as the job's spec says.
        priority: higher goes first.
        submitted_at: when the job was submitted (the submitting client's clock).
        seq: its index among the jobs submitted together.
        backfill_window: seconds later jobs may start ahead of it while it waits.
        state: ``queued``, ``holding`` (admitted) or ``recovering`` (after a loss; it
            keeps its claim ahead of every queued job).
        slots: the queue's node numbers it holds (0 .. cluster_nodes-1), for timelines.
        joined_at: when it joined (the head's clock).
        admitted_at: when it was last admitted.
        bypassed_since: since when later jobs start ahead of it.
        attempt: the attempts started so far.
        pid: its supervisor's process id.
        v: the claim's format; a newer one is counted as holding its nodes.
    """

    job: str
    nodes: int
    gpus_per_node: float
    cluster_nodes: int
    priority: int = 0
    submitted_at: float = 0.0
    seq: int = 0
    backfill_window: float = 3600.0
    state: str = "queued"
    slots: list[int] = dataclasses.field(default_factory=list)
    joined_at: float = 0.0
    admitted_at: float | None = None
    bypassed_since: float | None = None
    attempt: int = 0
    pid: int = 0
    v: int = CLAIM_VERSION

    def key(self) -> tuple[Any, ...]:
        """The queue's order: priority, then submission time, then submission order."""
        return (-self.priority, self.submitted_at, self.seq, self.job)

    @property
    def held(self) -> bool:
        return self.state in HELD

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Claim:
        """A claim read back; one of a newer format keeps only what is needed to count it as held."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a claim is a JSON object")
        if int(data.get("v", CLAIM_VERSION)) > CLAIM_VERSION:
            return cls(
                job=str(data["job"]),
                nodes=int(data.get("nodes", 0)),
                gpus_per_node=float(data.get("gpus_per_node", 0)),
                cluster_nodes=int(data.get("cluster_nodes", 0)),
                state="holding",
                slots=[int(s) for s in data.get("slots") or []],
                v=int(data["v"]),
            )
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def queue_root(ray_address: str, cluster: str, base: str | os.PathLike[str] | None = None) -> Path:
    """The ledger's directory for the head at ``ray_address`` and the cluster named ``cluster``.

    ``RAY_ADDRESS`` (the GCS address Ray gives every job's entrypoint) tells heads on one
    machine apart and stays the same for a head's life.

    Examples:
        >>> queue_root("127.0.0.1:40841", "demo", "/tmp").as_posix()
        '/tmp/rl-lustre-queue/127.0.0.1_40841/demo'
    """
    safe = [re.sub(r"[^A-Za-z0-9._-]", "_", part) or "_" for part in (ray_address, cluster)]
    return Path(base if base is not None else tempfile.gettempdir(), "rl-lustre-queue", *safe)


class Store:
    """The ledger in ``root``; every method but :meth:`generation` runs inside :meth:`locked`."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.claims_dir = self.root / "claims"
        self.claims_dir.mkdir(parents=True, exist_ok=True)
        self._mine: dict[str, int] = {}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The queue's lock, held for one read-decide-write."""
        fd = os.open(self.root / "queue.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def join(self, claim: Claim) -> None:
        """Take ``claim.job``'s lock for this process's life, then write the claim."""
        fd = os.open(self._lock_path(claim.job), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise RuntimeError(f"another live supervisor holds the claim of {claim.job}") from exc
            raise
        self._mine[claim.job] = fd
        self.save(claim)

    def save(self, claim: Claim) -> None:
        """Write ``claim`` atomically: a reader sees the old one or the new one, never half."""
        path = self._data_path(claim.job)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(claim.to_json())
        os.replace(tmp, path)

    def read(self) -> tuple[list[Claim], list[Claim]]:
        """The live claims, and the claims of dead supervisors found (and removed) now."""
        live, reaped = [], []
        for path in sorted(self.claims_dir.glob("*.json")):
            try:
                claim = Claim.from_json(path.read_text())
            except (OSError, ValueError, TypeError, KeyError):
                continue
            if claim.job in self._mine or self._alive(claim.job):
                live.append(claim)
            else:
                self._remove(claim.job)
                reaped.append(claim)
        return live, reaped

    def release(self, job: str) -> None:
        """Remove this process's claim of ``job`` and wake the waiting supervisors."""
        self._remove(job)
        fd = self._mine.pop(job, None)
        if fd is not None:
            os.close(fd)
        self._bump()

    def generation(self) -> int:
        """A number that changes whenever a claim is released (read without the lock)."""
        try:
            return int((self.root / "generation").read_text() or 0)
        except (OSError, ValueError):
            return 0

    def _bump(self) -> None:
        path = self.root / "generation"
        tmp = path.with_name(f".generation.{os.getpid()}.tmp")
        tmp.write_text(str(self.generation() + 1))
        os.replace(tmp, path)

    def _alive(self, job: str) -> bool:
        try:
            fd = os.open(self._lock_path(job), os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False

    def _remove(self, job: str) -> None:
        for path in (self._data_path(job), self._lock_path(job)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _data_path(self, job: str) -> Path:
        return self.claims_dir / f"{_file_name(job)}.json"

    def _lock_path(self, job: str) -> Path:
        return self.claims_dir / f"{_file_name(job)}.lock"


def _file_name(job: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", job)
