"""Exact privacy parameters (dpate_core.privacy): Fractions wherever eps and delta are added, split
or compared; floats only through ``to_float``, rounded in the requested (safe) direction."""

from __future__ import annotations

import math
import sys
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpate_core.privacy import BudgetSplit, PrivacyParams, exact, fraction_str, to_float

# ---------------------------------------------------------------------------------------------
# exact(): every accepted input becomes the Fraction the user typed


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, Fraction(1)),
        ("1/3", Fraction(1, 3)),
        (" 1/3 ", Fraction(1, 3)),
        ("0.1", Fraction(1, 10)),
        ("1e-5", Fraction(1, 100_000)),
        ("5", Fraction(5)),
        (0.1, Fraction(1, 10)),  # the typed decimal, not 0.1000000000000000055511151231257827...
        (1e-5, Fraction(1, 100_000)),
        (0.3, Fraction(3, 10)),
        (1 / 3, Fraction(3333333333333333, 10**16)),  # repr(1/3) is what the user sees
        (Decimal("0.25"), Fraction(1, 4)),
        (Fraction(2, 7), Fraction(2, 7)),
        (np.int64(3), Fraction(3)),  # numpy integers, e.g. read from an array
        (np.float64(0.1), Fraction(1, 10)),
    ],
)
def test_exact_reads_the_typed_number(value, expected):
    got = exact(value)
    assert type(got) is Fraction
    assert got == expected


def test_decimal_strings_add_exactly():
    assert exact("0.1") + exact("0.2") == exact("0.3")
    assert exact(0.1) + exact(0.2) == exact(0.3)  # although 0.1 + 0.2 != 0.3 in floats
    assert 0.1 + 0.2 != 0.3


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("inf", "finite"),
        ("-Infinity", "finite"),
        ("nan", "finite"),
        (math.inf, "finite"),
        (math.nan, "finite"),
        (Decimal("Infinity"), "finite"),
        ("abc", "not a number"),
        ("1/0", "not a number"),
        ("", "not a number"),
    ],
)
def test_exact_rejects_non_numbers_naming_value_and_rule(value, rule):
    with pytest.raises(ValueError, match=rule) as info:
        exact(value, "epsilon")
    message = str(info.value)
    assert message.startswith("epsilon (")
    assert str(value).strip().lower()[:3] in message.lower()


@pytest.mark.parametrize("value", [True, False, [1], None, 1j])
def test_exact_rejects_other_types(value):
    with pytest.raises(TypeError, match=r"epsilon \(") as info:
        exact(value, "epsilon")
    assert repr(value) in str(info.value)


# ---------------------------------------------------------------------------------------------
# PrivacyParams


def test_params_are_fractions_whatever_the_input():
    for p in (
        PrivacyParams.of(1, "1e-5"),
        PrivacyParams.of(0.5, 1e-6),
        PrivacyParams(0.5, 1e-6),  # direct construction converts too
        PrivacyParams.of("1/3"),
    ):
        assert type(p.epsilon) is Fraction and type(p.delta) is Fraction
    assert PrivacyParams(0.5, 1e-6) == PrivacyParams.of("1/2", "1/1000000")
    assert PrivacyParams.of("1/3").delta == 0


def test_composition_adds_exactly():
    total = PrivacyParams.of("0.1", "1e-6") + PrivacyParams.of("0.2", "2e-6")
    assert total == PrivacyParams.of("0.3", "3e-6")
    assert total <= PrivacyParams.of("0.3", "3e-6")  # a cap compared exactly, no float fuzz
    assert not total <= PrivacyParams.of("0.3", "2.999999e-6")
    assert not total <= PrivacyParams.of("0.2999999999999", "3e-6")
    assert type(total.epsilon) is Fraction


def test_scale_is_exact():
    p = PrivacyParams.of(1, "1e-5").scale(Fraction(1, 3))
    assert p == PrivacyParams(Fraction(1, 3), Fraction(1, 300_000))


@pytest.mark.parametrize(
    ("eps", "delta", "pattern"),
    [
        (-1, 0, r"epsilon \(-1\) must not be negative"),
        ("-0.5", 0, r"epsilon \(-1/2\) must not be negative"),
        (1, -1e-5, r"delta \(-1/100000\) must not be negative"),
        (1, 1, r"delta \(1\) must be below 1"),
        (1, "3/2", r"delta \(3/2\) must be below 1"),
        ("x", 0, r"epsilon \('x'\) is not a number"),
        (1, math.nan, r"delta \(nan\) must be finite"),
    ],
)
def test_invalid_params_name_value_and_rule(eps, delta, pattern):
    with pytest.raises(ValueError, match=pattern):
        PrivacyParams.of(eps, delta)


def test_params_are_immutable():
    p = PrivacyParams.of(1)
    with pytest.raises(AttributeError):
        p.epsilon = Fraction(2)  # type: ignore[misc]


def test_as_strings_are_exact_texts():
    assert PrivacyParams.of("1/3", "1e-5").as_strings() == {"epsilon": "1/3", "delta": "1/100000"}
    assert fraction_str(Fraction(1)) == "1"
    assert exact(fraction_str(Fraction(7, 300_001))) == Fraction(7, 300_001)  # round trip


# ---------------------------------------------------------------------------------------------
# BudgetSplit: an even split fits its own budget exactly


@pytest.mark.parametrize("parts", [1, 2, 3, 6, 7, 10, 49])
@pytest.mark.parametrize(("eps", "delta"), [(1, "1e-5"), ("0.3", "1/3"), ("5", 0), (0.1, 1e-9)])
def test_even_split_sums_exactly_to_the_total(parts, eps, delta):
    total = PrivacyParams.of(eps, delta)
    pieces = BudgetSplit.even(parts).apply(total)
    assert len(pieces) == parts
    assert sum((p.epsilon for p in pieces), Fraction(0)) == total.epsilon
    assert sum((p.delta for p in pieces), Fraction(0)) == total.delta
    composed = pieces[0]
    for p in pieces[1:]:
        composed = composed + p
    assert composed == total and composed <= total
    assert all(type(p.epsilon) is Fraction for p in pieces)


def test_third_split_three_times_is_one():
    split = BudgetSplit.even(3)
    assert split.shares == (Fraction(1, 3),) * 3
    assert sum(split.shares) == 1
    pieces = split.apply(PrivacyParams.of(1, "1e-5"))
    assert pieces[0].epsilon + pieces[1].epsilon + pieces[2].epsilon == 1
    assert pieces[0].delta == Fraction(1, 300_000)


def test_split_of_none_is_even_and_given_shares_are_kept():
    assert BudgetSplit.of(None, 3) == BudgetSplit.even(3)
    given_split = BudgetSplit.of(["1/2", "0.25", 0.25], 3)
    assert given_split.shares == (Fraction(1, 2), Fraction(1, 4), Fraction(1, 4))
    assert given_split.as_strings() == ["1/2", "1/4", "1/4"]
    # decimals that a float sum would get wrong are accepted: 0.1 + 0.2 + 0.7 == 1 exactly
    assert BudgetSplit.of([0.1, 0.2, 0.7], 3).shares[1] == Fraction(1, 5)


@pytest.mark.parametrize(
    ("shares", "parts", "pattern"),
    [
        (["1/2", "1/3"], 2, r"add up to 5/6, not 1"),
        (["0.4", "0.4", "0.4"], 3, r"add up to 6/5, not 1"),
        (["1", "0"], 2, r"budget share \(0\) must be positive"),
        (["3/2", "-1/2"], 2, r"budget share \(-1/2\) must be positive"),
        (["1/2", "1/2"], 3, r"3 parts, but the budget split has 2 shares"),
        ([], 1, r"at least one share"),
    ],
)
def test_invalid_splits_name_value_and_rule(shares, parts, pattern):
    with pytest.raises(ValueError, match=pattern):
        BudgetSplit.of(shares, parts)


# ---------------------------------------------------------------------------------------------
# to_float: nearest float on the requested side, checked with Fraction comparisons


def _check_rounding(value: Fraction) -> None:
    up = to_float(value, round_up=True)
    down = to_float(value, round_up=False)
    assert Fraction(up) >= value
    assert Fraction(down) <= value
    # tight: the next float towards the value is on the wrong side (or the value is a float)
    if Fraction(up) != value:
        assert Fraction(math.nextafter(up, -math.inf)) < value
    if Fraction(down) != value:
        assert Fraction(math.nextafter(down, math.inf)) > value
    assert up == down or math.nextafter(down, math.inf) == up


@pytest.mark.parametrize(
    "value",
    [
        Fraction(1, 3),
        Fraction(1, 10),
        Fraction(2, 3),
        Fraction(1, 300_000),
        Fraction(5, 3),
        Fraction(1, 2),  # exactly representable
        Fraction(0),
        Fraction(-1, 3),
        Fraction(1, 10**330),  # below the smallest subnormal
    ],
)
def test_to_float_rounds_in_the_requested_direction(value):
    _check_rounding(value)


def test_to_float_of_one_third_brackets_it():
    third = Fraction(1, 3)
    assert (
        Fraction(to_float(third, round_up=False)) < third < Fraction(to_float(third, round_up=True))
    )


@given(
    st.fractions(min_value=Fraction(-(10**6)), max_value=Fraction(10**6), max_denominator=10**30)
)
def test_to_float_rounds_safely_for_any_fraction(value):
    _check_rounding(value)


def test_to_float_beyond_the_float_range_saturates_safely():
    huge = Fraction(10**400)
    assert to_float(huge, round_up=True) == math.inf
    assert to_float(huge, round_up=False) == sys.float_info.max
    assert to_float(-huge, round_up=True) == -sys.float_info.max
    assert to_float(-huge, round_up=False) == -math.inf
