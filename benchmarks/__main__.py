"""``python -m benchmarks [--only NAME] [ARGS...]``: run every benchmark; non-zero if any missed its target."""

from __future__ import annotations

import argparse
import importlib
import sys

BENCHMARKS = ("provisioning", "startup", "submit", "sweep", "capacity", "hang")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--only", choices=BENCHMARKS, help="run one benchmark")
    args, rest = parser.parse_known_args(argv)
    failed = []
    for name in [args.only] if args.only else BENCHMARKS:
        module = importlib.import_module(f"benchmarks.{name}")
        print(f"== {name} ==", flush=True)
        if module.main(rest) != 0:
            failed.append(name)
    if failed:
        print(f"missed targets: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
