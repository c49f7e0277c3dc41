"""The budget rule (dpate_core.privacy): remaining and would-exceed, exactly, at the boundaries."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpate_core.privacy import NOTHING, PrivacyParams, check_budget

P = PrivacyParams.of


def test_a_release_landing_exactly_on_the_cap_fits_and_leaves_nothing():
    c = check_budget(P(1, "1e-5"), P("1/2", "1/200000"), P("1/2", "1/200000"))
    assert c.fits and c.exceeds == ()
    assert c.remaining == P("1/2", "1/200000")
    assert check_budget(P(1, "1e-5"), P(1, "1e-5")).remaining == NOTHING


def test_thirds_add_up_to_the_cap_exactly():
    # 1/3 + 1/3 + 1/3 == 1 in Fractions; in floats 0.1 + 0.2 > 0.3 would refuse a fitting release
    assert check_budget(P(1), P("2/3"), P("1/3")).fits
    assert check_budget(P("3/10"), P("1/10"), P("2/10")).fits
    assert check_budget(P("3/10"), P("1/10"), P("2/10")).remaining == P("1/5")


def test_the_smallest_excess_is_refused_and_named():
    tiny = Fraction(1, 10**30)
    c = check_budget(P(1, "1e-5"), P("2/3"), PrivacyParams(Fraction(1, 3) + tiny))
    assert not c.fits and c.exceeds == ("epsilon",)
    c = check_budget(P(1, "1e-5"), P(0, "1e-5"), PrivacyParams(Fraction(1, 2), tiny))
    assert not c.fits and c.exceeds == ("delta",)
    assert check_budget(P(1, 0), P(1), P(1, "1e-9")).exceeds == ("epsilon", "delta")


def test_a_delta_free_release_under_a_cap_already_past_in_delta_is_refused():
    # a cap lowered (dpate ledger set-cap) below the delta already spent: a pure release asks no
    # delta, but spent + ask is still past the cap; the ledger refuses it, so the check must too
    c = check_budget(P(5, "1e-6"), P(1, "1e-5"), P(1, 0))
    assert not c.fits and c.exceeds == ("delta",)
    assert c.remaining == P(4, 0)


def test_zero_delta_cap_admits_pure_releases_only():
    assert check_budget(P(2, 0), NOTHING, P(1, 0)).fits
    assert check_budget(P(2, 0), NOTHING, P(1, "1e-12")).exceeds == ("delta",)


def test_remaining_never_goes_below_zero_and_the_default_ask_is_nothing():
    c = check_budget(P(1, "1e-6"), P(3, "1e-5"))
    assert c.remaining == NOTHING and c.ask == NOTHING
    assert c.exceeds == ("epsilon", "delta")  # already past: even nothing does not fit
    assert check_budget(P(1), P("1/2")).fits


def test_a_delta_sum_of_one_or_more_is_answered_not_raised():
    c = check_budget(P(1, "1/2"), P(0, "1/2"), P("1/2", "1/2"))
    assert not c.fits and c.exceeds == ("delta",)


@pytest.mark.parametrize(
    ("cap", "spent", "ask"),
    [(P(1), P("1/3"), P("1/3")), (P(1, "1e-5"), P("1/2", "1e-6"), P("1/2", "9e-6"))],
)
def test_fits_is_the_composition_rule(cap, spent, ask):
    assert check_budget(cap, spent, ask).fits == ((spent + ask) <= cap)
