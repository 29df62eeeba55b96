"""The on-cluster package (rl_lustre.oncluster) as shipped: whole, standard library only at
module level, runnable on the image's Python with nothing of rl_lustre installed.

The cluster's image runs Python 3.12 and Ray 2.46 and has no rl_lustre; these tests run the
shipped package in an isolated interpreter (``-I -S``: no site-packages, so no Ray and no
rl_lustre; a Python 3.12 one when this machine has it) with nothing on its path but the
standard library and the shipped directory.
"""

from __future__ import annotations

import ast
import functools
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rl_lustre import oncluster
from rl_lustre.oncluster import nemo_formats as formats
from rl_lustre.recovery import PACKAGE, shipped_package

# The on-cluster package's tests: nox -s tests-oncluster runs them on the image's Python and Ray too.
pytestmark = pytest.mark.oncluster

HERE = Path(oncluster.__file__).parent


@functools.cache
def _image_python() -> str:
    """A Python 3.12 (the image's version) when one runs here, else this one."""
    candidates = [
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12"))),
        shutil.which("python3.12"),
    ]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-I", "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return sys.executable


def _isolated(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``code`` in an isolated interpreter (no site-packages) whose path is the standard library
    and the shipped package."""
    root = os.path.dirname(shipped_package())
    prelude = f"import sys; sys.path.insert(0, {root!r}); sys.argv = ['x', *sys.argv[1:]]\n"
    return subprocess.run(
        [_image_python(), "-I", "-S", "-c", prelude + code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def _modules() -> list[str]:
    """Every module of the package, as the cluster names it."""
    out = []
    for path in sorted(HERE.rglob("*.py")):
        parts = list(path.relative_to(HERE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join([PACKAGE, *parts]))
    return out


def test_the_shipped_package_is_the_whole_oncluster_package() -> None:
    package = Path(shipped_package())
    assert package.name == PACKAGE
    shipped = {
        p.relative_to(package).as_posix() for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }
    here = {p.relative_to(HERE).as_posix() for p in HERE.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert shipped == here
    for relative in here:
        assert (package / relative).read_bytes() == (HERE / relative).read_bytes()


def test_every_module_imports_with_nothing_but_the_standard_library() -> None:
    modules = _modules()
    assert len(modules) > 10
    out = _isolated(
        "import importlib, json\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "top = {m.split('.')[0] for m in sys.modules}\n"
        "print(json.dumps(sorted(top - set(sys.stdlib_module_names) - {'__main__'})))\n"
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [PACKAGE]


def test_the_isolated_import_fails_on_a_module_level_import_outside_the_standard_library(tmp_path: Path) -> None:
    """The check above can fail: with no site-packages, a top-level ``import ray`` does not import."""
    out = subprocess.run(
        [_image_python(), "-I", "-S", "-c", "import ray"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode != 0
    assert "No module named 'ray'" in out.stderr


def _top_level_imports(tree: ast.Module) -> list[tuple[int, str, int]]:
    """``(line, module, level)`` of every import not inside a function or class."""
    found = []
    for node in tree.body:
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(n, ast.Import):
                found += [(n.lineno, a.name, 0) for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                found.append((n.lineno, n.module or "", n.level))
            stack.extend(ast.iter_child_nodes(n))
    return found


def test_the_package_imports_itself_relatively_and_ray_only_inside_functions() -> None:
    """It runs as rl_lustre_oncluster on the cluster: an absolute rl_lustre import would not
    resolve there; Ray, present on the image but not here in -S, only where it is used."""
    problems = []
    for path in sorted(HERE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(HERE)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("rl_lustre"):
                problems.append(f"{rel}:{node.lineno} imports {node.module} absolutely")
            if isinstance(node, ast.Import) and any(a.name.startswith("rl_lustre") for a in node.names):
                problems.append(f"{rel}:{node.lineno} imports rl_lustre absolutely")
        for line, module, level in _top_level_imports(tree):
            top = module.split(".")[0]
            if level == 0 and top not in sys.stdlib_module_names and top != "__future__":
                problems.append(f"{rel}:{line} imports {module} at module level")
    assert problems == []


def test_the_shipped_package_reads_nemo_rls_formats_from_the_one_module_that_holds_them() -> None:
    out = _isolated(f"import {PACKAGE}.stamps as s\nprint(s.STEP_HEADER.pattern)\n")
    assert out.returncode == 0, out.stderr
    # The very regex of rl_lustre.oncluster.nemo_formats, not a copy of it.
    assert out.stdout.strip() == formats.STEP_HEADER.pattern


def test_the_shipped_supervisor_resumes_from_the_newest_complete_step_dir(tmp_path: Path) -> None:
    for step in (2, 10):
        (tmp_path / formats.checkpoint_name(step)).mkdir()
    (tmp_path / formats.checkpoint_name(12, formats.SAVING)).mkdir()
    (tmp_path / formats.checkpoint_name(11, formats.DELETING)).mkdir()
    (tmp_path / formats.checkpoint_name(30)).write_text("a file, not a checkpoint")
    out = _isolated(
        f"import {PACKAGE}.supervisor as s\n"
        "sup = s.Supervisor(s.parser().parse_args(['--checkpoint-dir', sys.argv[1], 'true']))\n"
        "print(sup._newest_checkpoint())\n",
        str(tmp_path),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "10"


@pytest.mark.parametrize("code", [0, 3])
def test_python_m_the_supervisor_runs_the_command_and_reads_its_step_headers(code: int) -> None:
    header = formats.step_header(1, 2)
    out = _isolated(
        f"import runpy; runpy.run_module('{PACKAGE}.supervisor', run_name='__main__', alter_sys=True)\n",
        "--",
        f"echo '{header}'; exit {code}",
    )
    assert out.returncode == code, out.stderr
    assert header in out.stdout
    if code:
        assert "while every worker node was alive: not restarted" in out.stdout
