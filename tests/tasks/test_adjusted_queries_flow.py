"""An adjusted study with the fixed-effects queries (``weighted_sum = true``): every site
releases both stages from its engine's statistics (the cells' histogram, then the two queries
and the squares' one, their coefficients from the committed histogram), the ledger's record
carries the four-part split and is returned on a re-run (nothing drawn, nothing spent), and the server
combines the reports into one fixed-effects answer."""

from __future__ import annotations

from dpate.settings import resolve_site

from .helpers import release_every_site_and_combine, with_estimator_options


def test_an_adjusted_study_with_the_queries_releases_once_and_the_server_combines_it(study):
    spec = with_estimator_options(study, "adjusted", "weighted_sum = true")
    assert resolve_site(spec, "north").spec.variant == "fixed_effects"
    typed = release_every_site_and_combine(
        study, spec, ("north", "south", "east"),
        ["histogram", "fe_numerator", "fe_denominator", "fe_squares"], 4,
    )  # fmt: skip
    assert typed.status == "answered" and typed.estimate is not None
    statuses = {s.status for s in typed.sites}  # MVAgg may leave a resolved site out
    assert "used" in statuses and statuses <= {"used", "excluded"}


def test_the_default_releases_the_queries_where_its_public_rule_says(study):
    """No ``weighted_sum`` in the spec (``"auto"``): a fixed-effects study whose sites declare
    ``n x epsilon >= 1000`` releases the queries through the same tasks (four noise sites, the
    squares' query among them, and a four-part ledger record), and the study's reason says why."""
    spec = with_estimator_options(study, "adjusted", "")
    text = study.spec.read_text().replace(
        'estimator = "adjusted"', 'estimator = "adjusted"\nadjusted_weighting = "fixed_effects"'
    )
    study.spec.write_text(text.replace('epsilon = "1"\n', 'epsilon = "1"\nn = 1000\n'))
    chosen = resolve_site(spec, "north").spec
    assert chosen.study_options.weighted_sum is True
    assert "with the fixed-effects queries" in chosen.study_choice.reason
    typed = release_every_site_and_combine(
        study, spec, ("north", "south", "east"),
        ["histogram", "fe_numerator", "fe_denominator", "fe_squares"], 4,
    )  # fmt: skip
    assert typed.status == "answered" and typed.estimate is not None
