"""A scripted stand-in for NeMo-RL's GRPO command, for the supervisor's hang tests: it prints
NeMo-RL's lines and writes its checkpoints (``tmp_step_N`` renamed ``step_N``), resumes from the
newest ``step_N``, and on the attempts its plan says, stalls -- inside a step or inside a save,
in a function whose name the diagnostics bundle's stack must show -- or dies of an NCCL
collective timeout the way PyTorch's watchdog ends a rank.

Run as ``python -m helpers.scripted_nemo PLAN.json`` (see :func:`plan`); each start counts one
attempt in the plan's ``attempts_file``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rl_lustre.oncluster import nemo_formats as formats
from rl_lustre.oncluster.nccl import DUMP_FILE

NCCL_LINE = (
    "[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=61, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 "
    "milliseconds before timing out."
)


def plan(tmp: Path, *, steps: int = 6, save_period: int = 2, step_seconds: float = 0.2, **attempts: Any) -> Path:
    """Write a plan: ``attempts`` maps ``a1``, ``a2``, ... (or ``every``) to what that attempt does:
    ``{"stall": "step"|"save", "at": k}``, ``{"nccl_timeout_at": k}``, ``{"first_step_seconds": s}``,
    ``{"slow_step": k, "seconds": s}``."""
    path = tmp / "plan.json"
    path.write_text(
        json.dumps(
            {
                "steps": steps,
                "save_period": save_period,
                "step_seconds": step_seconds,
                "checkpoint_dir": str(tmp / "ckpt"),
                "attempts_file": str(tmp / "attempts"),
                "attempts": attempts,
            }
        )
    )
    return path


def say(text: str) -> None:
    print(text, flush=True)


def stuck_in_step(k: int) -> None:
    """A rank that never reaches the step's collective."""
    while True:
        time.sleep(3600)


def stuck_in_save(k: int) -> None:
    """A save that never completes: its ``tmp_step_N`` stays."""
    while True:
        time.sleep(3600)


def main(path: str) -> int:
    p = json.loads(Path(path).read_text())
    counter = Path(p["attempts_file"])
    attempt = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(attempt))
    mine = p["attempts"].get(f"a{attempt}", p["attempts"].get("every", {}))
    root = Path(p["checkpoint_dir"])
    root.mkdir(parents=True, exist_ok=True)
    done = [s for n in os.listdir(root) if (s := formats.checkpoint_step(n)) is not None]
    start = max(done, default=0)
    say(f"scripted NeMo-RL: attempt {attempt}, resuming after step {start}")
    say(" " * 18 + formats.SETUP_DONE)
    total = int(p["steps"])
    for k in range(start + 1, total + 1):
        began = time.monotonic()
        say(formats.step_header(k, total))
        say("▶ Generating responses for batch of size 16...")
        seconds = float(p["step_seconds"])
        if k == start + 1 and "first_step_seconds" in mine:
            seconds = float(mine["first_step_seconds"])
        if mine.get("slow_step") == k:
            seconds = float(mine["seconds"])
        time.sleep(seconds)
        if mine.get("stall") == "step" and mine.get("at") == k:
            stuck_in_step(k)
        if mine.get("nccl_timeout_at") == k:
            prefix = os.environ.get(DUMP_FILE)
            if prefix:
                Path(prefix + "0").write_text(json.dumps({"rank": 0, "entries": [{"op": "allreduce", "seq": 61}]}))
            print(NCCL_LINE, file=sys.stderr, flush=True)
            return 1
        say("▶ Training policy...")
        if k % int(p["save_period"]) == 0 or k == total:
            say(formats.save_line(k))
            tmp = root / formats.checkpoint_name(k, formats.SAVING)
            tmp.mkdir(exist_ok=True)
            (tmp / formats.TRAINING_INFO).write_text(json.dumps({"total_steps": k}))
            if mine.get("stall") == "save" and mine.get("at") == k:
                stuck_in_save(k)
            tmp.rename(root / formats.checkpoint_name(k))
        say("📊 Training Results:")
        say(f"  • Total step time: {time.monotonic() - began:.2f}s")
    say("Max number of steps has been reached, stopping training early")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
