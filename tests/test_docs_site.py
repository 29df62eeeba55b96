"""The docs site carries every public name: a reference page per name, built from its
docstring by mkdocstrings, listed in the nav (``nox -s docs`` builds it strictly)."""

from __future__ import annotations

import re
from pathlib import Path

import rl_lustre

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


def test_every_public_name_has_a_reference_page_built_from_its_docstring() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for name in rl_lustre.__all__:
        if name == "__version__":
            continue
        page = REFERENCE / f"{name}.md"
        assert page.is_file(), f"no reference page for rl_lustre.{name}: add {page.relative_to(ROOT)}"
        assert re.search(rf"^::: rl_lustre\.{re.escape(name)}$", page.read_text(encoding="utf-8"), re.M), name
        assert f"reference/{name}.md" in nav, f"reference/{name}.md is not in the mkdocs nav"


def test_the_plan_the_checkpoints_and_the_fakes_have_pages_too() -> None:
    targets = "\n".join(p.read_text(encoding="utf-8") for p in REFERENCE.glob("*.md"))
    for target in (
        "rl_lustre.plan.Plan",
        "rl_lustre.nemo_rl.checkpoints.Checkpoint",
        "rl_lustre.check.CheckReport",
        "rl_lustre.testing",
    ):
        assert f"::: {target}\n" in targets, target


def test_the_site_is_built_from_docstrings_with_a_maintained_theme() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^theme:\n  name: material$", config, re.M)
    assert "- mkdocstrings:" in config
    assert "docstring_style: google" in config
    assert "strict: true" in config
