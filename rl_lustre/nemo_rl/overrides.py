"""Hydra override syntax: render typed Python values, and parse override strings back.

NeMo-RL reads its command line with Hydra's own ``OverridesParser``; we use the same
parser, both to read overrides and to check every string we render, so what a job
passes is exactly what NeMo-RL will see. Shell quoting is a separate, final step
(:func:`shlex.quote`) done by whoever builds the command line.
"""

from __future__ import annotations

import copy
import functools
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ..errors import ConfigError

if TYPE_CHECKING:
    from hydra.core.override_parser.overrides_parser import OverridesParser

OverrideKind = Literal["set", "add", "force_add", "delete"]
_PREFIXES: dict[str, OverrideKind] = {"": "set", "+": "add", "++": "force_add", "~": "delete"}
# Hydra's key grammar (dotted identifiers, '-' and '/' allowed after the first character).
_KEY = re.compile(r"[A-Za-z_$\\][\w$\\@:/.-]*")
# Strings left unquoted when Hydra reads them back unchanged: ids, paths, URLs, times.
# Anything with whitespace, quotes, '$', backslashes or Hydra punctuation is quoted.
_PLAIN = re.compile(r"[\w./:@+%-]+")


@attrs.frozen
class Override:
    """One parsed Hydra override.

    Attributes:
        key: the dotted key, without prefix.
        value: the typed value Hydra's parser produced (None for a bare ``~key``).
        kind: ``"set"`` (``key=v``), ``"add"`` (``+key=v``), ``"force_add"``
            (``++key=v``) or ``"delete"`` (``~key``).
        text: the override as written.
    """

    key: str
    value: Any
    kind: OverrideKind
    text: str


@functools.lru_cache(maxsize=1)
def _parser() -> OverridesParser:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def split_prefix(key: str) -> tuple[str, str]:
    """``"+a.b"`` → ``("+", "a.b")``; ``"a.b"`` → ``("", "a.b")``.

    Examples:
        >>> split_prefix("++policy.generation.vllm_kwargs.x")
        ('++', 'policy.generation.vllm_kwargs.x')
    """
    m = re.match(r"(\+\+|\+|~)?(.*)", key, re.DOTALL)
    assert m is not None
    return m.group(1) or "", m.group(2)


@functools.lru_cache(maxsize=4096)
def _hydra_parse(text: str) -> Any:
    """Hydra's parse of ``text`` (raising Hydra's own exceptions); each text is parsed once
    per process, so treat the result as read-only."""
    return _parser().parse_override(text)


def parse_override(text: str, *, owner: str = "override") -> Override:
    """Parse one override string exactly as NeMo-RL's Hydra parser does.

    Examples:
        >>> o = parse_override("checkpointing.metric_name=null")
        >>> o.key, o.value, o.kind
        ('checkpointing.metric_name', None, 'set')
        >>> parse_override("+logger.mlflow.tracking_uri='http://mlflow:5000'").value
        'http://mlflow:5000'

    Raises:
        ConfigError: the text is not a single-value override (syntax error, or a
            Hydra sweep such as ``key=a,b``, which NeMo-RL cannot run).
    """
    if not isinstance(text, str):
        raise ConfigError(owner, "override", text, "must be a string like 'key=value'")
    key = text.split("=", 1)[0]
    try:
        parsed = _hydra_parse(text)
    except Exception as exc:
        raise ConfigError(owner, key, text, syntax_rule(exc)) from exc
    if parsed.package is not None:
        raise ConfigError(owner, key, text, "'@package' config-group overrides do not apply to NeMo-RL configs")
    if parsed.is_sweep_override():
        raise ConfigError(owner, parsed.key_or_group, text, SWEEP_RULE)
    if parsed.is_delete():
        kind: OverrideKind = "delete"
    elif parsed.is_force_add():
        kind = "force_add"
    elif parsed.is_add():
        kind = "add"
    else:
        kind = "set"
    return Override(key=parsed.key_or_group, value=copy.deepcopy(parsed.value()), kind=kind, text=text)


SWEEP_RULE = (
    "a comma-separated value is a Hydra sweep, which NeMo-RL cannot run; write a list as "
    "[a,b] or quote a string containing commas, like key='a,b'"
)


def syntax_rule(exc: BaseException) -> str:
    """The rule text for a Hydra parse failure, with Hydra's own first line."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"is not valid Hydra override syntax ({detail}); quote strings that contain spaces, "
        "commas, quotes, brackets, '=', '#' or a leading '~', like key='a=b'"
    )


def render_override(key: str, value: Any, *, add: bool = False) -> str:
    """``key=value`` in Hydra syntax, such that Hydra's parser gives back ``value`` exactly.

    Strings stay unquoted when Hydra reads them back unchanged (so model ids and paths
    stay readable) and are quoted otherwise. ``${...}`` in a string is an OmegaConf
    interpolation, as in NeMo-RL's YAML files; :func:`literal` escapes it for literal text.
    Tuples render as lists. Shell-quote the result separately (:func:`shlex.quote`).

    Examples:
        >>> render_override("policy.model_name", "Qwen/Qwen2.5-72B-Instruct")
        'policy.model_name=Qwen/Qwen2.5-72B-Instruct'
        >>> render_override("checkpointing.metric_name", None)
        'checkpointing.metric_name=null'
        >>> render_override("logger.wandb.name", "true")
        'logger.wandb.name="true"'
        >>> render_override("logger.mlflow.tracking_uri", "http://mlflow:5000", add=True)
        '+logger.mlflow.tracking_uri=http://mlflow:5000'
        >>> render_override("~policy.dynamic_batching", None)
        '~policy.dynamic_batching'

    Args:
        key: the dotted key; a leading ``+``, ``++`` or ``~`` is kept as given (``~key``
            with value None deletes the key; with a value, only if it holds that value).
        value: None, bool, int, float (including inf and nan), str, or a list, tuple
            or dict of those.
        add: prefix ``+`` (add a key the recipe lacks).

    Raises:
        ConfigError: the key is not a Hydra key, or the value cannot be written so
            that Hydra reads back the same value and type.
    """
    prefix, bare = split_prefix(key) if isinstance(key, str) else ("", key)
    if add and not prefix:
        prefix = "+"
    if not isinstance(bare, str) or not _KEY.fullmatch(bare) or ".." in bare or bare.endswith("."):
        raise ConfigError("override", str(key), value, "must be a dotted key like 'grpo.max_num_steps'")
    if isinstance(value, str) and prefix != "~":
        # One parse per candidate spelling, of the override itself (value parsing does not
        # depend on the key); when none reads back, the general path below says why.
        for cand in _str_candidates(value):
            text = f"{prefix}{bare}={cand}"
            try:
                parsed = _hydra_parse(text)
            except Exception:
                continue
            if parsed.key_or_group == bare and not parsed.is_sweep_override() and same_value(parsed.value(), value):
                return text
    # "~key" deletes the key; "~key=value" deletes it only if it holds that value.
    text = f"~{bare}" if prefix == "~" and value is None else f"{prefix}{bare}={_render(value, bare)}"
    try:
        parsed = _hydra_parse(text)
    except Exception as exc:
        raise ConfigError(
            "override", bare, value, f"cannot be written as a Hydra override: {syntax_rule(exc)}"
        ) from exc
    if parsed.is_delete() and value is None and parsed.key_or_group == bare:
        return text
    if parsed.key_or_group != bare or parsed.is_sweep_override() or not same_value(parsed.value(), _normalise(value)):
        raise ConfigError("override", bare, value, "cannot be written so that Hydra reads back the same value")
    return text


_INTERPOLATION = re.compile(r"(\\*)\$\{")


def literal(value: Any) -> Any:
    r"""``value`` with every ``${`` in its strings escaped, so that OmegaConf (and so
    NeMo-RL) reads the text as written instead of resolving an interpolation.

    Backslashes right before ``${`` are doubled, so they survive as written too.

    Examples:
        >>> literal("run-${oc.env:USER}"), literal(["${x}", 3])
        ('run-\\${oc.env:USER}', ['\\${x}', 3])
    """
    if isinstance(value, str):
        return _INTERPOLATION.sub(lambda m: m.group(1) * 2 + "\\${", value)
    if isinstance(value, (list, tuple)):
        return [literal(v) for v in value]
    if isinstance(value, Mapping):
        return {k: literal(v) for k, v in value.items()}
    return value


def render_value(value: Any) -> str:
    """The value part of :func:`render_override`.

    Examples:
        >>> render_value([1, "a b", {"x": None}])
        '[1,"a b",{x:null}]'
    """
    return render_override("k", value).split("=", 1)[1]


def _normalise(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_normalise(v) for v in value]
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _normalise(v) for k, v in value.items()}
    return value


def same_value(a: Any, b: Any) -> bool:
    """Equal in value and in type, recursively (``1 != True != 1.0``; ``nan == nan``)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _render(value: Any, where: str) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _render_str(value, "{}")
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_render_element(v, where, "[{}]") for v in value) + "]"
    if isinstance(value, Mapping):
        items = []
        for k, v in value.items():
            if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][\w-]*", k):
                raise ConfigError(
                    "override", where, value, f"dict key {k!r} must be an identifier-like string for Hydra"
                )
            items.append(f"{k}:{_render_element(v, where, '{{x:{}}}')}")
        return "{" + ",".join(items) + "}"
    raise ConfigError("override", where, value, "must be None, bool, int, float, str, or a list or dict of those")


def _render_element(value: Any, where: str, context: str) -> str:
    if isinstance(value, str):
        return _render_str(value, context)
    return _render(value, where)


def _render_str(s: str, context: str) -> str:
    """The most readable spelling of ``s`` that Hydra reads back as ``s`` inside ``context``."""
    for cand in _str_candidates(s):
        try:
            parsed = _hydra_parse("k=" + context.format(cand))
        except Exception:
            continue
        if parsed.is_sweep_override():
            continue
        got = parsed.value()
        if context != "{}":
            got = got[0] if isinstance(got, list) else got.get("x") if isinstance(got, dict) else None
        if same_value(got, s):
            return cand
    raise ConfigError("override", "value", s, "this string cannot be written as a Hydra override value")


def _str_candidates(s: str) -> list[str]:
    """Spellings of ``s``, most readable first."""
    candidates = [s] if _PLAIN.fullmatch(s) else []
    # Double quotes first: the shell quoting that follows then stays a plain '...'.
    quotes = ["'", '"'] if '"' in s else ['"', "'"]
    return candidates + [_quote(s, q) for q in quotes]


def _quote(s: str, q: str) -> str:
    """Quote ``s`` with ``q``: Hydra treats backslashes as escapes only before a quote,
    so only backslash runs that precede a quote (or the closing quote) are doubled."""
    out = []
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == "\\":
            j += 1
        run = s[i:j]
        if run:
            nxt = s[j] if j < len(s) else None
            out.append(run * 2 if nxt in (q, None) else run)
            i = j
            continue
        out.append("\\" + q if s[i] == q else s[i])
        i += 1
    return q + "".join(out) + q
