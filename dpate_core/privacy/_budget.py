"""The budget rule of a site's lifetime cap: what remains, and whether a release fits.

Basic sequential composition (the paper's Section 3.1 composes a release's parts the same way,
``eps_1 + eps_2``): a site that has spent ``(eps_s, delta_s)`` of its lifetime cap
``(eps_c, delta_c)`` may make a release costing ``(eps_r, delta_r)`` exactly when
``eps_s + eps_r <= eps_c`` and ``delta_s + delta_r <= delta_c``.
Both comparisons are exact (:class:`fractions.Fraction`), so ``1/3 + 1/3 + 1/3`` fits a cap of
``1`` and a release that lands exactly on the cap is allowed.

The privacy ledger (``dpate.ledger``: reservations and audits) and ``dpate check`` ask this one
function, so what the check predicts is what the ledger does. The rule is pure: no I/O, nothing
is debited here (the ledger records the debit).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dpate_core.privacy._params import PrivacyParams

__all__ = ["NOTHING", "BudgetCheck", "check_budget"]

#: no spend: ``(0, 0)``
NOTHING = PrivacyParams(Fraction(0), Fraction(0))


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    """The answer of :func:`check_budget` for one requested release.

    ``remaining`` is what the cap leaves after ``spent``, per parameter and never below zero (a cap
    lowered below the spend leaves nothing). ``fits`` is True when ``spent + ask`` stays within
    the cap in both epsilon and delta; ``exceeds`` names the parameters that would pass it.
    """

    cap: PrivacyParams
    spent: PrivacyParams
    ask: PrivacyParams
    remaining: PrivacyParams
    exceeds: tuple[str, ...]

    @property
    def fits(self) -> bool:
        return not self.exceeds


def check_budget(
    cap: PrivacyParams, spent: PrivacyParams, ask: PrivacyParams = NOTHING
) -> BudgetCheck:
    """The remaining budget under ``cap`` after ``spent``, and whether ``ask`` still fits.

    A release fits when ``spent + ask <= cap`` in epsilon and in delta, compared exactly. The
    sums are compared as numbers, never built as a :class:`PrivacyParams`, so a spend past the
    cap or a delta sum of 1 or more is answered (it does not fit) rather than raised.

    >>> from dpate_core.privacy._params import PrivacyParams as P
    >>> c = check_budget(P.of(1, "1e-5"), P.of("2/3", "1e-5"), P.of("1/3"))
    >>> c.fits, str(c.remaining.epsilon), str(c.remaining.delta)
    (True, '1/3', '0')
    >>> check_budget(P.of(1), P.of("2/3"), P.of("1/3", "1e-9")).exceeds
    ('delta',)
    >>> check_budget(P.of(1), P.of(2)).remaining == P.of(0)  # a cap lowered below the spend
    True
    """
    exceeds = tuple(
        name
        for name, s, a, c in (
            ("epsilon", spent.epsilon, ask.epsilon, cap.epsilon),
            ("delta", spent.delta, ask.delta, cap.delta),
        )
        if s + a > c
    )
    remaining = PrivacyParams(
        max(cap.epsilon - spent.epsilon, Fraction(0)),
        max(cap.delta - spent.delta, Fraction(0)),
    )
    return BudgetCheck(cap, spent, ask, remaining, exceeds)
