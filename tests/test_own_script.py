"""The library from a user's own script and project, as docs/quickstart.md ("Your own script")
says: from a directory outside the clone, with uv run --with, a venv, uv add, and uv run
--project (Ray's hook for uv would refuse every job; local heads turn it off)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Each builds an environment of its own from uv's cache; two start a local Ray head.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
UV = [sys.executable, str(ROOT / "tools" / "uv.py")]  # the README's way to uv

WHERE = "import rl_lustre; print('RL_LUSTRE_FROM', rl_lustre.__file__)\n"
# Specs, a sweep's jobs built with attrs.evolve, a plan: everything but Ray.
OFFLINE = WHERE + textwrap.dedent("""
    import attrs
    base = rl_lustre.GRPOJob(name="base", recipe="grpo_math_1B", model="Qwen/Qwen2.5-1.5B")
    cluster = rl_lustre.Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
    jobs = [attrs.evolve(base, name=f"gens-{g}", num_generations_per_prompt=g) for g in (2, 4)]
    print("JOBS", [job.name for job in jobs], len(list(cluster.plan())) > 5)
""")


def _docs_sweep() -> str:
    """The sweep script of docs/quickstart.md ("Your own script"), as pasted."""
    text = (ROOT / "docs" / "quickstart.md").read_text()
    after = text.split("A sweep script, as `my_sweep.py`", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


SWEEP = WHERE + _docs_sweep()
ONE_JOB = WHERE + textwrap.dedent("""
    cluster = rl_lustre.Cluster.local("my-job", rehearsal_step_seconds=0.2)
    job = rl_lustre.GRPOJob(name="one", recipe="grpo_math_1B", model="Qwen/Qwen2.5-1.5B",
                            max_num_steps=2, num_prompts_per_step=4, num_generations_per_prompt=2,
                            train_global_batch_size=8, save_period=2)
    with cluster:
        print("STATUS", cluster.submit(job, fresh=True).wait(timeout=240))
""")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory of the user's, not in the clone."""
    assert ROOT not in tmp_path.parents
    return tmp_path


def _env(outside: Path, *, ray: bool = True) -> dict[str, str]:
    # The user's own project has no lock yet: CI's UV_LOCKED / UV_FROZEN (for the clone) stay out.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "UV_PROJECT_ENVIRONMENT", "UV_LOCKED", "UV_FROZEN")
        and not k.startswith(("PYTEST_", "RL_LUSTRE_", "NOX_"))
    }
    env["XDG_DATA_HOME"] = str(outside / "data")  # where Cluster.local keeps its volumes
    env["UV_NO_PROGRESS"] = "1"
    # A fresh environment's Ray without bytecode starts too slowly for Ray's fixed raylet wait
    # on a loaded machine (PYTHONDONTWRITEBYTECODE would keep it so): uv compiles on install.
    if ray:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["UV_COMPILE_BYTECODE"] = "1"
    return env


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 420) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def _imported_from(out: str) -> Path:
    return Path(next(line.split(maxsplit=1)[1] for line in out.splitlines() if line.startswith("RL_LUSTRE_FROM ")))


def test_a_sweep_script_runs_with_uv_run_with_the_clone(outside: Path) -> None:
    (outside / "my_sweep.py").write_text(SWEEP)
    out = _run([*UV, "run", "-q", "--with", str(ROOT), "my_sweep.py"], outside, _env(outside))
    assert ROOT not in _imported_from(out).parents  # an installed copy, not the clone on sys.path
    rows = [line.split() for line in out.splitlines() if line.startswith("gens-")]
    assert [(r[0], r[3], r[4]) for r in rows] == [("gens-2", "SUCCEEDED", "2/2"), ("gens-4", "SUCCEEDED", "2/2")]


def test_a_venv_and_a_project_of_ones_own_install_it(outside: Path) -> None:
    env = _env(outside, ray=False)
    (outside / "script.py").write_text(OFFLINE)
    # A virtual environment of the user's (uv venv, or python3 -m venv where venv is installed).
    _run([*UV, "venv", "-q", str(outside / "venv")], outside, env)
    _run([*UV, "pip", "install", "-q", "--python", str(outside / "venv" / "bin" / "python"), str(ROOT)], outside, env)
    out = _run([str(outside / "venv" / "bin" / "python"), "script.py"], outside, env)
    assert _imported_from(out).is_relative_to(outside / "venv")
    assert "JOBS ['gens-2', 'gens-4'] True" in out
    # A project of the user's: uv add.
    project = outside / "my-training"
    project.mkdir()
    (project / "script.py").write_text(OFFLINE)
    _run([*UV, "init", "-q", "--bare", "--name", "my-training", "."], project, env)
    _run([*UV, "add", "-q", str(ROOT)], project, env)
    assert "rl-lustre" in (project / "pyproject.toml").read_text()
    out = _run([*UV, "run", "-q", "script.py"], project, env)
    assert _imported_from(out).is_relative_to(project / ".venv")
    assert "JOBS ['gens-2', 'gens-4'] True" in out


def test_uv_run_project_from_elsewhere_submits_jobs(outside: Path) -> None:
    # Ray's hook for `uv run` would re-run this uv command for the head's drivers and refuse
    # every job ("... is not in the working_dir"); the clone's environment is kept apart here.
    env = _env(outside)
    env["UV_PROJECT_ENVIRONMENT"] = str(outside / "clone-env")
    (outside / "my_job.py").write_text(ONE_JOB)
    out = _run([*UV, "run", "-q", "--project", str(ROOT), "my_job.py"], outside, env)
    assert "STATUS SUCCEEDED" in out
