"""The object store behind :class:`rl_lustre.testing.kube.KubeFake`: what an API server
keeps (objects, resource versions, watch history) and the rules it applies to them.

Everything here runs on the fake's event loop thread; readers on other threads take
``Store.lock``.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import copy
import datetime
import random
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import attrs

Obj = dict[str, Any]
Key = tuple[str, "str | None", str]  # (kind, namespace, name)

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
# PV and PVC specs are immutable except for these fields (API server validation).
MUTABLE_SPEC = {
    "PersistentVolume": {"capacity", "mountOptions", "persistentVolumeReclaimPolicy", "claimRef", "nodeAffinity"},
    "PersistentVolumeClaim": {"resources", "volumeAttributesClassName"},
}
# Kinds whose status only the status subresource (here: the simulated controllers) may write.
STATUS_SUBRESOURCE = {"RayCluster", "Pod", "PersistentVolume", "PersistentVolumeClaim", "Service", "Node",
                      "DaemonSet", "Job"}


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(_NAME_CHARS) for _ in range(n))


class ApiError(Exception):
    """An error the fake answers with a ``Status`` body."""

    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details or {})

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


@attrs.frozen
class KindInfo:
    kind: str
    api_version: str
    plural: str
    namespaced: bool

    @property
    def resource(self) -> str:
        """``secrets`` or ``rayclusters.ray.io``, as the server names it in messages."""
        group = self.api_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural


KINDS = {
    k.kind: k
    for k in [
        KindInfo("PersistentVolume", "v1", "persistentvolumes", False),
        KindInfo("PersistentVolumeClaim", "v1", "persistentvolumeclaims", True),
        KindInfo("Secret", "v1", "secrets", True),
        KindInfo("Pod", "v1", "pods", True),
        KindInfo("Service", "v1", "services", True),
        KindInfo("Event", "v1", "events", True),
        KindInfo("RayCluster", "ray.io/v1", "rayclusters", True),
        KindInfo("Node", "v1", "nodes", False),
        KindInfo("DaemonSet", "apps/v1", "daemonsets", True),
        KindInfo("Job", "batch/v1", "jobs", True),
    ]
}
BY_PATH = {(k.api_version, k.plural): k for k in KINDS.values()}


# --- selectors -------------------------------------------------------------------

_REQUIREMENT = re.compile(
    r"\s*(?:(?P<not>!)\s*(?P<nkey>[^\s,!=()]+)"
    r"|(?P<key>[^\s,!=()]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[^\s,()]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?)\s*(?:,|$)"
)


@attrs.frozen
class _Requirement:
    """One term of a label selector: ``key op values``."""

    key: str
    op: str  # "exists", "!exists", "in", "notin"
    values: frozenset[str] = frozenset()

    def __call__(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        inside = self.key in labels and labels[self.key] in self.values
        return inside if self.op == "in" else not inside


def parse_label_selector(text: str | None) -> Callable[[Mapping[str, str]], bool]:
    """A predicate on labels for a label selector (``a=b,c!=d,e in (f,g),!h``)."""
    terms: list[_Requirement] = []
    pos = 0
    while text and pos < len(text):
        m = _REQUIREMENT.match(text, pos)
        if m is None or m.end() == pos:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: invalid label selector {text!r}")
        pos = m.end()
        if m["not"]:
            terms.append(_Requirement(m["nkey"], "!exists"))
        elif m["op"]:
            terms.append(_Requirement(m["key"], "notin" if m["op"] == "!=" else "in", frozenset({m["value"]})))
        elif m["setop"]:
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            terms.append(_Requirement(m["key"], m["setop"], values))
        else:
            terms.append(_Requirement(m["key"], "exists"))
    return lambda labels: all(term(labels) for term in terms)


def _field(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def parse_field_selector(text: str | None) -> Callable[[Obj], bool]:
    """A predicate on objects for a field selector (``metadata.name=x,status.phase!=Running``)."""
    terms: list[tuple[str, bool, str]] = []  # (path, equal, value)
    for term in (text or "").split(","):
        if not term.strip():
            continue
        m = re.fullmatch(r"\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*", term)
        if m is None:
            raise ApiError(400, "BadRequest", f"invalid field selector {text!r}")
        terms.append((m[1], m[2] != "!=", m[3]))
    return lambda obj: all((_field(obj, path) == value) == equal for path, equal, value in terms)


# --- patches ---------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _fold_string_data(obj: Obj) -> None:
    """What the API server does with a Secret's write-only ``stringData``."""
    string_data = obj.pop("stringData", None) or {}
    if string_data:
        data = dict(obj.get("data") or {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data
    obj.setdefault("type", "Opaque")


# --- the store -------------------------------------------------------------------


@attrs.define(eq=False)
class Watcher:
    kind: str
    namespace: str | None
    match: Callable[[Obj], bool]
    queue: asyncio.Queue[tuple[str, Obj] | None]


class Gone(Exception):
    """A watch asked for history the store no longer keeps."""


class Store:
    """Objects by ``(kind, namespace, name)``, a global resource version and a bounded
    history of changes for watches."""

    def __init__(self, history: int = 10_000) -> None:
        self.lock = threading.RLock()
        self.objects: dict[Key, Obj] = {}
        self.rv = 0
        self.history: collections.deque[tuple[int, str, Obj]] = collections.deque(maxlen=history)
        self.oldest_rv = 0
        self.watchers: set[Watcher] = set()
        # Called with (event type, object) after every change; the controllers hook in.
        self.listeners: list[Callable[[str, Obj], None]] = []

    # reads

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        with self.lock:
            return self.objects.get((kind, namespace, name))

    def require(self, kind: str, namespace: str | None, name: str) -> Obj:
        obj = self.get(kind, namespace, name)
        if obj is None:
            info = KINDS[kind]
            raise ApiError(404, "NotFound", f'{info.resource} "{name}" not found', {"name": name, "kind": info.plural})
        return obj

    def find(
        self,
        kind: str | None = None,
        namespace: str | None = None,
        match: Callable[[Obj], bool] = lambda obj: True,
    ) -> list[Obj]:
        with self.lock:
            return [
                obj
                for (k, ns, _), obj in sorted(self.objects.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2]))
                if (kind is None or k == kind) and (namespace is None or ns == namespace) and match(obj)
            ]

    def by_uid(self, uid: str) -> Obj | None:
        with self.lock:
            for obj in self.objects.values():
                if obj["metadata"].get("uid") == uid:
                    return obj
        return None

    # writes

    def _bump(self, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def _emit(self, typ: str, obj: Obj) -> None:
        snapshot = copy.deepcopy(obj)
        self.history.append((self.rv, typ, snapshot))
        if len(self.history) == self.history.maxlen:
            self.oldest_rv = self.history[0][0] - 1
        for w in list(self.watchers):
            if self._watch_match(w, snapshot):
                w.queue.put_nowait((typ, snapshot))
        for listener in self.listeners:
            listener(typ, snapshot)

    @staticmethod
    def _watch_match(w: Watcher, obj: Obj) -> bool:
        if obj.get("kind") != w.kind:
            return False
        if w.namespace is not None and obj["metadata"].get("namespace") != w.namespace:
            return False
        return w.match(obj)

    def create(self, obj: Obj) -> Obj:
        """Store a new object, filling what the server fills; 409 if the name is taken."""
        obj = copy.deepcopy(obj)
        info = KINDS[obj["kind"]]
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid", f"{info.kind} is invalid: metadata.name: Required value: name or generateName is required")
            meta["name"] = meta["generateName"] + random_suffix()
        namespace = meta.get("namespace") if info.namespaced else None
        if not info.namespaced:
            meta.pop("namespace", None)
        key = (info.kind, namespace, meta["name"])
        with self.lock:
            if key in self.objects:
                raise ApiError(
                    409, "AlreadyExists", f'{info.resource} "{meta["name"]}" already exists',
                    {"name": meta["name"], "kind": info.plural},
                )
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta.setdefault("generation", 1)
            for server_field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(server_field, None)
            obj["apiVersion"] = info.api_version
            if info.kind in STATUS_SUBRESOURCE and info.kind != "Node":
                obj.pop("status", None)
            if info.kind in ("DaemonSet", "Job"):
                from ._kube_workloads import server_defaults

                server_defaults(obj)
            elif info.kind == "Secret":
                _fold_string_data(obj)
            elif info.kind == "PersistentVolumeClaim":
                meta.setdefault("finalizers", ["kubernetes.io/pvc-protection"])
                obj["status"] = {"phase": "Pending"}
                obj["spec"].setdefault("volumeMode", "Filesystem")
            elif info.kind == "PersistentVolume":
                meta.setdefault("finalizers", ["kubernetes.io/pv-protection"])
                obj["status"] = {"phase": "Available"}
                obj["spec"].setdefault("volumeMode", "Filesystem")
                obj["spec"].setdefault("persistentVolumeReclaimPolicy", "Retain")
            elif info.kind == "Service":
                spec = obj.setdefault("spec", {})
                spec.setdefault("type", "ClusterIP")
                spec.setdefault("clusterIP", f"10.96.{random.randint(1, 254)}.{random.randint(1, 254)}")
                obj["status"] = {"loadBalancer": {}}
            self._bump(obj)
            self.objects[key] = obj
            self._emit("ADDED", obj)
            return obj

    def replace(self, obj: Obj, *, spec_changed: bool = False) -> Obj:
        """Store a changed object (already validated) as a new version."""
        meta = obj["metadata"]
        info = KINDS[obj["kind"]]
        key = (info.kind, meta.get("namespace") if info.namespaced else None, meta["name"])
        with self.lock:
            if spec_changed:
                meta["generation"] = int(meta.get("generation", 1)) + 1
            self._bump(obj)
            self.objects[key] = obj
            self._emit("MODIFIED", obj)
            return obj

    def update(self, kind: str, namespace: str | None, name: str, change: Callable[[Obj], None]) -> Obj | None:
        """Apply ``change`` to a copy of the object; store it only if it changed."""
        with self.lock:
            current = self.get(kind, namespace, name)
            if current is None:
                return None
            new = copy.deepcopy(current)
            change(new)
            if new == current:
                return current
            return self.replace(new, spec_changed=new.get("spec") != current.get("spec"))

    def patch(self, kind: str, namespace: str | None, name: str, patch: Obj, validate: Callable[[Obj], None] | None) -> Obj:
        """A merge patch from a client, with the server's immutability rules."""
        with self.lock:
            current = self.require(kind, namespace, name)
            info = KINDS[kind]
            new = merge_patch(current, patch)
            meta = new.setdefault("metadata", {})
            want_rv = (patch.get("metadata") or {}).get("resourceVersion")
            if want_rv is not None and want_rv != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409, "Conflict",
                    f'Operation cannot be fulfilled on {info.resource} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                )
            for field in ("uid", "creationTimestamp", "name", "namespace", "generation", "deletionTimestamp"):
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
                else:
                    meta.pop(field, None)
            new["kind"], new["apiVersion"] = current["kind"], current["apiVersion"]
            if kind in STATUS_SUBRESOURCE:
                if "status" in current:
                    new["status"] = current["status"]
                else:
                    new.pop("status", None)
            if kind == "Secret":
                _fold_string_data(new)
                if new.get("type") != current.get("type"):
                    raise ApiError(422, "Invalid", f'Secret "{name}" is invalid: type: Invalid value: field is immutable')
            frozen = MUTABLE_SPEC.get(kind)
            if frozen is not None:
                old_spec, new_spec = current.get("spec") or {}, new.get("spec") or {}
                changed = sorted(
                    k for k in set(old_spec) | set(new_spec) if k not in frozen and old_spec.get(k) != new_spec.get(k)
                )
                if changed:
                    raise ApiError(
                        422, "Invalid",
                        f'{kind} "{name}" is invalid: spec: Forbidden: spec is immutable after creation '
                        f"except {', '.join(sorted(frozen))} (changed: {', '.join(changed)})",
                    )
            if validate is not None:
                validate(new)
            if new == current:
                return current
            return self.replace(new, spec_changed=new.get("spec") != current.get("spec"))

    def mark_deleted(self, kind: str, namespace: str | None, name: str, *, foreground: bool) -> Obj:
        """Begin a deletion: set deletionTimestamp; the garbage collector finishes it."""
        with self.lock:
            current = self.require(kind, namespace, name)
            if current["metadata"].get("deletionTimestamp"):
                return current

            def mark(obj: Obj) -> None:
                obj["metadata"]["deletionTimestamp"] = now_rfc3339()
                obj["metadata"]["deletionGracePeriodSeconds"] = 0
                if foreground:
                    obj["metadata"].setdefault("finalizers", []).append("foregroundDeletion")

            updated = self.update(kind, namespace, name, mark)
            assert updated is not None
            return updated

    def remove(self, obj: Obj) -> None:
        meta = obj["metadata"]
        info = KINDS[obj["kind"]]
        key = (info.kind, meta.get("namespace") if info.namespaced else None, meta["name"])
        with self.lock:
            gone = self.objects.pop(key, None)
            if gone is None:
                return
            self._bump(gone)
            self._emit("DELETED", gone)

    # watches

    def events_since(self, rv: int, w: Watcher) -> list[tuple[str, Obj]]:
        """Changes after ``rv`` that ``w`` wants; :class:`Gone` if they were compacted."""
        with self.lock:
            if rv < self.oldest_rv:
                raise Gone(f"too old resource version: {rv} ({self.oldest_rv + 1})")
            return [(typ, obj) for (at, typ, obj) in self.history if at > rv and self._watch_match(w, obj)]

    def compact(self) -> None:
        """Forget the watch history, as etcd compaction does."""
        with self.lock:
            self.history.clear()
            self.oldest_rv = self.rv

    def clear(self) -> None:
        with self.lock:
            self.objects.clear()
            self.compact()


def owned_by(obj: Obj, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def owner_reference(owner: Obj) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def labels_of(obj: Obj) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("labels") or {})
