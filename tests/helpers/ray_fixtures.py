"""One real local Ray head for the whole test session, and process-table helpers.

Registered from ``conftest.py`` (``pytest_plugins``). The head runs in token mode,
set explicitly through ``RAY_AUTH_MODE``, and its environment carries a fake
``HF_TOKEN`` (a declared secret) and a fake ``OTHER_API_KEY`` (an undeclared one).

Its ``PATH`` starts with :func:`image_tools`: a test double of the NeMo-RL container
image's ``uv``, so that the GKE entrypoint ``cd <nemo_rl_dir> && uv run python ...`` runs
on this head as it runs in the image (see ``test_e2e_gke.py``).
"""

from __future__ import annotations

import os
import shlex
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from rl_lustre import Cluster

FAKE_HF_TOKEN = "hf_fake_" + uuid.uuid4().hex
FAKE_OTHER_KEY = "other_fake_" + uuid.uuid4().hex


def ray_processes(temp_dir: Path) -> list[tuple[int, str]]:
    """Live (non-zombie) processes of the head in ``temp_dir``: those whose command
    line names the temp dir or whose environment carries the launcher's mark.

    Read straight from ``/proc``, independently of the launcher's own bookkeeping.
    """
    found = []
    mark = f"RL_LUSTRE_HEAD={temp_dir}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                    continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ")
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if str(temp_dir).encode() in cmdline or mark in environ:
            found.append((int(name), cmdline.decode(errors="replace")[:120]))
    return found


def image_tools(directory: Path) -> Path:
    """Write the stand-ins for the NeMo-RL image's ``uv`` and ``python`` into ``directory``.

    It knows exactly one command, ``uv run python ARGS...``, which it runs with this
    test run's Python (where rl_lustre is importable); anything else fails loudly.
    """
    uv = directory / "uv"
    uv.write_text(
        "#!/bin/sh\n"
        "# Test double of the NeMo-RL container image's uv (tests/helpers/ray_fixtures.py).\n"
        'if [ "$1" = run ] && [ "$2" = python ]; then\n'
        "  shift 2\n"
        f'  exec {shlex.quote(sys.executable)} "$@"\n'
        "fi\n"
        "echo \"test double of the image's uv: only 'uv run python ...' is supported, not: uv $*\" >&2\n"
        "exit 2\n"
    )
    uv.chmod(0o755)
    # The image's python is the one Ray runs on (the job supervisor imports ray).
    python = directory / "python"
    python.write_text(
        "#!/bin/sh\n"
        "# Test double of the NeMo-RL container image's python (tests/helpers/ray_fixtures.py).\n"
        f'exec {shlex.quote(sys.executable)} "$@"\n'
    )
    python.chmod(0o755)
    return directory


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A ``Cluster.local`` that is up for the whole session (token auth)."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("the local backend tests read the process table from /proc (Linux)")
    volume = tmp_path_factory.mktemp("volume")
    cluster = Cluster.local(
        f"rll-test-{os.getpid()}",
        volume_dir=volume,
        secrets=("HF_TOKEN",),
        rehearsal_step_seconds=0.2,
        # One node of 8 GPUs, as an A4 node: the GKE-backend tests run their jobs on this
        # head too, and the queue gives those whole nodes of 8.
        gpus_per_node=8,
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "token")
        mp.setenv("HF_TOKEN", FAKE_HF_TOKEN)
        mp.setenv("OTHER_API_KEY", FAKE_OTHER_KEY)
        mp.setenv("PATH", f"{image_tools(tmp_path_factory.mktemp('image-tools'))}{os.pathsep}{os.environ['PATH']}")
        cluster.up()
    temp_dir = cluster._backend().temp_dir  # type: ignore[attr-defined]
    # The session ends the way a script fails: by an exception inside the with block,
    # which must tear the head down (and every job driver it started) all the same.
    try:
        with cluster:  # adopts the head up() started
            yield cluster
            raise _SessionOver
    except _SessionOver:
        pass
    left = ray_processes(temp_dir)
    assert not left, f"processes of the session's Ray head survived an exception in its with block: {left}"
    assert not temp_dir.exists()


@pytest.fixture(autouse=True)
def _stop_jobs_left_on_the_session_head(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that used the session head, stop any job of rl_lustre's it left going.

    Every job waits in the head's queue for its nodes: one left running would hold the
    session's node, and queue every later test's jobs behind it.
    """
    yield
    if "local_cluster" not in request.fixturenames:
        return
    from rl_lustre.oncluster.records import JOB

    jobs = request.getfixturevalue("local_cluster")._backend().jobs
    left = [i.submission_id for i in jobs.list() if not i.terminal and JOB in (i.metadata or {})]
    for job_id in left:
        jobs.stop(job_id)
    if left:
        warnings.warn(f"{request.node.nodeid} left jobs going on the session head, now stopped: {left}", stacklevel=1)


class _SessionOver(Exception):
    """Raised inside the session cluster's with block at the end of the session."""
