"""The registry adapter against the loopback registry fake: the token flow, index → amd64
manifest → compressed size, pinned digests, errors and retries."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rl_lustre.catalog import IMAGE_COMPRESSED_BYTES
from rl_lustre.errors import ConfigError, ImageNotFoundError, RegistryAuthError, RegistryError
from rl_lustre.registry import parse_reference, resolve
from rl_lustre.testing import FakeGCP

NEMO = "nvcr.io/nvidia/nemo-rl:v0.4.0"


@pytest.fixture(scope="module")
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP() as fake:
        yield fake


def calls(gcp: FakeGCP) -> list[str]:
    return [r.method for r in gcp.requests if r.method.startswith("registry.")]


def test_the_default_image_resolves_anonymously_to_its_digest_and_size(gcp: FakeGCP) -> None:
    before = len(calls(gcp))
    image = resolve(NEMO, wait=0)
    assert image.digest == gcp.registry.digest(NEMO)
    assert image.digest != image.platform_digest  # an index naming the amd64 manifest
    assert image.compressed_bytes == IMAGE_COMPRESSED_BYTES[NEMO] == sum(image.layers)
    assert len(image.layers) == 40
    assert image.pullable == f"{NEMO}@{image.digest}"
    # HEAD → 401 → token → HEAD → GET index → GET amd64 manifest.
    assert calls(gcp)[before:] == [
        "registry.manifests.head",
        "registry.token",
        "registry.manifests.head",
        "registry.manifests.get",
        "registry.manifests.get",
    ]


def test_a_pinned_digest_needs_no_head_and_a_moved_tag_a_new_digest(gcp: FakeGCP) -> None:
    first = gcp.registry.add("us-docker.pkg.dev/team/images/trainer:v1", layers=[5, 7], index=False)
    pinned = f"us-docker.pkg.dev/team/images/trainer@{first}"
    before = len(calls(gcp))
    image = resolve(pinned, wait=0, password=lambda: "ya29.not-a-real-token")
    assert (image.digest, image.platform_digest, image.layers) == (first, first, (5, 7))
    assert "registry.manifests.head" not in calls(gcp)[before:]
    moved = gcp.registry.add("us-docker.pkg.dev/team/images/trainer:v1", layers=[5, 7], index=False)
    assert resolve("us-docker.pkg.dev/team/images/trainer:v1", wait=0, password=lambda: None).digest == moved != first


def test_unknown_and_private_images_say_what_to_do(gcp: FakeGCP) -> None:
    with pytest.raises(ImageNotFoundError, match=r"no image nvcr\.io/nvidia/nemo-rl:v9\.9\.9"):
        resolve("nvcr.io/nvidia/nemo-rl:v9.9.9", wait=0)
    gcp.registry.add("nvcr.io/acme/secret-sauce:1", layers=[1])
    gcp.registry.private("nvcr.io/acme/secret-sauce:1")
    with pytest.raises(RegistryAuthError, match=r"preload_image=False"):
        resolve("nvcr.io/acme/secret-sauce:1", wait=0)


def test_server_errors_are_retried_then_reported(gcp: FakeGCP) -> None:
    gcp.faults.fail_call("registry.manifests.get", 503, times=2)
    assert resolve(NEMO, wait=0).compressed_bytes == IMAGE_COMPRESSED_BYTES[NEMO]
    gcp.faults.fail_call("registry.manifests.head", 503, times=10)
    with pytest.raises(RegistryError, match="after 3 tries"):
        resolve(NEMO, wait=0, attempts=3)
    gcp.faults.clear()


def test_references_split_as_docker_splits_them() -> None:
    assert parse_reference("docker.io/rayproject/ray:2.46.0").host == "registry-1.docker.io"
    assert parse_reference("ubuntu@sha256:" + "a" * 64).tag is None
    assert parse_reference("localhost:5000/x/y").host == "localhost:5000"
    assert parse_reference("localhost:5000/x/y").tag == "latest"
    assert parse_reference("ubuntu").pullable == "docker.io/library/ubuntu:latest"
    with pytest.raises(ConfigError, match=r"Cluster\.image='nvcr\.io/NVIDIA/x'"):
        parse_reference("nvcr.io/NVIDIA/x")
    with pytest.raises(ConfigError, match="sha256"):
        parse_reference("nvcr.io/nvidia/x@sha256:abc")
