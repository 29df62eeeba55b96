"""``status``, ``logs``, ``checkpoints`` and ``stop``: a job on a running deployment; ``queue``: its jobs."""

from __future__ import annotations

import time
from typing import Any

import click

from ._common import emit, json_option, load, target_argument

job_argument = click.argument("job_id", metavar="JOB_ID")


def _run(target: str, job_id: str) -> Any:
    return load(target).attach(job_id)


def queue_json(state: Any) -> dict[str, Any]:
    """A job's queue state as plain JSON."""
    return {
        "state": state.state,
        "place": state.place,
        "queued": state.queued,
        "nodes": state.nodes,
        "usable": state.usable,
        "capacity": state.capacity,
        "ahead": [list(a) for a in state.ahead],
        "waiting_for": state.waiting_for,
        "since": state.since,
        "slots": list(state.slots),
    }


def _clock(at: float | None) -> str:
    if at is None:
        return "?"
    return time.strftime("%H:%M:%S UTC", time.gmtime(at))


@click.command(name="queue")
@target_argument
@json_option
def queue(target: str, as_json: bool) -> None:
    """List TARGET's queue: the jobs holding nodes, then those waiting, in order."""
    entries = load(target).queue()
    now = time.time()
    rows = [{"job_id": run.job_id, **queue_json(state)} for run, state in entries]

    def text() -> str:
        if not rows:
            return "the queue is empty: no job of rl_lustre's is running or waiting"
        lines = [f"{'place':<6}{'job':<44}{'nodes':>5}  {'state':<11}{'waited':>8}  waiting for"]
        for run, state in entries:
            place = str(state.place) if state.state == "queued" and state.place else "-"
            waited = f"{now - state.since:.0f}s" if state.since and state.state == "queued" else "-"
            lines.append(
                f"{place:<6}{run.job_id:<44}{state.nodes:>5}  {state.state:<11}{waited:>8}  {state.waiting_for or '-'}"
            )
        return "\n".join(lines)

    emit(rows, as_json, text)


@click.command()
@target_argument
@job_argument
@json_option
def status(target: str, job_id: str, as_json: bool) -> None:
    """Show JOB_ID's status and progress on TARGET, and what the deployment cost while it ran."""
    run = _run(target, job_id)
    info = run.info()
    status = run.status()
    queue = run.queue() if not info.terminal else None
    progress = run.progress
    cost = run.cost_so_far()
    notes = run.notes()  # an on-demand fallback, a rehearsal, nothing left to do
    data = {
        "job_id": job_id,
        "status": status,
        "message": info.message,
        "step": progress.step,
        "completed_steps": progress.completed,
        "total_steps": progress.total,
        "cost_so_far_usd": cost,
        "queue": None if queue is None else queue_json(queue),
        "notes": notes,
    }
    if status == "QUEUED" and queue is not None:
        text = f"{job_id}: QUEUED ({queue}; since {_clock(queue.since)})"
    else:
        text = f"{job_id}: {status} ({progress})"
    if info.message:
        text += f"\n  {info.message}"
    text += "".join(f"\n  {note}" for note in notes)
    if cost is not None:
        text += f"\n  deployment cost while it ran: ${cost:,.2f}"
    emit(data, as_json, text)


@click.command()
@target_argument
@job_argument
@click.option("-f", "--follow", is_flag=True, help="Keep printing lines as they come until the job ends.")
@click.option("--raw", is_flag=True, help="Keep the supervisor's journal records (RL_LUSTRE_EVENT lines).")
def logs(target: str, job_id: str, follow: bool, raw: bool) -> None:
    """Print JOB_ID's log (Ctrl-C stops following; the job keeps running)."""
    run = _run(target, job_id)
    if not follow:
        click.echo(run.logs(records=raw), nl=False)
        return
    try:
        for line in run.logs(follow=True, records=raw):
            click.echo(line)
    except KeyboardInterrupt:
        click.echo(f"stopped following; {job_id} keeps running", err=True)


@click.command()
@target_argument
@job_argument
@json_option
def checkpoints(target: str, job_id: str, as_json: bool) -> None:
    """List JOB_ID's complete checkpoints, with size and write time."""
    found = _run(target, job_id).checkpoints()
    data = [c.to_dict() for c in found]

    def text() -> str:
        rows = [("step", "MB", "seconds", "MB/s", "path")]
        rows += [
            (
                str(c.step),
                f"{c.size_bytes / 1e6:.1f}",
                "-" if c.save_seconds is None else f"{c.save_seconds:.3f}",
                "-" if c.mb_per_second is None else f"{c.mb_per_second:.0f}",
                c.path,
            )
            for c in found
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        return "\n".join("  ".join(r[i].rjust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows)

    emit(data, as_json, text if found else f"{job_id} has no complete checkpoint yet")


@click.command()
@target_argument
@job_argument
@json_option
@click.option("--no-wait", is_flag=True, help="Ask the job to stop and return at once.")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds to wait for it to stop.")
def stop(target: str, job_id: str, as_json: bool, no_wait: bool, timeout: float) -> None:
    """Stop JOB_ID (the deployment keeps running)."""
    final = _run(target, job_id).stop(wait=not no_wait, timeout=timeout)
    emit({"job_id": job_id, "status": final}, as_json, f"{job_id}: {final}")
