"""Capacity that ends (flex-start): NeMo-RL is told to save before the nodes go
(``checkpointing.checkpoint_must_save_by``, DD:HH:MM:SS from its training loop's start)."""

from __future__ import annotations

import shlex
import warnings

import pytest
from helpers.specs import GKE

from rl_lustre import Capacity, Cluster, GRPOJob
from rl_lustre.backends.submission import prepare
from rl_lustre.errors import CapacityDeadlineWarning
from rl_lustre.nemo_rl.deadline import (
    DEADLINE_KEY,
    SAVE_MARGIN_SECONDS,
    Deadline,
    parse_save_by,
    save_by_text,
)

CLUSTER = Cluster(**{**GKE, "name": "flex"}, num_nodes=2, capacity=("flex-start",))
JOB = GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=10)
T0 = 1_800_000_000.0


def args_of(entrypoint: str) -> list[str]:
    return shlex.split(entrypoint)


def test_the_value_nemo_rl_reads_round_trips() -> None:
    for seconds in (0, 59, 3600 + 61, 6 * 86400 + 23 * 3600 + 59 * 60 + 59):
        assert parse_save_by(save_by_text(seconds)) == seconds
    assert save_by_text(-5) == "00:00:00:00"


def test_a_job_on_flex_start_saves_before_the_nodes_go() -> None:
    arrived = T0 - 3600.0  # the nodes came an hour ago
    deadline = Deadline.after(arrived, 2 * 86400.0)  # and live two days
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sub = prepare(CLUSTER, JOB, deadline=deadline, now=T0)
    expected = 2 * 86400 - 3600 - SAVE_MARGIN_SECONDS
    assert f"{DEADLINE_KEY}={save_by_text(expected)}" in sub.entrypoint
    assert save_by_text(expected) == "01:22:30:00"
    # The same job without a deadline: no such override, and the same identity.
    plain = prepare(CLUSTER, JOB)
    assert DEADLINE_KEY not in plain.entrypoint
    assert plain.base_id == sub.base_id
    # Later, less time is left.
    later = prepare(CLUSTER, JOB, deadline=deadline, now=T0 + 86400)
    assert f"{DEADLINE_KEY}={save_by_text(expected - 86400)}" in later.entrypoint


def test_the_users_own_value_is_kept_and_flagged_when_it_is_past_the_end() -> None:
    deadline = Deadline(end=T0 + 4 * 3600)
    mine = GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=10, overrides={DEADLINE_KEY: "00:02:00:00"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = prepare(CLUSTER, mine, deadline=deadline, now=T0)
    assert kept.entrypoint.count(DEADLINE_KEY) == 1
    assert f"{DEADLINE_KEY}=00:02:00:00" in kept.entrypoint
    late = GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=10, overrides={DEADLINE_KEY: "00:05:00:00"})
    with pytest.warns(CapacityDeadlineWarning, match="lies past the capacity's end"):
        prepare(CLUSTER, late, deadline=deadline, now=T0)


def test_the_supervisor_is_given_the_lifetimes_unless_the_user_set_the_key_or_nothing_is_saved() -> None:
    lifetimes = [("gke-flex-gpu-standby-1a2b3c4d-", 86400.0)]
    sub = prepare(CLUSTER, JOB, lifetimes=lifetimes, now=T0)
    words = args_of(sub.entrypoint)
    assert "--lifetime=gke-flex-gpu-standby-1a2b3c4d-=86400" in words
    assert words[words.index("--save-margin") + 1] == "1800"
    assert "--capacity-end" not in words  # no end granted: only the nodes' own
    assert DEADLINE_KEY not in sub.entrypoint  # the supervisor sets it, per attempt
    assert sub.base_id == prepare(CLUSTER, JOB).base_id
    mine = GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=10, overrides={DEADLINE_KEY: "00:02:00:00"})
    off = GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=10, checkpointing=False)
    for job in (mine, off):
        other = args_of(
            prepare(CLUSTER, job, lifetimes=lifetimes, deadline=Deadline(end=T0 + 86400), now=T0).entrypoint
        )
        assert not [w for w in other if w.startswith(("--lifetime", "--capacity-end", "--save-margin"))]


def test_too_little_time_left_to_save_is_warned_about() -> None:
    with pytest.warns(CapacityDeadlineWarning, match="less than the 30 min a save needs"):
        sub = prepare(CLUSTER, JOB, deadline=Deadline(end=T0 + 600), now=T0)
    assert f"{DEADLINE_KEY}=00:00:00:00" in sub.entrypoint


def test_the_gke_backend_passes_the_granted_deadline_to_every_job() -> None:
    from rl_lustre.backends.gke import GKEBackend

    backend = GKEBackend(CLUSTER)
    assert backend.capacity_deadline() is None  # nothing granted yet, or capacity that does not end
    backend.granted_deadline = Deadline.after(T0, 7 * 86400.0)
    assert backend.capacity_deadline() == Deadline(end=T0 + 7 * 86400.0)


def test_preflight_warns_when_a_run_on_flex_start_cannot_save() -> None:
    off = GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=10, checkpointing=False)
    flex = Cluster(
        **{**GKE, "name": "flex"},
        num_nodes=2,
        capacity=(Capacity("flex-start", max_run_duration=2 * 3600),),
    )
    (warning,) = [w for w in off.preflight(flex) if "flex-start" in w]
    assert "live at most 2 h" in warning
    assert "cannot finish inside the capacity's lifetime" in warning
    assert not [w for w in JOB.preflight(flex) if "flex-start" in w]  # it saves: no warning
    spot = Cluster(**{**GKE, "name": "flex"}, num_nodes=2)
    assert not [w for w in off.preflight(spot) if "flex-start" in w]
