"""The package surface: public names, typed marker, and a cheap import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import rl_lustre

PUBLIC = {
    "Capacity",
    "Cluster",
    "GRPOJob",
    "LustreSizing",
    "LustreVolume",
    "Run",
    "__version__",
    "enable_output",
    "errors",
    "size_lustre",
    "SweepResult",
    "run_sweep",
    "wait_all",
}
HEAVY = ("ray", "kubernetes", "grpc", "google.cloud", "google.api_core", "hydra", "omegaconf", "rich")


def test_all_is_the_public_names() -> None:
    assert set(rl_lustre.__all__) == PUBLIC
    assert len(rl_lustre.__all__) == len(set(rl_lustre.__all__))
    for name in rl_lustre.__all__:
        assert hasattr(rl_lustre, name), name
    public_attrs = {n for n in vars(rl_lustre) if not n.startswith("_")}
    # Submodules are importable, but the only public *objects* are the listed ones.
    objects = {n for n in public_attrs if not isinstance(getattr(rl_lustre, n), type(rl_lustre))}
    assert objects <= PUBLIC


def test_errors_root() -> None:
    from rl_lustre import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        if issubclass(cls, Warning):
            # Warnings are not errors: they derive from the built-in warning they resemble.
            assert issubclass(cls, UserWarning), name
            continue
        assert issubclass(cls, errors.RLLustreError), name
    assert issubclass(errors.ConfigError, ValueError)


def test_typed_marker_shipped() -> None:
    assert (Path(rl_lustre.__file__).parent / "py.typed").is_file()


def test_import_is_cheap() -> None:
    code = (
        "import sys, json, rl_lustre;"
        f"heavy={HEAVY!r};"
        "print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_uv_run_installs_no_development_tools() -> None:
    """`uv run examples/quickstart.py` syncs the default groups: there must be none."""
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert pyproject["tool"]["uv"]["default-groups"] == []
    assert any(dep.startswith("jsonschema") for dep in pyproject["project"]["dependencies"])


def test_tests_read_nothing_outside_the_repository() -> None:
    here = Path(__file__).resolve().parent
    for path in here.glob("*.py"):
        text = path.read_text()
        assert "shared" + "/ref" not in text, path
        assert "parents" + "[2]" not in text, path
