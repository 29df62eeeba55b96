"""Resolving many jobs of one recipe: one shared resolution, patched per job.

The jobs of a sweep share their recipe and most of their overrides; what differs is
usually a handful of plain values (the run name, its checkpoint and log directories,
the swept value). Applying and resolving the whole recipe for each of them repeats
the same OmegaConf work, which is most of the cost of a submission.

So :func:`resolve_patched` splits a job's overrides in two:

- *leaf* overrides: ``key=value`` (no ``+``, ``++`` or ``~``) of a key that holds a
  plain value in the recipe, to a plain value (None, bool, int, float, or a string
  without ``$`` or ``\\``, and not ``???``), where no interpolation of the recipe
  mentions the key or a key above it, and no other override touches it;
- every other override (*structural*).

The recipe with the structural overrides is applied and resolved once and kept; each
job's resolution is that, with its leaf values set in a copy of the paths leading to
them. This is exactly what Hydra and OmegaConf produce: Hydra sets such a leaf with
``OmegaConf.update`` and cannot fail, and since nothing refers to the key, no other
value changes. Whenever that cannot be shown (a relative interpolation in the recipe,
an interpolation in an override, a shared resolution that does not resolve), it
returns None and the caller resolves the job in full.
"""

from __future__ import annotations

import copy
import re
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, PreflightError

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = ["resolve_patched", "resolve_shared"]

_NAME = re.compile(r"[A-Za-z_][\w-]*(?:\.[\w-]+)*")
_SCALARS = (type(None), bool, int, float, str)
_MAX = 32


class _LRU:
    """A small thread-safe LRU map."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


# Both are keyed by id(recipe) and hold the recipe itself, so an id is never reused
# while its entry lives.
_RECIPES = _LRU(_MAX)
_SHARED = _LRU(_MAX)


class _Recipe:
    """What the fast path needs to know of one recipe: the names its interpolations
    mention and the dotted keys that hold plain values (not mappings or lists)."""

    def __init__(self, recipe: DictConfig) -> None:
        from omegaconf import OmegaConf

        self.recipe = recipe
        self.names: set[str] = set()
        self.leaves: set[str] = set()
        # False when that cannot be told: a relative interpolation, or a key with '$' or '.'.
        self.known = True
        self._walk(OmegaConf.to_container(recipe, resolve=False), "")

    def _walk(self, node: Any, prefix: str | None) -> None:
        """``prefix`` is None inside lists, whose items dotted keys do not reach."""
        if isinstance(node, Mapping):
            for k, v in node.items():
                if not isinstance(k, str) or "$" in k or "." in k:
                    self.known = False
                    continue
                path = None if prefix is None else f"{prefix}{k}"
                if path is not None and not isinstance(v, (Mapping, list)):
                    self.leaves.add(path)
                self._walk(v, None if path is None else path + ".")
        elif isinstance(node, list):
            for v in node:
                self._walk(v, None)
        elif isinstance(node, str) and "$" in node:
            if "${." in node.replace(" ", ""):
                self.known = False
            self.names.update(_NAME.findall(node))


def _recipe(recipe: DictConfig) -> _Recipe:
    cached: _Recipe | None = _RECIPES.get(id(recipe))
    if cached is not None and cached.recipe is recipe:
        return cached
    info = _Recipe(recipe)
    _RECIPES.put(id(recipe), info)
    return info


def _plain(value: Any) -> bool:
    if type(value) not in _SCALARS:
        return False
    return not (isinstance(value, str) and ("$" in value or "\\" in value or value == "???"))


def _mentioned(key: str, names: set[str]) -> bool:
    """Whether ``key`` or a section holding it is a name the recipe interpolates."""
    prefix = ""
    for part in key.split("."):
        prefix = f"{prefix}.{part}" if prefix else part
        if prefix in names:
            return True
    return False


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def resolve_shared(
    recipe: DictConfig,
    overrides: Sequence[str],
    *,
    owner: str,
    values: Sequence[Any] | None = None,
    version: str,
    read_env: bool = False,
) -> tuple[dict[str, Any] | None, list[ConfigError], list[ConfigError]]:
    """:func:`~rl_lustre.nemo_rl.config.resolve_overrides`, through a shared resolution where
    :func:`resolve_patched` can: the result may share parts with other calls' results, so
    the caller must not change it.

    Examples:
        >>> from rl_lustre.nemo_rl.config import shared_recipe
        >>> cfg, bad, unresolved = resolve_shared(shared_recipe("grpo_math_1B")[0], ["grpo.seed=7"],
        ...                                       owner="demo", version="0.4.0")
        >>> cfg["grpo"]["seed"], bad, unresolved
        (7, [], [])
    """
    from .config import resolve_overrides

    patched = resolve_patched(recipe, overrides, owner=owner, values=values, version=version, read_env=read_env)
    if patched is not None:
        return patched[0], patched[1], []
    return resolve_overrides(recipe, overrides, owner=owner, values=values, version=version, read_env=read_env)


def resolve_patched(
    recipe: DictConfig,
    overrides: Sequence[str],
    *,
    owner: str,
    values: Sequence[Any] | None,
    version: str,
    read_env: bool = False,
) -> tuple[dict[str, Any], list[ConfigError]] | None:
    """:func:`~rl_lustre.nemo_rl.config.resolve_overrides` through a shared resolution, or
    None when this job must be resolved in full.

    Returns the resolved config (which shares unpatched parts with other jobs' configs:
    read it, never change it) and the problems of the overrides. Never returns a
    config that did not resolve.
    """
    from .config import apply_overrides, defer_env_reads, resolve
    from .overrides import _hydra_parse

    info = _recipe(recipe)
    if not info.known:
        return None
    parsed = []
    for text in overrides:
        try:
            parsed.append(_hydra_parse(text))
        except Exception:
            parsed.append(None)
    keys = [p.key_or_group if p is not None else text for p, text in zip(parsed, overrides, strict=True)]
    leaves: dict[int, tuple[list[str], Any]] = {}
    for i, p in enumerate(parsed):
        if (
            p is None
            or p.package is not None
            or p.is_delete()
            or p.is_add()
            or p.is_force_add()
            or p.is_sweep_override()
            or not _plain(p.value())
            or keys.count(p.key_or_group) != 1
            or p.key_or_group not in info.leaves
            or _mentioned(p.key_or_group, info.names)
        ):
            continue
        leaves[i] = (p.key_or_group.split("."), p.value())
    structural = [i for i in range(len(overrides)) if i not in leaves]
    if "$" in "\n".join([overrides[i] for i in structural]):
        return None
    for i in list(leaves):
        for j in structural:
            if _related(keys[i], keys[j]):
                structural.append(i)  # the loop ends here: appending while iterating is safe
                del leaves[i]
                break
    structural.sort()
    texts = [overrides[i] for i in structural]
    shown = None if values is None else [values[i] for i in structural]
    key = (id(recipe), owner, version, read_env, tuple(texts), None if shown is None else tuple(map(repr, shown)))
    shared = _SHARED.get(key)
    if shared is None or shared[0] is not recipe:
        cfg = copy.deepcopy(recipe)
        problems = apply_overrides(cfg, texts, owner=owner, values=shown, version=version)
        try:
            config: dict[str, Any] | None = resolve(cfg if read_env else defer_env_reads(cfg), owner=owner)
        except PreflightError:
            config = None
        shared = (recipe, config, problems)
        _SHARED.put(key, shared)
    _, config, problems = shared
    if config is None:
        return None
    for path, _ in leaves.values():
        if not _is_plain_at(config, path):
            return None
    return _patch(config, list(leaves.values())), [copy.copy(p) for p in problems]


def _is_plain_at(config: Mapping[str, Any], path: list[str]) -> bool:
    node: Any = config
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return type(node) in _SCALARS


def _patch(config: dict[str, Any], patches: list[tuple[list[str], Any]]) -> dict[str, Any]:
    """``config`` with each ``path`` set to its value, copying only the mappings on those paths."""
    out = dict(config)
    copied: dict[tuple[str, ...], dict[str, Any]] = {(): out}
    for path, value in patches:
        node = out
        for depth in range(1, len(path)):
            prefix = tuple(path[:depth])
            if prefix not in copied:
                copied[prefix] = node[path[depth - 1]] = dict(node[path[depth - 1]])
            node = copied[prefix]
        node[path[-1]] = value
    return out
