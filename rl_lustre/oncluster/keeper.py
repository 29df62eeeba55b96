"""The keeper: outside the Ray head, it brings back the runs a lost head took with it.

``python -m rl_lustre_oncluster.keeper --cluster NAME --mount /lustre --dashboard URL``

Without GCS fault tolerance a new Ray head starts with an empty job table, and every
driver (our supervisors) died with the old one. The keeper runs where the head does not
(on GKE a Deployment of its own on the CPU pool; locally a process beside the head) and
every ``--poll`` seconds:

1. asks the head who it is (``/api/version``'s ``session_name``, new for every head, also
   for a head container restarted in place);
2. when that changed, records the loss in ``<mount>/rl_lustre/keeper/<cluster>/heads.jsonl``
   with why the head went (:mod:`.headpods`: ``OOMKilled``, ``Evicted``, ...);
3. looks for runs the volume says are in flight (:mod:`.runview`: neither ended, stopped
   nor given up) of which the head's job table knows nothing, and resubmits them
   (:mod:`.resubmit`) in their queue order: the runs that held their nodes first, then the
   queue's, each once its predecessor's supervisor has taken its run over, so that the
   queue on the new head is the old one's. Their supervisors resume from their newest
   checkpoints, as after a preemption.

Bounds: a run whose ``max_restarts`` is used up (every cause counts), or whose head went
down under it the ``--max-losses``-th time in ``--loss-window`` seconds, is not resubmitted:
the keeper leaves ``given_up`` in its directory, saying why (and the head's last
termination reason), which the run's handle reports.

One keeper acts at a time: each claims the next turn in its directory's ``owners/``
(:class:`~.runrecords.Generation`) and exits once a later one has begun. Resubmissions
have deterministic ids (:func:`~.resubmit.submission_id`), so a keeper restarted half-way
never starts a run twice. The laptop that submitted the runs is never needed.

Standard library only; the image's Ray for submitting (:func:`~.resubmit.submit`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import rundir
from .headpods import KubeHead, LocalHead, Loss
from .records import RUN_ID, VERSION
from .resubmit import order, resubmission, submit
from .runrecords import Generation
from .runview import RunView, history

__all__ = ["Keeper", "main"]

PREFIX = "rl_lustre keeper:"
# How long a resubmitted run's supervisor may take to take its run over before the next goes.
_TAKEOVER = 90.0
_MAX_RESTARTS = "rl_lustre.max_restarts"
_CLUSTER = "rl_lustre.cluster"


def _say(text: str) -> None:
    sys.stdout.write(f"{time.strftime('%H:%M:%S')} {PREFIX} {text}\n")
    sys.stdout.flush()


class Keeper:
    """One keeper of the cluster ``args.cluster``'s runs (see the module's docstring)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = Path(rundir.keeper_dir(args.mount, args.cluster))
        self.runs = Path(rundir.runs_dir(args.mount))
        self.stopping = threading.Event()
        self.platform: KubeHead | LocalHead | None = None
        if args.raycluster:
            self.platform = KubeHead(args.raycluster, args.namespace, credentials=args.kube_credentials, say=_say)
        elif args.head_status:
            self.platform = LocalHead(args.head_status)
        self.generation = Generation.claim(self.root, {"role": "the keeper", "cluster": args.cluster})
        records = history(args.mount, args.cluster)
        # The head it kept last, unless the cluster was torn down since (the next head is a new cluster's).
        marks = [r for r in records if r.get("event") in ("head", "down")]
        self.known: str | None = str(marks[-1]["session"]) if marks and marks[-1]["event"] == "head" else None
        self.losses = [r for r in records if r.get("event") == "lost"]
        self.down_since: float | None = None
        # What the last "unanswered" record said (head, reason), while the head does not answer.
        self.silent: tuple[Any, Any] | None = None
        # When the runs were last checked against the head's job table (monotonic), and since
        # when a local head's directory is missing.
        self.reconciled: float | None = None
        self.missing_since: float | None = None

    # -- records -----------------------------------------------------------------------------

    def record(self, record: dict[str, Any]) -> None:
        if self.generation.superseded():
            return
        full = {"v": VERSION, "at": round(time.time(), 3), **record}
        with open(self.root / rundir.HEADS, "a") as f:
            f.write(json.dumps(full, sort_keys=True) + "\n")

    # -- the head ----------------------------------------------------------------------------

    def head(self) -> tuple[str, dict[str, str]] | None:
        """The head's dashboard address and the headers to send it; None while none is known."""
        args = self.args
        token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
        if args.head_file:
            try:
                state = json.loads(Path(args.head_file).read_text())
            except (OSError, ValueError):
                return None
            url = str(state.get("dashboard_url") or "")
            if args.token_file:
                try:
                    token = Path(args.token_file).read_text().strip()
                except OSError:
                    token = ""
        else:
            url = args.dashboard
        if not url:
            return None
        return url.rstrip("/"), ({"Authorization": f"Bearer {token}"} if token else {})

    def _get(self, url: str, headers: dict[str, str], path: str) -> Any:
        request = urllib.request.Request(url + path, headers=headers)
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def session(self, url: str, headers: dict[str, str]) -> str | None:
        try:
            return str(self._get(url, headers, "/api/version")["session_name"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # -- one look ----------------------------------------------------------------------------

    def gone_for_good(self) -> bool:
        """A local head whose directory is gone was stopped, not lost (``down()`` or its ``stop()``):
        nothing will come back (a lost one's successor starts in the same directory at once)."""
        if not self.args.head_file or Path(self.args.head_file).parent.is_dir():
            self.missing_since = None
            return False
        if self.missing_since is None:
            self.missing_since = time.monotonic()
        return time.monotonic() - self.missing_since >= 5.0

    def tick(self) -> None:
        if self.platform is not None:
            self.platform.look()
        head = self.head()
        session = self.session(*head) if head is not None else None
        if head is None or session is None:
            if self.down_since is None:
                self.down_since = time.time()
                _say("the Ray head does not answer; waiting for it")
            self.unanswered()
            return
        if self.silent is not None and session == self.known:
            self.record({"event": "answered", "session": session})
        self.silent = None
        if session != self.known:
            if self.known is not None:
                self.lost(session)
            _say(f"the Ray head is {session}")
            self.record({"event": "head", "session": session})
            self.known, self.reconciled = session, None
        self.down_since = None
        if self.platform is not None:
            self.platform.healthy()
        # At once on a new head; then now and again, for runs a restarted keeper finds missing.
        due = self.reconciled is None or time.monotonic() - self.reconciled >= self.args.reconcile_every
        if due and self.reconcile(head[0], head[1], session):
            self.reconciled = time.monotonic()

    def unanswered(self) -> None:
        """Record that the head the keeper knew does not answer, and why as far as known now
        (again when that changes): if no head comes back before the cluster is torn down,
        teardown records this as the head's loss (:func:`.teardown.teardown`)."""
        if self.known is None:
            return
        why = self.platform.why() if self.platform is not None else Loss(head="the Ray head", reason="lost")
        told = (why.get("head"), why.get("reason"))
        if told == self.silent:
            return
        self.silent = told
        at = why.get("at") or self.down_since or time.time()
        self.record({"event": "unanswered", "session": self.known, "head": told[0], "reason": told[1], "lost_at": at})

    def lost(self, new: str) -> None:
        why = self.platform.why() if self.platform is not None else Loss(head="the Ray head", reason="lost")
        at = why.get("at") or self.down_since or time.time()
        loss = {
            "event": "lost",
            "session": self.known,
            "head": why.get("head"),
            "reason": why.get("reason"),
            "lost_at": at,
        }
        self.record(loss)
        self.losses.append(loss)
        _say(f"the Ray head {self.known} was lost ({why.get('reason')}: {why.get('head')}); the new one is {new}")

    def in_flight(self) -> list[RunView]:
        """The runs of this cluster the volume says are in flight."""
        try:
            dirs = sorted(p for p in self.runs.iterdir() if p.is_dir())
        except OSError:
            return []
        found = []
        for path in dirs:
            view = RunView(path)
            meta = (view.submission or {}).get("metadata") or {}
            if view.in_flight and meta.get(_CLUSTER, self.args.cluster) == self.args.cluster:
                found.append(view)
        return found

    def reconcile(self, url: str, headers: dict[str, str], session: str) -> bool:
        """Resubmit the in-flight runs the head's job table lacks, in their queue order; False
        when that could not be done now (the next look tries again)."""
        views = self.in_flight()
        if not views:
            return True
        try:
            table = self._get(url, headers, "/api/jobs/")
        except (OSError, ValueError):
            return False
        known = {
            str((j.get("metadata") or {}).get(RUN_ID) or j.get("submission_id")) for j in table if isinstance(j, dict)
        }
        missing = sorted((v for v in views if _run_id(v) not in known), key=order)
        done = True
        for view in missing:
            if self.stopping.is_set() or self.generation.superseded():
                return False
            done = self.resubmit(url, headers, session, view) and done
        return done

    def resubmit(self, url: str, headers: dict[str, str], session: str, view: RunView) -> bool:
        run = _run_id(view)
        loss = self.losses[-1] if self.losses else {"reason": "lost", "head": "the Ray head"}
        lost = {k: loss.get(k) for k in ("lost_at", "head", "reason", "session")}
        lost["lost_at"] = lost.get("lost_at") or view.last_at or time.time()
        meta = (view.submission or {}).get("metadata") or {}
        limit = _int(meta.get(_MAX_RESTARTS), 3)
        # This run's head losses in the window: those it recovered from, and this one.
        since = time.time() - self.args.loss_window
        earlier = [r for r in view.restarts if r.get("cause") == "head-lost" and float(r.get("lost_at") or 0) >= since]
        window = [*earlier, lost]
        why = None
        if len(view.restarts) >= limit:
            why = (
                "recovery is off (max_restarts=0)"
                if limit == 0
                else f"max_restarts={limit} is used up ({len(view.restarts)} restarts)"
            )
        elif len(window) >= self.args.max_losses:
            why = (
                f"its Ray head was lost {len(window)} times in {self.args.loss_window / 60:g} minutes, the last "
                f"time {loss.get('reason')} ({loss.get('head')})"
            )
        if why is not None:
            self.give_up(view, f"not resubmitted after its Ray head was lost ({loss.get('reason')}): {why}", loss)
            return True
        item = resubmission(view, session, lost)
        if item is None:
            self.give_up(view, "its directory has no submission.json: it cannot be resubmitted", loss)
            return True
        try:
            sent = submit(url, headers, item)
        except Exception as exc:  # the new head may still be starting: the next look tries again
            _say(f"could not resubmit {run}: {type(exc).__name__}: {exc}")
            return False
        self.record({"event": "resubmitted", "run": run, "submission": item.submission_id, "session": session})
        _say(f"resubmitted {run} as {item.submission_id}" + ("" if sent else " (already there)"))
        deadline = time.monotonic() + _TAKEOVER
        while time.monotonic() < deadline and not self.stopping.is_set():
            now = RunView(view.path)
            if now.current == item.submission_id or not now.in_flight:
                return True
            self.stopping.wait(0.2)
        _say(f"{item.submission_id} has not taken its run over after {_TAKEOVER:g}s; going on")
        return True

    def give_up(self, view: RunView, why: str, loss: dict[str, Any]) -> None:
        body = {
            "v": VERSION,
            "at": round(time.time(), 3),
            "why": why,
            "reason": loss.get("reason"),
            "head": loss.get("head"),
        }
        try:
            fd = os.open(view.path / rundir.GIVEN_UP, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(body, sort_keys=True))
        self.record({"event": "gave_up", "run": _run_id(view), "why": why})
        _say(f"{_run_id(view)}: {why}")

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> int:
        _say(f"keeping the runs of {self.args.cluster} (turn {self.generation.n}; records in {self.root})")
        while not self.stopping.is_set():
            if self.generation.superseded():
                _say("a later keeper has begun; this one stops")
                return 0
            if self.gone_for_good():
                _say("the local head was stopped (its directory is gone); this keeper stops")
                return 0
            try:
                self.tick()
            except Exception as exc:  # one bad look must not end the keeper
                _say(f"{type(exc).__name__}: {exc}")
            self.stopping.wait(self.args.poll)
        return 0

    def stop(self, signum: int, frame: object) -> None:
        self.stopping.set()


def _run_id(view: RunView) -> str:
    return str(((view.submission or {}).get("metadata") or {}).get(RUN_ID) or view.path.name)


def _int(value: object, default: int) -> int:
    try:
        return int(str(value))
    except ValueError:
        return default


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rl_lustre_oncluster.keeper",
        allow_abbrev=False,
        description="Resubmit the runs a lost Ray head took with it, from their records on the volume.",
    )
    p.add_argument("--cluster", required=True, help="the cluster's name (its runs carry it)")
    p.add_argument("--mount", required=True, help="where the volume is mounted")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--dashboard", help="the head's dashboard (the RayCluster's head service)")
    where.add_argument("--head-file", help="a local head's state file (its dashboard changes with the head)")
    p.add_argument("--token-file", help="the local head's Ray token (else $RAY_AUTH_TOKEN)")
    p.add_argument("--head-status", help="a local head's status file: why it went")
    p.add_argument("--raycluster", help="the RayCluster whose head pods say why the head went")
    p.add_argument("--namespace", default="default")
    p.add_argument("--kube-credentials", default="/var/run/secrets/kubernetes.io/serviceaccount")
    p.add_argument("--poll", type=float, default=2.0)
    p.add_argument("--max-losses", type=int, default=3, help="head losses in --loss-window that end resubmitting")
    p.add_argument("--loss-window", type=float, default=1800.0)
    p.add_argument(
        "--reconcile-every",
        type=float,
        default=30.0,
        help="seconds between looks for runs the head lacks (besides each new head)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    keeper = Keeper(args)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, keeper.stop)
    return keeper.run()


if __name__ == "__main__":
    sys.exit(main())
