"""The object store behind :class:`rl_lustre.testing.kube.KubeFake`: what an API server
keeps (objects, resource versions, watch history) and the rules it applies to them.

The kinds it serves are the table in :mod:`._kube_kinds` (:data:`KINDS`, :func:`register_kind`).

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

from ._kube_kinds import (
    BY_PATH,
    KINDS,
    MERGED_SCALAR_LISTS,
    META_MERGE_KEYS,
    KindInfo,
    pod_merge_keys,
    register_kind,
)
from ._kube_patch import merge_patch, omit_empty, strategic_merge

__all__ = [
    "BY_PATH",
    "KINDS",
    "ApiError",
    "Gone",
    "KindInfo",
    "Obj",
    "Store",
    "Watcher",
    "labels_of",
    "merge_patch",
    "owned_by",
    "owner_reference",
    "parse_field_selector",
    "parse_label_selector",
    "pod_merge_keys",
    "register_kind",
]

Obj = dict[str, Any]
Key = tuple[str, "str | None", str]  # (kind, namespace, name)

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
# PV and PVC specs are immutable except for these fields (API server validation).
MUTABLE_SPEC = {
    "PersistentVolume": {
        "capacity",
        "mountOptions",
        "persistentVolumeReclaimPolicy",
        "claimRef",
        "nodeAffinity",
        "storageClassName",
        "volumeAttributesClassName",
    },
    "PersistentVolumeClaim": {"resources", "volumeAttributesClassName"},
}


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


def parse_field_selector(text: str | None, info: KindInfo | None = None) -> Callable[[Obj], bool]:
    """A predicate on objects for a field selector (``metadata.name=x,status.phase!=Running``).

    With ``info``, selecting by a field the real server does not index for that kind is
    a 400 (``field label not supported``), as there.
    """
    terms: list[tuple[str, bool, str]] = []  # (path, equal, value)
    for term in (text or "").split(","):
        if not term.strip():
            continue
        m = re.fullmatch(r"\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*", term)
        if m is None:
            raise ApiError(400, "BadRequest", f"invalid field selector {text!r}")
        if info is not None and m[1] not in info.selectable_fields:
            raise ApiError(
                400,
                "BadRequest",
                f'"{m[1]}" is not a known field selector: only '
                f'"{", ".join(sorted(info.selectable_fields))}" (field label not supported: {m[1]})',
            )
        terms.append((m[1], m[2] != "!=", m[3]))
    return lambda obj: all((_field(obj, path) == value) == equal for path, equal, value in terms)


# --- patches ---------------------------------------------------------------------


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

    def event(self, typ: str, obj: Obj, old: Obj | None) -> str | None:
        """The event this watch sees for a change, or None.

        As the real server does for a selector watch: an object that starts matching
        arrives as ADDED, one that stops matching leaves as DELETED.
        """
        if obj.get("kind") != self.kind:
            return None
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return None
        now = self.match(obj)
        if typ != "MODIFIED" or old is None:
            return typ if now else None
        before = self.match(old)
        if now and before:
            return "MODIFIED"
        if now:
            return "ADDED"
        return "DELETED" if before else None


# Pods end gracefully (the kubelet stops their containers): never removed at once.
_GRACEFUL = frozenset({"Pod"})


class Gone(Exception):
    """A watch asked for history the store no longer keeps."""


class Store:
    """Objects by ``(kind, namespace, name)``, a global resource version and a bounded
    history of changes for watches."""

    def __init__(self, history: int = 10_000) -> None:
        self.lock = threading.RLock()
        self.objects: dict[Key, Obj] = {}
        self.rv = 0
        # (resourceVersion, type, object, the object before a MODIFIED)
        self.history: collections.deque[tuple[int, str, Obj, Obj | None]] = collections.deque(maxlen=history)
        self.oldest_rv = 0
        self.watchers: set[Watcher] = set()
        # Called with (event type, object) after every change; the controllers hook in.
        self.listeners: list[Callable[[str, Obj], None]] = []
        # What the API server fills in or rejects when an object of a kind is created, by
        # kind; the controllers that own the kind hook in.
        self.admission: dict[str, Callable[[Obj], None]] = {}
        # kind -> check(current, new) run on a client's update: the kind's update validation.
        self.update_rules: dict[str, Callable[[Obj, Obj], None]] = {}

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

    def _emit(self, typ: str, obj: Obj, old: Obj | None = None) -> None:
        snapshot = copy.deepcopy(obj)
        self.history.append((self.rv, typ, snapshot, old))
        if len(self.history) == self.history.maxlen:
            self.oldest_rv = self.history[0][0] - 1
        for w in list(self.watchers):
            seen = w.event(typ, snapshot, old)
            if seen is not None:
                w.queue.put_nowait((seen, snapshot))
        for listener in self.listeners:
            listener(typ, snapshot)

    def create(self, obj: Obj) -> Obj:
        """Store a new object, filling what the server fills; 409 if the name is taken."""
        obj = copy.deepcopy(obj)
        info = KINDS[obj["kind"]]
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(
                    422,
                    "Invalid",
                    f"{info.kind} is invalid: metadata.name: Required value: name or generateName is required",
                )
            meta["name"] = meta["generateName"] + random_suffix()
        namespace = meta.get("namespace") if info.namespaced else None
        if not info.namespaced:
            meta.pop("namespace", None)
        key = (info.kind, namespace, meta["name"])
        with self.lock:
            if key in self.objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{info.resource} "{meta["name"]}" already exists',
                    {"name": meta["name"], "kind": info.plural},
                )
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta.setdefault("generation", 1)
            for server_field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(server_field, None)
            obj["apiVersion"] = info.api_version
            if info.status and not info.status_on_create:
                obj.pop("status", None)
            if info.builtin:
                obj = omit_empty(obj, info.kind)
                meta = obj["metadata"]
            admit = self.admission.get(info.kind)
            if admit is not None:
                admit(obj)
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
            old = self.objects.get(key)
            if spec_changed:
                meta["generation"] = int(meta.get("generation", 1)) + 1
            self._bump(obj)
            self.objects[key] = obj
            self._emit("MODIFIED", obj, copy.deepcopy(old) if old is not None else None)
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

    def patch(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Obj,
        validate: Callable[[Obj], None] | None,
        *,
        strategic: bool = False,
    ) -> Obj:
        """A merge patch (or, for built-in kinds, a strategic merge patch) from a client."""
        info = KINDS[kind]
        if strategic and not info.builtin:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: "
                f"application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml "
                f"(strategic merge patch is not supported for {info.resource})",
            )
        with self.lock:
            current = self.require(kind, namespace, name)
            if strategic:
                new = strategic_merge(current, patch, {**META_MERGE_KEYS, **info.merge_keys}, MERGED_SCALAR_LISTS) or {}
            else:
                new = merge_patch(current, patch)
            want_rv = (patch.get("metadata") or {}).get("resourceVersion")
            return self._write(info, current, new, want_rv, validate)

    def put(
        self, kind: str, namespace: str | None, name: str, body: Obj, validate: Callable[[Obj], None] | None
    ) -> Obj:
        """A client's update (PUT): the whole object, optimistic on ``metadata.resourceVersion``."""
        info = KINDS[kind]
        meta = body.get("metadata") or {}
        if body.get("kind") != kind or body.get("apiVersion") != info.api_version:
            raise ApiError(
                400,
                "BadRequest",
                f"the body's {body.get('apiVersion')}/{body.get('kind')} does not match {info.api_version}/{kind}",
            )
        if meta.get("name") != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        with self.lock:
            current = self.require(kind, namespace, name)
            return self._write(info, current, copy.deepcopy(body), meta.get("resourceVersion"), validate)

    def _write(
        self, info: KindInfo, current: Obj, new: Obj, want_rv: Any, validate: Callable[[Obj], None] | None
    ) -> Obj:
        """Store a client's new version of ``current`` with the server's rules: server-set
        metadata kept, status only through the subresource, immutable fields, omitempty."""
        kind, name = info.kind, current["metadata"]["name"]
        if want_rv is not None and str(want_rv) != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {info.resource} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )
        meta = new.setdefault("metadata", {})
        for field in (
            "uid",
            "creationTimestamp",
            "name",
            "namespace",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
        ):
            if field in current["metadata"]:
                meta[field] = current["metadata"][field]
            else:
                meta.pop(field, None)
        new["kind"], new["apiVersion"] = current["kind"], current["apiVersion"]
        if info.status:
            if "status" in current:
                new["status"] = current["status"]
            else:
                new.pop("status", None)
        if kind == "Secret":
            _fold_string_data(new)
            if new.get("type") != current.get("type"):
                raise ApiError(422, "Invalid", f'Secret "{name}" is invalid: type: Invalid value: field is immutable')
        if info.builtin:
            new = omit_empty(new, kind)
        frozen = MUTABLE_SPEC.get(kind)
        if frozen is not None:
            old_spec, new_spec = current.get("spec") or {}, new.get("spec") or {}
            changed = sorted(
                k for k in set(old_spec) | set(new_spec) if k not in frozen and old_spec.get(k) != new_spec.get(k)
            )
            if changed:
                raise ApiError(
                    422,
                    "Invalid",
                    f'{kind} "{name}" is invalid: spec: Forbidden: spec is immutable after creation '
                    f"except {', '.join(sorted(frozen))} (changed: {', '.join(changed)})",
                )
            old_size = ((old_spec.get("resources") or {}).get("requests") or {}).get("storage")
            new_size = ((new_spec.get("resources") or {}).get("requests") or {}).get("storage")
            if kind == "PersistentVolumeClaim" and old_size != new_size and not old_spec.get("storageClassName"):
                # The PersistentVolumeClaimResize admission plugin, as a real API server runs it.
                raise ApiError(
                    403,
                    "Forbidden",
                    f'persistentvolumeclaims "{name}" is forbidden: only dynamically provisioned pvc can be '
                    "resized and the storageclass that provisions the pvc must support resize",
                )
        rule = self.update_rules.get(kind)
        if rule is not None:
            rule(current, new)
        if validate is not None:
            validate(new)
        if new == current:
            return current
        return self.replace(new, spec_changed=new.get("spec") != current.get("spec"))

    def delete(self, kind: str, namespace: str | None, name: str, *, foreground: bool) -> tuple[Obj, bool]:
        """A client's DELETE: ``(object, removed)``. An object without finalizers goes at once
        (``removed``); otherwise (finalizers, foreground propagation, a pod's graceful
        termination) it is marked and the controllers finish the deletion later."""
        with self.lock:
            current = self.require(kind, namespace, name)
            if not current["metadata"].get("finalizers") and not foreground and kind not in _GRACEFUL:
                self.remove(current)
                return current, True
            return self.mark_deleted(kind, namespace, name, foreground=foreground), False

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
            seen = ((w.event(typ, obj, old), obj) for (at, typ, obj, old) in self.history if at > rv)
            return [(typ, obj) for typ, obj in seen if typ is not None]

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
