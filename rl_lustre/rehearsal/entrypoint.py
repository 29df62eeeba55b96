"""The rehearsal's command line, ``python -m rl_lustre.rehearsal``: NeMo-RL's
``examples/run_grpo_math.py`` options (``--config`` and Hydra overrides) plus the
rehearsal's own, the config resolved as NeMo-RL resolves it, and the exit status of one
start (see :mod:`rl_lustre.rehearsal.driver` for the loop and where its behaviour was read).
"""

from __future__ import annotations

import argparse
import io
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..errors import ConfigError
from ..oncluster import nemo_formats as formats
from .driver import (
    DEFAULT_RECIPE,
    DEFAULT_SCALE,
    DEFAULT_STEP_SECONDS,
    PREFIX,
    Rehearsal,
    RehearsalError,
    get,
)
from .metrics import say

__all__ = ["main"]


class _Stopped(Exception):
    """SIGTERM arrived (Ray's job stop sends it before SIGKILL)."""


def _parser() -> argparse.ArgumentParser:
    def fraction(text: str) -> float:
        value = float(text)
        if not 0 < value <= 1:
            raise argparse.ArgumentTypeError(f"{text}: must be greater than 0 and at most 1")
        return value

    def seconds(text: str) -> float:
        value = float(text)
        if not 0 <= value <= 3600:
            raise argparse.ArgumentTypeError(f"{text}: must be between 0 and 3600")
        return value

    p = argparse.ArgumentParser(
        prog="python -m rl_lustre.rehearsal",
        description="Rehearse a NeMo-RL GRPO run without training: NeMo-RL's command line, step "
        "lines and checkpoint layout, with synthetic metrics and scaled-down checkpoints.",
        allow_abbrev=False,
    )
    p.add_argument("--config", default=DEFAULT_RECIPE, help="a NeMo-RL recipe name or YAML path (default: %(default)s)")
    p.add_argument(
        "--checkpoint-scale",
        type=fraction,
        default=DEFAULT_SCALE,
        metavar="S",
        help="checkpoints are S x the real size for the model (default: %(default)g)",
    )
    p.add_argument(
        "--step-seconds",
        type=seconds,
        default=DEFAULT_STEP_SECONDS,
        metavar="T",
        help="how long a rehearsed step takes (default: %(default)g)",
    )
    p.add_argument(
        "--param-count",
        type=int,
        default=None,
        metavar="N",
        help="the model's parameter count, when policy.model_name does not state it",
    )
    p.add_argument(
        "--reserve",
        action="store_true",
        help="hold the job's GPUs in Ray placement groups exactly as NeMo-RL's RayVirtualCluster does, "
        "and fail as it fails when they cannot be had",
    )
    p.add_argument(
        "--place-workers",
        action="store_true",
        help="also place one Ray actor per node in those groups, as NeMo-RL places its workers; "
        "a lost node then fails the run as it fails NeMo-RL (implies --reserve)",
    )
    p.add_argument(
        "--nemo-rl-version",
        default="0.4.0",
        metavar="V",
        help="the NeMo-RL version whose config rules apply (default: %(default)s)",
    )
    return p


def _signal_stop(signum: int, frame: object) -> NoReturn:
    raise _Stopped(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rehearsal with NeMo-RL's command line; return the exit status.

    Examples:
        >>> import contextlib, io, tempfile
        >>> d = tempfile.mkdtemp()
        >>> out = io.StringIO()
        >>> with contextlib.redirect_stdout(out):
        ...     status = main(["--config", "grpo_math_1B", "--step-seconds", "0",
        ...                    "grpo.max_num_steps=2", "checkpointing.save_period=1",
        ...                    "checkpointing.metric_name=null",
        ...                    f"checkpointing.checkpoint_dir={d}/ckpt", f"logger.log_dir={d}/logs"])
        >>> status, sorted(p.name for p in Path(d, "ckpt").iterdir())
        (0, ['step_1', 'step_2'])
        >>> out.getvalue().splitlines()[0].startswith("rl_lustre rehearsal: REHEARSAL")
        True
    """
    args, overrides = _parser().parse_known_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        # Emoji must not kill the run on a non-UTF-8 terminal or pipe.
        sys.stdout.reconfigure(errors="backslashreplace")
    say(
        f"{PREFIX} REHEARSAL -- no model is trained. This driver stands in for NeMo-RL's GRPO "
        "entrypoint to rehearse orchestration and checkpoint storage; its metrics are synthetic."
    )
    say(
        f"{PREFIX} checkpoints are written in NeMo-RL's layout at {args.checkpoint_scale:g} x the real "
        f"size; each step takes {args.step_seconds:g}s."
    )
    previous = signal.getsignal(signal.SIGTERM)
    in_main_thread = _is_main_thread()
    if in_main_thread:
        signal.signal(signal.SIGTERM, _signal_stop)
    rehearsal: Rehearsal | None = None
    status = 1
    try:
        cfg = _resolve(args.config, overrides, args.nemo_rl_version)
        params = args.param_count or _param_count(cfg)
        rehearsal = Rehearsal(
            cfg,
            scale=args.checkpoint_scale,
            step_seconds=args.step_seconds,
            param_count=params,
            place_workers=args.place_workers,
            reserve=args.reserve,
        )
        rehearsal.setup()
        status = rehearsal.run()
        say(
            f"{PREFIX} finished at step {rehearsal.step or rehearsal.state.get('total_steps', 0)}/"
            f"{rehearsal.max_steps}. This was a REHEARSAL: no model was trained."
        )
    except (RehearsalError, ConfigError) as exc:
        print(f"{PREFIX} error: {exc}", file=sys.stderr, flush=True)
        say(f"{PREFIX} failed before training could start or continue. This was a REHEARSAL: no model was trained.")
        status = 1
    except (_Stopped, KeyboardInterrupt) as exc:
        name = str(exc) if isinstance(exc, _Stopped) else "SIGINT"
        step = rehearsal.step if rehearsal is not None else 0
        unfinished = formats.checkpoint_name(step, formats.SAVING)
        say(
            f"{PREFIX} stopped by {name} during step {step}; an unfinished {unfinished} is cleared at the "
            "next start. This was a REHEARSAL: no model was trained."
        )
        status = 128 + signal.Signals[name].value
    except Exception:
        say(f"{PREFIX} failed (the traceback is on stderr). This was a REHEARSAL: no model was trained.")
        raise
    finally:
        if rehearsal is not None:
            rehearsal.close()
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
    return status


def _is_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _recipe(config: str) -> str:
    """A YAML file that exists is read; NeMo-RL's own ``examples/configs/<name>.yaml``
    (a path inside the NeMo-RL image) selects the shipped recipe ``<name>``."""
    if Path(config).is_file():
        return config
    m = re.fullmatch(r"(?:.*/)?examples/configs/([^/]+)\.ya?ml", config)
    return m.group(1) if m else config


def _resolve(config: str, overrides: list[str], version: str) -> dict[str, Any]:
    from ..nemo_rl import resolve_config

    say(f"Loaded configuration from: {config}")
    if overrides:
        say(f"Overrides: {overrides}")
    cfg = resolve_config(_recipe(config), overrides, version=version)
    say("Applied CLI overrides")
    return cfg


def _param_count(cfg: dict[str, Any]) -> int:
    from .._sizing import parse_param_count

    model = get(cfg, "policy.model_name")
    count = parse_param_count(str(model))
    if count is None:
        raise RehearsalError(
            f"policy.model_name={model!r} states no parameter count, so the checkpoint size is unknown; "
            "pass --param-count N"
        )
    return count
