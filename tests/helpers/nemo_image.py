"""A directory laid out like NeMo-RL in its container image (``/opt/nemo-rl``), for tests whose
job runs the rehearsal through the image's ``examples/run_grpo_math.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "rl_lustre" / "nemo_rl" / "recipes" / "v0.4.0"


def nemo_rl_image(root: Path, shim: str) -> Path:
    """``root`` with NeMo-RL's v0.4.0 recipes under ``examples/configs`` and ``shim`` as its
    ``examples/run_grpo_math.py``; returns ``root``."""
    configs = root / "examples" / "configs"
    configs.mkdir(parents=True)
    (root / "examples" / "run_grpo_math.py").write_text(shim)
    for recipe in RECIPES.glob("*.yaml"):
        shutil.copy(recipe, configs / recipe.name)
    return root
