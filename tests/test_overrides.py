"""NeMo-RL config resolution and Hydra override rendering, against the real parser's vectors."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from rl_lustre.errors import ConfigError, PreflightError
from rl_lustre.nemo_rl import (
    available_recipes,
    flatten,
    load_recipe,
    nemo_rl_version,
    parse_override,
    render_override,
    resolve_config,
)
from rl_lustre.nemo_rl.config import config_keys
from rl_lustre.nemo_rl.overrides import same_value

RECIPE = "grpo_math_70B_megatron"
PARSER = OverridesParser.create()


def hydra_value(text: str) -> Any:
    """What Hydra's own parser reads from one override string."""
    return PARSER.parse_override(text).value()


def nested(d: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        d = d[part]
    return d


def cases(ref: Path) -> list[dict[str, Any]]:
    return json.loads((ref / "nemo-rl" / "hydra_override_cases.json").read_text())["cases"]


@pytest.fixture(scope="module")
def recipe_keys() -> set[str]:
    return set(config_keys(load_recipe(RECIPE)))


def test_shipped_recipes_are_the_four_v040_ones() -> None:
    assert set(available_recipes()) == {
        "grpo_math_1B",
        "grpo_math_1B_megatron",
        "grpo_math_8B_megatron",
        "grpo_math_70B_megatron",
    }
    notice = (Path(load_recipe.__code__.co_filename).parent / "recipes" / "v0.4.0" / "NOTICE").read_text()
    assert "c751f811217db7df0d4c94abdeaada6626cfc150" in notice
    assert "Apache" in notice


def test_shipped_recipes_are_unmodified_copies(ref: Path) -> None:
    ours = Path(load_recipe.__code__.co_filename).parent / "recipes" / "v0.4.0"
    upstream = json.loads((ref / "nemo-rl" / "recipes.sha256.json").read_text())
    assert set(upstream) == {f"{name}.yaml" for name in available_recipes()}
    for name, digest in upstream.items():
        assert hashlib.sha256((ours / name).read_bytes()).hexdigest() == digest, name


def test_70b_recipe_resolves_to_the_reference_keys_and_defaults(ref: Path) -> None:
    expected = json.loads((ref / "nemo-rl" / "grpo_math_70B_megatron.resolved.json").read_text())
    got = flatten(resolve_config(RECIPE))
    assert len(got) == len(expected) == 177
    assert got == expected
    assert all(same_value(got[k], expected[k]) for k in expected)


def test_example_command_resolves_to_the_reference(ref: Path) -> None:
    overrides = json.loads((ref / "nemo-rl" / "grpo_math_70B_megatron.example_cmd.overrides.json").read_text())
    assert len(overrides) == 14
    expected = json.loads((ref / "nemo-rl" / "grpo_math_70B_megatron.example_cmd.resolved.json").read_text())
    got = flatten(resolve_config(RECIPE, overrides))
    assert got == expected
    assert all(same_value(got[k], expected[k]) for k in expected)


def test_interpolated_keys_follow_their_source(ref: Path) -> None:
    interps = json.loads((ref / "nemo-rl" / "grpo_math_70B_megatron.interpolations.json").read_text())
    base = flatten(resolve_config(RECIPE))
    for key, expr in interps.items():
        sources = re.findall(r"\$\{([\w.]+)\}", expr)
        src = sources[0]
        new = (
            base[src] + 3
            if isinstance(base[src], int)
            else base[src] * 2
            if isinstance(base[src], float)
            else f"{base[src]}-x"
        )
        got = flatten(resolve_config(RECIPE, [render_override(src, new)]))
        if expr.startswith("${mul:"):
            a, b = (got[s] for s in sources)
            assert got[key] == a * b, key
        else:
            assert same_value(got[key], new), key


def test_every_vector_resolves_as_hydra_did(ref: Path) -> None:
    """Our resolve_config gives the recorded value for 'ok' vectors and our error for the others."""
    for case in cases(ref):
        if case["result"] == "error":
            with pytest.raises(ConfigError) as info:
                resolve_config(RECIPE, [case["override"]])
            assert isinstance(info.value, PreflightError)
            (problem,) = info.value.problems
            assert problem.field.startswith(case["check_key"]), case
            assert problem.rule
            assert problem.field in str(info.value)
            continue
        cfg = resolve_config(RECIPE, [case["override"]])
        if case.get("key_deleted"):
            assert case["check_key"] not in flatten(cfg)
        else:
            assert same_value(nested(cfg, case["check_key"]), case["value"]), case


def test_every_ok_vector_value_round_trips_through_render(ref: Path, recipe_keys: set[str]) -> None:
    checked = 0
    for case in cases(ref):
        if case["result"] != "ok" or "value" not in case:
            continue
        key, value = case["check_key"], case["value"]
        if key not in recipe_keys:
            text = render_override(key, value, add=True)
        elif isinstance(value, dict):
            text = "++" + render_override(key, value)  # merge into a mapping struct mode guards
        else:
            text = render_override(key, value)
        assert same_value(hydra_value(text), value), (case, text)
        assert same_value(parse_override(text).value, value)
        applied = resolve_config(RECIPE, [text])
        assert same_value(nested(applied, key), value), (case, text)
        # The shell step keeps the Hydra text intact.
        assert shlex.split(shlex.quote(text)) == [text]
        checked += 1
    assert checked >= 60


TRICKY_STRINGS = [
    "",
    " ",
    "abc",
    "a b",
    " lead",
    "trail ",
    "true",
    "False",
    "null",
    "NULL",
    "None",
    "1",
    "-3",
    "1_000",
    "01",
    "3e-7",
    "1.",
    ".5",
    "inf",
    "-inf",
    "nan",
    "a,b",
    "a=b",
    "#tag",
    "it's",
    'say "hi"',
    "a'b\"c",
    "a\\",
    "a\\'b",
    "\\n\\n",
    "[x]",
    "{x}",
    "a(b)",
    "a:b",
    "é",
    "~x",
    "*",
    "a\tb",
    "line1\nline2",
    "$(rm -rf /)",
    "`ls`",
    "a;b",
    "a|b",
    "100%",
    "Qwen/Qwen2.5-72B-Instruct",
    "/lustre/a b/c",
    "s3://b/x",
    "00:03:30:00",
    "2025-01-01",
    "val:accuracy",
    "a\\\\'\"",
    "\\${literal}",
]


@pytest.mark.parametrize("s", TRICKY_STRINGS)
def test_strings_round_trip_through_hydra_and_the_shell(s: str) -> None:
    text = render_override("logger.wandb.name", s)
    assert same_value(hydra_value(text), s), text
    assert shlex.split(shlex.quote(text)) == [text]
    applied = resolve_config(RECIPE, [text]) if "${" not in s else None
    if applied is not None:
        assert same_value(applied["logger"]["wandb"]["name"], s)


def test_readable_strings_stay_unquoted_and_lookalikes_are_quoted() -> None:
    for plain in [
        "Qwen/Qwen2.5-72B-Instruct",
        "/lustre/fsw/run-1_x.y@z+1",
        "val:accuracy",
        "DeepScaler",
        "s3://bucket/x",
        "00:03:30:00",
    ]:
        assert render_override("k", plain) == f"k={plain}"
    for lookalike in ["true", "null", "1", "3e-7", "inf", "a,b", "a b", "it's", "${x}", "a\\b", "#x", "a=b"]:
        text = render_override("k", lookalike)
        assert text != f"k={lookalike}"
        assert text[2] in "'\""


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -7,
        2**40,
        0.5,
        3e-07,
        1e20,
        -0.0,
        math.inf,
        -math.inf,
        [],
        {},
        [1, 2.5, "a b", None],
        {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        {"a": {"b": [True, "x,y"]}},
        ["</answer>", "\\n\\n"],
    ],
)
def test_typed_values_round_trip(value: Any) -> None:
    text = render_override("policy.generation.stop_token_ids", value)
    assert same_value(hydra_value(text), value), text


def test_nan_round_trips() -> None:
    assert math.isnan(hydra_value(render_override("policy.megatron_cfg.optimizer.lr", math.nan)))


def test_tuples_render_as_lists() -> None:
    assert hydra_value(render_override("k", (1, "a"))) == [1, "a"]


def test_add_prefix() -> None:
    assert (
        render_override("logger.mlflow.tracking_uri", "http://mlflow:5000", add=True)
        == "+logger.mlflow.tracking_uri=http://mlflow:5000"
    )
    assert render_override("++policy.x", 1) == "++policy.x=1"
    assert parse_override("++policy.x=1").kind == "force_add"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("bad key", 1),
        ("a..b", 1),
        ("", 1),
        ("k", object()),
        ("k", {"a b": 1}),
        ("k", {1: "x"}),
        ("k", b"x"),
    ],
)
def test_unrenderable_is_a_config_error(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        render_override(key, value)
    assert isinstance(info.value, ValueError)
    assert info.value.rule


def test_parse_override_rejects_sweeps_and_bad_syntax() -> None:
    with pytest.raises(ConfigError, match="sweep"):
        parse_override("logger.wandb.name=run,1")
    with pytest.raises(ConfigError, match="Hydra override syntax"):
        parse_override("logger.wandb.name=it's")
    assert parse_override("~checkpointing.metric_name").kind == "delete"


def test_unknown_key_names_nearest_keys_and_plus_advice() -> None:
    with pytest.raises(PreflightError) as info:
        resolve_config(RECIPE, ["grpo.num_prompts_per_stepp=3", "policy.megatron_cfg.tensor_parallel_size=2"])
    first, second = info.value.problems
    assert first.field == "grpo.num_prompts_per_stepp"
    assert first.value == "3"
    assert "grpo.num_prompts_per_step" in first.rule
    assert "+grpo.num_prompts_per_stepp=" in first.rule
    assert "policy.megatron_cfg.tensor_model_parallel_size" in second.rule


def test_struct_mapping_names_the_missing_subkey() -> None:
    with pytest.raises(PreflightError) as info:
        resolve_config(RECIPE, ["logger.tensorboard={log_dir:foo}"])
    assert "+logger.tensorboard.log_dir=" in info.value.problems[0].rule
    assert flatten(resolve_config(RECIPE, ["+logger.tensorboard.log_dir=foo"]))["logger.tensorboard.log_dir"] == "foo"


def test_unresolvable_interpolation_is_our_error() -> None:
    with pytest.raises(PreflightError) as info:
        resolve_config(RECIPE, ["checkpointing.checkpoint_dir=${nope.missing}/x"])
    assert info.value.problems[0].field == "checkpointing.checkpoint_dir"


def test_overrides_must_be_a_sequence_of_strings() -> None:
    with pytest.raises(ConfigError):
        resolve_config(RECIPE, "grpo.max_num_steps=3")  # type: ignore[arg-type]


def test_all_four_recipes_resolve_with_their_chain() -> None:
    r1 = flatten(resolve_config("grpo_math_1B"))
    r1m = flatten(resolve_config("grpo_math_1B_megatron"))
    r8 = flatten(resolve_config("grpo_math_8B_megatron"))
    r70 = flatten(resolve_config("grpo_math_70B_megatron"))
    assert r1["policy.dtensor_cfg.enabled"] is True
    assert r1["policy.megatron_cfg.enabled"] is False
    assert r1m["policy.megatron_cfg.enabled"] is True
    assert r8["policy.megatron_cfg.pipeline_model_parallel_size"] == 2
    assert r70["policy.megatron_cfg.tensor_model_parallel_size"] == 4
    # Keys only the root of the chain sets reach the leaves.
    assert r8["grpo.seed"] == r70["grpo.seed"] == r1["grpo.seed"] == 42
    assert r1["policy.sequence_packing.train_mb_tokens"] == 512 * 4


def test_recipe_from_a_yaml_path_with_a_relative_defaults_chain(tmp_path: Path) -> None:
    shipped = Path(load_recipe.__code__.co_filename).parent / "recipes" / "v0.4.0"
    (tmp_path / "base.yaml").write_text(f"defaults: {shipped / 'grpo_math_70B_megatron.yaml'}\ngrpo:\n  seed: 7\n")
    (tmp_path / "mine.yaml").write_text("defaults:\n  - base.yaml\npolicy:\n  max_total_sequence_length: 1024\n")
    cfg = flatten(resolve_config(str(tmp_path / "mine.yaml"), ["grpo.max_num_steps=3"]))
    assert cfg["grpo.seed"] == 7
    assert cfg["grpo.max_num_steps"] == 3
    assert cfg["policy.generation.vllm_cfg.max_model_len"] == 1024
    assert cfg["policy.megatron_cfg.tensor_model_parallel_size"] == 4


def test_broken_defaults_chains_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("defaults: b.yaml\nx: 1\n")
    (tmp_path / "b.yaml").write_text("defaults: a.yaml\ny: 1\n")
    (tmp_path / "c.yaml").write_text("defaults: nowhere.yaml\n")
    (tmp_path / "d.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="loops"):
        load_recipe(str(tmp_path / "a.yaml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_recipe(str(tmp_path / "c.yaml"))
    with pytest.raises(ConfigError, match="mapping"):
        load_recipe(str(tmp_path / "d.yaml"))
    with pytest.raises(ConfigError, match="grpo_math_70B_megatron"):
        load_recipe("grpo_math_404")


def test_load_recipe_returns_independent_copies() -> None:
    a = load_recipe(RECIPE)
    a.grpo.seed = 1
    assert load_recipe(RECIPE).grpo.seed == 42


def test_version_facts() -> None:
    v040 = nemo_rl_version("0.4.0")
    assert (v040.ray_version, v040.python_version) == ("2.46.0", "3.12")
    assert v040.key("data.dataset_name") == "data.dataset_name"
    assert nemo_rl_version("0.5.0").key("data.dataset_name") == "data.dataset_name"
    assert nemo_rl_version("0.6.0").key("data.dataset_name") == "data.train.dataset_name"
    assert nemo_rl_version("1.2.3").renamed_from("data.dataset_name") is not None
    with pytest.raises(ConfigError):
        nemo_rl_version("v0.6")


def test_newer_versions_check_against_renamed_keys() -> None:
    cfg = flatten(resolve_config(RECIPE, ["data.train.dataset_name=DeepScaler"], version="0.6.0"))
    assert cfg["data.train.dataset_name"] == "DeepScaler"
    assert "data.dataset_name" not in cfg
    with pytest.raises(PreflightError) as info:
        resolve_config(RECIPE, ["data.dataset_name=DeepScaler"], version="0.6.0")
    assert info.value.problems[0].field == "data.dataset_name"
    assert "data.train.dataset_name" in info.value.problems[0].rule
    with pytest.raises(PreflightError):
        resolve_config(RECIPE, ["data.train.dataset_name=DeepScaler"], version="0.4.0")
