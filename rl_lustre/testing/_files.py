"""Where the fakes keep bytes: each Lustre instance's files (a directory of this machine)
and each Cloud Storage object's content (a file).

A Lustre instance *is* a directory: what a job writes under the volume's mount path is what
the instance holds, what ``ExportData`` copies to a bucket and what ``ImportData`` fills.
By default each instance gets a directory of its own under a temporary root; :class:`FakeGKE
<rl_lustre.testing.FakeGKE>` points the instance of the clusters it makes at the directory
its "pods" mount (:meth:`Files.mount`), so the two are one.

Large files are sparse: a seeded 9 GB file takes no disk, and copying it (an export, an
import) copies only its data, leaving the holes (:func:`copy_sparse`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

__all__ = ["Files", "copy_sparse", "relative_files"]

_CHUNK = 8 << 20


def copy_sparse(src: Path, dst: Path) -> int:
    """Copy ``src`` to ``dst`` (replacing it) byte for byte, holes as holes; returns the size.

    Examples:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> with open(d / "a", "wb") as f:
        ...     _ = f.write(b"head")
        ...     _ = f.truncate(1 << 30)
        >>> copy_sparse(d / "a", d / "b"), (d / "b").read_bytes()[:4]
        (1073741824, b'head')
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.partial")
    with open(src, "rb") as f, open(tmp, "wb") as g:
        fd, size, pos = f.fileno(), os.fstat(f.fileno()).st_size, 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            while start < end:
                chunk = os.pread(fd, min(_CHUNK, end - start), start)
                if not chunk:
                    break
                os.pwrite(g.fileno(), chunk, start)
                start += len(chunk)
            pos = end
        g.truncate(size)
    tmp.replace(dst)
    return size


def relative_files(root: Path, under: str = "") -> dict[str, int]:
    """Every regular file below ``root/under``: its path relative to ``root`` -> its size.

    Examples:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / "x" / "y").mkdir(parents=True)
        >>> _ = (d / "x" / "y" / "f").write_bytes(b"abc")
        >>> relative_files(d), relative_files(d, "x/z")
        ({'x/y/f': 3}, {})
    """
    top = root / under.strip("/") if under.strip("/") else root
    out: dict[str, int] = {}
    if not top.is_dir():
        return out
    for dirpath, _dirs, names in os.walk(top):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                out[path.relative_to(root).as_posix()] = path.stat().st_size
    return dict(sorted(out.items()))


class Files:
    """The fakes' bytes on this machine: instance directories and object contents.

    The root is a temporary directory made on first use and removed by :meth:`cleanup`
    (with everything in it); a directory given to :meth:`mount` is the caller's, and only
    emptied when its instance is deleted.
    """

    def __init__(self) -> None:
        self._root: Path | None = None
        self._mounts: dict[str, Path] = {}
        self._lock = threading.Lock()

    def root(self) -> Path:
        with self._lock:
            if self._root is None:
                # Short: FakeGKE's Ray head keeps sockets under paths near it.
                self._root = Path(tempfile.mkdtemp(prefix="rl-fgcp-"))
            return self._root

    def mount(self, instance: str, path: Path) -> None:
        """The files of Lustre instance ``instance`` (its full name) live in ``path``."""
        with self._lock:
            self._mounts[instance] = Path(path)

    def instance_dir(self, instance: str) -> Path:
        """The directory that holds the instance's files (made when missing)."""
        with self._lock:
            mounted = self._mounts.get(instance)
        path = mounted if mounted is not None else self.root() / "lustre" / instance.replace("/", "_")
        path.mkdir(parents=True, exist_ok=True)
        return path

    def wipe(self, instance: str) -> None:
        """Delete every file of the instance (a deleted instance's data goes with it)."""
        path = self.instance_dir(instance)
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)

    def write(self, instance: str, relative: str, data: bytes | int) -> None:
        """Put a file on the instance: ``data`` bytes, or that many zero bytes (sparse)."""
        path = self.instance_dir(instance) / relative.strip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                f.truncate(int(data))

    def blob(self, bucket: str, generation: str) -> Path:
        """Where the content of generation ``generation`` of an object of ``bucket`` lives."""
        path = self.root() / "storage" / bucket / generation
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def cleanup(self) -> None:
        """Remove the root and everything in it."""
        with self._lock:
            root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
