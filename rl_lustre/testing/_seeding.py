"""What a test makes exist at once on :class:`~rl_lustre.testing.FakeGCP`, as if someone had
created it before: disk images, networks, Cloud Storage buckets and their objects, files on
a Lustre instance (and reading the last two back).

:class:`Seeding` holds these methods; ``FakeGCP`` inherits them, so they are called on it
(``gcp.seed_network(...)``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..gcp._ownership import describe_ownership
from ._core import Core, project_number

__all__ = ["Seeding"]


class Seeding:
    """The seeding methods of :class:`~rl_lustre.testing.FakeGCP` (a mixin: it works on the
    fake's state, ``_core``, and names links after its ``rest_url``)."""

    _core: Core
    rest_url: str

    def seed_image(
        self,
        project: str,
        name: str,
        *,
        holds: Sequence[str] = (),
        labels: Mapping[str, str] | None = None,
        size_gb: int = 250,
    ) -> str:
        """Make a READY disk image exist at once, as if someone had built it, holding the
        container images ``holds`` (what a node booting from it finds preloaded); returns its path."""
        path = f"projects/{project}/global/images/{name}"
        with self._core.lock:
            self._core.images[(project, name)] = {
                "kind": "compute#image",
                "id": str(self._core.next_id()),
                "name": name,
                "status": "READY",
                "labels": dict(labels or {}),
                "diskSizeGb": str(size_gb),
                "archiveSizeBytes": str(size_gb * 10**9),
                "selfLink": f"{self.rest_url}/compute/v1/{path}",
                "creationTimestamp": "2026-01-01T00:00:00Z",
            }
            self._core.contents[path] = {"images": list(holds)}
        return path

    def seed_bucket(
        self,
        bucket: str,
        objects: Mapping[str, int | bytes] | None = None,
        *,
        iam: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Make a Cloud Storage bucket exist (a user's: rl_lustre never creates one), holding
        ``objects`` (name -> bytes, or a number of zero bytes).

        ``iam`` is the bucket's policy (role -> members, ``"serviceAccount:..."``); by default
        anyone signed in may read and write it, Managed Lustre's service agents included. With
        a policy, a transfer whose service agent it does not let write (export) or read
        (import) fails with PERMISSION_DENIED, as on Google Cloud.

        Examples:
            >>> from rl_lustre.testing import FakeGCP
            >>> with FakeGCP() as gcp:
            ...     gcp.seed_bucket("my-bucket", {"a/b.bin": 3, "a/c.txt": b"hi"})
            ...     gcp.bucket_objects("my-bucket"), gcp.bucket_content("my-bucket", "a/c.txt")
            ({'a/b.bin': 3, 'a/c.txt': 2}, b'hi')
        """
        from ._storage import put_object, seed_policy

        with self._core.lock:
            self._core.buckets.setdefault(bucket, {})
            seed_policy(self._core, bucket, iam)
            for name, data in (objects or {}).items():
                put_object(self._core, bucket, name, data)

    def bucket_objects(self, bucket: str) -> dict[str, int]:
        """The objects of ``bucket`` (name -> bytes); KeyError when there is no such bucket."""
        with self._core.lock:
            return {n: o["size"] for n, o in sorted(self._core.buckets[bucket].items())}

    def bucket_content(self, bucket: str, name: str) -> Any:
        """What object ``name`` holds: its JSON data when it was written as JSON (a manifest),
        else its bytes; None when there is no such object."""
        import json

        with self._core.lock:
            obj = self._core.buckets[bucket].get(name)
            if obj is None:
                return None
            data = obj["blob"].read_bytes()
            return json.loads(data) if obj["content_type"].startswith("application/json") else data

    def seed_files(self, instance: str, files: Mapping[str, int | bytes]) -> None:
        """Put ``files`` (path relative to the volume's root -> bytes, or a number of zero
        bytes) on the Lustre instance ``instance`` (its full name), as a job or the prefetch
        writing them would."""
        with self._core.lock:
            for path, data in files.items():
                self._core.files.write(instance, path, data)

    def files(self, instance: str) -> dict[str, int]:
        """What the Lustre instance ``instance`` holds (path -> bytes)."""
        from ._files import relative_files

        with self._core.lock:
            return relative_files(self._core.files.instance_dir(instance))

    def volume_dir(self, instance: str, path: str | os.PathLike[str] | None = None) -> Path:
        """The directory that holds the files of Lustre instance ``instance`` (its full name):
        what a pod mounting it sees. With ``path``, that directory from now on (FakeGKE
        points its clusters' volumes at the directory its pods mount)."""
        if path is not None:
            self._core.files.mount(instance, Path(path))
        return self._core.files.instance_dir(instance)

    def seed_network(
        self,
        project: str,
        network: str,
        *,
        region: str = "us-east1",
        subnet: str | None = None,
        psa_range: str | None = "10.90.0.0/22",
        deployment: str | None = None,
    ) -> None:
        """Make a network exist at once, as if someone had created it: a custom-mode VPC,
        a subnet (``subnet`` or the network's name) with ``pods`` and ``services``
        secondary ranges, and unless ``psa_range`` is None a PSA range
        ``<network>-psa`` peered with Service Networking.

        With ``deployment`` the resources carry that deployment's labels; otherwise
        they are a user's own.

        Examples:
            >>> from rl_lustre.testing import FakeGCP
            >>> with FakeGCP() as gcp:
            ...     gcp.seed_network("p", "user-net")
            ...     sorted(gcp.resources()["compute.subnetworks"])
            ['projects/p/regions/us-east1/subnetworks/user-net']
        """
        core = self._core
        desc = describe_ownership(deployment, "seeded") if deployment else "created by hand"

        def link(path: str) -> str:
            return f"{self.rest_url}/compute/v1/{path}"

        net_path = f"projects/{project}/global/networks/{network}"
        sub = subnet or network
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with core.lock:
            core.networks[(project, network)] = {
                "kind": "compute#network",
                "name": network,
                "description": desc,
                "id": str(core.next_id()),
                "autoCreateSubnetworks": False,
                "selfLink": link(net_path),
                "creationTimestamp": now,
            }
            core.subnetworks[(project, region, sub)] = {
                "kind": "compute#subnetwork",
                "name": sub,
                "description": desc,
                "id": str(core.next_id()),
                "network": link(net_path),
                "region": link(f"projects/{project}/regions/{region}"),
                "ipCidrRange": "192.168.0.0/18",
                "state": "READY",
                "secondaryIpRanges": [
                    {"rangeName": "pods", "ipCidrRange": "10.4.0.0/14"},
                    {"rangeName": "services", "ipCidrRange": "10.0.32.0/20"},
                ],
                "selfLink": link(f"projects/{project}/regions/{region}/subnetworks/{sub}"),
                "creationTimestamp": now,
            }
            if psa_range is not None:
                address, prefix = psa_range.split("/")
                core.addresses[(project, f"{network}-psa")] = {
                    "kind": "compute#address",
                    "name": f"{network}-psa",
                    "description": desc,
                    "id": str(core.next_id()),
                    "address": address,
                    "prefixLength": int(prefix),
                    "purpose": "VPC_PEERING",
                    "addressType": "INTERNAL",
                    "network": link(net_path),
                    "status": "RESERVED",
                    "selfLink": link(f"projects/{project}/global/addresses/{network}-psa"),
                }
                core.connections[(project, network)] = {
                    "network": f"projects/{project_number(project)}/global/networks/{network}",
                    "reservedPeeringRanges": [f"{network}-psa"],
                    "peering": "servicenetworking-googleapis-com",
                    "service": "services/servicenetworking.googleapis.com",
                }
