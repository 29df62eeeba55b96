"""Recovery from lost nodes (Spot preemption), run on the cluster by a supervisor.

A submitted job does not run NeMo-RL's command directly: it runs
:mod:`rl_lustre.recovery.supervisor` on the Ray head, which runs the command and runs
it again, from the newest checkpoint, when worker nodes were lost (see that module for
what is watched, waited for and when it gives up). This package is the client's side:

- :func:`supervised` renders the Ray job's entrypoint around NeMo-RL's command;
- :func:`shipped_module` is the directory Ray uploads as the job's ``py_modules``, so
  the supervisor runs on an image that has no rl_lustre;
- :func:`parse_restarts` reads the supervisor's records back from the job's log, for
  :meth:`rl_lustre.run.Run.restarts`.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from .._command import number as _number
from .journal import RESTART_MARK, RESUMED_MARK

__all__ = ["LostNode", "Restart", "parse_restarts", "shipped_module", "supervised"]

MODULE = "rl_lustre_supervisor"


@attrs.frozen
class LostNode:
    """A worker node that died during an attempt, as Ray's node table reported it.

    Attributes:
        node_id: Ray's node id.
        address: the node's IP address.
        name: the node's name (on GKE, the pod's host name).
        reason: why, in Ray's words (e.g. a failed health check, or the node's own
            shutdown message), or ``left Ray's node table``.
    """

    node_id: str
    address: str
    name: str
    reason: str


@attrs.frozen
class Restart:
    """One recovery from lost nodes.

    Attributes:
        number: 1 for the first recovery of the run, 2 for the second, ...
        lost_at: when the nodes were lost (seconds since the epoch): when Ray declared
            the first of them dead, a few seconds after the VM went away.
        nodes: the worker nodes lost.
        resumed_from_step: the newest complete checkpoint (``step_N``) the rerun resumed
            from; None when there was none and the rerun started over.
        last_step: the (global) step that was running when the nodes were lost.
        exit_code: how the interrupted attempt ended.
        first_step: the first step the rerun printed; None until it has.
        seconds_lost: seconds from ``lost_at`` to the rerun's first step header: what the
            preemption cost in wall-clock time, waiting for GPUs included; None until then.
        capacity_seconds: of those, the seconds spent waiting for the GPUs to come back.
        first_step_at: when the rerun printed its first step header (the head's clock).
    """

    number: int
    lost_at: float
    nodes: tuple[LostNode, ...]
    resumed_from_step: int | None
    last_step: int
    exit_code: int
    first_step: int | None = None
    seconds_lost: float | None = None
    capacity_seconds: float | None = None
    first_step_at: float | None = None

    @property
    def when(self) -> _dt.datetime:
        """``lost_at`` as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.lost_at, tz=_dt.timezone.utc)

    @property
    def steps_redone(self) -> int:
        """Steps run again: those after the checkpoint resumed from, up to the one interrupted."""
        return max(0, self.last_step - (self.resumed_from_step or 0))


def parse_restarts(log: str) -> list[Restart]:
    """The recoveries the supervisor recorded in a job's log, oldest first.

    Examples:
        >>> log = ('RL_LUSTRE_RESTART {"restart": 1, "lost_at": 100.0, "nodes": [{"node_id": "ab", '
        ...        '"address": "10.0.0.3", "name": "w1", "reason": "health check failed"}], '
        ...        '"resume_step": 4, "last_step": 6, "exit_code": 1}\\n'
        ...        'RL_LUSTRE_RESUMED {"restart": 1, "first_step": 5, "seconds_lost": 12.5, '
        ...        '"capacity_seconds": 3.0}\\n')
        >>> [(r.number, r.resumed_from_step, r.first_step, r.seconds_lost, r.steps_redone) for r in parse_restarts(log)]
        [(1, 4, 5, 12.5, 2)]
    """
    restarts: dict[int, Restart] = {}
    resumed: dict[int, dict[str, Any]] = {}
    for line in log.splitlines():
        if line.startswith(RESTART_MARK):
            r = _json(line[len(RESTART_MARK) :])
            if r is None:
                continue
            restarts[int(r["restart"])] = Restart(
                number=int(r["restart"]),
                lost_at=float(r["lost_at"]),
                nodes=tuple(
                    LostNode(
                        str(n.get("node_id") or ""),
                        str(n.get("address") or ""),
                        str(n.get("name") or ""),
                        str(n.get("reason") or ""),
                    )
                    for n in r.get("nodes") or []
                ),
                resumed_from_step=None if r.get("resume_step") is None else int(r["resume_step"]),
                last_step=int(r.get("last_step") or 0),
                exit_code=int(r.get("exit_code") or 0),
            )
        elif line.startswith(RESUMED_MARK):
            r = _json(line[len(RESUMED_MARK) :])
            if r is not None:
                resumed[int(r["restart"])] = r
    out = []
    for number in sorted(restarts):
        r = resumed.get(number)
        restart = restarts[number]
        if r is not None:
            restart = attrs.evolve(
                restart,
                first_step=int(r["first_step"]),
                seconds_lost=float(r["seconds_lost"]),
                capacity_seconds=float(r.get("capacity_seconds") or 0.0),
                first_step_at=None if r.get("first_step_at") is None else float(r["first_step_at"]),
            )
        out.append(restart)
    return out


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "restart" in value else None


def supervised(
    command: str,
    *,
    python: str,
    max_restarts: int,
    nodes: int,
    gpus_per_node: int,
    capacity_timeout: float,
    checkpoint_dir: str | None,
    poll: float,
    settle: float,
    siblings: float = 5.0,
    hang_grace: float = 60.0,
    queue: str | None = None,
    cluster_nodes: int | None = None,
    priority: int = 0,
    backfill_window: float = 3600.0,
    watch: bool = True,
    capacity_end: float | None = None,
    lifetimes: Sequence[tuple[str, float]] = (),
    save_margin: float | None = None,
) -> str:
    """The Ray job's entrypoint: the supervisor, running ``command``.

    With ``queue`` (the cluster's name) the job first waits in the cluster's queue for
    ``nodes`` of its ``cluster_nodes`` nodes (see :mod:`rl_lustre.queueing`); without
    ``watch`` it does not watch Ray's node table (a local head has no node to lose). On
    capacity that ends (``capacity_end``, seconds since the epoch; ``lifetimes``: node-name
    prefixes and how long such nodes live) it tells NeMo-RL, before each attempt, to save
    ``save_margin`` seconds before the end (see :mod:`rl_lustre.recovery.lifetimes`).

    Examples:
        >>> supervised("cd /opt/nemo-rl && uv run python x.py", python="python", max_restarts=3, nodes=8,
        ...            gpus_per_node=8, capacity_timeout=1800, checkpoint_dir="/lustre/c/run", poll=2,
        ...            settle=30, queue="demo", cluster_nodes=8)  # doctest: +NORMALIZE_WHITESPACE
        "python -m rl_lustre_supervisor --max-restarts 3 --nodes 8 --gpus-per-node 8 --capacity-timeout 1800
         --poll 2 --settle 30 --siblings 5 --hang-grace 60 --queue demo --cluster-nodes 8 --priority 0
         --backfill-window 3600
         --checkpoint-dir /lustre/c/run -- 'cd /opt/nemo-rl && uv run python x.py'"
    """
    parts = [
        shlex.quote(python), "-m", MODULE,
        "--max-restarts", str(max_restarts),
        "--nodes", str(nodes),
        "--gpus-per-node", str(gpus_per_node),
        "--capacity-timeout", _number(capacity_timeout),
        "--poll", _number(poll),
        "--settle", _number(settle),
        "--siblings", _number(siblings),
        "--hang-grace", _number(hang_grace),
    ]  # fmt: skip
    if queue:
        parts += [
            "--queue",
            shlex.quote(queue),
            "--cluster-nodes",
            str(cluster_nodes or nodes),
            "--priority",
            str(priority),
            "--backfill-window",
            _number(backfill_window),
        ]
    if not watch:
        parts.append("--no-watch")
    if checkpoint_dir:
        parts += ["--checkpoint-dir", shlex.quote(checkpoint_dir)]
    if capacity_end is not None or lifetimes:
        assert save_margin is not None, "a capacity that ends needs the save margin"
        if capacity_end is not None:
            parts += ["--capacity-end", _number(round(capacity_end, 3))]
        parts += [f"--lifetime={shlex.quote(f'{prefix}={_number(seconds)}')}" for prefix, seconds in lifetimes]
        parts += ["--save-margin", _number(save_margin)]
    return " ".join([*parts, "--", shlex.quote(command)])


# The files the supervisor needs, relative to the rl_lustre package: shipped at the same
# places inside rl_lustre_supervisor, so that its relative imports work there as here.
SHIPPED = (
    "recovery/supervisor.py",
    "recovery/jobargs.py",
    "recovery/journal.py",
    "recovery/stamps.py",
    "recovery/watch.py",
    "recovery/procs.py",
    "recovery/lifetimes.py",
    "nemo_rl/formats.py",
    "jobrecord.py",
    "queueing/claims.py",
    "queueing/policy.py",
    "queueing/view.py",
    "queueing/member.py",
)
_MAIN = b"import sys\n\nfrom .recovery.supervisor import main\n\nsys.exit(main())\n"


def shipped_module() -> str:
    """A directory holding the ``rl_lustre_supervisor`` package, for the job's ``py_modules``.

    The package holds this installation's :data:`SHIPPED` files, at the same paths as in
    rl_lustre (empty ``__init__.py`` files around them), and a ``__main__.py`` that runs
    the supervisor. Its directory is named by the content's hash, so Ray uploads it once
    per cluster and every process agrees on it. The files are read and hashed once per
    process; the directory is made again if something removed it.

    Examples:
        >>> import os
        >>> d = shipped_module()
        >>> os.path.basename(d), sorted(os.path.relpath(os.path.join(top, f), d)
        ...                             for top, _, files in os.walk(d) for f in files if f.endswith(".py"))
        ... # doctest: +NORMALIZE_WHITESPACE
        ('rl_lustre_supervisor', ['__init__.py', '__main__.py', 'jobrecord.py', 'nemo_rl/__init__.py',
         'nemo_rl/formats.py', 'queueing/__init__.py', 'queueing/claims.py', 'queueing/member.py', 'queueing/policy.py',
         'queueing/view.py', 'recovery/__init__.py', 'recovery/jobargs.py', 'recovery/journal.py',
         'recovery/lifetimes.py', 'recovery/procs.py', 'recovery/stamps.py', 'recovery/supervisor.py',
         'recovery/watch.py'])
    """
    root, files = _shipped_files()
    package = root / MODULE
    if not (package / "__main__.py").is_file():
        staging = Path(tempfile.mkdtemp(prefix="rl-lustre-supervisor-"))
        for relative, content in files.items():
            target = staging / MODULE / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        try:
            staging.rename(root)
        except OSError:
            # Another process made it first: theirs is the same content.
            import shutil

            shutil.rmtree(staging, ignore_errors=True)
    return str(package)


@functools.cache
def _shipped_files() -> tuple[Path, dict[str, bytes]]:
    """Where the shipped package goes (named by its content's hash) and ``{path: content}`` of its files."""
    here = Path(__file__).parent.parent
    files: dict[str, bytes] = {"__init__.py": b"", "__main__.py": _MAIN}
    for relative in SHIPPED:
        files[relative] = (here / relative).read_bytes()
        parent = Path(relative).parent
        while parent != Path("."):
            files.setdefault(f"{parent.as_posix()}/__init__.py", b"")
            parent = parent.parent
    digest = hashlib.sha256(json.dumps({k: v.hex() for k, v in sorted(files.items())}).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"rl-lustre-supervisor-{digest}", files
