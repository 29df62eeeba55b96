"""Input rules at the edges of what the shell and Hydra accept.

- A newline or tab inside an override *value* is let through (NeMo-RL's stop strings,
  ``["</answer>", "\\n\\n"]``): Hydra 1.3's own parser reads it back from the rendered
  override, and it survives the job's entrypoint (the shell Ray runs it in, the recovery
  supervisor, the shell that runs NeMo-RL's command).
- NUL and every other control character are refused there; newlines and tabs never pass
  in names, keys or paths.
- ``mount_path="//lustre"`` is refused; an ``authorized_networks`` error quotes what was typed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.specs import GKE
from hydra.core.override_parser.overrides_parser import OverridesParser

from rl_lustre import Cluster, GRPOJob
from rl_lustre.errors import ConfigError
from rl_lustre.nemo_rl import render_override
from rl_lustre.recovery import shipped_package, supervised

STOP = "policy.generation.stop_strings"
# Values with newlines and tabs, where NeMo-RL takes strings.
WHITESPACE_VALUES: list[tuple[str, Any]] = [
    (STOP, ["</answer>", "\n\n"]),
    (STOP, ["\t", "a\tb\nc"]),
    ("logger.wandb.name", "run\t1\n"),
    ("+logger.notes", {"why": "first line\nsecond line"}),
]


def _hydra(text: str) -> Any:
    """What Hydra's own parser makes of one override string."""
    return OverridesParser.create().parse_override(text).value()


@pytest.mark.parametrize(("key", "value"), WHITESPACE_VALUES)
def test_a_newline_or_tab_in_an_override_value_is_read_back_by_hydras_parser(key: str, value: Any) -> None:
    job = GRPOJob(name="stops", overrides={key: value})
    resolved = job.resolve(Cluster(**GKE))
    (text,) = [a for a in resolved.override_args if a.startswith(f"{key}=")]
    assert _hydra(text) == value
    if key == STOP:
        # The recipe's config as NeMo-RL resolves it (OmegaConf on Hydra's parse).
        assert resolved.config is not None
        assert resolved.config["policy"]["generation"]["stop_strings"] == value


def test_the_reference_vector_for_stop_strings_still_parses_as_hydra_did(ref: Path) -> None:
    # What Hydra 1.3.2 and NeMo-RL v0.4.0 did with stop strings written with backslashes.
    cases = json.loads((ref / "nemo-rl" / "hydra_override_cases.json").read_text())["cases"]
    (case,) = [c for c in cases if c.get("check_key") == STOP]
    assert _hydra(case["override"]) == case["value"]
    assert _hydra(render_override(STOP, case["value"])) == case["value"]


@pytest.mark.parametrize(("key", "value"), WHITESPACE_VALUES)
def test_a_newline_or_tab_in_an_override_value_survives_the_jobs_entrypoint(
    key: str, value: Any, tmp_path: Path
) -> None:
    """The entrypoint as Ray runs it (``sh -c``), the supervisor, then ``sh -c`` again:
    a stand-in for NeMo-RL's script receives its argv, and Hydra reads the override back."""
    resolved = GRPOJob(name="stops", overrides={key: value}).resolve(Cluster(**GKE))
    entry = resolved.entrypoint
    script = entry[: entry.index(" --config ")]
    assert script.endswith("examples/run_grpo_math.py")
    argv = tmp_path / "argv.json"
    probe = f"{sys.executable} -c 'import json, sys; json.dump(sys.argv[1:], open(sys.argv[1], \"w\"))' {argv}"
    command = probe + entry[len(script) :]
    outer = supervised(
        command,
        python=sys.executable,
        max_restarts=0,
        nodes=0,
        gpus_per_node=8,
        capacity_timeout=1,
        checkpoint_dir=None,
        poll=0.1,
        settle=0,
    )
    env = {**os.environ, "PYTHONPATH": os.path.dirname(shipped_package())}
    done = subprocess.run(["/bin/sh", "-c", outer], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    received = json.loads(argv.read_text())
    (text,) = [a for a in received if a.startswith(f"{key}=")]
    assert text in resolved.override_args
    assert _hydra(text) == value


@pytest.mark.parametrize("bad", ["\x00", "\x1b[31m", "\r", "\x7f", "\x85", "\u2028", "\x0b", "\x0c"])
def test_nul_and_the_other_control_characters_are_refused_in_an_override_value(bad: str) -> None:
    for value in (f"a{bad}b", ["</answer>", f"\n{bad}"], {"k": f"v{bad}"}):
        with pytest.raises(ConfigError) as info:
            GRPOJob(name="j", overrides={"+logger.x": value})
        assert info.value.field == "overrides['+logger.x']"
        assert "control characters other than newlines and tabs" in info.value.rule
        assert f"U+{ord(bad[0]):04X}" in info.value.rule


@pytest.mark.parametrize("ws", ["\n", "\t"])
@pytest.mark.parametrize(
    ("what", "field", "make"),
    [
        ("job name", "name", lambda ws: GRPOJob(name=f"a{ws}b")),
        ("override key", "overrides", lambda ws: GRPOJob(name="j", overrides={f"grpo{ws}.seed": 1})),
        (
            "key inside a value",
            "overrides['+logger.x']",
            lambda ws: GRPOJob(name="j", overrides={"+logger.x": {f"k{ws}": "v"}}),
        ),
        ("checkpoint root", "checkpoint_root", lambda ws: GRPOJob(name="j", checkpoint_root=f"ck{ws}pt")),
        ("working dir", "working_dir", lambda ws: GRPOJob(name="j", working_dir=f"/tmp/w{ws}d")),
        ("environment value", "env['A']", lambda ws: GRPOJob(name="j", env={"A": f"x{ws}y"})),
        ("cluster name", "name", lambda ws: Cluster(**{**GKE, "name": f"de{ws}mo"})),
        ("mount path", "mount_path", lambda ws: Cluster(**GKE, mount_path=f"/lus{ws}tre")),
        ("secret name", "secrets", lambda ws: Cluster(**GKE, secrets=(f"HF{ws}TOKEN",))),
    ],
)
def test_newlines_and_tabs_never_pass_in_names_keys_or_paths(what: str, field: str, make: Any, ws: str) -> None:
    with pytest.raises(ConfigError) as info:
        make(ws)
    assert info.value.field == field, what


@pytest.mark.parametrize("path", ["//lustre", "//lustre/x", "///lustre"])
def test_a_mount_path_with_a_leading_double_slash_is_refused(path: str) -> None:
    with pytest.raises(ConfigError) as info:
        Cluster(**GKE, mount_path=path)
    assert info.value.field == "mount_path"
    assert info.value.value == path
    assert "normalised" in info.value.rule


@pytest.mark.parametrize(
    ("typed", "quoted"),
    [
        (["0.0.0.0/00"], "0.0.0.0/00"),
        (["10.0.0.0/8", "0.0.0.0/0.0.0.0"], "0.0.0.0/0.0.0.0"),
        (["::0/0"], "::0/0"),
        (["0.0.0.0/1", "128.0.0.0/01"], "0.0.0.0/1, 128.0.0.0/01"),
    ],
)
def test_an_authorized_networks_error_quotes_what_was_typed(typed: list[str], quoted: str) -> None:
    with pytest.raises(ConfigError) as info:
        Cluster(**GKE, authorized_networks=typed)
    assert info.value.field == "authorized_networks"
    assert info.value.value == quoted
    assert f"={quoted!r}" in str(info.value)
