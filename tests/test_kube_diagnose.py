"""Diagnosis of pods and claims from status and events as GKE reports them (no server)."""

from __future__ import annotations

from rl_lustre.kube.diagnose import Diagnosis, Problem, explain_claim, explain_pod


def pod(status: dict, *, uid: str = "u1", selector: dict | None = None) -> dict:
    return {
        "kind": "Pod",
        "metadata": {"name": "rl-demo-head-abcde", "namespace": "default", "uid": uid},
        "spec": {"nodeSelector": selector or {}},
        "status": status,
    }


def event(reason: str, message: str, *, uid: str = "u1", warning: bool = True) -> dict:
    return {
        "involvedObject": {"kind": "Pod", "name": "rl-demo-head-abcde", "uid": uid},
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "lastTimestamp": "2025-01-01T00:00:00Z",
    }


def unschedulable(message: str) -> dict:
    return {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
    }


def test_untolerated_taint() -> None:
    found = explain_pod(
        pod(
            unschedulable(
                "0/2 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: present}. "
                "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
            )
        )
    )
    assert [p.reason for p in found] == ["Taint"]
    assert "nvidia.com/gpu: present" in found[0].message


def test_stockout_reported_only_in_an_autoscaler_event() -> None:
    status = unschedulable("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.")
    events = [
        event("FailedScheduling", status["conditions"][0]["message"]),
        event(
            "FailedScaleUp",
            "Node scale up in zones us-east1-b associated with this pod failed: "
            "ZONE_RESOURCE_POOL_EXHAUSTED. Pod is at risk of not being scheduled.",
        ),
    ]
    found = explain_pod(pod(status, selector={"cloud.google.com/gke-accelerator": "nvidia-b200"}), events)
    assert [p.reason for p in found] == ["SpotCapacity"]
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in found[0].message


def test_failed_scheduling_event_without_a_condition() -> None:
    found = explain_pod(
        pod({"phase": "Pending"}),
        [event("FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")],
    )
    assert [p.reason for p in found] == ["InsufficientGPU"]


def test_events_of_other_objects_are_ignored() -> None:
    found = explain_pod(
        pod({"phase": "Pending"}),
        [event("FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", uid="other")],
    )
    assert [p.reason for p in found] == ["NotReady"]


def test_missing_secret_keeps_the_container_waiting() -> None:
    status = {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "ray-head",
                "state": {
                    "waiting": {
                        "reason": "CreateContainerConfigError",
                        "message": 'secret "rl-demo-job-secrets" not found',
                    }
                },
            }
        ],
    }
    found = explain_pod(pod(status))
    assert [p.reason for p in found] == ["ContainerWaiting"]
    assert 'secret "rl-demo-job-secrets" not found' in found[0].message


def test_running_but_failing_readiness_probe() -> None:
    status = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": "ray-head", "ready": False, "state": {"running": {}}}],
    }
    found = explain_pod(
        pod(status), [event("Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503")]
    )
    assert [p.reason for p in found] == ["NotReady"]
    assert "statuscode: 503" in found[0].message


def test_ready_pod_has_no_problem() -> None:
    status = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "ray-head", "ready": True, "state": {"running": {}}}],
    }
    assert explain_pod(pod(status)) == []


def test_bound_claim_has_no_problem_and_missing_volume_is_named() -> None:
    claim = {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "lustre-pvc", "namespace": "default"},
        "spec": {"volumeName": "rl-demo-lustre-pv"},
        "status": {"phase": "Bound"},
    }
    assert explain_claim(claim) == []
    claim["status"]["phase"] = "Pending"
    found = explain_claim(claim, volume_exists=False)
    assert "PersistentVolume 'rl-demo-lustre-pv' does not exist" in found[0].message


def test_diagnosis_text_is_its_repr_and_indents_multiline_messages() -> None:
    d = Diagnosis("RayCluster default/x: state=None", (Problem("CrashLoop", "Pod default/p", "line one\nline two"),))
    assert repr(d) == str(d) == "RayCluster default/x: state=None\n  - Pod default/p: line one\n      line two"
    assert d.reasons() == {"CrashLoop"}
