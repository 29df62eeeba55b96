"""The supervisor run as the cluster runs it, on a short rehearsal and without Ray, for the tests
that read its journal (``test_supervisor_journal``) or the run timeline built from it
(``test_goodput_runlog``)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

from rl_lustre.recovery import shipped_package

REHEARSAL = (
    "--step-seconds 0.05 --checkpoint-scale 1e-6 grpo.max_num_steps=4 checkpointing.save_period=2 "
    "grpo.val_period=3 checkpointing.metric_name=null"
)


@functools.cache
def supervised_log(tmp: str, extra: str = "") -> str:
    """The output of the supervisor running a 4-step rehearsal (no Ray: --nodes 0)."""
    command = (
        f"{sys.executable} -m rl_lustre.rehearsal {REHEARSAL} checkpointing.checkpoint_dir={tmp}/ckpt "
        f"logger.log_dir={tmp}/logs {extra}"
    )
    root = os.path.dirname(shipped_package())
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys, runpy; sys.path.insert(0, {root!r}); "
            "runpy.run_module('rl_lustre_oncluster.supervisor', run_name='__main__', alter_sys=True)",
            "--nodes",
            "0",
            "--",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout
