"""A RayCluster as a user (or KubeRay's samples) would write it by hand: for the Kubernetes fake's tests."""

from __future__ import annotations

from typing import Any


def raycluster(name: str, replicas: int = 2, image: str = "rayproject/ray:2.46.0") -> dict[str, Any]:
    """A RayCluster named ``name`` with one GPU worker group of ``replicas`` pods."""
    container = {"name": "ray", "image": image, "ports": [{"name": "dashboard", "containerPort": 8265}]}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "rayVersion": "2.46.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container]}}},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": replicas,
                    "minReplicas": replicas,
                    "maxReplicas": replicas,
                    "rayStartParams": {},
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": image,
                                    "resources": {
                                        "limits": {"nvidia.com/gpu": "1"},
                                        "requests": {"nvidia.com/gpu": "1"},
                                    },
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }
