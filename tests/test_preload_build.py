"""Building the preload disk image on the fakes: the request bodies, reuse, concurrency,
a fault at every step leaving nothing of the build, a cancellation mid-wait, the retry of a
too-small disk; and the builder VM's startup script itself, run with PATH shims."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rl_lustre import naming
from rl_lustre.errors import GCPError, PreloadBuildError
from rl_lustre.gcp import progress_hook
from rl_lustre.gcp.images import Disks, Images, Instances
from rl_lustre.gcp.preload import PreloadBuild, ensure_preload_image, startup_script
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

P, Z = "my-project", "us-east1-b"
NEMO = "nvcr.io/nvidia/nemo-rl:v0.4.0"


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP(latency={"compute.preload_boot": 0.1}) as fake:
        yield fake


def build(gcp: FakeGCP, **kw: Any) -> PreloadBuild:
    digest = gcp.registry.digest(NEMO)
    return PreloadBuild(
        project=P,
        zone=Z,
        subnetwork=f"projects/{P}/regions/us-east1/subnetworks/demo-subnet",
        image=NEMO,
        pullable=f"{NEMO}@{digest}",
        digest=digest,
        compressed_bytes=25 * 10**9,
        family=naming.preload_family(NEMO),
        name=naming.preload_image_name(NEMO, digest),
        builder=naming.preload_builder_name(digest),
        created_by="demo",
        storage_location="us-east1",
        **kw,
    )


def ensure(b: PreloadBuild) -> Any:
    return ensure_preload_image(
        b,
        images=Images(backoff=FAST_BACKOFF, retry=FAST_RETRY),
        disks=Disks(backoff=FAST_BACKOFF, retry=FAST_RETRY),
        instances=Instances(backoff=FAST_BACKOFF, retry=FAST_RETRY),
        backoff=FAST_BACKOFF,
    )


def compute_calls(gcp: FakeGCP) -> list[str]:
    wanted = (
        "compute.instances.insert",
        "compute.instances.detachDisk",
        "compute.images.insert",
        "compute.instances.delete",
        "compute.disks.delete",
        "compute.images.delete",
    )
    return [r.method for r in gcp.requests if r.method in wanted and r.outcome == "ok"]


def test_the_requests_say_what_the_builder_is() -> None:
    with FakeGCP() as gcp:
        b = build(gcp)
    vm = b.instance_request()
    assert vm.name == b.builder == f"rlp-build-{b.digest[7:19]}"
    assert vm.machine_type == f"zones/{Z}/machineTypes/n2-standard-8"
    boot, data = vm.disks
    assert (boot.boot, boot.auto_delete, boot.initialize_params.source_image) == (
        True,
        True,
        "projects/debian-cloud/global/images/family/debian-12",
    )
    assert (data.device_name, data.auto_delete, data.initialize_params.disk_size_gb) == ("rl-lustre-data", True, 250)
    assert data.initialize_params.disk_type == f"zones/{Z}/diskTypes/pd-ssd"
    assert (
        dict(vm.labels)
        == dict(data.initialize_params.labels)
        == {
            "managed-by": "rl-lustre",
            "rl-lustre-role": "preload-build",
            "rl-lustre-digest": b.digest[7:70],
            "rl-lustre-created-by": "demo",
        }
    )
    assert (vm.scheduling.max_run_duration.seconds, vm.scheduling.instance_termination_action) == (7200, "DELETE")
    meta = {i.key: i.value for i in vm.metadata.items}
    assert meta == {
        "startup-script": startup_script(),
        "enable-guest-attributes": "TRUE",
        "rl-lustre-images": b.pullable,
        "rl-lustre-pull-auth": "none",
        "rl-lustre-layout": "v1",
    }
    assert vm.network_interfaces[0].subnetwork == b.subnetwork
    image = b.image_request(60 * 10**9)
    assert (image.name, image.family, image.source_disk, list(image.storage_locations)) == (
        b.name,
        b.family,
        f"projects/{P}/zones/{Z}/disks/{b.builder}-data",
        ["us-east1"],
    )
    assert len(image.name) <= 39
    assert dict(image.labels)["rl-lustre-layout"] == "v1"
    assert json.loads(image.description)["unpacked_bytes"] == 60 * 10**9
    assert PreloadBuild(**{**_fields(b), "pullable": "us-docker.pkg.dev/p/r/i@" + b.digest}).pull_auth == "google"


def _fields(b: PreloadBuild) -> dict[str, Any]:
    import attrs

    return attrs.asdict(b)


def test_a_first_build_leaves_only_the_image_and_a_second_finds_it(gcp: FakeGCP) -> None:
    b = build(gcp)
    first = ensure(b)
    assert first.outcome == "created"
    assert first.image.status == "READY"
    assert first.image.name == b.name
    assert compute_calls(gcp) == [
        "compute.instances.insert",
        "compute.instances.detachDisk",
        "compute.images.insert",
        "compute.instances.delete",
        "compute.disks.delete",
    ]
    gcp.settle()
    assert gcp.leaked() == []
    assert gcp.leaked(shared=True) == [f"compute.images projects/{P}/global/images/{b.name}"]
    before = len(compute_calls(gcp))
    again = ensure(b)
    assert (again.outcome, again.image.name) == ("adopted", b.name)
    assert compute_calls(gcp)[before:] == []


def test_two_ups_building_at_once_build_once(gcp: FakeGCP) -> None:
    b = build(gcp)
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(ensure(b))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(r.outcome for r in results) == ["adopted", "created"]
    assert compute_calls(gcp).count("compute.instances.insert") == 1
    gcp.settle()
    assert gcp.leaked() == []


@pytest.mark.parametrize(
    "fault",
    [
        "instances.insert",
        "guest attributes",
        "script",
        "hang",
        "detachDisk",
        "images.insert call",
        "images.insert operation",
    ],
)
def test_a_fault_at_any_step_leaves_nothing_of_the_build(gcp: FakeGCP, fault: str) -> None:
    kw: dict[str, Any] = {}
    if fault == "instances.insert":
        gcp.faults.fail_call("compute.instances.insert", 403, message="Required 'compute.instances.create' permission")
    elif fault == "guest attributes":
        gcp.faults.fail_call("compute.instances.getGuestAttributes", 403, times=100)
    elif fault == "script":
        gcp.preload.script_failure = "ctr: failed to pull: unexpected EOF (token=hf_abcdefghijklmnopqrstuvwxyz0123)"
    elif fault == "hang":
        gcp.preload.hang, kw["timeout"] = True, 0.5
    elif fault == "detachDisk":
        gcp.faults.fail_operation("compute.instances.detachDisk", message="disk busy")
    elif fault == "images.insert call":
        gcp.faults.fail_call("compute.images.insert", 400, message="Invalid value for field 'resource.sourceDisk'")
    else:
        gcp.faults.fail_operation("compute.images.insert", message="internal error")
    with pytest.raises(GCPError) as err:
        ensure(build(gcp, **kw))
    if fault in ("script", "hang"):
        assert isinstance(err.value, PreloadBuildError)
        assert "preload_image=False" in str(err.value)
        assert "hf_abcdefghij" not in str(err.value)
    gcp.settle()
    assert gcp.leaked(shared=True) == []


def test_a_cancellation_mid_build_still_cleans_up(gcp: FakeGCP) -> None:
    from rl_lustre.provision.step import Cancelled

    gcp.preload.hang = True
    polls: list[str] = []

    def cancel(p: Any) -> None:  # the executor's hook, once the user pressed Ctrl-C
        polls.append(p.state)
        if len(polls) > 3:
            raise Cancelled

    with progress_hook(cancel), pytest.raises(Cancelled):
        ensure(build(gcp))
    gcp.settle()
    assert gcp.leaked(shared=True) == []


def test_a_too_small_disk_is_retried_once_bigger(gcp: FakeGCP) -> None:
    done = ensure(build(gcp, data_disk_gb=20))
    assert done.outcome == "created"
    inserts = [r for r in gcp.requests if r.method == "compute.instances.insert"]
    assert len(inserts) == 2
    assert done.image.disk_size_gb == 90  # 60 GB unpacked x 1.5, in tens of GB
    # Once only: a disk that fills again fails the build.
    gcp.preload.script_failure = "disk too small: unpacked 30000000000 bytes > 20000000000"
    gcp.registry.add(NEMO, layers=[25 * 10**9])  # a new push: a new digest to build
    with pytest.raises(PreloadBuildError, match="disk too small"):
        ensure(build(gcp, data_disk_gb=20))
    assert len([r for r in gcp.requests if r.method == "compute.instances.insert"]) == 4
    gcp.settle()
    assert gcp.leaked() == []


# The startup script itself, with the commands it runs replaced by shims.

SHIMS = {
    "ctr": r"""#!/bin/bash
# a containerd client over a directory: pull makes two committed layers
args=("$@"); while [[ "${args[0]}" == --* || "${args[0]}" == -n ]]; do args=("${args[@]:2}"); done
set -- "${args[@]}"
snap="$CTR_ROOT/io.containerd.snapshotter.v1.overlayfs/snapshots"
case "$1 $2" in
  "images pull") [ -n "$SHIM_PULL_FAILS" ] && { echo "$SHIM_PULL_FAILS" >&2; exit 1; }
    echo "$@" >> "$SHIM_LOG"
    mkdir -p "$snap/3/fs/usr/bin" "$snap/7/fs/opt" && echo py > "$snap/3/fs/usr/bin/python3" \
      && head -c 5000 /dev/zero > "$snap/7/fs/opt/big" ;;
  "images ls") echo "REF TYPE DIGEST SIZE"; echo "nvcr.io/nvidia/nemo-rl:v0.4.0 index sha256:ab 25.0GiB" ;;
  "snapshots ls") echo "KEY PARENT KIND"; echo "sha256:aaa  Committed"; echo "sha256:bbb sha256:aaa Committed"
    echo "rl-tmp sha256:bbb Active" ;;
  "snapshots view") echo "$3 $4" >> "$SHIM_VIEWS" ;;
  "snapshots mounts") key=$(awk -v v="$4" '$1 == v {print $2}' "$SHIM_VIEWS")
    if [ "$key" = "sha256:aaa" ]; then echo "mount -t bind $snap/3/fs $3 -o ro,rbind"
    else echo "mount -t overlay overlay $3 -o index=off,lowerdir=$snap/7/fs:$snap/3/fs"; fi ;;
  "snapshots rm") ;;
  *) echo "ctr shim: $*" >&2; exit 2 ;;
esac
""",
    "containerd": '#!/bin/bash\nwhile [ "$1" != --address ]; do shift; done\nmkdir -p "$(dirname "$2")"\n'
    "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' \"$2\"\n"
    "exec sleep 60\n",
    "mkfs.ext4": '#!/bin/bash\necho mkfs.ext4 "$@" >> "$SHIM_LOG"\n',
    "mount": '#!/bin/bash\necho mount "$@" >> "$SHIM_LOG"\n',
    "umount": '#!/bin/bash\necho umount "$@" >> "$SHIM_LOG"\n',
    "fstrim": "#!/bin/bash\nexit 0\n",
}


class _Metadata(BaseHTTPRequestHandler):
    attributes: dict[str, str] = {}
    guest: dict[str, str] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        key = self.path.rsplit("/", 1)[-1]
        assert self.headers["Metadata-Flavor"] == "Google"
        if "/attributes/" in self.path and key in self.attributes:
            self._reply(200, self.attributes[key].encode())
        else:
            self._reply(404)

    def do_PUT(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.guest[self.path.split("/guest-attributes/", 1)[1]] = self.rfile.read(length).decode()
        self._reply(200)


def run_script(tmp_path: Path, **env: str) -> tuple[int, str, dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in SHIMS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    root, device = tmp_path / "disk", tmp_path / "device"
    device.write_text("")  # the data disk (mkfs and mount are shims)
    _Metadata.attributes = {"rl-lustre-images": f"{NEMO}@sha256:{'ab' * 32}", "rl-lustre-pull-auth": "none"}
    _Metadata.guest = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        done = subprocess.run(
            ["bash", "-c", startup_script()],
            capture_output=True,
            text=True,
            timeout=60,
            env={
                **os.environ,
                "PATH": f"{bin_dir}:{os.environ['PATH']}",
                "RL_LUSTRE_DEVICE": str(device),
                "RL_LUSTRE_MOUNT": str(root),
                "RL_LUSTRE_STATE": str(tmp_path / "state"),
                "RL_LUSTRE_METADATA_URL": f"http://127.0.0.1:{server.server_address[1]}/computeMetadata/v1",
                "CTR_ROOT": str(root / ".containerd"),
                "SHIM_LOG": str(tmp_path / "log"),
                "SHIM_VIEWS": str(tmp_path / "views"),
                "SHIM_PULL_FAILS": "",
                **env,
            },
        )
    finally:
        server.shutdown()
    return done.returncode, done.stdout + done.stderr, dict(_Metadata.guest), root


def test_the_script_leaves_the_layout_gke_reads(tmp_path: Path) -> None:
    code, out, guest, root = run_script(tmp_path)
    assert code == 0, out
    assert guest["rl-lustre/status"] == "done"
    assert (root / "snapshots.metadata").read_text().splitlines() == [
        "sha256:aaa snapshots/3/fs",
        "sha256:bbb snapshots/7/fs",
    ]
    assert (root / "snapshots/3/fs/usr/bin/python3").read_text() == "py\n"
    assert (root / "snapshots/7/fs/opt/big").stat().st_size == 5000
    assert "nemo-rl:v0.4.0" in (root / "images.metadata").read_text()
    assert not (root / ".containerd").exists()  # moved, not copied: nothing else remains
    assert int(guest["rl-lustre/unpacked-bytes"]) >= 5003
    log = (tmp_path / "log").read_text()
    assert "mkfs.ext4 -F -q -m 0 -E lazy_itable_init=0,lazy_journal_init=0,discard" in log
    assert f"images pull {NEMO}@sha256:{'ab' * 32}" in log
    assert log.rstrip().splitlines()[-1].startswith("umount")


def test_any_failing_command_reports_failed_with_its_error(tmp_path: Path) -> None:
    code, _out, guest, _ = run_script(tmp_path, SHIM_PULL_FAILS="failed to copy: no space left on device")
    assert code == 1
    assert guest["rl-lustre/status"] == "failed"
    assert guest["rl-lustre/error"].startswith("disk too small: unpacked ")
    code, _, guest, _ = run_script(tmp_path / "again", SHIM_PULL_FAILS="401 Unauthorized")
    assert code == 1
    assert guest["rl-lustre/error"].startswith(f"ctr images pull {NEMO}@sha256:")
    assert "401 Unauthorized" in guest["rl-lustre/error"]


def test_the_script_is_valid_bash(tmp_path: Path) -> None:
    import shutil

    subprocess.run(["bash", "-n", "-c", startup_script()], check=True)
    if shutil.which("shellcheck"):
        (tmp_path / "s.sh").write_text(startup_script())
        subprocess.run(["shellcheck", str(tmp_path / "s.sh")], check=True)
