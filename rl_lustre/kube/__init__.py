"""Kubernetes side of a GKE deployment.

:mod:`rl_lustre.kube.manifests` builds the objects a deployment applies
(PersistentVolume, PersistentVolumeClaim, Secret, RayCluster) as plain dicts.

This package is imported lazily by :class:`rl_lustre.Cluster`; keep this module free of
imports so that ``import rl_lustre.kube`` never pulls in the Kubernetes client.
"""
