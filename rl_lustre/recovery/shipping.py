"""The on-cluster package as the client ships it, and the command that runs its supervisor.

The code that runs on the cluster is the package :mod:`rl_lustre.oncluster` (standard
library only, Ray imported lazily): :func:`shipped_package` copies it whole, as the
package ``rl_lustre_oncluster``, into a directory that a job's runtime env names in
``py_modules``, so the cluster's image needs nothing of rl_lustre; :func:`supervised`
renders the Ray job's entrypoint, ``python -m rl_lustre_oncluster.supervisor [options] --
COMMAND``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .._command import number as _number
from ..oncluster.rundir import PACKAGE

__all__ = ["PACKAGE", "shipped_files", "shipped_package", "supervised"]


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
    run_dir: str | None = None,
    hang_timeout: float | None = None,
    startup_timeout: float | None = None,
    kube_raycluster: str | None = None,
    kube_namespace: str | None = None,
    on_demand: Sequence[str] = (),
    fallback_note: str = "",
) -> str:
    """The Ray job's entrypoint: the supervisor, running ``command``.

    With ``queue`` (the cluster's name) the job first waits in the cluster's queue for
    ``nodes`` of its ``cluster_nodes`` nodes (see :mod:`rl_lustre.oncluster.queue`); without
    ``watch`` it does not watch Ray's node table (a local head has no node to lose). On
    capacity that ends (``capacity_end``, seconds since the epoch; ``lifetimes``: node-name
    prefixes and how long such nodes live) it tells NeMo-RL, before each attempt, to save
    ``save_margin`` seconds before the end (see :mod:`rl_lustre.oncluster.lifetimes`). The
    run's records go to ``run_dir`` on the volume (:mod:`rl_lustre.oncluster.rundir`). Its
    watchdog (:mod:`rl_lustre.oncluster.hangs`) declares a stall after ``hang_timeout`` seconds
    without progress (None: adaptive), ``startup_timeout`` until an attempt's first step is
    done; a diagnostics bundle then holds the Kubernetes events of ``kube_raycluster``'s pods.
    Nodes whose name starts with one of ``on_demand`` are an on-demand fallback, recorded when
    the run holds them, with ``fallback_note`` (see :mod:`rl_lustre.oncluster.fallback`).

    Examples:
        >>> supervised("cd /opt/nemo-rl && uv run python x.py", python="python", max_restarts=3, nodes=8,
        ...            gpus_per_node=8, capacity_timeout=1800, checkpoint_dir="/lustre/c/run", poll=2,
        ...            settle=30, queue="demo", cluster_nodes=8)  # doctest: +NORMALIZE_WHITESPACE
        "python -m rl_lustre_oncluster.supervisor --max-restarts 3 --nodes 8 --gpus-per-node 8 --capacity-timeout 1800
         --poll 2 --settle 30 --siblings 5 --hang-grace 60 --queue demo --cluster-nodes 8 --priority 0
         --backfill-window 3600
         --checkpoint-dir /lustre/c/run -- 'cd /opt/nemo-rl && uv run python x.py'"
    """
    parts = [
        shlex.quote(python), "-m", f"{PACKAGE}.supervisor",
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
    if run_dir:
        parts += ["--run-dir", shlex.quote(run_dir)]
    if hang_timeout is not None:
        parts += ["--hang-timeout", _number(hang_timeout)]
    if startup_timeout is not None:
        parts += ["--startup-timeout", _number(startup_timeout)]
    if kube_raycluster:
        parts += ["--kube-raycluster", shlex.quote(kube_raycluster)]
        if kube_namespace:
            parts += ["--kube-namespace", shlex.quote(kube_namespace)]
    if capacity_end is not None or lifetimes:
        assert save_margin is not None, "a capacity that ends needs the save margin"
        if capacity_end is not None:
            parts += ["--capacity-end", _number(round(capacity_end, 3))]
        parts += [f"--lifetime={shlex.quote(f'{prefix}={_number(seconds)}')}" for prefix, seconds in lifetimes]
        parts += ["--save-margin", _number(save_margin)]
    parts += [f"--on-demand={shlex.quote(prefix)}" for prefix in on_demand]
    if on_demand and fallback_note:
        parts += ["--fallback-note", shlex.quote(fallback_note)]
    return " ".join([*parts, "--", shlex.quote(command)])


def shipped_package() -> str:
    """A directory holding the package ``rl_lustre_oncluster``, for the job's ``py_modules``.

    It is :mod:`rl_lustre.oncluster` whole: every file of it, at its place in it, under
    the name ``rl_lustre_oncluster`` (its modules import one another relatively, so they
    work under either name). Its parent directory is named by the content's hash, so Ray
    uploads it once per cluster and every process agrees on it. The files are read and
    hashed once per process; the directory is made again if something removed it.

    Examples:
        >>> import os
        >>> from rl_lustre import oncluster
        >>> d = shipped_package()
        >>> os.path.basename(d)
        'rl_lustre_oncluster'
        >>> here = os.path.dirname(oncluster.__file__)
        >>> def tree(root):
        ...     return sorted(os.path.relpath(os.path.join(top, f), root)
        ...                   for top, _, files in os.walk(root) for f in files if "__pycache__" not in top)
        >>> tree(d) == tree(here)
        True
    """
    root, files = shipped_files()
    package = root / PACKAGE
    if not (package / "__init__.py").is_file():
        staging = Path(tempfile.mkdtemp(prefix="rl-lustre-oncluster-"))
        for relative, content in files.items():
            target = staging / PACKAGE / relative
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
def shipped_files() -> tuple[Path, dict[str, bytes]]:
    """Where the shipped package goes (named by its content's hash) and ``{path: content}`` of its files."""
    from .. import oncluster

    here = Path(oncluster.__file__).parent
    files = {
        path.relative_to(here).as_posix(): path.read_bytes()
        for path in sorted(here.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    digest = hashlib.sha256(json.dumps({k: v.hex() for k, v in sorted(files.items())}).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"rl-lustre-oncluster-{digest}", files
