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
- lint:      ruff check and ruff format --check (one style over the tree, 120 columns).
- typecheck: mypy on the package.
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


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check on the package, tests, examples, benchmarks and tools."""
    _install(session, "lint", project=False)
    trees = ("rl_lustre", "tests", "examples", "benchmarks", "tools", "noxfile.py")
    session.run("ruff", "check", *trees)
    session.run("ruff", "format", "--check", *trees)


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy on the package."""
    _install(session, "typecheck")
    session.run("mypy", "rl_lustre")


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
