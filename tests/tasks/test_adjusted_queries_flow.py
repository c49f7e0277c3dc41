"""An adjusted study with the fixed-effects queries (``weighted_sum = true``): every site
releases both stages from its engine's statistics (the cells' histogram and squares, then the
two queries, their coefficients from the committed histogram), the ledger's record carries the
four-part split and is returned on a re-run (nothing drawn, nothing spent), and the server
combines the reports into one fixed-effects answer."""

from __future__ import annotations

from dpate.settings import resolve_site

from .helpers import release_every_site_and_combine, with_estimator_options


def test_an_adjusted_study_with_the_queries_releases_once_and_the_server_combines_it(study):
    spec = with_estimator_options(study, "adjusted", "weighted_sum = true")
    assert resolve_site(spec, "north").spec.variant == "fixed_effects"
    typed = release_every_site_and_combine(
        study, spec, ("north", "south", "east"),
        ["histogram", "squares", "fe_numerator", "fe_denominator"], 4,
    )  # fmt: skip
    assert typed.status == "answered" and typed.estimate is not None
    statuses = {s.status for s in typed.sites}  # MVAgg may leave a resolved site out
    assert "used" in statuses and statuses <= {"used", "excluded"}
