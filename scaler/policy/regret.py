"""Scale-down regret: the SLO policy's hold grows while its scale-downs are undone.

On the smooth families about half of the scale-downs were followed within a minute by a
scale-up above the level they came down to (docs/benchmarks.md, "Sixth look"): a dip of
the 15 s rate that outlasted the hold, on a load that kept climbing. Each costs a restart
(time-to-ready of replica-seconds and the requests that wait for it). A longer fixed hold
fixes those groups and overpays on every other. So each group learns its own: every
regret multiplies its hold by `regret_hold_growth`, every scale-down that stood for
`regret_window_s` divides it by `regret_hold_decay`, within [1, `max_regret_hold_factor`]
times `hold_s`.
"""

from __future__ import annotations

import dataclasses

from scaler.config import PolicyConfig
from scaler.signals import GroupState


def judge(
    state: GroupState, desired: int, current: int, config: PolicyConfig, now: float
) -> GroupState:
    """Judge the pending scale-downs against this tick's recommendation; adjust the factor.

    A pending scale-down is a regret when the policy now wants more replicas than it left
    and more than it has (a scale-up, not a recommendation that only stays above a level
    it came down past); it stood when `regret_window_s` passed without that.
    """
    factor, pending = state.hold_factor, []
    for at, level in state.pending_downs:
        if desired > current and desired > level:
            factor *= config.regret_hold_growth
        elif now - at > config.regret_window_s:
            factor /= config.regret_hold_decay
        else:
            pending.append((at, level))
    factor = min(config.max_regret_hold_factor, max(1.0, factor))
    return dataclasses.replace(state, pending_downs=tuple(pending), hold_factor=factor)


def remember_scale_down(state: GroupState, level: int, now: float) -> GroupState:
    """A scale-down to `level` was decided now: judge it later."""
    return dataclasses.replace(state, pending_downs=(*state.pending_downs, (now, level)))
