"""The kinds :class:`~rl_lustre.testing.kube.KubeFake` serves, as one table.

URL routing, discovery (``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>/<version>``, what
``kubectl api-resources`` shows), status subresources, field selectors and
strategic-merge keys all follow from :data:`KINDS`. Serving a new kind is one
:func:`register_kind` call at import time of the module that simulates it::

    register_kind(KindInfo("DaemonSet", "apps/v1", "daemonsets", namespaced=True,
                           short_names=("ds",), status=True,
                           merge_keys=pod_merge_keys("spec.template.spec")))

A kind whose objects need server-side defaults on create hooks into
``Store.create`` (see how DaemonSets and Jobs do it).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .._public import public

# Every kind can be selected by these fields (the server adds them to each kind's own).
_COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@public("rl_lustre.testing")
@attrs.frozen
class KindInfo:
    """One kind the fake serves: what discovery says about it and the rules it follows.

    Attributes:
        kind: ``DaemonSet``.
        api_version: ``apps/v1`` (``v1`` for the core group).
        plural: the URL segment, ``daemonsets``.
        namespaced: whether objects live in namespaces.
        short_names: kubectl's short names (``ds``).
        status: ``status`` is a subresource: clients' writes to it are ignored (the
            simulated controllers set it) and discovery lists ``<plural>/status``.
        status_on_create: a client may set ``status`` when creating (Nodes).
        field_selectors: field selectors beyond ``metadata.name``/``metadata.namespace``
            the real server supports for the kind; any other is a 400.
        subresources: other subresources discovery lists (``portforward``, ``log``).
        builtin: the server knows the kind's Go types (core and built-in groups): it drops
            empty ``omitempty`` fields and takes strategic merge patches. Custom resources
            are stored as sent and take merge patches only (strategic: 415).
        merge_keys: strategic-merge keys of list fields, by dotted field path
            (``spec.template.spec.containers`` -> ``name``); see :func:`pod_merge_keys`.
    """

    kind: str
    api_version: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    status: bool = False
    status_on_create: bool = False
    field_selectors: frozenset[str] = frozenset()
    subresources: tuple[str, ...] = ()
    builtin: bool = True
    merge_keys: Mapping[str, str] = attrs.field(factory=dict, eq=False, hash=False)

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def resource(self) -> str:
        """``secrets`` or ``rayclusters.ray.io``, as the server names it in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def selectable_fields(self) -> frozenset[str]:
        return _COMMON_FIELDS | self.field_selectors


_POD_SPEC_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
_CONTAINER_KEYS = {"ports": "containerPort", "env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath"}


@public("rl_lustre.testing")
def pod_merge_keys(prefix: str) -> dict[str, str]:
    """Strategic-merge keys of a PodSpec's lists, for a PodSpec at ``prefix``
    (``spec`` in a Pod, ``spec.template.spec`` in a DaemonSet or Job).

    Examples:
        >>> pod_merge_keys("spec")["spec.containers.env"]
        'name'
    """
    keys = {f"{prefix}.{field}": key for field, key in _POD_SPEC_KEYS.items()}
    for containers in ("containers", "initContainers", "ephemeralContainers"):
        keys.update({f"{prefix}.{containers}.{field}": key for field, key in _CONTAINER_KEYS.items()})
    return keys


# Lists of scalars that strategic merge patches merge (as sets) instead of replacing.
MERGED_SCALAR_LISTS = frozenset({"metadata.finalizers"})
# List fields every kind's metadata has.
META_MERGE_KEYS = {"metadata.ownerReferences": "uid", "metadata.managedFields": "manager"}

KINDS: dict[str, KindInfo] = {}
BY_PATH: dict[tuple[str, str], KindInfo] = {}


@public("rl_lustre.testing")
def register_kind(info: KindInfo) -> KindInfo:
    """Serve a kind (or change how one is served): routing, discovery, selectors,
    status subresource and patches follow from ``info``. Returns ``info``.

    Examples:
        >>> register_kind(KindInfo("ConfigMap", "v1", "configmaps", namespaced=True,
        ...                        short_names=("cm",))).resource
        'configmaps'
    """
    previous = KINDS.get(info.kind)
    if previous is not None:
        BY_PATH.pop((previous.api_version, previous.plural), None)
    KINDS[info.kind] = info
    BY_PATH[(info.api_version, info.plural)] = info
    return info


for _info in (
    KindInfo("Namespace", "v1", "namespaces", False, ("ns",), status=True, field_selectors=frozenset({"status.phase"})),
    KindInfo(
        "PersistentVolume",
        "v1",
        "persistentvolumes",
        False,
        ("pv",),
        status=True,
        field_selectors=frozenset({"spec.storageClassName"}),
    ),
    KindInfo("PersistentVolumeClaim", "v1", "persistentvolumeclaims", True, ("pvc",), status=True),
    KindInfo("Secret", "v1", "secrets", True, field_selectors=frozenset({"type"})),
    KindInfo("ServiceAccount", "v1", "serviceaccounts", True, ("sa",)),
    KindInfo("Role", "rbac.authorization.k8s.io/v1", "roles", True),
    KindInfo("RoleBinding", "rbac.authorization.k8s.io/v1", "rolebindings", True),
    # The Ray head's, to get Nodes (rl_lustre.kube.head_access): stored as sent, like the Role.
    KindInfo("ClusterRole", "rbac.authorization.k8s.io/v1", "clusterroles", False),
    KindInfo("ClusterRoleBinding", "rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    KindInfo(
        "Pod",
        "v1",
        "pods",
        True,
        ("po",),
        status=True,
        field_selectors=frozenset(
            {
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.podIPs",
                "status.nominatedNodeName",
            }
        ),
        subresources=("portforward", "log"),
        merge_keys=pod_merge_keys("spec"),
    ),
    KindInfo("Service", "v1", "services", True, ("svc",), status=True, merge_keys={"spec.ports": "port"}),
    KindInfo(
        "Event",
        "v1",
        "events",
        True,
        ("ev",),
        field_selectors=frozenset(
            {
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            }
        ),
    ),
    KindInfo(
        "Node",
        "v1",
        "nodes",
        False,
        ("no",),
        status=True,
        status_on_create=True,
        field_selectors=frozenset({"spec.unschedulable"}),
    ),
    KindInfo(
        "DaemonSet",
        "apps/v1",
        "daemonsets",
        True,
        ("ds",),
        status=True,
        merge_keys=pod_merge_keys("spec.template.spec"),
    ),
    KindInfo(
        "Job",
        "batch/v1",
        "jobs",
        True,
        status=True,
        field_selectors=frozenset({"status.successful"}),
        merge_keys=pod_merge_keys("spec.template.spec"),
    ),
    KindInfo("RayCluster", "ray.io/v1", "rayclusters", True, status=True, builtin=False),
    # GKE's multi-networking CRDs (cluster-scoped); GKE's controller writes their status.
    KindInfo("GKENetworkParamSet", "networking.gke.io/v1", "gkenetworkparamsets", False, status=True, builtin=False),
    KindInfo("Network", "networking.gke.io/v1", "networks", False, status=True, builtin=False),
):
    register_kind(_info)
