"""Exact privacy parameters and budget splits.

Privacy parameters are kept as :class:`fractions.Fraction` wherever they are added, split or
compared with a cap (the Tumult discipline): ``1/3 + 1/3 + 1/3 == 1`` holds exactly, and an even
split always fits its own budget. Floats appear only where a sampler or a sensitivity formula needs
one, through :func:`to_float`, rounded in the direction that is safe for privacy (an epsilon used to
scale noise is rounded *down*, so the noise is never smaller than the exact parameter asks for).
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

__all__ = [
    "MAX_EXACT_CHARS",
    "MAX_EXACT_EXPONENT",
    "MAX_EXACT_INT_BITS",
    "BudgetSplit",
    "PrivacyParams",
    "exact",
    "fraction_str",
    "to_float",
]

Number = int | float | str | Fraction | Decimal

#: an exact number given as text has at most this many characters (so a fraction's numerator and
#: denominator at most this many digits; a ledger's lifetime total of many releases stays far below)
MAX_EXACT_CHARS = 300
#: a decimal's exponent (``1e-5``: -5) lies within +-this: ``"1e-999999999"`` would otherwise
#: become a billion-digit integer before any comparison could refuse it
MAX_EXACT_EXPONENT = 400
#: an integer (or a decimal's integer digits) has at most this many bits
MAX_EXACT_INT_BITS = 1024


def _bounded_decimal(value: Decimal, name: str, shown: object) -> Decimal:
    """``value`` if its exponent and digits are within the bounds, else ValueError (checked on
    the Decimal's own fields, before the exact conversion computes ``10**exponent``)."""
    if not value.is_finite():
        # checked before the conversion: Fraction(Decimal('Infinity')) raises OverflowError
        raise ValueError(f"{name} ({shown!r}) must be finite")
    if value and not -MAX_EXACT_EXPONENT <= value.adjusted() <= MAX_EXACT_EXPONENT:
        raise ValueError(
            f"{name}: the exponent of {str(shown)[:40]!r} is beyond +-{MAX_EXACT_EXPONENT}: write "
            f"a number of ordinary size (privacy parameters are between 1e-{MAX_EXACT_EXPONENT} "
            f"and 1e{MAX_EXACT_EXPONENT})"
        )
    if len(value.as_tuple().digits) > MAX_EXACT_CHARS:
        raise ValueError(f"{name} has more than {MAX_EXACT_CHARS} significant digits")
    return value


def exact(value: Number, name: str = "value") -> Fraction:
    """Return ``value`` as an exact :class:`Fraction`.

    Strings may be decimals (``"0.1"``, ``"1e-5"``) or fractions (``"1/3"``). A float is read as the
    shortest decimal that prints the same (``0.1`` -> ``1/10``), i.e. the number the user typed, not
    the binary approximation Python stores.

    >>> exact("1/3") + exact("1/3") + exact("1/3") == 1
    True
    >>> exact(0.1)
    Fraction(1, 10)
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} ({value!r}) must be a number, not a boolean")
    if isinstance(value, Fraction):
        result = value
    elif isinstance(value, numbers.Integral):  # int, and numpy's integers (np.int64(1))
        if int(value).bit_length() > MAX_EXACT_INT_BITS:
            raise ValueError(f"{name} is an integer of more than {MAX_EXACT_INT_BITS} bits")
        result = Fraction(int(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{name} ({value!r}) must be finite")
        result = Fraction(Decimal(repr(float(value))))  # repr(np.float64) is "np.float64(..)"
    elif isinstance(value, Decimal):
        result = Fraction(_bounded_decimal(value, name, value))
    elif isinstance(value, str):
        text = value.strip()
        if len(text) > MAX_EXACT_CHARS:
            raise ValueError(
                f"{name} is written with more than {MAX_EXACT_CHARS} characters: write a decimal "
                f"such as '0.5' or '1e-5', or a fraction such as '1/3'"
            )
        try:
            parsed = None if "/" in text else Decimal(text)
        except InvalidOperation:
            parsed = None
        if parsed is not None:
            _bounded_decimal(parsed, name, value)
        try:
            result = Fraction(text) if parsed is None else Fraction(parsed)
        except (ValueError, ZeroDivisionError) as exc:
            raise ValueError(
                f"{name} ({value!r}) is not a number: write a decimal such as '0.5' or '1e-5', "
                f"or a fraction such as '1/3'"
            ) from exc
    else:
        raise TypeError(f"{name} ({value!r}) must be an int, float, str, Decimal or Fraction")
    return result


def to_float(value: Fraction, *, round_up: bool) -> float:
    """The float nearest ``value`` on the safe side: ``>= value`` if ``round_up`` else ``<= value``."""
    try:
        f = float(value)
    except OverflowError:  # beyond the largest float: the nearest safe float is +-inf or +-max
        big = math.inf if (value > 0) == round_up else sys.float_info.max
        return big if value > 0 else -big
    if round_up and Fraction(f) < value:
        f = math.nextafter(f, math.inf)
    elif not round_up and Fraction(f) > value:
        f = math.nextafter(f, -math.inf)
    return f


def fraction_str(value: Fraction) -> str:
    """Exact text form used in reports and ledgers: ``'1/3'``, ``'1'``, ``'1/100000'``."""
    return str(value)


@dataclass(frozen=True, slots=True)
class PrivacyParams:
    """An (epsilon, delta) pair held exactly. Immutable; arithmetic returns new values."""

    epsilon: Fraction
    delta: Fraction = Fraction(0)

    def __post_init__(self) -> None:
        eps = exact(self.epsilon, "epsilon")
        dlt = exact(self.delta, "delta")
        # checked in this order: negative -> error, then the ranges each parameter may take
        if eps < 0:
            raise ValueError(f"epsilon ({eps}) must not be negative")
        if dlt < 0:
            raise ValueError(f"delta ({dlt}) must not be negative")
        if dlt >= 1:
            raise ValueError(
                f"delta ({dlt}) must be below 1; a delta of 1 or more promises nothing"
            )
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", dlt)

    @classmethod
    def of(cls, epsilon: Number, delta: Number = 0) -> PrivacyParams:
        return cls(exact(epsilon, "epsilon"), exact(delta, "delta"))

    def __add__(self, other: PrivacyParams) -> PrivacyParams:
        """Basic sequential composition."""
        return PrivacyParams(self.epsilon + other.epsilon, self.delta + other.delta)

    def __le__(self, other: PrivacyParams) -> bool:
        return self.epsilon <= other.epsilon and self.delta <= other.delta

    def scale(self, weight: Fraction) -> PrivacyParams:
        return PrivacyParams(self.epsilon * weight, self.delta * weight)

    def as_strings(self) -> dict[str, str]:
        return {"epsilon": fraction_str(self.epsilon), "delta": fraction_str(self.delta)}

    @property
    def epsilon_float(self) -> float:
        """Epsilon as the float that calibrates noise: rounded *down*, so noise is never smaller
        than the exact parameter asks for."""
        return to_float(self.epsilon, round_up=False)

    @property
    def delta_float(self) -> float:
        """Delta as a float, rounded down (a smaller delta asks for more noise)."""
        return to_float(self.delta, round_up=False)

    def laplace_scale(self, sensitivity: Number) -> float:
        """The Laplace scale ``sensitivity / epsilon``, computed exactly and rounded *up*: a
        float ``B / eps`` is rounded to nearest and can land one ulp below the exact ratio.
        ``sensitivity`` is read exactly (a float as its binary value)."""
        sens = Fraction(sensitivity) if isinstance(sensitivity, float) else exact(sensitivity)
        return to_float(sens / self.epsilon, round_up=True)


@dataclass(frozen=True, slots=True)
class BudgetSplit:
    """Shares of one site budget given to the parts of a release, summing to exactly 1.

    The paper splits evenly: ``(1/3, 1/3, 1/3)`` for the ATE, the sampling variance and the private
    smooth sensitivity of SmoothDPMatching.
    """

    shares: tuple[Fraction, ...]

    def __post_init__(self) -> None:
        shares = tuple(exact(s, "budget share") for s in self.shares)
        if not shares:
            raise ValueError("a budget split needs at least one share")
        for s in shares:
            if s <= 0:
                raise ValueError(f"budget share ({s}) must be positive")
        if sum(shares) != 1:
            raise ValueError(
                f"budget shares {[str(s) for s in shares]} add up to {sum(shares)}, not 1: "
                f"give shares that sum to exactly 1, e.g. ['1/3', '1/3', '1/3']"
            )
        object.__setattr__(self, "shares", shares)

    @classmethod
    def even(cls, parts: int) -> BudgetSplit:
        return cls(tuple(Fraction(1, parts) for _ in range(parts)))

    @classmethod
    def of(cls, shares: Sequence[Number] | None, parts: int) -> BudgetSplit:
        """The split given, or the even split into ``parts`` when ``shares`` is None."""
        if shares is None:
            return cls.even(parts)
        split = cls(tuple(exact(s, "budget share") for s in shares))
        if len(split.shares) != parts:
            raise ValueError(
                f"this release has {parts} parts, but the budget split has {len(split.shares)} "
                f"shares: give exactly {parts}"
            )
        return split

    def apply(self, total: PrivacyParams) -> tuple[PrivacyParams, ...]:
        parts = tuple(total.scale(s) for s in self.shares)
        # the parts compose back to the total exactly (Fractions); asserted, not assumed
        assert sum((p.epsilon for p in parts), Fraction(0)) == total.epsilon
        return parts

    def as_strings(self) -> list[str]:
        return [fraction_str(s) for s in self.shares]
