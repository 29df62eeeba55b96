"""``diagnose``: the evidence the watchdog kept when a run stalled (its newest bundle, or all)."""

from __future__ import annotations

from typing import Any

import click

from ._common import emit, json_option, load, target_argument


def _json(d: Any) -> dict[str, Any]:
    return {
        "path": d.path,
        "at": d.at,
        "attempt": d.attempt,
        "step": d.step,
        "phase": d.phase,
        "silence": d.silence,
        "summary": list(d.summary),
        "files": d.files(),
    }


@click.command()
@target_argument
@click.argument("job_id", metavar="JOB_ID")
@click.option("--all", "every", is_flag=True, help="Every bundle of the run, oldest first, not only the newest.")
@json_option
def diagnose(target: str, job_id: str, every: bool, as_json: bool) -> None:
    """Show the newest diagnostics bundle of JOB_ID on TARGET: when and where it stalled, who
    was where, and where the evidence is (its stacks, Ray's state, logs, NCCL dumps)."""
    found = load(target).attach(job_id).diagnostics()
    shown = found if every else found[-1:]

    def text() -> str:
        if not shown:
            return f"run {job_id} never stalled: no diagnostics bundle was kept"
        blocks = []
        for d in shown:
            try:
                body = d.read()
            except OSError:
                body = str(d)  # the bundle is on the cluster's volume, not readable from here
            else:
                listing = "\n".join(f"  {name}" for name in d.files())
                body = f"{body.rstrip()}\n\nFiles in {d.path}:\n{listing}"
            blocks.append(body)
        return "\n\n".join(blocks)

    emit([_json(d) for d in shown], as_json, text)
