"""The scale-down hold that grows with regrets: judging pending scale-downs, and the policy."""

from __future__ import annotations

import pytest

from scaler.config import PolicyConfig
from scaler.policy import decide
from scaler.policy.regret import judge, remember_scale_down
from scaler.signals import GroupState, ScalerState
from tests.unit.scaler.conftest import FakeClock, make_signals

LEARNING = PolicyConfig(regret_hold_growth=2.0, regret_hold_decay=2.0, max_regret_hold_factor=4.0)


@pytest.mark.parametrize(
    ("factor", "desired", "current", "now", "after", "still_pending"),
    [
        # Came down to 8 at t=100.
        pytest.param(1.0, 10, 8, 130.0, 2.0, False, id="scale-up-above-it-is-a-regret"),
        pytest.param(1.0, 9, 10, 130.0, 1.0, True, id="a-higher-wish-that-is-no-scale-up-waits"),
        pytest.param(1.0, 8, 8, 130.0, 1.0, True, id="holding-its-level-waits"),
        pytest.param(4.0, 8, 8, 161.0, 2.0, False, id="stood-the-window-shrinks-the-hold"),
        pytest.param(1.0, 8, 8, 161.0, 1.0, False, id="never-below-one"),
        pytest.param(4.0, 12, 8, 130.0, 4.0, False, id="never-above-the-most"),
    ],
)
def test_judge(
    factor: float, desired: int, current: int, now: float, after: float, still_pending: bool
) -> None:
    state = remember_scale_down(GroupState(group="g", hold_factor=factor), 8, 100.0)
    judged = judge(state, desired, current, LEARNING, now)
    assert judged.hold_factor == after
    assert bool(judged.pending_downs) is still_pending


def test_defaults_never_learn() -> None:
    state = remember_scale_down(GroupState(group="g"), 8, 100.0)
    assert judge(state, 12, 8, PolicyConfig(), 130.0).hold_factor == 1.0


def _holds(clock: FakeClock, config: PolicyConfig) -> list[float]:
    """A group at 300/s a replica: 2 min at 2400/s, 100 s at 1200/s (longer than the
    82 s hold after a step down, so it scales down), then 2400/s again (a scale-up within
    the regret window). The hold factor after every tick."""
    state, replicas, holds = ScalerState(), 10, []
    for lam in [2400.0] * 24 + [1200.0] * 20 + [2400.0] * 12:
        now = clock.tick(5.0)
        s = make_signals(
            replicas=replicas,
            ready_replicas=replicas,
            arrival_rps=lam,
            utilization=min(1.0, lam / (300.0 * replicas)),
            queue_p99_ms=200.0,
            partitions=64,
            collected_at=now,
        )
        decision, state = decide([s], state, config, now)
        replicas = decision.groups[0].desired
        holds.append(state.get(s.group).hold_factor)
    return holds


def test_an_undone_scale_down_lengthens_the_hold(clock: FakeClock) -> None:
    assert _holds(clock, LEARNING)[-1] == 2.0
    assert set(_holds(FakeClock(), PolicyConfig())) == {1.0}, "off by default"
