"""The fake Cloud Storage JSON API (REST): buckets someone made (``FakeGCP.seed_bucket``),
their objects with their content, and their IAM policies; the fake Managed Lustre's
ImportData reads the objects and ExportData writes them (:mod:`rl_lustre.testing._lustre`).

Served by :class:`~rl_lustre.testing._rest.RestFake` on the real URL templates
(``/storage/v1/b/{bucket}``, ``/storage/v1/b/{bucket}/o``, ``/storage/v1/b/{bucket}/o/{object}``
with ``alt=media`` for the content, ``/upload/storage/v1/b/{bucket}/o`` for a media upload,
``/storage/v1/b/{bucket}/iam``). An object is ``{"name", "size", "generation", "updated",
"content_type"}``; its bytes are a file (:meth:`Files.blob <rl_lustre.testing._files.Files.blob>`).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import attrs

from ..catalog import LUSTRE_SERVICE_AGENT, STORAGE_WRITER_ROLES
from ._compute import Handler
from ._core import Core, FakeError, project_number
from ._files import copy_sparse

__all__ = ["Media", "StorageFake", "can_write", "put_object"]

_BUCKET = "/storage/v1/b/(?P<bucket>[^/]+)"
# A seeded bucket's policy unless the test gives one: anyone signed in may read and write.
OPEN_POLICY: dict[str, list[str]] = {"roles/storage.objectUser": ["allAuthenticatedUsers"]}
_READER_ROLES = (*STORAGE_WRITER_ROLES, "roles/storage.objectViewer", "roles/storage.legacyObjectReader")


@attrs.frozen
class Media:
    """A response body that is not JSON: an object's bytes."""

    data: bytes
    content_type: str = "application/octet-stream"


def put_object(
    core: Core, bucket: str, name: str, data: bytes | int | Path, content_type: str = "application/octet-stream"
) -> dict[str, Any]:
    """Store an object (a new generation): ``data`` bytes, that many zero bytes, or a copy of
    a file (sparse stays sparse). The caller holds ``core.lock``."""
    generation = str(core.next_id())
    blob = core.files.blob(bucket, generation)
    if isinstance(data, Path):
        size = copy_sparse(data, blob)
    elif isinstance(data, bytes):
        blob.write_bytes(data)
        size = len(data)
    else:
        with open(blob, "wb") as f:
            f.truncate(int(data))
        size = int(data)
    old = core.buckets[bucket].get(name)
    if old is not None:
        old["blob"].unlink(missing_ok=True)
    obj = {
        "name": name,
        "size": size,
        "generation": generation,
        "updated": time.time(),
        "content_type": content_type,
        "blob": blob,
    }
    core.buckets[bucket][name] = obj
    return obj


def drop_object(core: Core, bucket: str, name: str) -> bool:
    """Delete an object and its bytes; False when it was not there (the caller holds the lock)."""
    obj = core.buckets[bucket].pop(name, None)
    if obj is None:
        return False
    obj["blob"].unlink(missing_ok=True)
    return True


def can_write(core: Core, bucket: str, project: str, *, write: bool = True) -> bool:
    """Whether Managed Lustre's service agent of ``project`` may write (or read) ``bucket``."""
    agent = "serviceAccount:" + LUSTRE_SERVICE_AGENT.format(number=project_number(project))
    policy = core.bucket_policies.get(bucket, OPEN_POLICY)
    roles = STORAGE_WRITER_ROLES if write else _READER_ROLES
    return any(
        role in roles and (agent in members or "allAuthenticatedUsers" in members or "allUsers" in members)
        for role, members in policy.items()
    )


def _rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class StorageFake:
    """Buckets, objects and bucket policies."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def routes(self) -> list[tuple[str, str, str, Handler]]:
        """``(verb, path regex, method, handler)`` of every Cloud Storage method served."""
        return [
            ("GET", _BUCKET, "storage.buckets.get", self.bucket_get),
            ("GET", _BUCKET + "/iam", "storage.buckets.getIamPolicy", self.bucket_iam),
            ("GET", _BUCKET + "/o", "storage.objects.list", self.objects_list),
            ("GET", _BUCKET + "/o/(?P<object>[^/]+)", "storage.objects.get", self.object_get),
            ("DELETE", _BUCKET + "/o/(?P<object>[^/]+)", "storage.objects.delete", self.object_delete),
            ("POST", "/upload" + _BUCKET + "/o", "storage.objects.insert", self.object_insert),
        ]

    def _bucket(self, name: str) -> dict[str, dict[str, Any]]:
        found = self.core.buckets.get(name)
        if found is None:
            raise FakeError(404, "The specified bucket does not exist.", reason="notFound")
        return found

    @staticmethod
    def _resource(bucket: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "kind": "storage#object",
            "bucket": bucket,
            "name": obj["name"],
            "size": str(obj["size"]),
            "generation": obj["generation"],
            "updated": _rfc3339(obj["updated"]),
            "contentType": obj["content_type"],
            "id": f"{bucket}/{obj['name']}/{obj['generation']}",
        }

    def bucket_get(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        self._bucket(params["bucket"])
        return {"kind": "storage#bucket", "name": params["bucket"], "location": "US-EAST1", "storageClass": "STANDARD"}

    def bucket_iam(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        bucket = params["bucket"]
        self._bucket(bucket)
        policy = self.core.bucket_policies.get(bucket, OPEN_POLICY)
        return {
            "kind": "storage#policy",
            "resourceId": f"projects/_/buckets/{bucket}",
            "version": 1,
            "bindings": [{"role": role, "members": list(members)} for role, members in sorted(policy.items())],
        }

    def objects_list(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        bucket = params["bucket"]
        objects = self._bucket(bucket)
        prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
        names = sorted(n for n in objects if n.startswith(prefix))
        prefixes: list[str] = []
        if delimiter:
            # Names with the delimiter after the prefix roll up into their common prefix.
            kept = []
            for n in names:
                cut = n.find(delimiter, len(prefix))
                if cut < 0:
                    kept.append(n)
                else:
                    p = n[: cut + len(delimiter)]
                    if not prefixes or prefixes[-1] != p:
                        prefixes.append(p)
            names = kept
        # Pages of 1000, as the API's maxResults default.
        start = int(query.get("pageToken") or 0)
        page = names[start : start + 1000]
        out: dict[str, Any] = {"kind": "storage#objects", "items": [self._resource(bucket, objects[n]) for n in page]}
        if prefixes and start == 0:
            out["prefixes"] = sorted(set(prefixes))
        if start + 1000 < len(names):
            out["nextPageToken"] = str(start + 1000)
        return out

    def object_get(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        bucket, name = params["bucket"], unquote(params["object"])
        obj = self._bucket(bucket).get(name)
        if obj is None:
            raise FakeError(404, f"No such object: {bucket}/{name}", reason="notFound")
        if query.get("alt") == "media":
            return Media(obj["blob"].read_bytes(), obj["content_type"])
        return self._resource(bucket, obj)

    def object_delete(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        bucket, name = params["bucket"], unquote(params["object"])
        self._bucket(bucket)
        if not drop_object(self.core, bucket, name):
            raise FakeError(404, f"No such object: {bucket}/{name}", reason="notFound")
        return {}

    def object_insert(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        bucket = params["bucket"]
        self._bucket(bucket)
        name = query.get("name", "")
        if query.get("uploadType") != "media" or not name:
            raise FakeError(400, "rl_lustre.testing: only uploadType=media with a name is served", reason="invalid")
        data, content_type = body if isinstance(body, tuple) else (bytes(body or b""), "application/octet-stream")
        return self._resource(bucket, put_object(self.core, bucket, name, data, content_type))


def seed_policy(core: Core, bucket: str, iam: Mapping[str, Sequence[str]] | None) -> None:
    """Give ``bucket`` the policy ``iam`` (role -> members); None: the open default."""
    if iam is None:
        core.bucket_policies.pop(bucket, None)
    else:
        core.bucket_policies[bucket] = {role: list(members) for role, members in iam.items()}
