"""The propensity release's study-wide choice of ``K`` and the model's budget share (options
``bands`` and ``model_share``, ``"auto"``): one public rule on the smallest effective size
``n x epsilon`` among the sites (the record count ``n`` the spec declares for a site times the
site's per-release epsilon), made once for the whole study (docs/research/propensity.md, "Bands
and model share by study size").

Why: with ``K = 5`` and a quarter of the budget to the model, the residual confounding within
the bands and the model draw's part of the error, which the reported variance leaves out, come to
dominate once the band cells' noise shrinks: the interval under-covers from a few thousand
records per site at epsilon 1, and from 1,500 when the confounding is strong (the model draw's
error grows with it). The noise's scale is ``1 / (n epsilon)``, so the size where that happens
is one of ``n x epsilon`` (measured at epsilon 1/2, 1 and 2: 2,000 records at epsilon 2
under-cover with the defaults as 4,000 do at epsilon 1). Half the budget to the model (and,
from an effective size of 10,000, ``K = 10`` bands) covers there (measured: ``python
bench/bench_propensity.py --auto --eps E``, with ``--strong`` for the strong confounding). Below
1,500 two fifths to the model (stop 43): with less of it the combination under-covers when the
confounding is strong (the noise share's own error moves the correction and the weights
together; a quarter 0.78-0.92 from 400 to 1,000 records per site with the three-query band
cells, stop 31; a third 0.877-0.927 at 3 x 500 and 3 x 1,000 with their two-end histogram, stop
43), with two fifths it covers (0.943-0.987), and is still 11% narrower where the confounding is
mild than a third was with the three-query cells (docs/research/propensity.md, "Below 1,500:
two fifths to the model"). At epsilon 1 the effective size is ``n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from dpate_core.mechanisms._estimator import StudySite, effective_size

from ._release import BANDS, DEFAULT_SPLIT, LINEARISED_FROM, is_linearised

__all__ = [
    "AUTO_RULE",
    "DEFAULT_MODEL_SHARE",
    "SHARE_MATTERS_BELOW",
    "WEIGHTED_FROM",
    "allowance_notes",
    "below_rule_notes",
    "effective_size",
    "model_share_split",
    "released_model_share",
    "resolved_split",
    "study_bands",
    "study_weighted",
]

#: the model's share of :data:`~._release.DEFAULT_SPLIT`
DEFAULT_MODEL_SHARE = Fraction(DEFAULT_SPLIT[0])
#: ``"auto"``'s rule: ``(smallest site n x epsilon from which it applies, K, model share)``,
#: ascending; the first row also where some site declares no ``n`` (docs/research/propensity.md,
#: "Bands and model share by study size", where each row's coverage is measured)
AUTO_RULE: tuple[tuple[int, int, Fraction], ...] = (
    (0, BANDS, Fraction(2, 5)),
    (1500, 5, Fraction(1, 2)),
    (10_000, 10, Fraction(1, 2)),
)
#: the band cells' two-end histogram (counts and centred sums as one query) and squares share the
#: rest of the budget as 29 : 1 since stop 51, the squares being sums of the used cells' (9 : 1
#: with their vector until then; 21 + 33 : 6 of the three queries until stop 43; a binary
#: outcome's band cells are one query, its histogram, at the whole of the rest)
_CELL_PARTS = (29, 1)
#: with the weighted sum (stop 46): the histogram, the squares and the weighted sum share the rest
#: 9 : 1 : 10 since stop 51, the squares being sums (4 : 1 : 5 until then, measured against
#: 3 : 1 : 6, 5 : 1 : 4 and 4 : 0.5 : 5.5 at 2,000 and 5,000 records per site; 14 : 1 : 15 reads
#: the same as 9 : 1 : 10; docs/research/propensity.md, "The weighted sum", "The band squares as
#: sums")
_WEIGHTED_CELL_PARTS = (9, 1, 10)
#: from this smallest ``n x epsilon`` among a study's sites the weighted sum was measured narrower
#: (continuous outcomes away from the bound's ends, epsilon 1; wider at 1,000 records per site)
WEIGHTED_FROM = 1500


def model_share_split(
    share: Fraction | str, binary: bool = False, weighted: bool = False
) -> tuple[str, ...]:
    """The three-part budget split with ``share`` to the model and the rest to the band cells as
    :data:`~._release.DEFAULT_SPLIT` divides it (29 : 1); ``model_share_split("1/4")`` is
    :data:`~._release.DEFAULT_SPLIT` exactly. ``binary``: the two-part split of a binary
    outcome (the model, then the band cells' histogram at the rest). ``weighted``: the four-part
    split of a release with the weighted sum, the rest shared 9 : 1 : 10 by the histogram, the
    squares and the weighted sum (a binary outcome has none). Raises ``ValueError`` unless ``0 <
    share < 1``."""
    m = Fraction(share)
    if not 0 < m < 1:
        raise ValueError(f"model_share ({share}) must lie strictly between 0 and 1 (e.g. '1/2')")
    if binary:
        return (str(m), str(1 - m))
    cells = _WEIGHTED_CELL_PARTS if weighted else _CELL_PARTS
    total = sum(cells)
    return (str(m), *(str((1 - m) * Fraction(c, total)) for c in cells))


def _number(x: Fraction) -> str:
    """``x`` as a whole number when it is one, else as a decimal to 2 places."""
    return str(int(x)) if x.denominator == 1 else f"{float(x):.2f}"


def _words(bands: int, share: Fraction) -> str:
    return f"K = {bands} bands, model share {share}"


def _rule(size: Fraction | None) -> tuple[int, Fraction]:
    """The row of :data:`AUTO_RULE` for the smallest effective size ``n x epsilon`` (None: the
    first)."""
    rows = [r for r in AUTO_RULE if size is not None and size >= r[0]] or [AUTO_RULE[0]]
    return rows[-1][1], rows[-1][2]


def _rule_words() -> str:
    return "; ".join(f"from n x epsilon = {n}: {_words(k, m)}" for n, k, m in AUTO_RULE[1:])


def study_bands(
    bands: int | str, model_share: str, sites: Sequence[StudySite]
) -> tuple[int, Fraction, str]:
    """``(K, model share, why)`` for every site of a study (public values only): a value the
    spec declares is kept; ``"auto"`` is :data:`AUTO_RULE`'s row for the smallest effective
    size ``n x epsilon`` among the sites (:func:`effective_size`), its first row when some site
    declares no ``n``."""
    auto = [name for name, v in (("bands", bands), ("model_share", model_share)) if v == "auto"]
    if not auto:
        k, m = int(bands), Fraction(model_share)
        return k, m, f"declared in the spec (bands = {k}, model_share = '{m}')"
    smallest = effective_size(sites)
    rule_k, rule_m = _rule(None if smallest is None else smallest[0])
    k = rule_k if bands == "auto" else int(bands)
    m = rule_m if model_share == "auto" else Fraction(model_share)
    given = " and ".join(f"{name} = 'auto'" for name in auto)
    if smallest is None:
        return (
            k,
            m,
            (
                f"{given} and not every site declares its record count n in the spec: "
                f"{_words(k, m)} (the rule's first row; declare n for every site to let "
                f"the study choose from the smallest n x epsilon: {_rule_words()})"
            ),
        )
    size, site = smallest
    caveat = (
        f"; below {AUTO_RULE[1][0]} two fifths to the model because a third under-covers the "
        f"combination when the confounding is strong (measured 0.877-0.927 at a crude "
        f"difference 0.09 above the effect); where it is known to be mild, model_share = '1/4' "
        f"is 14-29% narrower (docs/research/propensity.md, 'Below 1,500: two fifths to the "
        f"model')"
        if model_share == "auto" and size < AUTO_RULE[1][0]
        else ""
    )
    return (
        k,
        m,
        (
            f"{given}: the smallest site n x epsilon is {_number(size)} (n = {site.n} at "
            f"epsilon {site.epsilon}; the public rule: below "
            f"{AUTO_RULE[1][0]}: {_words(AUTO_RULE[0][1], AUTO_RULE[0][2])}; "
            f"{_rule_words()}; "
            f"docs/research/propensity.md, 'Bands and model share by study size'){caveat}"
        ),
    )


def released_model_share(options: Any, chosen: Fraction, sites: Sequence[StudySite]) -> Fraction:
    """The smallest model share the study's sites release with: a site's own ``budget_split``
    gives its first part to the model; a site without one (its split the default of the
    unresolved ``options``, :func:`resolved_split`) releases with the study's ``chosen``
    share."""
    shares = []
    for s in sites:
        default = tuple(Fraction(x) for x in resolved_split(options, len(s.split) == 2))
        own = bool(s.split) and tuple(Fraction(x) for x in s.split) != default
        shares.append(Fraction(s.split[0]) if own else chosen)
    return min(shares, default=chosen)


#: below this smallest ``n x epsilon`` a model share under the rule's was measured to
#: under-cover (stop 45, the release as shipped); from it a quarter with five bands covered
#: (0.93-0.99 per site, continuous outcome, mild and strong confounding, 10,000 per site)
SHARE_MATTERS_BELOW = 10_000


def below_rule_notes(
    bands: int, share: Fraction, sites: Sequence[StudySite], binary: bool = False
) -> list[str]:
    """A caution when the study releases less than :data:`AUTO_RULE` gives its smallest
    effective size ``n x epsilon`` where that was measured to under-cover (stop 45, the release
    as shipped, epsilon 1, 40 data sets x 25 releases per row; docs/research/propensity.md,
    "Declared below the rule"):

    - a model share below the rule's, below :data:`SHARE_MATTERS_BELOW`: more of the model's
      noise is left out of the reported variance (a quarter at 3,000-5,000 records per site
      with mild confounding: 0.88-0.91 per site and combined; below 1,500 with strong
      confounding a quarter 0.79-0.93, a third 0.92-0.97);
    - fewer than :data:`~._release.BANDS` bands: more of the confounding stays within them
      (three at 3,000-5,000 with half to the model: 0.93-0.94);
    - with a ``binary`` outcome, fewer bands than the rule's from its third row (five at 20,000
      per site: as low as 0.89 per site). With a continuous outcome five bands covered there.

    Empty where a site declares no ``n`` (the rule's first row then applies, whatever the
    sizes), or where none of these holds."""
    smallest = effective_size(sites)
    if smallest is None:
        return []
    size = smallest[0]
    k = int(bands)
    rule_k, rule_m = _rule(size)
    why = []
    if share < rule_m and size < SHARE_MATTERS_BELOW:
        why.append(
            "a smaller model share leaves more of the model's noise out of the reported "
            "variance (a quarter at 3,000-5,000 records per site with mild confounding covered "
            "0.88-0.91; below 1,500 with strong confounding a quarter 0.79-0.93, a third "
            "0.92-0.97)"
        )
    if k < BANDS:
        why.append(
            "fewer than five bands leave more of the confounding within them (three at "
            "3,000-5,000 records per site covered 0.93-0.94)"
        )
    elif binary and k < rule_k:
        why.append(
            f"with a binary outcome {k} bands leave more of the confounding within them than "
            f"its interval allows for at this size (five at 20,000 records per site covered as "
            f"low as 0.89)"
        )
    if not why:
        return []
    return [
        f"the study releases {_words(k, share)}, below the public rule's {_words(rule_k, rule_m)} "
        f"for its smallest site n x epsilon of {_number(size)}: "
        + "; ".join(why)
        + " (coverage of 95% intervals in simulation, epsilon 1; docs/research/propensity.md, "
        "'Bands and model share by study size'); bands = 'auto' and model_share = 'auto' "
        "release the rule's"
    ]


def resolved_split(options: Any, binary: bool = False) -> tuple[str, ...]:
    """The default split of these options: ``model_share``'s (``"auto"`` unresolved, a plan made
    outside a study: :data:`AUTO_RULE`'s first row's); two parts for a binary outcome, four with
    the weighted sum (``weighted_sum`` true)."""
    share = getattr(options, "model_share", "auto")
    weighted = bool(getattr(options, "weighted_sum", False))
    return model_share_split(AUTO_RULE[0][2] if share == "auto" else share, binary, weighted)


def study_weighted(
    options: Any, sites: Sequence[StudySite], binary: bool
) -> tuple[bool, str, list[str]]:
    """``(weighted sum, why, cautions)`` for every site of a study: the spec's ``weighted_sum``
    (a binary outcome's band cells are one histogram query: it has none), with a caution where
    the smallest ``n x epsilon`` among the sites is below :data:`WEIGHTED_FROM` (wider there:
    measured)."""
    if not getattr(options, "weighted_sum", False):
        return False, "", []
    if binary:
        return (
            False,
            (
                "weighted_sum = true does not apply to a binary outcome (its band cells are one "
                "histogram query, whose sums carry no more noise than its counts)"
            ),
            [],
        )
    why = (
        "weighted_sum = true: the corrected estimate's outcome part is also released as one "
        "weighted-sum query (docs/research/propensity.md, 'The weighted sum')"
    )
    smallest = effective_size(sites)
    if smallest is not None and smallest[0] < WEIGHTED_FROM:
        return (
            True,
            why,
            [
                f"weighted_sum = true at a smallest site n x epsilon of {_number(smallest[0])}, below "
                f"{WEIGHTED_FROM}: the weighted sum takes budget from the band cells' counts, and at "
                f"1,000 records per site (epsilon 1) the interval was measured 6% wider than "
                f"without it, where dpate plan predicts it narrower (docs/research/propensity.md, "
                f"'The weighted sum')"
            ],
        )
    return True, why, []


def allowance_notes(sites: Sequence[Any]) -> list[str]:
    """``dpate plan``'s and ``dpate check``'s note on the sites (``site_id``, ``n``, ``epsilon``
    and ``split``, the model's share first: the predicted sites) whose release keeps the
    attenuation correction's factor ``(1 + k)^2`` on its variance whatever its noise share:
    ``N x epsilon_model`` below :data:`~._release.LINEARISED_FROM` (public,
    :func:`~._release.is_linearised`). There the factor's excess over the corrected estimate's
    own delta method is an allowance for the confounding the bands leave uncorrected at that
    size, which the release cannot see (docs/research/propensity.md, "The corrected estimate's
    own delta method"); where there is none to remove the interval is conservative, and the
    note says so, so that an interval wider than its error is read as what it is."""
    small = [
        str(s.site_id)
        for s in sites
        if s.split and not is_linearised(int(s.n), Fraction(s.epsilon) * Fraction(s.split[0]))
    ]
    if not small:
        return []
    return [
        f"the intervals at {', '.join(small)} (N x epsilon_model below {LINEARISED_FROM}) keep "
        "the attenuation correction's factor (1 + k)^2 on their variance, an allowance for "
        "confounding the bands leave uncorrected at that size, which the release cannot see: "
        "under strong confounding it is what makes them cover; on sites of 240-370 records with "
        "none to remove (IHDP's and Lalonde's) the reported variance was 2.8-3.3 times the "
        "realised squared error and the intervals covered 0.97-1.00, so there an interval is "
        "conservative (docs/research/propensity.md, 'The corrected estimate's own delta method')"
    ]
