"""The fake Cloud Storage JSON API (REST): buckets someone made (``FakeGCP.seed_bucket``)
and their objects, an in-memory store that the fake Managed Lustre's ImportData reads and
ExportData writes (:mod:`rl_lustre.testing._lustre`).

Served by :class:`~rl_lustre.testing._rest.RestFake` on the real URL templates
(``/storage/v1/b/{bucket}``, ``/storage/v1/b/{bucket}/o``, ``/upload/storage/v1/b/{bucket}/o``).
An object is ``{"name", "size", "generation", "content"}``; ``content`` is what a media
upload wrote (JSON here), None for what an export copied (only its size is modelled).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from ._compute import Handler
from ._core import Core, FakeError

__all__ = ["StorageFake", "put_object"]

_BUCKET = "/storage/v1/b/(?P<bucket>[^/]+)"


def put_object(core: Core, bucket: str, name: str, size: int, content: Any = None) -> dict[str, Any]:
    """Store an object (a new generation); the caller holds ``core.lock``."""
    obj = {"name": name, "size": int(size), "generation": str(core.next_id()), "content": content}
    core.buckets[bucket][name] = obj
    return obj


class StorageFake:
    """Buckets and objects."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def routes(self) -> list[tuple[str, str, str, Handler]]:
        """``(verb, path regex, method, handler)`` of every Cloud Storage method served."""
        return [
            ("GET", _BUCKET, "storage.buckets.get", self.bucket_get),
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
    def _resource(bucket: str, obj: dict[str, Any]) -> dict[str, Any]:
        return {
            "kind": "storage#object",
            "bucket": bucket,
            "name": obj["name"],
            "size": str(obj["size"]),
            "generation": obj["generation"],
            "id": f"{bucket}/{obj['name']}/{obj['generation']}",
        }

    def bucket_get(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        self._bucket(params["bucket"])
        return {"kind": "storage#bucket", "name": params["bucket"], "location": "US-EAST1", "storageClass": "STANDARD"}

    def objects_list(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        bucket = params["bucket"]
        objects = self._bucket(bucket)
        prefix = query.get("prefix", "")
        names = sorted(n for n in objects if n.startswith(prefix))
        # Pages of 1000, as the API's maxResults default.
        start = int(query.get("pageToken") or 0)
        page = names[start : start + 1000]
        out: dict[str, Any] = {"kind": "storage#objects", "items": [self._resource(bucket, objects[n]) for n in page]}
        if start + 1000 < len(names):
            out["nextPageToken"] = str(start + 1000)
        return out

    def object_get(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        bucket, name = params["bucket"], unquote(params["object"])
        obj = self._bucket(bucket).get(name)
        if obj is None:
            raise FakeError(404, f"No such object: {bucket}/{name}", reason="notFound")
        if query.get("alt") == "media":
            return obj["content"]
        return self._resource(bucket, obj)

    def object_delete(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        bucket, name = params["bucket"], unquote(params["object"])
        if self._bucket(bucket).pop(name, None) is None:
            raise FakeError(404, f"No such object: {bucket}/{name}", reason="notFound")
        return {}

    def object_insert(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        bucket = params["bucket"]
        self._bucket(bucket)
        name = query.get("name", "")
        if query.get("uploadType") != "media" or not name:
            raise FakeError(400, "rl_lustre.testing: only uploadType=media with a name is served", reason="invalid")
        import json

        return self._resource(bucket, put_object(self.core, bucket, name, len(json.dumps(body)), content=body))
