"""NeMo-RL config resolution, offline and exactly as NeMo-RL does it.

NeMo-RL v0.4.0 (``nemo_rl/utils/config.py`` and ``examples/run_grpo_math.py``):

1. ``load_config``: load the YAML, pop its ``defaults:`` (a file name or a list of
   them, relative to the YAML's directory), load those recursively and merge them in
   order with ``OmegaConf.merge``, then merge the file itself on top.
2. ``parse_hydra_overrides``: struct mode on, Hydra's ``OverridesParser``, then
   Hydra's ``ConfigLoaderImpl._apply_overrides_to_config``.
3. ``OmegaConf.to_container(resolve=True)`` with the ``mul`` resolver registered.

We call the same Hydra and OmegaConf functions, so keys, types and error cases match.
NeMo-RL wraps every failure in ``OverridesError``; we raise
:class:`~rl_lustre.errors.PreflightError` listing each bad override, with its key,
its value and the rule it breaks (and, for an unknown key, the nearest known keys).
"""

from __future__ import annotations

import copy
import difflib
import functools
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, PreflightError
from .overrides import SWEEP_RULE, syntax_rule
from .versions import DEFAULT_VERSION, RECIPE_VERSION, nemo_rl_version

if TYPE_CHECKING:
    from omegaconf import DictConfig

log = logging.getLogger("rl_lustre.nemo_rl")

RECIPES_DIR = Path(__file__).parent / "recipes"


def available_recipes(version: str = RECIPE_VERSION) -> tuple[str, ...]:
    """Names of the recipes shipped for ``version`` (only ``0.4.0`` ships any).

    Examples:
        >>> "grpo_math_70B_megatron" in available_recipes()
        True
    """
    d = RECIPES_DIR / f"v{version}"
    return tuple(sorted(p.stem for p in d.glob("*.yaml"))) if d.is_dir() else ()


def recipe_name(recipe: str | os.PathLike[str]) -> str:
    """A recipe's name, without directory or YAML suffix.

    Examples:
        >>> recipe_name("/x/grpo_math_1B.yaml"), recipe_name("grpo_math_1B")
        ('grpo_math_1B', 'grpo_math_1B')
    """
    name = Path(recipe).name
    for ext in (".yaml", ".yml"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def is_recipe_path(recipe: str | os.PathLike[str]) -> bool:
    """Whether ``recipe`` names a YAML file on disk rather than a shipped recipe."""
    s = os.fspath(recipe)
    return os.sep in s or "/" in s or (s.endswith((".yaml", ".yml")) and Path(s).is_file())


def recipe_path(recipe: str | os.PathLike[str]) -> Path:
    """The YAML file of a shipped recipe (by name) or a recipe file on disk.

    Examples:
        >>> recipe_path("grpo_math_1B").name
        'grpo_math_1B.yaml'

    Raises:
        ConfigError: no such recipe or file.
    """
    if is_recipe_path(recipe):
        p = Path(recipe).expanduser()
        if not p.is_file():
            raise ConfigError("GRPOJob", "recipe", os.fspath(recipe), "no such recipe file")
        return p
    name = recipe_name(recipe)
    p = RECIPES_DIR / f"v{RECIPE_VERSION}" / f"{name}.yaml"
    if not p.is_file():
        raise ConfigError(
            "GRPOJob",
            "recipe",
            os.fspath(recipe),
            f"is not a recipe rl_lustre knows (known: {', '.join(available_recipes())}); "
            "pass the path of a NeMo-RL YAML file instead",
        )
    return p


def _load_chain(path: Path, seen: tuple[Path, ...] = ()) -> DictConfig:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    path = path.resolve()
    if path in seen:
        chain = " -> ".join(p.name for p in (*seen, path))
        raise ConfigError("recipe", "defaults", str(path), f"the defaults chain loops: {chain}")
    try:
        cfg = OmegaConf.load(path)
    except Exception as exc:
        raise ConfigError("recipe", "file", str(path), f"is not readable YAML: {exc}") from exc
    if not isinstance(cfg, DictConfig):
        raise ConfigError("recipe", "file", str(path), "must be a YAML mapping, not a list")
    if "defaults" not in cfg:
        return cfg
    defaults = cfg.pop("defaults")
    parents = [str(d) for d in defaults] if isinstance(defaults, ListConfig) else [str(defaults)]
    base: Any = OmegaConf.create({})
    for parent in parents:
        ppath = Path(parent) if parent.startswith("/") else path.parent / parent
        if not ppath.is_file():
            raise ConfigError("recipe", "defaults", parent, f"{path.name} inherits from a file that does not exist")
        base = _merge(base, _load_chain(ppath, (*seen, path)), path)
    merged = _merge(base, cfg, path)
    assert isinstance(merged, DictConfig)
    return merged


def _merge(base: Any, cfg: Any, path: Path) -> Any:
    from omegaconf import OmegaConf

    try:
        return OmegaConf.merge(base, cfg)
    except Exception as exc:
        raise ConfigError("recipe", "defaults", str(path), f"cannot be merged with its defaults: {exc}") from exc


@functools.lru_cache(maxsize=32)
def _shipped(name: str, version: str) -> tuple[DictConfig, tuple[str, ...]]:
    """A shipped recipe for ``version`` and the notes that go with it (cached; copy before use)."""
    from omegaconf import OmegaConf

    cfg = _load_chain(recipe_path(name))
    info = nemo_rl_version(version)
    if info.has_recipes:
        return cfg, ()
    raw: Any = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(raw, dict)
    moved = []
    for r in info.renames:
        value = _pop_path(raw, r.old)
        if value is not _MISSING:
            _set_path(raw, r.new, value)
            moved.append(f"{r.old} -> {r.new}")
    note = (
        f"rl_lustre ships NeMo-RL recipes for {RECIPE_VERSION} only; checking {name!r} for NeMo-RL "
        f"{version} against the {RECIPE_VERSION} keys"
        + (f" with the known renames ({', '.join(moved)})" if moved else "")
        + ". Keys added or removed in between are not known."
    )
    log.warning("%s", note)
    return OmegaConf.create(raw), (note,)


def shared_recipe(recipe: str | os.PathLike[str], version: str = DEFAULT_VERSION) -> tuple[DictConfig, tuple[str, ...]]:
    """:func:`load_recipe` without the copy, plus warnings about how well the recipe matches ``version``.

    A shipped recipe is parsed once per process and the same object is returned every
    time: read it, never change it (:func:`resolve_overrides` copies it first). A
    recipe file is read afresh.

    Raises:
        ConfigError: unknown recipe, unreadable YAML, or a broken ``defaults:`` chain.
    """
    from .._validate import need

    need("recipe", "recipe", recipe, (str, os.PathLike), "a recipe name or the path of a YAML file")
    need("recipe", "version", version, str, "a NeMo-RL version like '0.4.0'")
    if is_recipe_path(recipe):
        return _load_chain(recipe_path(recipe)), ()
    return _shipped(recipe_name(recipe), version)


def load_recipe_with_notes(
    recipe: str | os.PathLike[str], version: str = DEFAULT_VERSION
) -> tuple[DictConfig, list[str]]:
    """:func:`load_recipe`, plus warnings about how well the recipe matches ``version``."""
    shared_recipe(recipe, version)  # checks the arguments
    if is_recipe_path(recipe):
        return _load_chain(recipe_path(recipe)), []
    cfg, notes = _shipped(recipe_name(recipe), version)
    return copy.deepcopy(cfg), list(notes)


def load_recipe(recipe: str | os.PathLike[str], version: str = DEFAULT_VERSION) -> DictConfig:
    """A NeMo-RL recipe with its ``defaults:`` chain merged, not yet resolved.

    ``recipe`` is a shipped recipe's name (``grpo_math_70B_megatron``) or the path of a
    YAML file (whose ``defaults:`` are read relative to it). For a ``version`` other
    than 0.4.0, the 0.4.0 recipe is returned with the known key renames applied, and a
    warning is logged.

    Examples:
        >>> cfg = load_recipe("grpo_math_70B_megatron")
        >>> cfg.policy.megatron_cfg.tensor_model_parallel_size, cfg.policy.model_name
        (4, 'meta-llama/Llama-3.3-70B-Instruct')

    Raises:
        ConfigError: unknown recipe, unreadable YAML, or a broken ``defaults:`` chain.
    """
    return load_recipe_with_notes(recipe, version)[0]


def register_resolvers() -> None:
    """Register the OmegaConf resolvers NeMo-RL v0.4.0's GRPO example registers (``mul``)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("mul"):
        OmegaConf.register_new_resolver("mul", lambda a, b: a * b)


def config_keys(cfg: DictConfig | Mapping[str, Any]) -> list[str]:
    """Every dotted path in ``cfg``: leaves and the mappings above them.

    Examples:
        >>> config_keys({"a": {"b": 1}, "c": None})
        ['a', 'a.b', 'c']
    """
    from omegaconf import DictConfig, OmegaConf

    raw: Any = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    out: list[str] = []

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for k, v in node.items():
            path = f"{prefix}{k}"
            out.append(path)
            if isinstance(v, Mapping):
                walk(v, path + ".")

    assert isinstance(raw, Mapping)
    walk(raw, "")
    return out


def nearest_keys(key: str, known: Sequence[str], n: int = 3) -> list[str]:
    """The known keys closest to ``key`` (by spelling, then by last component).

    Examples:
        >>> nearest_keys("grpo.max_steps", ["grpo.max_num_steps", "grpo.seed", "policy.max_grad_norm"])
        ['grpo.max_num_steps', 'grpo.seed']
    """
    close = difflib.get_close_matches(key, known, n=n, cutoff=0.6)
    if len(close) < n:
        last = key.rsplit(".", 1)[-1]
        tails = {k.rsplit(".", 1)[-1]: k for k in reversed(known)}
        for t in difflib.get_close_matches(last, list(tails), n=n, cutoff=0.75):
            if tails[t] not in close:
                close.append(tails[t])
    return close[:n]


def missing_key_rule(key: str, known: Sequence[str]) -> str:
    near = nearest_keys(key, known)
    hint = f"did you mean {' or '.join(map(repr, near))}? " if near else "no similar key exists. "
    return (
        f"the recipe has no key {key!r}; {hint}If it is a new key, add it with '+{key}=value' "
        "(in GRPOJob.overrides: {'+" + key + "': value})"
    )


def apply_overrides(
    cfg: DictConfig,
    overrides: Sequence[str],
    *,
    owner: str,
    values: Sequence[Any] | None = None,
    version: str = DEFAULT_VERSION,
) -> list[ConfigError]:
    """Apply Hydra overrides in place as NeMo-RL does; return a problem per bad override.

    A bad override is skipped and the rest still apply, so every problem is reported
    at once. ``values`` (parallel to ``overrides``) are what errors show as the value;
    by default, the text after ``=``.

    Examples:
        >>> cfg = load_recipe("grpo_math_1B")
        >>> [p.field for p in apply_overrides(cfg, ["grpo.seed=1", "grpo.sed=2"], owner="demo")]
        ['grpo.sed']
        >>> cfg.grpo.seed
        1
    """
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from omegaconf import OmegaConf

    from .overrides import _hydra_parse

    info = nemo_rl_version(version)
    OmegaConf.set_struct(cfg, True)
    problems: list[ConfigError] = []
    for i, text in enumerate(overrides):
        key = text.lstrip("+~").split("=", 1)[0]
        shown = values[i] if values is not None else text.split("=", 1)[1] if "=" in text else None

        def problem(rule: str, *, field: str = key, value: Any = shown) -> None:
            problems.append(ConfigError(owner, field, value, rule))

        try:
            parsed = _hydra_parse(text)
        except Exception as exc:
            problem(syntax_rule(exc))
            continue
        key = parsed.key_or_group
        if parsed.is_sweep_override():
            problem(SWEEP_RULE, field=key)
            continue
        rename = info.renamed_from(key)
        if rename is not None and OmegaConf.select(cfg, key, default=_MISSING) is _MISSING:
            problem(
                f"NeMo-RL renamed {rename.old!r} to {rename.new!r} in {rename.since} and this "
                f"job runs NeMo-RL {info.version}; write {info.key(key)!r}",
                field=key,
            )
            continue
        try:
            ConfigLoaderImpl._apply_overrides_to_config(overrides=[parsed], cfg=cfg)
        except Exception as exc:
            msg = str(exc)
            if msg.startswith("Could not override"):
                known = config_keys(cfg)
                missing = key
                if key in known and isinstance(parsed.value(), Mapping):
                    # The mapping exists; struct mode refused a sub-key it lacks.
                    subs = [f"{key}.{k}" for k in flatten(parsed.value())]
                    missing = next((k for k in subs if k not in known), key)
                problem(missing_key_rule(missing, known), field=key)
            elif msg.startswith("Could not append to config"):
                problem(
                    f"'+' adds a key, but {key!r} already exists; drop the '+' to change it "
                    "(or write '++' to add or change it)",
                    field=key,
                )
            elif msg.startswith("Could not delete"):
                problem(f"'~' deletes a key, but the recipe has no {key!r}", field=key)
            else:
                cause = exc.__cause__ or exc
                detail = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
                problem(f"Hydra/OmegaConf cannot apply this override: {detail}", field=key)
    return problems


def resolve(cfg: DictConfig, *, owner: str) -> dict[str, Any]:
    """``OmegaConf.to_container(cfg, resolve=True)``, errors translated."""
    from omegaconf import OmegaConf

    register_resolvers()
    try:
        out: Any = OmegaConf.to_container(cfg, resolve=True)
    except Exception as exc:
        key = getattr(exc, "full_key", None) or "config"
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PreflightError([ConfigError(owner, key, None, f"cannot be resolved: {detail}")]) from exc
    assert isinstance(out, dict)
    return out


_ENV_READ = re.compile(r"oc\.env\s*:")
_INTERPOLATION = re.compile(r"(?<!\\)\$\{")


def defer_env_reads(cfg: DictConfig) -> DictConfig:
    """A copy of ``cfg`` in which every string reading ``${oc.env:...}`` is kept literally.

    Resolving it then shows ``${oc.env:HF_TOKEN}`` as written instead of this process's
    ``HF_TOKEN``; interpolations that point at such a value get the same text.

    Examples:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"token": "${oc.env:HOME}", "copy": "${token}", "n": "${mul:2,3}"})
        >>> register_resolvers()
        >>> OmegaConf.to_container(defer_env_reads(cfg), resolve=True)
        {'token': '${oc.env:HOME}', 'copy': '${oc.env:HOME}', 'n': 6}
    """
    from omegaconf import DictConfig, OmegaConf

    def walk(node: Any) -> Any:
        if isinstance(node, str) and _ENV_READ.search(node):
            return _INTERPOLATION.sub(lambda _: "\\${", node)
        if isinstance(node, dict):
            return {k: walk(x) for k, x in node.items()}
        if isinstance(node, list):
            return [walk(x) for x in node]
        return node

    raw = OmegaConf.to_container(cfg, resolve=False)
    out = OmegaConf.create(walk(raw))
    assert isinstance(out, DictConfig)
    return out


def resolve_overrides(
    recipe: DictConfig,
    overrides: Sequence[str],
    *,
    owner: str,
    values: Sequence[Any] | None = None,
    version: str = DEFAULT_VERSION,
    read_env: bool = False,
) -> tuple[dict[str, Any] | None, list[ConfigError], list[ConfigError]]:
    """``recipe`` with Hydra ``overrides`` applied as NeMo-RL does, then resolved; ``recipe`` is left unchanged.

    Bad overrides are skipped (see :func:`apply_overrides`) and the rest still resolve, so
    every problem is reported at once. :func:`.config_cache.resolve_shared` gives the same
    result sharing parts with other calls, so that many jobs of one recipe resolve at the
    cost of their differences.

    ``${oc.env:...}`` is read from this process's environment only with ``read_env``
    (the job's own process, where NeMo-RL would read it). Otherwise such values stay
    as written (see :func:`defer_env_reads`): preflight runs on the user's machine,
    whose environment holds their tokens, and its findings are printed.

    Examples:
        >>> cfg, bad, unresolved = resolve_overrides(shared_recipe("grpo_math_1B")[0],
        ...                                          ["grpo.seed=7", "grpo.sed=2"], owner="demo")
        >>> cfg["grpo"]["seed"], [p.field for p in bad], unresolved
        (7, ['grpo.sed'], [])

    Returns:
        The resolved config (None when it does not resolve), the problems of the
        overrides, and the problems of resolution.
    """
    cfg = copy.deepcopy(recipe)
    applied = apply_overrides(cfg, list(overrides), owner=owner, values=values, version=version)
    try:
        return resolve(cfg if read_env else defer_env_reads(cfg), owner=owner), applied, []
    except PreflightError as exc:
        return None, applied, exc.problems


def resolve_config(
    recipe_or_cfg: str | os.PathLike[str] | DictConfig | Mapping[str, Any],
    overrides: Sequence[str] = (),
    version: str = DEFAULT_VERSION,
) -> dict[str, Any]:
    """The config NeMo-RL would run: recipe + Hydra overrides, interpolations resolved.

    Examples:
        >>> cfg = resolve_config("grpo_math_70B_megatron",
        ...                      ["policy.max_total_sequence_length=8192", "grpo.max_num_steps=20"])
        >>> cfg["policy"]["generation"]["vllm_cfg"]["max_model_len"], cfg["grpo"]["max_num_steps"]
        (8192, 20)

    Args:
        recipe_or_cfg: a recipe name, a YAML path, a ``DictConfig`` (left unchanged) or
            a plain mapping.
        overrides: Hydra override strings (``key=v``, ``+key=v``, ``++key=v``, ``~key``).
        version: the NeMo-RL version (key renames; recipes ship for 0.4.0).

    Returns:
        A nested plain dict.

    Raises:
        PreflightError: (a ``ConfigError``) listing every override NeMo-RL would reject
            (unknown key, bad syntax, sweep, '+' on an existing key, ...), or an
            interpolation that does not resolve.
    """
    from omegaconf import DictConfig, OmegaConf

    if isinstance(recipe_or_cfg, (str, os.PathLike)):
        cfg = shared_recipe(recipe_or_cfg, version)[0]
        owner = recipe_name(recipe_or_cfg)
    elif isinstance(recipe_or_cfg, DictConfig):
        cfg = recipe_or_cfg
        owner = "config"
    elif isinstance(recipe_or_cfg, Mapping):
        cfg = OmegaConf.create(dict(recipe_or_cfg))
        owner = "config"
    else:
        raise ConfigError(
            "resolve_config",
            "recipe_or_cfg",
            recipe_or_cfg,
            "must be a recipe name, a YAML path, a DictConfig or a mapping",
        )
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, (list, tuple)):
        raise ConfigError(owner, "overrides", overrides, "must be a list of override strings like ['grpo.seed=1']")
    for text in overrides:
        if not isinstance(text, str):
            raise ConfigError(owner, "overrides", text, "each override must be a string like 'grpo.seed=1'")
    resolved, applied, unresolved = resolve_overrides(cfg, overrides, owner=owner, version=version, read_env=True)
    if applied or unresolved:
        raise PreflightError(applied or unresolved)
    assert resolved is not None
    return resolved


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys → leaf values; empty mappings and all lists are leaves.

    Examples:
        >>> flatten({"a": {"b": 1, "c": {}}, "d": [1, 2]})
        {'a.b': 1, 'a.c': {}, 'd': [1, 2]}
    """
    if not isinstance(d, Mapping):
        raise ConfigError("flatten", "d", d, "must be a mapping")
    out: dict[str, Any] = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, path + "."))
        else:
            out[path] = v
    return out


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()


def _pop_path(d: dict[str, Any], path: str) -> Any:
    *parents, last = path.split(".")
    node: Any = d
    for p in parents:
        node = node.get(p) if isinstance(node, dict) else None
        if node is None:
            return _MISSING
    return node.pop(last, _MISSING) if isinstance(node, dict) else _MISSING


def _set_path(d: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = d
    for p in parents:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[last] = value
