"""``python -m rl_lustre.rehearsal --config <recipe> [overrides...]``."""

from __future__ import annotations

import sys

from .entrypoint import main

if __name__ == "__main__":
    sys.exit(main())
