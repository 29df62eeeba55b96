"""Developer sessions. ``nox -l`` lists them; CI runs ``nox -s tests-slow``, ``nox -s tests`` and
``nox -s tests-kube``.

- tests:      the default test run (unit, doctests, local Ray head, protocol fakes), about
              5 minutes on 2 cores: every test but those marked ``slow``.
- tests-slow: the tests marked ``slow`` (real Ray worker nodes preempted, whole GKE
              deployments on the fakes, docs blocks that run jobs), about 8 minutes.
- tests-kube: the tests marked ``kube``: the Kubernetes half against a real control plane
              (kube-apiserver, etcd, controller-manager, scheduler, kwok, the KubeRay
              operator) built from Go modules by ``tools/kube/build.sh`` (needs Go >= 1.26;
              the first build takes about 10-35 minutes on 2 cores, idle to loaded; later
              ones reuse it).
- tests-oncluster: the on-cluster package's tests (marked ``oncluster``) on the cluster image's
              Python (3.12) and Ray (2.46.0), the versions rl_lustre.oncluster runs on.
- lint:      ruff check and ruff format --check (one style over the tree, 120 columns).
- typecheck: mypy on the package, mypy --strict on the public surface (STRICT); the on-cluster
             package also for Python 3.12.
- docs:      mkdocs build --strict (broken links and missing pages fail).
- bench:     benchmarks under benchmarks/, reported as ratios against a baseline.
- lock:      upgrade uv.lock to the newest versions pyproject.toml allows (on purpose, never on
             the way: every other session installs exactly what uv.lock says).

Every session runs on the Python nox runs on (the README's ``python3 tools/uv.py run
--only-group nox nox ...`` makes that the project's Python) and installs from ``uv.lock`` with
``uv sync --locked``: the versions the README's commands and CI use, and an error, not a silent
re-resolve, when pyproject.toml changed without ``nox -s lock``.
"""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["tests", "lint", "typecheck", "docs"]
nox.options.reuse_existing_virtualenvs = True

# The uv that runs nox (uv run sets $UV), else the one on PATH.
UV = os.environ.get("UV", "uv")
PYTHON = None  # the Python nox runs on


def _install(session: nox.Session, *groups: str, project: bool = True) -> None:
    """Install the locked versions (uv.lock) of the project (editable) and ``groups``."""
    args = [UV, "sync", "--locked", "--no-progress"]
    if project:
        args += [f"--group={g}" for g in groups]
    else:
        args += [f"--only-group={g}" for g in groups]
    assert isinstance(session.virtualenv.location, str)
    session.run_install(*args, external=True, env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location})


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The default test run: every test not marked slow (pass extra pytest arguments after --)."""
    _install(session, "test")
    session.run("pytest", "-m", "not slow and not kube", *session.posargs)


@nox.session(name="tests-slow", python=PYTHON)
def tests_slow(session: nox.Session) -> None:
    """The tests marked slow: multi-process scenarios of tens of seconds each."""
    _install(session, "test")
    session.run("pytest", "-m", "slow and not kube", *session.posargs)


@nox.session(name="tests-kube", python=PYTHON)
def tests_kube(session: nox.Session) -> None:
    """The tests marked kube, against the control plane tools/kube/build.sh builds (needs Go)."""
    _install(session, "test")
    session.run("bash", "tools/kube/build.sh", external=True)  # builds what is missing, with progress
    out = session.run("bash", "tools/kube/build.sh", external=True, silent=True)  # reused: prints where
    build = str(out).strip().splitlines()[-1]
    session.run("pytest", "-m", "kube", "--kube", *session.posargs, env={"RL_LUSTRE_KUBE_BUILD": build})


# The cluster image's versions (nvcr.io/nvidia/nemo-rl:v0.4.0): what rl_lustre.oncluster runs on.
IMAGE_PYTHON = "3.12"
IMAGE_RAY = "ray[default]==2.46.0"


def _image_python() -> str:
    """A Python 3.12 interpreter that runs: ``python3.12`` on PATH, or pyenv's (whose shim
    fails unless 3.12 is pyenv's selected version); else the version, for nox to find."""
    import glob
    import shutil
    import subprocess

    candidates = [
        shutil.which("python3.12"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12"))),
    ]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return IMAGE_PYTHON


@nox.session(name="tests-oncluster", python=_image_python())
def tests_oncluster(session: nox.Session) -> None:
    """The tests marked oncluster, on the image's Python and Ray (installed over the locked set)."""
    _install(session, "test")
    session.run_install(
        UV, "pip", "install", "--no-progress", IMAGE_RAY, external=True,
        env={"VIRTUAL_ENV": session.virtualenv.location},
    )  # fmt: skip
    session.run("python", "-c", "import ray, sys; print('ray', ray.__version__, 'on Python', sys.version.split()[0])")
    session.run("pytest", "-m", "oncluster and not kube", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check on the package, tests, examples, benchmarks and tools."""
    _install(session, "lint", project=False)
    trees = ("rl_lustre", "tests", "examples", "benchmarks", "tools", "noxfile.py")
    session.run("ruff", "check", *trees)
    session.run("ruff", "format", "--check", *trees)
    # The on-cluster package runs on the image's Python 3.12, and the client imports it on 3.10+:
    # checked for both.
    session.run("ruff", "check", "--target-version", "py312", "rl_lustre/oncluster")


# The public surface (docs/architecture.md, "The public surface"), held to mypy --strict: the
# packages that export it, the façade, and every module that defines a public class or function
# (but rl_lustre/gcp/lustre.py, an adapter whose only public part is the plain TransferResult).
STRICT = [
    "rl_lustre/__init__.py",
    "rl_lustre/_public.py",
    "rl_lustre/errors.py",
    "rl_lustre/cluster.py",
    "rl_lustre/job.py",
    "rl_lustre/volume.py",
    "rl_lustre/run.py",
    "rl_lustre/run_accounts.py",
    "rl_lustre/sweep.py",
    "rl_lustre/sweep_result.py",
    "rl_lustre/sizing.py",
    "rl_lustre/spec/capacity.py",
    "rl_lustre/_output.py",
    "rl_lustre/catalog.py",
    "rl_lustre/check_items.py",
    "rl_lustre/cost.py",
    "rl_lustre/goodput/attribute.py",
    "rl_lustre/goodput/ledger.py",
    "rl_lustre/goodput/recoveries.py",
    "rl_lustre/metrics.py",
    "rl_lustre/nemo_rl/checkpoints.py",
    "rl_lustre/nemo_rl/logs.py",
    "rl_lustre/outages.py",
    "rl_lustre/plan/graph.py",
    "rl_lustre/plot.py",
    "rl_lustre/prices.py",
    "rl_lustre/queueing/state.py",
    "rl_lustre/ray/jobs.py",
    "rl_lustre/recovery/diagnostics.py",
    "rl_lustre/recovery/restarts.py",
    "rl_lustre/shared.py",
    "rl_lustre/testing/__init__.py",
    "rl_lustre/testing/_capacity.py",
    "rl_lustre/testing/_core.py",
    "rl_lustre/testing/_fake.py",
    "rl_lustre/testing/_fake_gke.py",
    "rl_lustre/testing/_freeze.py",
    "rl_lustre/testing/_kube_faults.py",
    "rl_lustre/testing/_kube_kinds.py",
    "rl_lustre/testing/_lose_head.py",
    "rl_lustre/testing/_preempt.py",
    "rl_lustre/testing/_preemption.py",
    "rl_lustre/testing/_seeding.py",
    "rl_lustre/testing/kube.py",
]


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy on the package; mypy --strict on the public surface (STRICT)."""
    _install(session, "typecheck")
    session.run("mypy", "rl_lustre")
    # Only these files are held to --strict: what they import is read, not checked.
    session.run("mypy", "--strict", "--follow-imports=silent", *STRICT)
    # The on-cluster package runs on the image's Python: checked for that version too.
    session.run("mypy", "--python-version", IMAGE_PYTHON, "rl_lustre/oncluster")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the docs in strict mode."""
    _install(session, "docs")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Run the benchmarks; each prints its ratio against a baseline measured in the same run."""
    _install(session, "test")
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session(venv_backend="none")
def lock(session: nox.Session) -> None:
    """Upgrade uv.lock to the newest versions pyproject.toml allows (commit the result)."""
    session.run(UV, "lock", "--upgrade", *session.posargs, external=True)
