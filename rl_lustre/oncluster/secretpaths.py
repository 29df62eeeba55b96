"""Which files may hold a credential, by their name or place: the rule every copy of the
volume to Cloud Storage follows (the warm-start export, a run's results), on both sides.

Standard library only (part of the on-cluster package): the seal of a run's results
(:mod:`.seal`) applies it on the cluster, the client (:mod:`rl_lustre._secrets`) re-exports it.

Examples:
    >>> secret_path("huggingface_cache/token")
    "a credentials file ('token')"
    >>> secret_path("huggingface_cache/hub/secrets/x.bin")
    "under a secrets directory ('secrets')"
    >>> secret_path("huggingface_cache/hub/models--Qwen--Qwen2.5-72B-Instruct/blobs/0a1b") is None
    True
"""

from __future__ import annotations

import re

__all__ = ["secret_path"]

# Files that hold credentials by their name or place: huggingface_hub's token files
# ($HF_HOME/token, $HF_HOME/stored_tokens), anything under a directory named for secrets
# or credentials, private keys, netrc and .env files. A copy of the volume to Cloud Storage
# must never carry one.
_SECRET_FILE = re.compile(
    r"token|stored_tokens|\.netrc|_netrc|\.git-credentials|\.env|id_(?:rsa|dsa|ecdsa|ed25519)"
    r"|.*\.(?:pem|key|p12|pfx|jks)|credentials(?:\.json)?|application_default_credentials\.json",
    re.IGNORECASE,
)
_SECRET_DIR = re.compile(r"\.?(?:secrets?|credentials?|\.ssh|\.gnupg|\.aws|\.kube|gcloud)", re.IGNORECASE)


def secret_path(path: str) -> str | None:
    """Why the file at ``path`` (a ``/``-separated path) may hold a secret, or None."""
    parts = [p for p in str(path).split("/") if p]
    for part in parts[:-1]:
        if _SECRET_DIR.fullmatch(part):
            return f"under a secrets directory ({part!r})"
    if parts and _SECRET_FILE.fullmatch(parts[-1]):
        return f"a credentials file ({parts[-1]!r})"
    return None
