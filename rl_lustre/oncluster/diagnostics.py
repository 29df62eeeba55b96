"""Diagnostics bundles: the evidence of a stalled run, kept on the volume before it is restarted.

When the watchdog (:mod:`.watchdog`) finds a run stalled, the supervisor writes a bundle into
the run's directory (:mod:`.rundir`) before it stops anything, one directory per stall::

    <run dir>/diagnostics/<UTC time>-attempt<N>-step<S>/
        summary.txt         who is where, for people: the stall, then the processes grouped
                            by the frame they are in ("7 of 8 processes in all_reduce ...")
        bundle.json         the same for programs: the stall, every process (node, pid, role,
                            state, where), what could not be collected and why
        stacks/<node>/<pid>-<role>.txt
                            each process's Python stack (py-spy, through Ray's dashboard agent
                            on the process's node where it can)
        processes.json      the run's processes on every node (the process tree)
        ray/status.txt      ``ray status``; ray/nodes.json, ray/actors.json,
                            ray/placement_groups.json: Ray's state API
        kubernetes/events.json
                            the Kubernetes events of the RayCluster's pods (GKE)
        logs/driver.log     the last lines the attempt printed; logs/<node>/...: the last
                            lines of the run's Ray workers' logs and of each node's raylet
        nccl/               PyTorch's NCCL flight recorder dumps, one per rank (:mod:`.nccl`)

Nothing secret goes in (a bundle is exported with the run's results): every text is passed
through :class:`Scrubber` before it is written. The names are this module's: the client reads
bundles back through it (``run.diagnostics()``).

Standard library only (part of the on-cluster package).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BUNDLE_JSON",
    "DIAGNOSTICS_MARK",
    "LOGS",
    "NCCL",
    "RAY",
    "STACKS",
    "SUMMARY",
    "Scrubber",
    "bundle_name",
    "list_bundles",
    "write_json",
    "write_text",
]

SUMMARY = "summary.txt"
BUNDLE_JSON = "bundle.json"
STACKS = "stacks"
PROCESSES = "processes.json"
RAY = "ray"
KUBERNETES = "kubernetes"
LOGS = "logs"
NCCL = "nccl"
# The journal event that announces a bundle (oncluster.records), read by run.diagnostics().
DIAGNOSTICS_MARK = "diagnostics"

REDACTED = "REDACTED"
_SECRET_NAME = re.compile(r"(?i)token|secret|passw|api_?key|credential|private_?key")
# Shapes that are secrets wherever they appear: Hugging Face tokens, bearer credentials.
_SECRET_SHAPES = (
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),
    re.compile(r"(?i)(?<=bearer )[A-Za-z0-9._~+/=-]{8,}"),
)
_MIN_SECRET = 8


class Scrubber:
    """Replaces secrets in text before it is written: the values of this process's
    environment variables whose names look secret (``HF_TOKEN``, ``WANDB_API_KEY``, ...; the
    pods get them from the cluster's Kubernetes Secret), the Ray auth token, and secret shapes.

    Examples:
        >>> s = Scrubber({"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwx", "WANDB_API_KEY": "0123456789abcdef", "A": "x"})
        >>> s("key=0123456789abcdef tok=hf_zyxwvutsrqponmlkjihgfedc x")
        'key=REDACTED tok=REDACTED x'
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = dict(os.environ if environ is None else environ)
        values = {v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= _MIN_SECRET}
        path = env.get("RAY_AUTH_TOKEN_PATH")
        if path:
            try:
                with open(path) as f:
                    token = f.read().strip()
                if len(token) >= _MIN_SECRET:
                    values.add(token)
            except OSError:
                pass
        # Longest first, so that a secret containing another is replaced whole.
        self._values = sorted(values, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        for shape in _SECRET_SHAPES:
            text = shape.sub(REDACTED, text)
        return text


def bundle_name(at: float, attempt: int, step: int) -> str:
    """A bundle's directory name: when, which attempt, which step.

    Examples:
        >>> bundle_name(0.0, 2, 143)
        '19700101T000000Z-attempt2-step143'
    """
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(at))}-attempt{attempt}-step{step}"


def _safe(relative: str) -> str:
    parts = [p for p in relative.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    return os.path.join(*(re.sub(r"[^A-Za-z0-9_.@+-]", "_", p)[:120] for p in parts))


def write_text(bundle: str, relative: str, text: str, scrub: Scrubber) -> str:
    """Write ``text`` (scrubbed) to ``bundle/relative``; returns the path."""
    path = os.path.join(bundle, _safe(relative))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", errors="replace") as f:
        f.write(scrub(text))
    return path


def write_json(bundle: str, relative: str, value: Any, scrub: Scrubber) -> str:
    """Write ``value`` as indented JSON (scrubbed) to ``bundle/relative``; returns the path."""
    return write_text(bundle, relative, json.dumps(value, indent=2, sort_keys=True, default=str) + "\n", scrub)


def list_bundles(diagnostics_dir: str) -> list[dict[str, Any]]:
    """The bundles under a run's ``diagnostics/`` directory, oldest first: each one's
    ``bundle.json`` with its ``path`` (a bundle without one, cut short, has its path only)."""
    try:
        names = sorted(os.listdir(diagnostics_dir))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(diagnostics_dir, name)
        if name == NCCL or not os.path.isdir(path):
            continue
        try:
            with open(os.path.join(path, BUNDLE_JSON), encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
            record = {}
        out.append({**(record if isinstance(record, dict) else {}), "path": path})
    return out
