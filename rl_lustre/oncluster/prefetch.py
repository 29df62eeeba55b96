"""The program the model-prefetch Job runs inside the job image: download Hugging Face
models into ``$HF_HOME`` on the volume, unless the cache already holds them.

It runs as ``python -c <this module's source> MODEL...`` with the image's own Python and
``huggingface_hub`` (in ``nvcr.io/nvidia/nemo-rl`` the ``python`` on ``PATH`` is the
NeMo-RL virtualenv, ``docker/Dockerfile`` of NVIDIA-NeMo/RL v0.4.0), so this module uses
nothing but the standard library until it has to download. ``HF_TOKEN`` comes from the
pod's environment (the Kubernetes Secret); ``huggingface_hub`` reads it itself and it is
never printed.

A model counts as cached when a previous prefetch finished it: the marker
``$HF_HOME/rl_lustre_prefetch/models--<org>--<name>.json`` names the revision it
downloaded, and that revision's snapshot directory exists. A download cut short leaves
no marker, and ``snapshot_download`` resumes it on the next attempt.

Progress goes to stdout, one line every ``$RL_LUSTRE_PROGRESS_SECONDS`` (30 s), each
starting with :data:`MARK`; ``up()`` shows the newest one while it waits.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time

MARK = "RL_LUSTRE_PREFETCH"
# Under $HF_HOME: one marker per model a prefetch finished.
MARKER_DIR = "rl_lustre_prefetch"


def say(message: str) -> None:
    print(f"{MARK} {message}", flush=True)


def repo_folder(repo: str) -> str:
    """``models--Qwen--Qwen2.5-72B-Instruct``: the hub cache's folder for a model."""
    return "models--" + repo.replace("/", "--")


def marker_path(home: str, repo: str) -> str:
    return os.path.join(home, MARKER_DIR, repo_folder(repo) + ".json")


def cached(home: str, repo: str) -> dict | None:
    """The marker of a finished earlier prefetch of ``repo``, if its snapshot is still there."""
    try:
        with open(marker_path(home, repo)) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not record.get("revision"):
        return None
    snapshot = os.path.join(home, "hub", repo_folder(repo), "snapshots", str(record["revision"]))
    return record if os.path.isdir(snapshot) else None


def tree_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file renamed or removed while we look
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def fetch(home: str, repo: str, every: float) -> None:
    record = cached(home, repo)
    if record is not None:
        say(
            f"{repo}: already in the cache (revision {record['revision']}, "
            f"{record.get('bytes', 0) / 1e9:.1f} GB); download skipped"
        )
        return
    from huggingface_hub import HfApi, snapshot_download

    info = HfApi().model_info(repo, files_metadata=True)
    total = sum(int(getattr(s, "size", 0) or 0) for s in info.siblings or [])
    blobs = os.path.join(home, "hub", repo_folder(repo), "blobs")
    already = tree_bytes(blobs)
    say(f"{repo}: downloading revision {info.sha}, {total / 1e9:.1f} GB ({already / 1e9:.1f} GB already here)")
    start = time.monotonic()
    finished = threading.Event()

    def report() -> None:
        while not finished.wait(every):
            have = tree_bytes(blobs)
            rate = (have - already) / max(time.monotonic() - start, 1e-9) / 1e6
            say(f"{repo}: {have / 1e9:.1f} of {total / 1e9:.1f} GB ({rate:.0f} MB/s)")

    threading.Thread(target=report, daemon=True).start()
    try:
        snapshot_download(repo, revision=info.sha)
    finally:
        finished.set()
    seconds = time.monotonic() - start
    path = marker_path(home, repo)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"repo": repo, "revision": info.sha, "bytes": total, "seconds": round(seconds, 1)}, f)
    os.replace(tmp, path)
    say(f"{repo}: downloaded {total / 1e9:.1f} GB in {seconds:.0f} s")


def main(argv: list[str]) -> int:
    home = os.environ.get("HF_HOME")
    if not home:
        say("HF_HOME is not set; nothing to fill")
        return 2
    every = float(os.environ.get("RL_LUSTRE_PROGRESS_SECONDS") or 30)
    for repo in argv:
        fetch(home, repo, every)
    say(f"done: {len(argv)} model(s) in {home}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
