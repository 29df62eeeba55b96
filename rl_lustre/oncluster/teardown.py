"""Teardown's mark on the volume: the runs in flight are stopped, and the keeper's history ends.

``python -m rl_lustre_oncluster.teardown --cluster NAME --mount /lustre``

``down()`` stops the keeper first, then runs this (locally in its own process, on GKE as a
helper job on the head), then stops the runs: every run of the cluster the volume says is in
flight gets the ``stopped`` marker (``by: teardown``), so that no keeper of a later cluster on
the same volume resubmits it; and the keeper's history gets a ``down`` record (under a turn of
its own, :class:`~.runrecords.Generation`: a keeper still running writes nothing more), so
that the next keeper takes the next head for a new cluster, not for a lost head. A head
found lost for good (``lost``: why, from where it ran) is recorded first, if its keeper had
not recorded it: told by ``down()`` (a local head's status), or read from the keeper's last
record that the head did not answer.

Standard library only (part of the on-cluster package).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import rundir
from .records import VERSION
from .runrecords import Generation, mark_stopped
from .runview import RunView, history

__all__ = ["main", "teardown"]

_CLUSTER = "rl_lustre.cluster"


def teardown(mount_path: str, cluster: str, *, lost: dict[str, Any] | None = None) -> list[str]:
    """Mark the cluster's runs in flight stopped by teardown and end the keeper's history;
    returns the runs marked. ``lost``: the head's loss (``head``, ``reason``, ``lost_at``),
    when the head is gone and its keeper may not have recorded it."""
    marked = []
    try:
        dirs = sorted(p for p in Path(rundir.runs_dir(mount_path)).iterdir() if p.is_dir())
    except OSError:
        dirs = []
    for path in dirs:
        view = RunView(path)
        meta = (view.submission or {}).get("metadata") or {}
        if view.in_flight and meta.get(_CLUSTER, cluster) == cluster and mark_stopped(path, "teardown"):
            marked.append(path.name)
    root = Path(rundir.keeper_dir(mount_path, cluster))
    if not root.is_dir() and not marked:
        return marked
    Generation.claim(root, {"role": "teardown"})
    records = history(mount_path, cluster)
    if lost is None:
        lost = _unanswered(records)
    known = {round(float(r.get("lost_at") or 0), 3) for r in records if r.get("event") == "lost"}
    with open(root / rundir.HEADS, "a") as f:
        if lost is not None and round(float(lost.get("lost_at") or 0), 3) not in known:
            f.write(
                json.dumps({"v": VERSION, "at": round(time.time(), 3), "event": "lost", **lost}, sort_keys=True) + "\n"
            )
        f.write(json.dumps({"v": VERSION, "at": round(time.time(), 3), "event": "down", "stopped": marked}) + "\n")
    return marked


def _unanswered(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The head's loss as its keeper last saw it, when the last thing it recorded of the cluster's
    heads is that one did not answer (and no head came after).

    Examples:
        >>> seen = [{"event": "head", "session": "s1"}, {"event": "unanswered", "session": "s1",
        ...     "head": "demo-head-x", "reason": "Evicted", "lost_at": 5.0}]
        >>> _unanswered(seen)
        {'session': 's1', 'head': 'demo-head-x', 'reason': 'Evicted', 'lost_at': 5.0}
        >>> _unanswered(seen + [{"event": "answered", "session": "s1"}]) is None
        True
    """
    marks = [r for r in records if r.get("event") in ("head", "answered", "unanswered", "lost", "down")]
    if not marks or marks[-1].get("event") != "unanswered":
        return None
    return {k: marks[-1].get(k) for k in ("session", "head", "reason", "lost_at")}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rl_lustre_oncluster.teardown", allow_abbrev=False)
    p.add_argument("--cluster", required=True)
    p.add_argument("--mount", required=True)
    args = p.parse_args(argv)
    marked = teardown(args.mount, args.cluster)
    print(json.dumps({"stopped": marked}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
