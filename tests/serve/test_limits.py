"""Per-client limits (rckit.serve.limits): the token bucket, the in-flight count, and the state
kept, on a fake clock."""

from __future__ import annotations

import pytest

from rckit.serve.limits import IN_FLIGHT_WAIT, ClientLimits


class Clock:
    """A clock that moves only when told."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def admit(limits: ClientLimits, client: str, n: int) -> None:
    """``n`` requests of ``client`` admitted and answered at once."""
    for _ in range(n):
        assert limits.enter(client) is None
        limits.leave(client)


def test_a_burst_then_refusal_with_the_wait_for_the_next_token():
    clock = Clock()
    limits = ClientLimits(rate=2.0, burst=3, in_flight=None, clock=clock)
    admit(limits, "a", 3)
    assert limits.enter("a") == pytest.approx(0.5)  # empty bucket, 2 tokens a second
    clock.now += 0.2
    assert limits.enter("a") == pytest.approx(0.3)  # 0.4 of a token back, 0.6 to come
    assert limits.enter("a") == pytest.approx(0.3)  # a refusal took nothing


def test_the_bucket_refills_at_the_rate_and_no_further_than_the_burst():
    clock = Clock()
    limits = ClientLimits(rate=2.0, burst=3, in_flight=None, clock=clock)
    admit(limits, "a", 3)
    clock.now += 0.5  # one token
    admit(limits, "a", 1)
    assert limits.enter("a") is not None
    clock.now += 60  # long idle: a full bucket, not 120 tokens
    admit(limits, "a", 3)
    assert limits.enter("a") == pytest.approx(0.5)


def test_a_steady_rate_is_admitted():
    clock = Clock()
    limits = ClientLimits(rate=10.0, burst=1, in_flight=None, clock=clock)
    for _ in range(50):
        admit(limits, "a", 1)
        clock.now += 0.1
    assert limits.enter("a") is None


def test_in_flight_counts_until_leave():
    clock = Clock()
    limits = ClientLimits(rate=None, burst=10, in_flight=2, clock=clock)
    assert limits.enter("a") is None
    assert limits.enter("a") is None
    assert limits.enter("a") == IN_FLIGHT_WAIT
    assert limits.enter("a") == IN_FLIGHT_WAIT  # refused, so nothing taken: still 2 in flight
    limits.leave("a")
    assert limits.enter("a") is None
    assert limits.enter("a") == IN_FLIGHT_WAIT
    limits.leave("a")
    limits.leave("a")
    assert len(limits) == 0  # nothing in flight, no rate: nothing kept
    limits.leave("a")  # one leave too many changes nothing
    assert limits.enter("a") is None and limits.enter("a") is None


def test_both_limits_the_longer_wait_and_a_refusal_takes_no_token():
    clock = Clock()
    limits = ClientLimits(rate=0.25, burst=2, in_flight=1, clock=clock)
    assert limits.enter("a") is None
    assert limits.enter("a") == IN_FLIGHT_WAIT  # a token left, but one in flight
    limits.leave("a")
    assert limits.enter("a") is None  # the token the refusal did not take
    limits.leave("a")
    assert limits.enter("a") == pytest.approx(4.0)  # no token: 4 s for the next
    assert limits.enter("b") is None
    assert limits.enter("b") == pytest.approx(IN_FLIGHT_WAIT)


def test_two_clients_are_independent():
    clock = Clock()
    limits = ClientLimits(rate=1.0, burst=2, in_flight=1, clock=clock)
    assert limits.enter("a") is None
    assert limits.enter("a") == IN_FLIGHT_WAIT
    assert limits.enter("b") is None  # a at its limit does not hold b
    limits.leave("a")
    assert limits.enter("a") is None
    limits.leave("a")
    assert limits.enter("a") == pytest.approx(1.0)  # a's bucket is empty
    limits.leave("b")
    assert limits.enter("b") is None  # b's is not


def test_idle_state_is_dropped():
    clock = Clock()  # an empty bucket fills in 2 s: a sweep at most every 2 s
    limits = ClientLimits(rate=1.0, burst=2, in_flight=4, clock=clock)
    for i in range(100):
        admit(limits, f"10.0.0.{i}", 1)
    assert len(limits) == 100  # each a token short of a full bucket
    assert limits.enter("busy") is None  # and this one not answered yet
    clock.now += 1.0  # every bucket full again, but the last sweep was 1 s ago
    admit(limits, "new", 1)
    assert len(limits) == 102
    clock.now += 1.0  # a sweep: only the one in flight, and "new" (a token short), are kept
    admit(limits, "new", 1)
    assert set(limits.clients) == {"busy", "new"}
    limits.leave("busy")  # nothing in flight and a full bucket when it leaves: dropped at once
    assert set(limits.clients) == {"new"}
    clock.now += 2.0
    assert limits.enter("other") is None
    assert set(limits.clients) == {"other"}


def test_a_dropped_client_is_the_same_as_a_new_one():
    clock = Clock()
    limits = ClientLimits(rate=1.0, burst=2, in_flight=None, clock=clock)
    admit(limits, "a", 2)
    assert limits.enter("a") == pytest.approx(1.0)
    clock.now += 5
    admit(limits, "b", 1)  # sweeps a
    assert "a" not in limits.clients
    admit(limits, "a", 2)
    assert limits.enter("a") == pytest.approx(1.0)


def test_without_limits_everyone_is_admitted_and_nothing_is_kept():
    limits = ClientLimits(rate=None, burst=1, in_flight=None, clock=Clock())
    for _ in range(1000):
        assert limits.enter("a") is None
    for _ in range(1000):
        limits.leave("a")
    assert len(limits) == 0


@pytest.mark.parametrize("rate, burst, in_flight", [(0, 1, None), (-1.0, 1, None), (1.0, 0, None), (None, 1, 0)])
def test_settings_out_of_range_are_refused(rate, burst, in_flight):
    with pytest.raises(ValueError):
        ClientLimits(rate, burst, in_flight)
