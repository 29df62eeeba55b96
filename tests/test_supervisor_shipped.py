"""The recovery supervisor as shipped to the cluster: a package of its own that needs the
standard library only, reading NeMo-RL's formats from the one module that holds them.

The cluster's image runs Python 3.12 and has no rl_lustre; these tests run the shipped
package in an isolated interpreter (a Python 3.12 one when this machine has it), with
nothing on its path but the standard library and the shipped directory.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rl_lustre.nemo_rl import formats
from rl_lustre.recovery import SHIPPED, shipped_module


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
    """``code`` in an isolated interpreter whose path is the standard library and the shipped package."""
    root = os.path.dirname(shipped_module())
    prelude = f"import sys; sys.path.insert(0, {root!r}); sys.argv = ['x', *sys.argv[1:]]\n"
    return subprocess.run(
        [_image_python(), "-I", "-c", prelude + code, *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_the_shipped_package_holds_the_files_the_supervisor_imports_at_their_paths_in_rl_lustre() -> None:
    package = Path(shipped_module())
    here = Path(formats.__file__).parent.parent
    for relative in SHIPPED:
        assert (package / relative).read_bytes() == (here / relative).read_bytes()


def test_the_shipped_supervisor_imports_nothing_but_the_standard_library() -> None:
    out = _isolated(
        "import json, rl_lustre_supervisor.recovery.supervisor, rl_lustre_supervisor.recovery.stamps as s\n"
        "top = {m.split('.')[0] for m in sys.modules}\n"
        "print(json.dumps(sorted(top - set(sys.stdlib_module_names) - {'__main__'})))\n"
        "print(s.STEP_HEADER.pattern)\n"
    )
    assert out.returncode == 0, out.stderr
    foreign, pattern = out.stdout.splitlines()
    assert json.loads(foreign) == ["rl_lustre_supervisor"]
    # The very regex of rl_lustre.nemo_rl.formats, not a copy of it.
    assert pattern == formats.STEP_HEADER.pattern


def test_the_shipped_supervisor_resumes_from_the_newest_complete_step_dir(tmp_path: Path) -> None:
    for step in (2, 10):
        (tmp_path / formats.checkpoint_name(step)).mkdir()
    (tmp_path / formats.checkpoint_name(12, formats.SAVING)).mkdir()
    (tmp_path / formats.checkpoint_name(11, formats.DELETING)).mkdir()
    (tmp_path / formats.checkpoint_name(30)).write_text("a file, not a checkpoint")
    out = _isolated(
        "import rl_lustre_supervisor.recovery.supervisor as s\n"
        "sup = s.Supervisor(s.parser().parse_args(['--checkpoint-dir', sys.argv[1], 'true']))\n"
        "print(sup._newest_checkpoint())\n",
        str(tmp_path),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "10"


@pytest.mark.parametrize("code", [0, 3])
def test_python_m_rl_lustre_supervisor_runs_the_command_and_reads_its_step_headers(code: int) -> None:
    header = formats.step_header(1, 2)
    out = _isolated(
        "import runpy; runpy.run_module('rl_lustre_supervisor', run_name='__main__', alter_sys=True)\n",
        "--",
        f"echo '{header}'; exit {code}",
    )
    assert out.returncode == code, out.stderr
    assert header in out.stdout
    if code:
        assert "while every worker node was alive: not restarted" in out.stdout
