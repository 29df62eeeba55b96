"""Every Python block in README.md and docs/ runs as pasted, in a fresh interpreter.

A block runs on its own: a new ``python`` process, an empty working directory, a
private ``XDG_DATA_HOME`` (where ``Cluster.local`` keeps its volume by default) and no
Google credentials in the environment. The only blocks exempt are those that need Google
Cloud, marked by the HTML comment ``<!-- needs: gcp -->`` on the line before the fence
(mkdocs renders nothing for it); they must still compile.

The blocks run concurrently, two at a time, on first use; each test waits for its own.
Blocks that start a local Ray head run one at a time: two heads starting together on a
small, busy machine can outlast Ray's fixed wait for a new raylet.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
GCP_MARK = "<!-- needs: gcp -->"
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<info>[^\n`]*)$")
_PYTHON = {"python", "py", "python3"}
# Generous: only a guard against a hung block (the slowest takes ~1 min on 2 cores).
_TIMEOUT = 600
_ONE_RAY_AT_A_TIME = threading.Lock()


class Block(NamedTuple):
    path: Path
    line: int  # 1-based line of the opening fence
    info: str
    code: str
    needs_gcp: bool

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks_in(path: Path) -> list[Block]:
    """The fenced code blocks of one Markdown file (any language), in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, indent = m["fence"], m["indent"]
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        previous = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        found.append(Block(path, start + 1, m["info"].strip(), "\n".join(body) + "\n", previous == GCP_MARK))
        i += 1
    return found


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks() -> list[Block]:
    return [
        b
        for path in doc_files()
        for b in blocks_in(path)
        if b.info.split(maxsplit=1)[0:1] and b.info.split(maxsplit=1)[0].strip("{}.").lower() in _PYTHON
    ]


BLOCKS = python_blocks()
RUNNABLE = [b for b in BLOCKS if not b.needs_gcp]


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "RL_LUSTRE_", "PYTEST_"))}
    env["XDG_DATA_HOME"] = str(home / "data")
    # The block imports the rl_lustre of this checkout, as an installed one would be.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return env


def _run(block: Block) -> subprocess.CompletedProcess[str]:
    if "Cluster.local(" in block.code or "FakeGKE(" in block.code:
        with _ONE_RAY_AT_A_TIME:
            return _run_alone(block)
    return _run_alone(block)


def _run_alone(block: Block) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="rl-lustre-doc-") as tmp:
        home = Path(tmp)
        script = home / "block.py"
        script.write_text(block.code, encoding="utf-8")
        work = home / "work"
        work.mkdir()
        try:
            return subprocess.run(
                [sys.executable, str(script)],
                cwd=work,
                env=_clean_env(home),
                capture_output=True,
                text=True,
                timeout=_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(
                exc.cmd, -1, str(exc.stdout or ""), f"timed out after {_TIMEOUT} s\n{exc.stderr or ''}"
            )


@pytest.fixture(scope="module")
def results(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    # Only the blocks this session selected (``-k``) are run.
    selected = {
        item.callspec.params["block"].id
        for item in request.session.items
        if hasattr(item, "callspec") and isinstance(item.callspec.params.get("block"), Block)
    }
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="doc-block")
    futures = {b.id: pool.submit(_run, b) for b in RUNNABLE if b.id in selected}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def test_the_docs_have_python_blocks_and_the_marker_is_exact() -> None:
    assert len(RUNNABLE) >= 5
    # A near-miss spelling of the marker would silently turn a skip into a failure, or worse
    # the other way round: only the exact comment counts, and no other "needs:" comment exists.
    for path in doc_files():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip().startswith("<!--") and "needs" in line:
                assert line.strip() == GCP_MARK, f"{path.relative_to(ROOT)}:{n}: {line.strip()!r}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.needs_gcp], ids=lambda b: b.id)
def test_gcp_blocks_compile(block: Block) -> None:
    compile(block.code, block.id, "exec")


def _starts_ray(block: Block) -> bool:
    """A block that runs a job or a sweep on a local Ray head (tens of seconds each)."""
    return ("Cluster.local(" in block.code or "FakeGKE(" in block.code) and any(
        w in block.code for w in (".submit(", "sweep(", "run_sweep")
    )


@pytest.mark.parametrize(
    "block", [pytest.param(b, id=b.id, marks=[pytest.mark.slow] if _starts_ray(b) else []) for b in RUNNABLE]
)
def test_block_runs_as_pasted(block: Block, results: dict[str, Future[subprocess.CompletedProcess[str]]]) -> None:
    done = results[block.id].result()
    assert done.returncode == 0, (
        f"{block.id} failed as pasted (exit {done.returncode}):\n{block.code}\n"
        f"--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-5000:]}"
    )
