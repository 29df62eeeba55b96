"""What the supervisor is told: its command line, and what Ray passes the job's entrypoint.

:func:`parser` reads ``python -m rl_lustre_oncluster.supervisor [options] -- COMMAND``;
:func:`job_config` the metadata the job was submitted with (its submission id among
them); :func:`claim_of` and :func:`store_of` turn both into the job's claim in the
cluster's queue and the queue's ledger on the head. Standard library only: shipped with
the supervisor.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from typing import Any

from . import lifetimes
from .queue.claims import Claim, Store, queue_root
from .records import SEQ, SUBMITTED_AT
from .watchdog import DEFAULT_FLOOR, DEFAULT_STARTUP

__all__ = ["PREFIX", "claim_of", "job_config", "parser", "store_of"]

PREFIX = "rl_lustre supervisor:"


def job_config() -> dict[str, Any]:
    """What Ray tells a job's entrypoint about its submission: its metadata (with the submission id)."""
    try:
        config = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    except ValueError:
        return {}
    metadata = config.get("metadata") if isinstance(config, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def claim_of(args: argparse.Namespace, meta: dict[str, Any], submission_id: str | None) -> Claim:
    """This job's claim, from its command line and the metadata it was submitted with."""

    def number(key: str, default: float) -> float:
        try:
            return float(meta.get(key, default))
        except (TypeError, ValueError):
            return default

    return Claim(
        job=submission_id or f"pid-{os.getpid()}",
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        cluster_nodes=args.cluster_nodes or args.nodes,
        priority=args.priority,
        submitted_at=number(SUBMITTED_AT, time.time()),
        seq=int(number(SEQ, 0)),
        backfill_window=args.backfill_window,
        pid=os.getpid(),
    )


def store_of(args: argparse.Namespace) -> Store:
    """The cluster's ledger on this head; refuses to run anywhere but on the head."""
    if args.queue_dir:
        return Store(args.queue_dir)
    address = os.environ.get("RAY_ADDRESS", "")
    host = address.rsplit(":", 1)[0].strip("[]")
    if not address or not _local(host):
        raise SystemExit(
            f"{PREFIX} the rl_lustre supervisor runs on the Ray head, where the cluster's queue is; it was "
            f"started on {socket.gethostname()} with RAY_ADDRESS={address!r}: is "
            "RAY_JOB_ALLOW_DRIVER_ON_WORKER_NODES set on the head?"
        )
    return Store(queue_root(address, args.queue))


def _local(host: str) -> bool:
    """Whether ``host`` is an address of this machine."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
        return True
    except OSError:
        return False


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rl_lustre_oncluster.supervisor",
        allow_abbrev=False,
        description="Wait for the job's nodes in the cluster's queue, run a command, and "
        "rerun it after Ray worker nodes were lost.",
    )
    p.add_argument("--max-restarts", type=int, default=3)
    p.add_argument("--nodes", type=int, default=0, help="the GPU nodes the run takes (0: no queue, no watch)")
    p.add_argument("--gpus-per-node", type=float, default=0)
    p.add_argument("--no-watch", action="store_true", help="do not watch Ray's node table for lost nodes")
    p.add_argument("--queue", default="", metavar="NAME", help="wait in this cluster's queue on the Ray head first")
    p.add_argument("--queue-dir", default="", help=argparse.SUPPRESS)
    p.add_argument("--cluster-nodes", type=int, default=0, help="the cluster's nodes (default: --nodes)")
    p.add_argument("--priority", type=int, default=0)
    p.add_argument("--backfill-window", type=float, default=3600.0)
    p.add_argument("--capacity-timeout", type=float, default=1800.0)
    p.add_argument("--checkpoint-dir", default="")
    p.add_argument(
        "--run-dir", default="", metavar="DIR", help="the run's directory on the volume (oncluster/rundir.py)"
    )
    p.add_argument(
        "--capacity-end",
        type=float,
        default=None,
        metavar="EPOCH",
        help="when the capacity granted at submission ends (seconds since the epoch)",
    )
    p.add_argument(
        "--lifetime",
        type=lifetimes.parse_lifetime,
        action="append",
        default=[],
        metavar="PREFIX=SECONDS",
        help="nodes whose name starts with PREFIX live at most SECONDS",
    )
    p.add_argument(
        "--save-margin",
        type=float,
        default=None,
        help="seconds before a capacity's end by which NeMo-RL must have saved",
    )
    p.add_argument(
        "--on-demand",
        action="append",
        default=[],
        metavar="PREFIX",
        help="nodes whose name starts with PREFIX are on-demand, a fallback of the capacity policy (fallback.py)",
    )
    p.add_argument("--fallback-note", default="", help="what running on them means (the policy's first choice, cost)")
    p.add_argument("--poll", type=float, default=1.0)
    p.add_argument(
        "--hang-grace", type=float, default=60.0, help="kill an attempt still running this long after a lost node"
    )
    p.add_argument(
        "--hang-timeout",
        type=float,
        default=None,
        help="a stall: no progress for this long (default: adaptive, see oncluster/watchdog.py)",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=DEFAULT_STARTUP,
        help="the silence allowed until an attempt's first step is done",
    )
    p.add_argument("--hang-floor", type=float, default=DEFAULT_FLOOR, help="the adaptive hang timeout's minimum")
    p.add_argument("--kube-raycluster", default="", help="the RayCluster whose pods' events a bundle holds")
    p.add_argument("--kube-namespace", default="", help="its namespace (default: the head pod's)")
    p.add_argument("--kube-credentials", default="", help="the service account's token and CA (default: the pod's own)")
    p.add_argument("--settle", type=float, default=3.0, help="seconds to look for lost nodes after the command failed")
    p.add_argument(
        "--siblings", type=float, default=5.0, help="seconds to look on for more lost nodes after one was found lost"
    )
    p.add_argument("command", help="the shell command (after --)")
    return p
