"""Recognising secrets: by the name that holds them, and by the shape of the value.

Secrets reach a job only through ``Cluster.secrets`` (names of environment variables,
delivered by a Kubernetes Secret or the local head's environment). Everything else a
user writes (overrides, env, names, paths) ends up in plain text somewhere: the job's
command line, Ray's job records, plans, logs. So a value shaped like a token is refused
wherever it is written, and redacted from every error message that would echo it.

The shapes are the documented token formats of the services a NeMo-RL run talks to
(Hugging Face, Weights & Biases, GitHub, Google Cloud, AWS, OpenAI-style keys, Slack)
and PEM private keys. Stdlib only: the supervisor and helper jobs import nothing heavy.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

# Which files may hold a credential: one rule for both sides of the wire (the seal of a
# run's results applies it on the cluster).
from .oncluster.secretpaths import secret_path as secret_path

REDACTED = "<redacted>"

# (what it is, pattern). Searched anywhere in a string, so a token pasted inside a URL
# or a longer value is found too.
SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (what, re.compile(pattern))
    for what, pattern in (
        ("a Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}"),
        ("a Hugging Face token", r"\bapi_org_[A-Za-z0-9]{30,}"),
        ("a Weights & Biases API key", r"\b(?:local-|wandb_v1_)?[0-9a-f]{40}\b"),
        ("a Weights & Biases API key", r"\bwandb_v1_[A-Za-z0-9_]{20,}"),
        ("a GitHub token", r"\bgh[pousr]_[A-Za-z0-9]{36,}"),
        ("a GitHub token", r"\bgithub_pat_[A-Za-z0-9_]{40,}"),
        ("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
        ("a Google OAuth access token", r"\bya29\.[0-9A-Za-z_-]{20,}"),
        ("a Google OAuth refresh token", r"\b1//[0-9A-Za-z_-]{30,}"),
        ("an AWS access key id", r"\b(?:AKIA|ASIA|AROA|AIDA)[0-9A-Z]{16}\b"),
        ("an API key (sk-...)", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"),
        ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
        ("a private key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"),
        ("a service-account key", r"\"private_key(?:_id)?\"\s*:"),
        ("a JSON Web Token", r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    )
)

# Names of variables and keys that hold secrets: whole words, so that
# TOKENIZERS_PARALLELISM or MONKEY_PATCH do not count.
_SECRET_WORDS = frozenset({"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY"})
_SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "APIKEY", "CREDENTIALS")
# Config keys are looser than environment names: NeMo-RL has pad_token, stop_token_ids,
# input_key and output_key, none of them secret. These are the key names that are.
_SECRET_KEY = re.compile(
    r"token|(?:.*_)?(?:(?:hf|hub|api|auth|access|bearer|github|gh|wandb|refresh|session)_?token"
    r"|api_?key|secret(?:_?key)?|password|passwd|private_?key|credentials?|access_?key(?:_?id)?)",
    re.IGNORECASE,
)


def looks_secret(name: str) -> bool:
    """Whether an environment variable name looks like it holds a secret.

    Whole words count (``HF_TOKEN``, ``WANDB_API_KEY``, ``DB_PASSWORD``), so that
    ``TOKENIZERS_PARALLELISM`` or ``MONKEY_PATCH`` do not.

    Examples:
        >>> looks_secret("HF_TOKEN"), looks_secret("wandb_api_key"), looks_secret("TOKENIZERS_PARALLELISM")
        (True, True, False)
    """
    words = [w for w in re.split(r"[^A-Z0-9]+", str(name).upper()) if w]
    return any(w in _SECRET_WORDS or w.endswith(_SECRET_SUFFIXES) for w in words)


def secret_key(key: str) -> bool:
    """Whether a dotted config key names a secret (its last part: ``hf_token``, ``api_key``).

    Examples:
        >>> secret_key("+policy.hf_token"), secret_key("policy.tokenizer.pad_token"), secret_key("data.input_key")
        (True, False, False)
    """
    last = str(key).lstrip("+~").rsplit(".", 1)[-1]
    return bool(_SECRET_KEY.fullmatch(last))


def secret_shape(value: Any) -> str | None:
    """What kind of secret ``value`` (or any string nested in it) looks like, or None.

    Examples:
        >>> secret_shape("hf_" + "a" * 34)
        'a Hugging Face token'
        >>> secret_shape({"x": ["fine", "ghp_" + "b" * 36]})
        'a GitHub token'
        >>> secret_shape("Qwen/Qwen2.5-72B-Instruct") is None
        True
    """
    for s in _strings(value):
        for what, rx in SHAPES:
            if rx.search(s):
                return what
    return None


def redact(text: str) -> str:
    """``text`` with every secret-shaped part replaced by ``<redacted>``.

    Examples:
        >>> redact("token hf_" + "x" * 34 + " rejected")
        'token <redacted> rejected'
    """
    if not isinstance(text, str) or not text:
        return text
    for _, rx in SHAPES:
        text = rx.sub(REDACTED, text)
    return text


def redact_value(value: Any) -> Any:
    """``value`` itself, or ``"<redacted>"`` when anything in it is secret-shaped."""
    return REDACTED if secret_shape(value) is not None else value


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    if depth > 20:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode("utf-8", "replace")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(k, depth + 1)
            yield from _strings(v, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _strings(v, depth + 1)


# ``${oc.env:NAME}`` / ``${oc.env:NAME,default}``: OmegaConf reads NAME from the process
# environment when the config is resolved.
ENV_INTERPOLATION = re.compile(r"\$\{\s*oc\.env\s*:\s*([^,}\s]*)")


def env_references(value: Any) -> list[str]:
    """Environment variables a value reads through ``${oc.env:...}`` interpolations.

    Examples:
        >>> env_references("${oc.env:HF_TOKEN}"), env_references(["${oc.env:HOME,/root}"])
        (['HF_TOKEN'], ['HOME'])
    """
    return [m.group(1) for s in _strings(value) for m in ENV_INTERPOLATION.finditer(s)]
