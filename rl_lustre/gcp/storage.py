"""Cloud Storage objects of a bucket that is not ours (the warm-start and results buckets),
over the JSON API (``storage.googleapis.com/storage/v1``) with an authorised ``requests`` session.

What warm starts and results need: see that the bucket is there and who may write to it
(its IAM policy), list objects under a prefix (name, size, generation; or the "directories"
below it), read an object's content, write a small object (a manifest, a record), delete an
object. The bucket itself is never created, changed or deleted.

Example::

    objects = BucketObjects()
    objects.check_bucket("my-bucket")
    [(o.name, o.size) for o in objects.list("my-bucket", "warm/volume/")]
"""

from __future__ import annotations

import builtins
import json
import logging
from typing import Any
from urllib.parse import quote

import attrs

from ..errors import NotFoundError
from . import _clients
from ._errors import STORAGE, Call, RetryPolicy, call

log = logging.getLogger("rl_lustre.gcp.storage")

__all__ = ["BucketObjects", "StoredObject"]


@attrs.frozen
class StoredObject:
    """One object: its name in the bucket, its size in bytes, its generation."""

    name: str
    size: int
    generation: str = ""


class BucketObjects:
    """Objects of Cloud Storage buckets.

    Args:
        session: an authorised ``requests.Session``; by default one for this environment
            (the REST emulator's when ``RL_LUSTRE_GCP_REST_EMULATOR`` is set).
        base_url: the API's base URL, with ``session``.
        retry: retries of transient failures.
    """

    def __init__(
        self,
        session: Any = None,
        *,
        base_url: str = _clients.STORAGE_URL,
        retry: RetryPolicy | None = None,
        backoff: Any = None,
    ) -> None:
        self._session = session
        self._base_url = base_url
        self._retry = retry

    def _http(self) -> tuple[Any, str]:
        if self._session is not None:
            return self._session, self._base_url
        return _clients.http_session("storage", _clients.STORAGE_URL)

    def _request(self, action: str, resource: str, method: str, path: str, **kwargs: Any) -> Any:
        session, base = self._http()

        def send() -> Any:
            response = session.request(method, f"{base}{path}", timeout=60, **kwargs)
            response.raise_for_status()
            return response

        return call(Call(STORAGE, action, resource), send, policy=self._retry)

    def check_bucket(self, bucket: str) -> dict[str, Any]:
        """The bucket's metadata (its location); raises NotFoundError when it is not there.

        Raises:
            NotFoundError: no such bucket (or no access to it).
        """
        return dict(self._request("read", f"bucket gs://{bucket}", "GET", f"/storage/v1/b/{quote(bucket)}").json())

    def list(self, bucket: str, prefix: str) -> list[StoredObject]:
        """Every object under ``prefix``, all pages, by name."""
        out: list[StoredObject] = []
        token: str | None = None
        while True:
            params = {"prefix": prefix, "fields": "items(name,size,generation),nextPageToken"}
            if token:
                params["pageToken"] = token
            page = self._request(
                "list objects of", f"gs://{bucket}/{prefix}", "GET", f"/storage/v1/b/{quote(bucket)}/o", params=params
            ).json()
            out += [
                StoredObject(i["name"], int(i.get("size") or 0), str(i.get("generation") or ""))
                for i in page.get("items") or []
            ]
            token = page.get("nextPageToken")
            if not token:
                return sorted(out, key=lambda o: o.name)

    def list_dirs(self, bucket: str, prefix: str) -> builtins.list[str]:
        """The "directories" right under ``prefix`` (the common prefixes of the names below
        it, up to the next ``/``), all pages, sorted.

        Example::

            BucketObjects().list_dirs("my-bucket", "results/")  # ['results/run-1/', 'results/run-2/']
        """
        out: set[str] = set()
        token: str | None = None
        while True:
            params = {"prefix": prefix, "delimiter": "/", "fields": "prefixes,nextPageToken"}
            if token:
                params["pageToken"] = token
            page = self._request(
                "list objects of", f"gs://{bucket}/{prefix}", "GET", f"/storage/v1/b/{quote(bucket)}/o", params=params
            ).json()
            out.update(page.get("prefixes") or [])
            token = page.get("nextPageToken")
            if not token:
                return sorted(out)

    def read_bytes(self, bucket: str, name: str) -> bytes | None:
        """The content of object ``name``, or None when there is none.

        Example::

            BucketObjects().read_bytes("my-bucket", "results/run-1/driver.log")
        """
        try:
            response = self._request(
                "read",
                f"gs://{bucket}/{name}",
                "GET",
                f"/storage/v1/b/{quote(bucket)}/o/{quote(name, safe='')}",
                params={"alt": "media"},
            )
        except NotFoundError:
            return None
        return bytes(response.content)

    def write_bytes(self, bucket: str, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Write ``data`` as object ``name`` (a simple media upload, for small objects)."""
        self._request(
            "write",
            f"gs://{bucket}/{name}",
            "POST",
            f"/upload/storage/v1/b/{quote(bucket)}/o",
            params={"uploadType": "media", "name": name},
            data=data,
            headers={"Content-Type": content_type},
        )

    def policy(self, bucket: str) -> dict[str, builtins.list[str]]:
        """The bucket's IAM policy: role -> members.

        Raises:
            NotFoundError: no such bucket.
            PermissionDeniedError: this caller may not read the policy
                (``storage.buckets.getIamPolicy``).
        """
        found = self._request(
            "read the IAM policy of", f"bucket gs://{bucket}", "GET", f"/storage/v1/b/{quote(bucket)}/iam"
        ).json()
        return {b["role"]: list(b.get("members") or []) for b in found.get("bindings") or [] if "role" in b}

    def read_json(self, bucket: str, name: str) -> Any | None:
        """The JSON content of object ``name``, or None when there is none."""
        try:
            response = self._request(
                "read",
                f"gs://{bucket}/{name}",
                "GET",
                f"/storage/v1/b/{quote(bucket)}/o/{quote(name, safe='')}",
                params={"alt": "media"},
            )
        except NotFoundError:
            return None
        return json.loads(response.content)

    def write_json(self, bucket: str, name: str, data: Any) -> None:
        """Write ``data`` as the JSON object ``name`` (a simple media upload)."""
        self.write_bytes(bucket, name, json.dumps(data, indent=1, sort_keys=True).encode(), "application/json")

    def delete(self, bucket: str, name: str) -> bool:
        """Delete object ``name``; False when it was not there."""
        try:
            self._request(
                "delete", f"gs://{bucket}/{name}", "DELETE", f"/storage/v1/b/{quote(bucket)}/o/{quote(name, safe='')}"
            )
        except NotFoundError:
            return False
        log.info("deleted gs://%s/%s", bucket, name)
        return True
