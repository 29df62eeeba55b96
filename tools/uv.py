"""Run uv with the stdlib alone: ``python3 tools/uv.py run examples/quickstart.py``.

The README's commands start here so that they work on any Python 3.10+, including a stock
Debian or Ubuntu ``python3`` (externally managed, PEP 668: ``pip install`` refused, often no
``venv``/``ensurepip`` either). Nothing is installed into that Python: this script finds
uv ``VERSION`` (the one ``uv.lock`` is made with) and runs it with the arguments given.

- a ``uv`` of that version on ``PATH`` (or beside this Python) is used as is;
- otherwise uv's wheel for this platform is fetched once from PyPI (its Simple API, the
  index pip and uv use), checked against the sha256 the index lists, and its ``uv``
  binary is kept in ``$XDG_CACHE_HOME/rl_lustre/uv/VERSION`` (``~/.cache/...``).

uv then makes the project's virtual environment itself (it needs no ``venv`` module) and
installs the locked versions into it. The directory of the uv in use goes first on
``PATH`` of what it runs, so ``nox`` (and its sessions) find the same uv. uv is told to
trust the system's certificate store (``UV_SYSTEM_CERTS``, unless you set it), as this
script's own download just did. ``RL_LUSTRE_UV_INDEX`` names another Simple API index.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import urllib.request
import zipfile
from pathlib import Path

VERSION = "0.13.9"
INDEX = os.environ.get("RL_LUSTRE_UV_INDEX", "https://pypi.org/simple").rstrip("/")
_ACCEPT = "application/vnd.pypi.simple.v1+json"


def _say(message: str) -> None:
    print(f"tools/uv.py: {message}", file=sys.stderr, flush=True)


def _version_of(exe: str) -> str | None:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    words = out.stdout.split()
    return words[1] if out.returncode == 0 and len(words) > 1 and words[0] == "uv" else None


def _installed() -> str | None:
    """A uv of ``VERSION`` already on this machine: on PATH, or beside this Python."""
    places = [shutil.which("uv"), os.path.join(sysconfig.get_path("scripts"), "uv")]
    user = f"{os.name}_user"
    if user in sysconfig.get_scheme_names():
        places.append(os.path.join(sysconfig.get_path("scripts", user), "uv"))
    for exe in places:
        if exe and os.access(exe, os.X_OK) and _version_of(exe) == VERSION:
            return exe
    return None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rl_lustre" / "uv" / VERSION


def _platform_tags() -> tuple[str, str]:
    """(prefix, suffix) of the wheel platform tag for this machine, e.g. ('manylinux', '_x86_64')."""
    system, machine = platform.system(), platform.machine().lower()
    if system == "Linux":
        libc = "manylinux" if platform.libc_ver()[0] == "glibc" else "musllinux"
        return libc, "_" + {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if system == "Darwin":
        return "macosx", "_arm64" if machine in ("arm64", "aarch64") else "_x86_64"
    raise SystemExit(
        f"tools/uv.py: no uv wheel for {system} {machine} here; install uv "
        "(https://docs.astral.sh/uv/) and run `uv` instead"
    )


def _wheel() -> dict[str, object]:
    """The index entry of uv ``VERSION``'s wheel for this platform."""
    request = urllib.request.Request(f"{INDEX}/uv/", headers={"Accept": _ACCEPT})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            files = json.load(response)["files"]
    except OSError as exc:
        raise SystemExit(
            f"tools/uv.py: cannot read {INDEX}/uv/ ({exc}); install uv "
            "(https://docs.astral.sh/uv/) or set RL_LUSTRE_UV_INDEX to a PyPI mirror"
        ) from None
    prefix, suffix = _platform_tags()
    for entry in files:
        name = entry["filename"]
        if not (name.startswith(f"uv-{VERSION}-py3-none-") and name.endswith(".whl")):
            continue
        tags = name[: -len(".whl")].split("-")[-1].split(".")
        if any(t.startswith(prefix) and t.endswith(suffix) for t in tags) and not entry.get("yanked"):
            return dict(entry)
    raise SystemExit(
        f"tools/uv.py: {INDEX}/uv/ lists no uv {VERSION} wheel for {prefix}*{suffix}; "
        "install uv (https://docs.astral.sh/uv/) and run `uv` instead"
    )


def _fetch(target: Path) -> None:
    """Download uv's wheel, check its sha256 and keep its ``uv`` binary at ``target``."""
    entry = _wheel()
    url, want = str(entry["url"]), dict(entry["hashes"])["sha256"]  # type: ignore[call-overload]
    size = int(entry.get("size") or 0)  # type: ignore[call-overload]
    _say(f"no uv {VERSION} here; fetching {entry['filename']} ({size / 1e6:.0f} MB) from {INDEX} once")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        wheel = Path(tmp) / "uv.whl"
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=300) as response, open(wheel, "wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != want:
            raise SystemExit(f"tools/uv.py: {url} does not match the index's sha256 {want}; not used")
        with zipfile.ZipFile(wheel) as zf:
            member = f"uv-{VERSION}.data/scripts/uv"
            staged = Path(tmp) / "uv"
            staged.write_bytes(zf.read(member))
        staged.chmod(0o755)
        if _version_of(str(staged)) != VERSION:
            raise SystemExit(f"tools/uv.py: the uv in {entry['filename']} does not run on this machine")
        os.replace(staged, target)
    _say(f"uv {VERSION} is in {target.parent}")


def find_uv() -> str:
    """The path of a uv ``VERSION`` binary, fetching it once if need be."""
    found = _installed()
    if found is not None:
        return found
    cached = _cache_dir() / "uv"
    if not (os.access(cached, os.X_OK) and _version_of(str(cached)) == VERSION):
        _fetch(cached)
    return str(cached)


def main(argv: list[str]) -> int:
    uv = find_uv()
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(uv)), env.get("PATH", "")])
    env.setdefault("UV_SYSTEM_CERTS", "1")
    if not argv:
        print(uv)
        return 0
    if os.name == "posix":
        os.execve(uv, [uv, *argv], env)
    return subprocess.run([uv, *argv], env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
