"""Per-tenant token buckets: refill, burst, overrides, a clock stepping back, bad settings."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from services.cli.common import SettingsInvalid, load_settings
from services.ingest.handlers import Answer, Route, handle_event
from services.ingest.limits import NO_TENANT, RECORD_TIME_CREDIT_S, TenantLimit, TenantLimiter
from services.ingest.settings import IngestSettings
from tests.unit.ingest.conftest import NOW, PRODUCED_AT, FakeCatalog, encode, mlp_event


class FakeClock:
    """Moves only when told."""

    def __init__(self, start: datetime = NOW) -> None:
        self.now = start

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def admitted(limiter: TenantLimiter, tenant: str | None, steps: list[float]) -> list[bool]:
    """For each step: advance the clock that many seconds, then try one request."""
    clock = FakeClock()
    out = []
    for step in steps:
        verdict = limiter.admit(tenant, clock.advance(step))
        assert verdict is not None
        out.append(verdict.allowed)
    return out


def allows(limiter: TenantLimiter, tenant: str) -> bool:
    verdict = limiter.admit(tenant, NOW)
    assert verdict is not None
    return verdict.allowed


@pytest.mark.parametrize(
    ("limit", "steps", "expected"),
    [
        # burst defaults to one second's worth: 2 at once, then one per 0.5 s
        (TenantLimit(rate_rps=2), [0, 0, 0], [True, True, False]),
        (TenantLimit(rate_rps=2), [0, 0, 0, 0.5, 0], [True, True, False, True, False]),
        # an explicit burst above the rate
        (TenantLimit(rate_rps=1, burst=3), [0, 0, 0, 0], [True, True, True, False]),
        # a rate below 1/s still lets one request through at once
        (TenantLimit(rate_rps=0.5), [0, 0, 1.0, 1.0], [True, False, False, True]),
        # a long pause refills only up to the burst
        (TenantLimit(rate_rps=1, burst=2), [0, 0, 60, 0, 0], [True, True, True, True, False]),
    ],
    ids=["burst-is-rate", "refill", "explicit-burst", "slow-rate", "refill-capped"],
)  # fmt: skip
def test_bucket(limit: TenantLimit, steps: list[float], expected: list[bool]) -> None:
    assert admitted(TenantLimiter(limit), "team-a", steps) == expected


def test_tenants_have_their_own_buckets_and_overrides() -> None:
    limiter = TenantLimiter(TenantLimit(rate_rps=1), {"team-a": TenantLimit(rate_rps=3)})
    now = NOW
    a = [limiter.admit("team-a", now) for _ in range(4)]
    b = [limiter.admit("team-b", now) for _ in range(2)]
    none = [limiter.admit(None, now) for _ in range(2)]
    assert [v.allowed for v in a if v] == [True, True, True, False]
    assert [v.allowed for v in b if v] == [True, False]
    assert [(v.tenant, v.allowed) for v in none if v] == [(NO_TENANT, True), (NO_TENANT, False)]
    assert a[3] is not None and a[3].limit.rate_rps == 3


def test_no_default_limits_only_the_named_tenants() -> None:
    limiter = TenantLimiter(None, {"team-a": TenantLimit(rate_rps=1)})
    assert limiter.admit("team-b", NOW) is None
    assert limiter.active
    assert not TenantLimiter(None).active


def test_a_clock_stepping_back_refills_nothing() -> None:
    limiter = TenantLimiter(TenantLimit(rate_rps=1))
    assert admitted(limiter, "t", [0, -30, 30.5, 0.6]) == [True, False, False, True]


def test_new_tenants_past_the_cap_evict_the_least_recently_used() -> None:
    limiter = TenantLimiter(TenantLimit(rate_rps=10), max_buckets=3)
    for name in ("a", "b", "c", "a", "d"):  # a was used again: b is the oldest
        limiter.admit(name, NOW)
    assert list(limiter._others) == ["c", "a", "d"]
    assert (len(limiter), limiter.evictions, limiter.evicted_unrefilled) == (3, 1, 1)
    limiter.admit("e", NOW + timedelta(seconds=1))  # c refilled by now: its eviction cost nothing
    assert (len(limiter), limiter.evictions, limiter.evicted_unrefilled) == (3, 2, 1)


def test_a_flood_of_new_tenants_is_one_eviction_each_and_never_past_the_cap() -> None:
    # Before: once full of unrefilled buckets, each new name scanned the whole table, freed
    # nothing and grew it (the third 5,000 names took 42.6 s at 0.1 req/s).
    cap, names = 5_000, 20_000
    limiter = TenantLimiter(TenantLimit(rate_rps=0.1), max_buckets=cap)
    clock = FakeClock()
    for i in range(names):
        verdict = limiter.admit(f"t-{i}", clock.advance(0.001))
        assert verdict is not None and verdict.allowed
        assert len(limiter) <= cap
        assert limiter.evictions == max(i + 1 - cap, 0), "one eviction a new tenant, at most"
    assert limiter.evicted_unrefilled == names - cap


def test_busy_and_named_tenants_keep_their_buckets_through_a_flood() -> None:
    limiter = TenantLimiter(
        TenantLimit(rate_rps=0.001), {"team-a": TenantLimit(rate_rps=0.001)}, max_buckets=100
    )
    assert [allows(limiter, t) for t in ("busy", "busy", "team-a", "team-a")] == [
        True,
        False,
        True,
        False,
    ]
    for i in range(1_000):
        limiter.admit(f"flood-{i}", NOW)
        if i % 50 == 0:  # a tenant that keeps asking is never the least recently used
            assert not allows(limiter, "busy")
    assert not allows(limiter, "team-a"), "its own limit: never evicted"
    assert len(limiter) == 100 + 1


def test_an_idle_tenant_evicted_before_it_refilled_comes_back_to_a_full_bucket() -> None:
    # The documented trade-off of a bounded table: it takes `max_buckets` other tenants
    # between two of its requests, and is counted.
    limiter = TenantLimiter(TenantLimit(rate_rps=0.001), max_buckets=2)
    assert [allows(limiter, "idle"), allows(limiter, "idle")] == [True, False]
    limiter.admit("x", NOW)
    limiter.admit("y", NOW)  # idle is evicted, empty
    assert allows(limiter, "idle")
    assert limiter.evicted_unrefilled == 2  # idle, then x


def test_a_table_of_no_buckets_is_refused() -> None:
    with pytest.raises(ValueError, match="max_buckets must be at least 1"):
        TenantLimiter(TenantLimit(rate_rps=1), max_buckets=0)


RATE, BURST, LIMITS = (f"INFERBUS_INGEST_TENANT_{n}" for n in ("RATE_RPS", "BURST", "LIMITS"))


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({RATE: "0"}, f"{RATE}: Input should be greater than 0", id="zero-rate"),
        pytest.param({RATE: "x"}, f"{RATE}: Input should be a valid number", id="not-a-number"),
        pytest.param(
            {LIMITS: '{"team-a": -1}'},
            f"{LIMITS} (team-a.rate_rps): Input should be greater than 0",
            id="negative-override",
        ),
        pytest.param(
            {LIMITS: '{"team-a": {"rate": 1}}'},
            f"{LIMITS} (team-a.rate_rps): Field required",
            id="unknown-field",
        ),
        pytest.param({LIMITS: "a=1"}, f"{LIMITS}: not valid JSON: Expecting value", id="not-json"),
        pytest.param(
            {LIMITS: '{"team-a": 1, "team-b": 2, "team-a": 3}'},
            f"{LIMITS}: 'team-a' is written twice in one object",
            id="tenant-twice",
        ),
        pytest.param(
            {LIMITS: '{"team-a": {"rate_rps": 1, "rate_rps": 2}}'},
            f"{LIMITS}: 'rate_rps' is written twice in one object",
            id="field-twice",
        ),
        pytest.param({BURST: "10"}, f"{BURST} is set without {RATE}", id="burst-alone"),
        pytest.param({RATE: "inf"}, f"{RATE}: Input should be a finite number", id="infinite"),
        pytest.param(
            {LIMITS: '{"team-a": 1e400}'},
            f"{LIMITS} (team-a.rate_rps): Input should be a finite number",
            id="overflowing-override",
        ),
        pytest.param(
            {LIMITS: '{"": 1}'}, f"{LIMITS}: an empty tenant never matches", id="empty-tenant"
        ),
        pytest.param(
            {LIMITS: '{"' + "t" * 129 + '": 1}'},
            f"{LIMITS}: tenant 'tttt",
            id="tenant-too-long-to-match",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_variable(
    env: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsInvalid) as refused:
        load_settings(IngestSettings)
    assert expected in str(refused.value)
    assert "\n" not in str(refused.value)


def test_settings_build_the_limiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERBUS_INGEST_TENANT_RATE_RPS", "5")
    monkeypatch.setenv("INFERBUS_INGEST_TENANT_BURST", "7")
    monkeypatch.setenv(
        "INFERBUS_INGEST_TENANT_LIMITS", '{"team-a": 100, "team-b": {"rate_rps": 1, "burst": 4}}'
    )
    limiter = load_settings(IngestSettings).tenant_limiter()
    assert limiter.limit_for("x") == TenantLimit(rate_rps=5, burst=7)
    assert limiter.limit_for("team-a") == TenantLimit(rate_rps=100)
    assert limiter.limit_for("team-b") == TenantLimit(rate_rps=1, burst=4)


def test_ingest_answers_over_the_limit_with_the_tenant_and_the_limit(
    catalog: FakeCatalog, settings: IngestSettings
) -> None:
    limiter = TenantLimiter(None, {"team-a": TenantLimit(rate_rps=2, burst=2)})
    outcomes = [
        handle_event(
            encode(mlp_event(request_id=f"r-{i}", tenant=tenant)),
            produced_at=PRODUCED_AT,
            catalog=catalog,
            settings=settings,
            now=NOW,
            limiter=limiter,
        )
        for i, tenant in enumerate(["team-a", "team-a", "team-a", "team-b"])
    ]
    assert [type(o) for o in outcomes] == [Route, Route, Answer, Route]
    refused = outcomes[2]
    assert isinstance(refused, Answer)
    assert refused.result.status == "rejected_overload"
    message = refused.result.error.message if refused.result.error else ""
    assert "tenant 'team-a'" in message and "2 requests/s" in message and "burst 2" in message
    assert refused.error.context == {"tenant": "team-a", "limit_rps": 2.0, "burst": 2.0}


def test_an_unauthorized_tenant_is_refused_before_it_spends_tokens(
    catalog: FakeCatalog, settings: IngestSettings
) -> None:
    limiter = TenantLimiter(TenantLimit(rate_rps=1))
    outcome = handle_event(
        encode(mlp_event(model="mlp-team-a", tenant="team-b")),
        produced_at=PRODUCED_AT,
        catalog=catalog,
        settings=settings,
        now=NOW,
        limiter=limiter,
    )
    assert isinstance(outcome, Answer) and outcome.result.status == "unauthorized"
    assert len(limiter) == 0


def _sent_at(
    catalog: FakeCatalog,
    settings: IngestSettings,
    limiter: TenantLimiter,
    sent: list[datetime],
    now: datetime,
) -> int:
    """Requests of team-a, each sent (its record timestamp) at `sent`, all handled at `now`;
    returns how many were routed."""
    routed = 0
    for i, at in enumerate(sent):
        outcome = handle_event(
            encode(mlp_event(request_id=f"r-{now.timestamp()}-{i}", tenant="team-a")),
            produced_at=at,
            catalog=catalog,
            settings=settings,
            now=now,
            limiter=limiter,
        )
        routed += isinstance(outcome, Route)
    return routed


def test_records_that_waited_out_an_ingest_restart_count_when_they_were_sent(
    catalog: FakeCatalog, settings: IngestSettings
) -> None:
    """A tenant at 4/s under a 5/s limit was refused after ingest restarted: what waited for
    it arrived at once on ingest's clock."""
    limiter = TenantLimiter(None, {"team-a": TenantLimit(rate_rps=5)})
    sent = [NOW + timedelta(seconds=i / 4) for i in range(24)]  # 6 s at 4/s
    assert _sent_at(catalog, settings, limiter, sent, NOW + timedelta(seconds=9)) == 24


def test_back_dating_gains_at_most_the_credit_once(
    catalog: FakeCatalog, settings: IngestSettings
) -> None:
    limiter = TenantLimiter(None, {"team-a": TenantLimit(rate_rps=1, burst=1)})
    hour_ago = NOW - timedelta(hours=1)
    forged = [hour_ago + timedelta(seconds=i) for i in range(3600)]  # a second apart
    first = _sent_at(catalog, settings, limiter, forged, NOW)
    assert first <= 1 + RECORD_TIME_CREDIT_S + 1
    assert _sent_at(catalog, settings, limiter, forged, NOW) == 0  # its bucket is at NOW now
