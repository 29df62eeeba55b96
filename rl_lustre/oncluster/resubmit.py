"""A run resubmitted after its head was lost: what goes to the new head, built from the run's directory.

The keeper (:mod:`.keeper`) resubmits a run from what its supervisor recorded in the run's
directory (:mod:`.runrecords`): the same command (the supervisor's own command line), the same
metadata (its place in the queue, ``submitted_at`` and ``seq``, included) plus
:data:`~.records.HEAD_LOST`, and the runtime env with the packages the lost head held
(``gcs://`` URIs in its store, gone with it) uploaded again from the run's ``packages/``.

The submission id is the run id and the new head's identity: deterministic, so a keeper
that restarts half-way through resubmitting finds its earlier submission taken (Ray refuses
a second job of the same id) instead of starting the run twice.

Standard library only at module level; Ray's job SDK (the image's Ray) inside :func:`submit`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from . import rundir
from .records import HEAD_LOST, PRIORITY, RUN_ID, SEQ, SUBMITTED_AT
from .runview import RunView

__all__ = ["Resubmission", "order", "resubmission", "submission_id", "submit"]

# Metadata the resubmission sets afresh.
_ATTEMPT = "rl_lustre.attempt"


class Resubmission:
    """What the keeper sends for one run: entrypoint, submission id, runtime env, metadata."""

    def __init__(
        self, run_id: str, entrypoint: str, submission_id: str, runtime_env: dict[str, Any], metadata: dict[str, str]
    ) -> None:
        self.run_id = run_id
        self.entrypoint = entrypoint
        self.submission_id = submission_id
        self.runtime_env = runtime_env
        self.metadata = metadata

    def __repr__(self) -> str:
        return f"Resubmission({self.submission_id!r})"


def submission_id(run_id: str, session: str) -> str:
    """The id of ``run_id``'s resubmission to the head whose session is ``session``.

    Examples:
        >>> submission_id("rl-lustre-tiny-0a1b2c3d", "session_2025-01-01_00-00-00_000000_1")
        'rl-lustre-tiny-0a1b2c3d-hadd7a466'
    """
    return f"{run_id}-h{hashlib.sha256(session.encode()).hexdigest()[:8]}"


def resubmission(view: RunView, session: str, lost: dict[str, Any]) -> Resubmission | None:
    """The resubmission of the run in ``view`` to the head of ``session`` after the loss ``lost``;
    None when its directory lacks what a resubmission needs (its ``submission.json``)."""
    submitted = view.submission
    if not submitted or not submitted.get("entrypoint"):
        return None
    metadata = {str(k): str(v) for k, v in (submitted.get("metadata") or {}).items()}
    run_id = metadata.get(RUN_ID) or view.path.name
    metadata[RUN_ID] = run_id
    metadata[HEAD_LOST] = json.dumps(lost, sort_keys=True)
    metadata[_ATTEMPT] = str(len(view.submissions) + 1)
    return Resubmission(
        run_id,
        str(submitted["entrypoint"]),
        submission_id(run_id, session),
        _runtime_env(dict(submitted.get("runtime_env") or {}), view.path),
        metadata,
    )


def _runtime_env(env: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The run's runtime env with what the lost head stored (``gcs://``) taken from ``packages/``.

    Examples:
        >>> _runtime_env({"py_modules": ["gcs://_ray_pkg_1.zip"], "env_vars": {"A": "1"}}, Path("/v/r"))
        {'py_modules': ['/v/r/packages/rl_lustre_oncluster'], 'env_vars': {'A': '1'}}
    """
    packages = run_dir / rundir.PACKAGES
    out = dict(env)
    modules = out.get("py_modules")
    if isinstance(modules, list):
        ours = str(packages / rundir.PACKAGE)
        kept = [m for m in modules if not (isinstance(m, str) and m.startswith("gcs://"))]
        out["py_modules"] = [ours, *kept] if len(kept) < len(modules) else kept
    working_dir = out.get("working_dir")
    if isinstance(working_dir, str) and working_dir.startswith("gcs://"):
        out["working_dir"] = str(packages / "working_dir")
        out.pop("excludes", None)  # applied when it was first uploaded
    return out


def order(view: RunView) -> tuple[Any, ...]:
    """The runs' order of resubmission: those that held their nodes first, then the queue's
    order (priority, then submission time and place in its batch)."""
    meta = (view.submission or {}).get("metadata") or {}

    def number(key: str) -> float:
        try:
            return float(meta.get(key, 0))
        except (TypeError, ValueError):
            return 0.0

    return (0 if view.held else 1, -number(PRIORITY), number(SUBMITTED_AT), number(SEQ), view.path.name)


def submit(address: str, headers: dict[str, str], item: Resubmission) -> bool:
    """Submit ``item`` through Ray's job SDK (which uploads the local packages first); False
    when the head already has a job of that id (an earlier keeper sent it)."""
    from ray.job_submission import JobSubmissionClient

    for name in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        os.environ.pop(name, None)  # the SDK would prefer them to the address given
    client = JobSubmissionClient(address, headers=headers or {"Authorization": ""})
    try:
        client.submit_job(
            entrypoint=item.entrypoint,
            submission_id=item.submission_id,
            runtime_env=item.runtime_env,
            metadata=item.metadata,
        )
    except RuntimeError as exc:
        if "already exists" in str(exc):
            return False
        raise
    return True
