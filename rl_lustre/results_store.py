"""A results location's files, read and written alike whether it is a Cloud Storage prefix
(``gs://BUCKET/PREFIX``, through :class:`~rl_lustre.gcp.storage.BucketObjects`: the JSON API)
or a directory of this machine (a local cluster's ``results``).

Names are relative to the location (``<run id>/checkpoints/step_4/...``), ``/``-separated.

Examples:
    >>> import tempfile
    >>> store = ResultsStore(tempfile.mkdtemp())
    >>> store.write("r1/summary.json", b'{"status": "SUCCEEDED"}')
    >>> store.runs(), store.read("r1/summary.json"), [o.size for o in store.list("r1/")]
    (['r1'], b'{"status": "SUCCEEDED"}', [23])
"""

from __future__ import annotations

import builtins
import os
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from .gcp.storage import BucketObjects
    from .plan.results import ResultsLocation

__all__ = ["ResultsStore", "StoredFile"]


@attrs.frozen
class StoredFile:
    """One file of a results location: its name there and its size."""

    name: str
    size: int


class ResultsStore:
    """The files of one results location.

    Args:
        where: ``gs://BUCKET[/PREFIX]``, a directory path, a ``file://`` URI, or a
            :class:`~rl_lustre.plan.results.ResultsLocation`.
        storage: the Cloud Storage adapter (by default one for this environment).
    """

    def __init__(self, where: str | ResultsLocation, storage: BucketObjects | None = None) -> None:
        from .plan.results import ResultsLocation

        self.location = where if isinstance(where, ResultsLocation) else ResultsLocation(str(where))
        self._storage = storage

    def __repr__(self) -> str:
        return f"ResultsStore({self.location.uri!r})"

    @property
    def uri(self) -> str:
        """The location, as a URI or a path."""
        return self.location.uri

    @property
    def storage(self) -> BucketObjects:
        if self._storage is None:
            from .gcp.storage import BucketObjects

            self._storage = BucketObjects()
        return self._storage

    @property
    def is_bucket(self) -> bool:
        return self.location.kind == "gs"

    def uri_of(self, name: str) -> str:
        """The full URI (or path) of ``name``."""
        return posixpath.join(self.location.uri, name)

    def _path(self, name: str) -> Path:
        path = Path(self.location.path) / name
        if ".." in Path(name).parts or name.startswith("/"):
            raise ValueError(f"{name!r} is not a name inside {self.uri}")
        return path

    def list(self, prefix: str = "") -> list[StoredFile]:
        """Every file whose name starts with ``prefix``, by name."""
        if self.is_bucket:
            head = self.location.prefix
            return [
                StoredFile(o.name[len(head) :], o.size) for o in self.storage.list(self.location.bucket, head + prefix)
            ]
        root = Path(self.location.path)
        top = self._path(prefix.rsplit("/", 1)[0]) if "/" in prefix else root
        out = []
        for dirpath, _dirs, names in os.walk(top) if top.is_dir() else ():
            for n in names:
                path = Path(dirpath) / n
                rel = path.relative_to(root).as_posix()
                if rel.startswith(prefix) and path.is_file() and not n.startswith(".rl-lustre-partial-"):
                    out.append(StoredFile(rel, path.stat().st_size))
        return sorted(out, key=lambda f: f.name)

    def runs(self) -> builtins.list[str]:
        """The names of the directories right under the location (the runs, and anything else)."""
        if self.is_bucket:
            head = self.location.prefix
            return [d[len(head) :].rstrip("/") for d in self.storage.list_dirs(self.location.bucket, head)]
        root = Path(self.location.path)
        return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    def read(self, name: str) -> bytes | None:
        """The content of ``name``, or None when there is none."""
        if self.is_bucket:
            return self.storage.read_bytes(self.location.bucket, self.location.prefix + name)
        path = self._path(name)
        return path.read_bytes() if path.is_file() else None

    def write(self, name: str, data: bytes, content_type: str = "application/json") -> None:
        """Write ``name`` (whole: a reader never sees half of it)."""
        if self.is_bucket:
            self.storage.write_bytes(self.location.bucket, self.location.prefix + name, data, content_type)
            return
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".rl-lustre-partial-{path.name}")
        tmp.write_bytes(data)
        tmp.replace(path)

    def delete(self, name: str) -> bool:
        """Delete ``name``; False when it was not there."""
        if self.is_bucket:
            return self.storage.delete(self.location.bucket, self.location.prefix + name)
        path = self._path(name)
        if not path.is_file():
            return False
        path.unlink()
        for parent in path.parents:
            if parent == Path(self.location.path) or any(parent.iterdir()):
                break
            parent.rmdir()
        return True
