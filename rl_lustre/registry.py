"""The container registry, read-only: an image reference's digest and its compressed size.

The preload disk image is keyed by the image's digest (a moving tag caches nothing new),
so ``up()`` asks the registry for it, as ``docker pull`` does, over the OCI distribution
API (opencontainers/distribution-spec, ``spec.md``):

1. ``HEAD /v2/<name>/manifests/<tag>`` with the manifest media types in ``Accept``: the
   ``Docker-Content-Digest`` header is the digest (skipped when the reference pins one);
2. ``GET /v2/<name>/manifests/<digest>``: an index (multi-platform) names the
   ``linux/amd64`` manifest, which is fetched in turn; its ``layers[].size`` add up to
   the compressed size.

A ``401`` with ``WWW-Authenticate: Bearer realm=…,service=…,scope=…`` is answered by the
token flow of distribution/distribution's ``docs/content/spec/auth/token.md``: anonymous
for public registries (nvcr.io, Docker Hub), with the caller's Google access token as
``oauth2accesstoken`` for Artifact Registry and Container Registry. Server errors and
timeouts are retried (tenacity).

``RL_LUSTRE_REGISTRY_EMULATOR=http://127.0.0.1:PORT`` sends every registry's requests to a
fake (:class:`rl_lustre.testing.FakeGCP` sets it), the host kept as the first path
segment: ``/<host>/v2/<name>/manifests/<reference>``.

Examples:
    >>> parse_reference("nvcr.io/nvidia/nemo-rl:v0.4.0")
    Reference(host='nvcr.io', repository='nvidia/nemo-rl', tag='v0.4.0', digest=None)
    >>> parse_reference("rayproject/ray:2.46.0").host, parse_reference("ubuntu").repository
    ('registry-1.docker.io', 'library/ubuntu')
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .catalog import DOCKER_HUB, google_registry, split_host
from .errors import ConfigError, ImageNotFoundError, RegistryAuthError, RegistryError

if TYPE_CHECKING:
    import requests

__all__ = [
    "EMULATOR_ENV",
    "Reference",
    "ResolvedImage",
    "google_registry",
    "parse_reference",
    "resolve",
]

EMULATOR_ENV = "RL_LUSTRE_REGISTRY_EMULATOR"
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
ACCEPT = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
PLATFORM = ("linux", "amd64")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_BEARER = re.compile(r'(\w+)="([^"]*)"')


@attrs.frozen
class Reference:
    """An image reference, split as a registry client splits it.

    Attributes:
        host: the registry host (``nvcr.io``; Docker Hub is ``registry-1.docker.io``).
        repository: the repository path (``nvidia/nemo-rl``; ``library/`` added for
            Docker Hub's official images).
        tag: the tag, or None when only a digest was given.
        digest: the pinned ``sha256:…`` digest, or None.
    """

    host: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def pullable(self) -> str:
        """The reference to pull: ``host/repository[:tag]@digest`` when the digest is known."""
        host = "docker.io" if self.host == DOCKER_HUB else self.host
        base = f"{host}/{self.repository}" + (f":{self.tag}" if self.tag else "")
        return f"{base}@{self.digest}" if self.digest else base


@attrs.frozen
class ResolvedImage:
    """What the registry says of an image.

    Attributes:
        reference: the reference as given.
        digest: the digest ``docker pull`` would fetch (of the index for a
            multi-platform image): the preload image's key.
        platform_digest: the ``linux/amd64`` manifest's digest (equal to ``digest`` for a
            single-platform image).
        compressed_bytes: the sum of the ``linux/amd64`` layers' sizes.
        layers: each layer's compressed size, in order.
        media_type: the top manifest's media type.
    """

    reference: str
    digest: str
    platform_digest: str
    compressed_bytes: int
    layers: tuple[int, ...]
    media_type: str

    @property
    def pullable(self) -> str:
        """``reference@digest``: the exact image, whatever the tag points at later."""
        return attrs.evolve(parse_reference(self.reference), digest=self.digest).pullable


def parse_reference(ref: str) -> Reference:
    """Split an image reference the way Docker does.

    Raises:
        ConfigError: not an image reference.
    """

    def bad(rule: str) -> ConfigError:
        return ConfigError("Cluster", "image", ref, rule)

    rest, _, digest = ref.partition("@")
    if digest and not _DIGEST.match(digest):
        raise bad("a pinned digest must be sha256: and 64 lowercase hex digits")
    host, path = split_host(rest)
    tag: str | None = None
    name, colon, maybe_tag = path.rpartition(":")
    if colon and "/" not in maybe_tag:
        path, tag = name, maybe_tag
    if host in ("docker.io", "index.docker.io"):
        host = DOCKER_HUB
    if host == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not path or not all(_COMPONENT.match(c) for c in path.split("/")):
        raise bad("the repository must be lowercase path components (letters, digits, '.', '_', '-')")
    if tag is not None and not _TAG.match(tag):
        raise bad("a tag is 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'")
    if tag is None and not digest:
        tag = "latest"
    return Reference(host, path, tag, digest or None)


def _base_url(host: str) -> str:
    emulator = os.environ.get(EMULATOR_ENV, "").strip().rstrip("/")
    return f"{emulator}/{host}" if emulator else f"https://{host}"


def _google_password() -> str | None:
    """The caller's Google access token (Application Default Credentials), or None."""
    try:
        import google.auth
        import google.auth.transport.requests

        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        credentials.refresh(google.auth.transport.requests.Request())
        return str(credentials.token)
    except Exception:  # no credentials here: try anonymously, the registry will say
        return None


class _Client:
    """One registry's session with the token it earned."""

    def __init__(
        self, ref: Reference, session: requests.Session, timeout: float, password: Callable[[], str | None]
    ) -> None:
        self.ref = ref
        self.session = session
        self.timeout = timeout
        self.password = password
        self.base = _base_url(ref.host)
        self.token: str | None = None

    def _token(self, challenge: str) -> str:
        params = dict(_BEARER.findall(challenge))
        realm = params.pop("realm", None)
        if not challenge.lower().startswith("bearer") or not realm:
            raise RegistryAuthError(f"{self.ref.host} asks for authentication this client does not speak: {challenge}")
        auth = None
        if google_registry(self.ref.host):
            secret = self.password()
            if secret is not None:
                auth = ("oauth2accesstoken", secret)
        params.setdefault("scope", f"repository:{self.ref.repository}:pull")
        answer = self.session.get(realm, params=params, auth=auth, timeout=self.timeout)
        if answer.status_code >= 500:
            answer.raise_for_status()
        if answer.status_code != 200:
            raise self._denied(answer.status_code)
        body = answer.json()
        token = body.get("token") or body.get("access_token")
        if not token:
            raise RegistryError(f"{self.ref.host}'s token service answered without a token")
        return str(token)

    def _denied(self, status: int) -> RegistryAuthError:
        return RegistryAuthError(
            f"{self.ref.host} refused to serve {self.ref.pullable} without credentials (HTTP {status}): "
            "preloading needs a public image or one in Artifact Registry the caller can read; "
            "Cluster(preload_image=False) turns preloading off (the image is then pre-pulled on each node)"
        )

    def request(self, verb: str, reference: str, accept: str = ACCEPT) -> requests.Response:
        url = f"{self.base}/v2/{self.ref.repository}/manifests/{reference}"
        for attempt in range(2):
            headers = {"Accept": accept}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            answer = self.session.request(verb, url, headers=headers, timeout=self.timeout)
            if answer.status_code == 401 and attempt == 0:
                self.token = self._token(answer.headers.get("WWW-Authenticate", ""))
                continue
            break
        if answer.status_code in (401, 403):
            raise self._denied(answer.status_code)
        if answer.status_code == 404:
            raise ImageNotFoundError(
                f"{self.ref.host} has no image {self.ref.pullable} (manifest {reference} unknown): check Cluster.image"
            )
        if answer.status_code == 429 or answer.status_code >= 500:
            answer.raise_for_status()  # retried
        if answer.status_code >= 400:
            raise RegistryError(f"{self.ref.host} answered {answer.status_code} for {verb} {url}")
        return answer


def _platform_manifest(index: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for entry in index.get("manifests") or []:
        platform = entry.get("platform") or {}
        if (platform.get("os"), platform.get("architecture")) == PLATFORM:
            return dict(entry)
    return None


def _transient(exc: BaseException) -> bool:
    import requests

    if isinstance(exc, requests.HTTPError):
        status = exc.response.status_code if exc.response is not None else 0
        return status == 429 or status >= 500
    return isinstance(exc, (requests.ConnectionError, requests.Timeout))


def resolve(
    ref: str,
    *,
    session: requests.Session | None = None,
    timeout: float = 30.0,
    attempts: int = 4,
    wait: float = 1.0,
    password: Callable[[], str | None] | None = None,
) -> ResolvedImage:
    """Ask the image's registry for its digest and compressed size.

    Examples:
        >>> resolve("nvcr.io/nvidia/nemo-rl:v0.4.0").digest  # doctest: +SKIP
        'sha256:…'

    Args:
        ref: the image reference (``Cluster.image``).
        session: the HTTP session (a new ``requests.Session`` by default).
        timeout: seconds per request.
        attempts: tries of a request the registry failed with 429, 5xx or a timeout.
        wait: the first backoff between tries, in seconds (doubling).
        password: where a Google registry's password comes from (Application Default
            Credentials by default).

    Raises:
        ImageNotFoundError: the registry has no such image.
        RegistryAuthError: the image is private to this caller.
        RegistryError: the registry failed (after the retries) or answered nonsense.
    """
    import requests
    import tenacity

    parsed = parse_reference(ref)
    client = _Client(parsed, session or requests.Session(), timeout, password or _google_password)
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_exponential(multiplier=wait, max=8 * max(wait, 0.001)),
        retry=tenacity.retry_if_exception(_transient),
        reraise=True,
    )

    def fetch() -> ResolvedImage:
        digest = parsed.digest
        if digest is None:
            assert parsed.tag is not None
            head = client.request("HEAD", parsed.tag)
            digest = head.headers.get("Docker-Content-Digest")
            if not digest or not _DIGEST.match(digest):
                # Some registries answer HEAD without the header: the GET below carries it.
                digest = client.request("GET", parsed.tag).headers.get("Docker-Content-Digest")
            if not digest or not _DIGEST.match(digest):
                raise RegistryError(f"{parsed.host} gave no sha256 digest for {ref}")
        top = client.request("GET", digest)
        manifest = top.json()
        media_type = str(manifest.get("mediaType") or top.headers.get("Content-Type", "").split(";")[0])
        platform_digest = digest
        if media_type in INDEX_TYPES or "manifests" in manifest:
            entry = _platform_manifest(manifest)
            if entry is None:
                raise ImageNotFoundError(f"{ref} has no linux/amd64 image (the GPU nodes are linux/amd64)")
            platform_digest = str(entry["digest"])
            manifest = client.request("GET", platform_digest, accept=", ".join(MANIFEST_TYPES)).json()
        layers = tuple(int(layer.get("size") or 0) for layer in manifest.get("layers") or [])
        return ResolvedImage(ref, digest, platform_digest, sum(layers), layers, media_type)

    try:
        return retrying(fetch)
    except requests.RequestException as exc:
        raise RegistryError(f"{parsed.host}: could not read {ref} after {attempts} tries: {exc}") from exc
