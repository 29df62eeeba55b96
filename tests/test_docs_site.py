"""The docs site carries every public name, by its public path: a reference page built from
its docstring by mkdocstrings, listed in the nav (``nox -s docs`` builds it strictly)."""

from __future__ import annotations

import re
from pathlib import Path

import rl_lustre

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


def _directives() -> dict[str, Path]:
    """Each ``::: target`` of the reference pages, and the page it is on."""
    return {
        m[1]: page
        for page in sorted(REFERENCE.glob("*.md"))
        for m in re.finditer(r"^::: (\S+)$", page.read_text(encoding="utf-8"), re.M)
    }


def test_every_public_name_is_on_a_reference_page_built_from_its_docstring() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    directives = _directives()
    for name in rl_lustre.__all__:
        if name == "__version__":
            continue
        page = directives.get(f"rl_lustre.{name}")
        assert page is not None, f"no reference page shows rl_lustre.{name}: add '::: rl_lustre.{name}' to one"
        assert f"reference/{page.name}" in nav, f"reference/{page.name} is not in the mkdocs nav"


def test_the_objects_have_a_page_each() -> None:
    for name in ("Cluster", "LustreVolume", "GRPOJob", "Run", "Capacity", "SweepResult", "Plan", "Checkpoint"):
        assert _directives().get(f"rl_lustre.{name}") == REFERENCE / f"{name}.md", name


def test_the_reference_names_public_paths_only() -> None:
    targets = set(_directives())
    for target in ("rl_lustre.Plan", "rl_lustre.Checkpoint", "rl_lustre.CheckReport", "rl_lustre.testing"):
        assert target in targets, target
    for target in targets:
        head, _, name = target.rpartition(".")
        assert target in ("rl_lustre.errors", "rl_lustre.testing") or (
            head == "rl_lustre" and name in rl_lustre.__all__
        ), f"::: {target} is not a public path (rl_lustre.<name>, rl_lustre.errors, rl_lustre.testing)"


def test_the_site_is_built_from_docstrings_with_a_maintained_theme() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^theme:\n  name: material$", config, re.M)
    assert "- mkdocstrings:" in config
    assert "docstring_style: google" in config
    assert "strict: true" in config
