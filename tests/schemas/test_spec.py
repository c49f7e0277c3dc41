"""The study spec: loading, validation messages, derived public quantities, the canonical hash."""

from __future__ import annotations

import copy
import math
from fractions import Fraction
from pathlib import Path

import pytest

from dpate.schemas.spec import SpecError, StudySpec, load_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


#: the explicit opt-out of signed reports, for unit tests of a report's other checks
UNSIGNED = {"signing": "none", "unsigned_reason": "unit test of the report's other checks"}


def base() -> dict:
    return {
        "study_id": "s1",
        "design": "observational",
        "estimator": "smooth_matching",
        "reports": "file:///tmp/reports",
        "treatment": {"column": "w"},
        "outcome": {"column": "y", "bound": 1.0},
        "covariates": [
            {"kind": "categorical", "column": "sex", "levels": ["f", "m"]},
            {"kind": "numeric", "column": "age", "edges": [0, 40, 65, "inf"]},
        ],
        "sites": [
            {
                "id": "a",
                "data": "a.csv",
                "epsilon": "1",
                "delta": "1e-5",
                "lifetime_cap": {"epsilon": "3", "delta": "1e-4"},
            },
            {
                "id": "b",
                "data": "s3://bucket/b.parquet",
                "epsilon": 0.5,
                "delta": "1/100000",
                "budget_split": ["1/2", "1/4", "1/4"],
                "lifetime_cap": {"epsilon": "1", "delta": "1e-4"},
            },
        ],
    }


def problems(d: dict) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        StudySpec.from_dict(d)
    return info.value.problems


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_shipped_examples_validate(name):
    spec = load_spec(EXAMPLES / name)
    assert len(spec.spec_hash) == 64
    assert spec.sites


def test_derived_public_quantities():
    spec = StudySpec.from_dict(base())
    assert spec.domain_size == 2 * 3
    assert spec.release_parts == 3
    assert spec.budget_split("a").shares == (Fraction(1, 3),) * 3
    assert spec.budget_split("b").shares == (Fraction(1, 2), Fraction(1, 4), Fraction(1, 4))
    assert spec.site("b").epsilon == Fraction(1, 2)
    assert spec.site("b").delta == Fraction(1, 100000)
    assert spec.site("a").data_format == "csv" and spec.site("b").data_format == "parquet"
    assert spec.data_location("a", "/srv") == "/srv/a.csv"
    assert spec.data_location("b", "/srv") == "s3://bucket/b.parquet"
    assert spec.ledger_url("a") is None
    with pytest.raises(KeyError, match="'zz' is not in study"):
        spec.site("zz")


def test_exact_numbers_are_strings_in_json_and_hash_is_canonical():
    spec = StudySpec.from_dict(base())
    d = spec.canonical_dict()
    assert d["sites"][1]["epsilon"] == "1/2"
    assert d["sites"][0]["delta"] == "1/100000"
    assert d["covariates"][1]["edges"][-1] == "inf"
    # same content written differently: same hash
    other = base()
    other["sites"][1]["epsilon"] = "1/2"
    other["sites"][0]["delta"] = 0.00001
    other["aggregator"] = "mvagg"  # the default, written out
    other = dict(reversed(list(other.items())))
    assert StudySpec.from_dict(other).spec_hash == spec.spec_hash
    # round trip through its canonical JSON
    again = StudySpec.model_validate_json(spec.to_json_bytes())
    assert again.spec_hash == spec.spec_hash and again == spec
    # any public change moves the hash
    changed = base()
    changed["sites"][0]["epsilon"] = "1.01"
    assert StudySpec.from_dict(changed).spec_hash != spec.spec_hash
    changed = base()
    changed["outcome"]["bound"] = 2.0
    assert StudySpec.from_dict(changed).spec_hash != spec.spec_hash


def test_load_spec_from_toml(tmp_path):
    text = (EXAMPLES / "synth-observational-3-sites.toml").read_text()
    path = tmp_path / "study.toml"
    path.write_text(text)
    spec = load_spec(path)
    assert spec.data_location("site-a") == str(tmp_path / "site-a" / "records.parquet")
    assert spec.spec_hash == StudySpec.from_toml_text(text).spec_hash


@pytest.mark.parametrize(
    ("mutate", "where", "says"),
    [
        (lambda d: d.update(design="trial"), "design", "'randomized', 'observational'"),
        (lambda d: d.update(estimator="ols"), "estimator", "'dim', 'smooth_matching'"),
        (lambda d: d.update(aggregator="mean"), "aggregator", "'mvagg'"),
        (lambda d: d["outcome"].update(bound=-1), "outcome.bound", "positive and finite"),
        (lambda d: d["outcome"].update(policy="winsorize"), "outcome.policy", "'clip', 'reject'"),
        (lambda d: d.update(missing="impute"), "missing", "'reject', 'drop'"),
        (lambda d: d["sites"][0].update(epsilon="0"), "sites.0", "must be positive"),
        (lambda d: d["sites"][0].update(epsilon="abc"), "sites.0.epsilon", "'1/3'"),
        (lambda d: d["sites"][0].update(delta="1"), "sites.0", "below 1"),
        (lambda d: d["sites"][0].update(epsilon="4"), "sites.0", "exceeds the lifetime cap"),
        (lambda d: d["sites"][0].update(budget_split=["1/2", "1/3"]), "sites.0", "not 1"),
        (
            lambda d: d["sites"][0].update(budget_split=["1/2", "1/2"]),
            "sites.0.budget_split",
            "exactly 3",
        ),
        (lambda d: d["sites"][0].update(delta="0"), "sites.0.delta", "needs delta > 0"),
        (lambda d: d["sites"][0].update(id="a b"), "sites.0.id", "letters, digits"),
        (lambda d: d["sites"][1].update(id="a"), "sites", "must be unique"),
        (lambda d: d["sites"][0].update(colour="red"), "sites.0.colour", "unknown field"),
        (lambda d: d.pop("study_id"), "study_id", "required field is missing"),
        (lambda d: d.update(sites=[]), "sites", "at least 1"),
        (lambda d: d.update(target_width=2.5), "target_width", "at most 2"),
        (lambda d: d.update(target_width=0), "target_width", "greater than 0"),
        (lambda d: d.update(covariates=[]), "covariates", "declare at least one"),
        (lambda d: d.update(design="observational", estimator="dim"), "estimator", "randomized"),
        (lambda d: d["covariates"][1].update(edges=[0, 65, 40]), "covariates.1.edges", "strictly"),
        (lambda d: d["covariates"][1].update(edges=[0, "inf", 9]), "covariates.1.edges", "only"),
        (lambda d: d["covariates"][0].update(levels=["f", "f"]), "covariates.0", "distinct"),
        (lambda d: d["covariates"][0].update(kind="ordinal"), "covariates.0", "'categorical'"),
        (lambda d: d["covariates"][0].update(column="w"), "(columns)", "more than once"),
        (lambda d: d["treatment"].update(treated="yes"), "treatment", "both"),
        (
            lambda d: d["covariates"].extend(
                {"kind": "numeric", "column": f"z{i}", "edges": list(range(10**4))}
                for i in range(3)
            ),
            "covariates",
            "strata",
        ),
    ],
)
def test_invalid_specs_name_the_field_and_what_is_valid(mutate, where, says):
    d = copy.deepcopy(base())
    mutate(d)
    found = problems(d)
    assert any(loc == where and says in msg for loc, msg in found), found


def test_all_problems_at_once_and_readable_message():
    d = base()
    d["estimator"] = "ols"
    d["sites"][0]["epsilon"] = "-1"
    with pytest.raises(SpecError) as info:
        StudySpec.from_dict(d, source="study.toml")
    text = str(info.value)
    assert "invalid study spec in study.toml (2 problem(s))" in text
    assert "estimator: must be one of" in text and "sites.0" in text


def test_bad_toml_and_missing_file(tmp_path):
    with pytest.raises(SpecError, match="not valid TOML"):
        StudySpec.from_toml_text("study_id = ")
    with pytest.raises(SpecError, match="cannot read the spec"):
        load_spec(tmp_path / "nope.toml")


def test_randomized_dim_parts_follow_arm_size_assumption():
    d = base()
    d.update(design="randomized", estimator="dim", covariates=[], arm_sizes_public=True)
    for s in d["sites"]:
        s.pop("budget_split", None)
    spec = StudySpec.from_dict(d)
    assert spec.release_parts == 2 and spec.domain_size == 1
    d["arm_sizes_public"] = (
        False  # the arms' histogram and the squares (a count part until stop 44)
    )
    private = StudySpec.from_dict(d)
    assert private.release_parts == 2
    assert private.estimator_info.part_names(private.options)[0] == "arm outcome histogram"
    d["sites"][0]["budget_split"] = ["1/3", "1/3", "1/3"]
    with pytest.raises(SpecError, match=r"2 parts .* but budget_split has 3 shares"):
        StudySpec.from_dict(d)


def test_categorical_other_level_extends_the_domain():
    d = base()
    d["covariates"][0]["other"] = "unknown"
    assert StudySpec.from_dict(d).domain_size == 3 * 3
    d["covariates"][0]["other"] = "f"  # mapping unknowns onto an existing level
    assert StudySpec.from_dict(d).domain_size == 2 * 3


def test_arm_sizes_public_is_required_for_dim_and_refused_otherwise():
    d = base()
    d.update(design="randomized", estimator="dim", covariates=[])
    for s in d["sites"]:
        s.pop("budget_split", None)
    [(loc, msg)] = problems(d)
    assert loc == "arm_sizes_public" and "say so explicitly" in msg
    d["arm_sizes_public"] = True
    assert StudySpec.from_dict(d).publishes_exact_arm_sizes
    d["arm_sizes_public"] = False
    assert not StudySpec.from_dict(d).publishes_exact_arm_sizes
    obs = base()
    obs["arm_sizes_public"] = True
    [(loc, msg)] = problems(obs)
    assert loc == "arm_sizes_public" and "observational" in msg and "remove" in msg
    obs["arm_sizes_public"] = False  # refused either way: the field does not apply
    assert problems(obs)[0][0] == "arm_sizes_public"
    assert not StudySpec.from_dict(base()).publishes_exact_arm_sizes


def test_outcome_labels_map_to_public_numbers_within_the_bound():
    d = base()
    d["outcome"]["labels"] = {"Yes": 1, "No": 0}
    spec = StudySpec.from_dict(d)
    assert spec.outcome.labels == {"Yes": 1.0, "No": 0.0}
    d["outcome"]["labels"] = {"Yes": 2, "No": 0}
    [(loc, msg)] = problems(d)
    assert loc == "outcome" and "['Yes']" in msg and "outside [offset, offset + bound]" in msg
    for bad in ({}, {"Yes": "1"}, {"Yes": True}):
        d["outcome"]["labels"] = bad
        assert problems(d)[0][0].startswith("outcome.labels")


def _adjusted_spec(**extra) -> dict:
    d = base()
    d.update(estimator="adjusted", **extra)
    d["sites"][1]["budget_split"] = ["9/10", "1/10"]
    return d


def test_adjusted_weighting_selects_the_post_processing_and_is_refused_elsewhere():
    # unset: "auto", and omitted from the canonical form (existing specs keep their hash)
    plain = StudySpec.from_dict(_adjusted_spec())
    assert plain.adjusted_weighting is None and plain.options.weighting == "auto"
    assert "adjusted_weighting" not in plain.canonical_dict()
    assert StudySpec.from_dict(_adjusted_spec(adjusted_weighting="auto")).spec_hash != (
        plain.spec_hash
    )
    for mode in ("subclassification", "fixed_effects"):
        spec = StudySpec.from_dict(_adjusted_spec(adjusted_weighting=mode))
        assert spec.options.weighting == mode
        assert spec.canonical_dict()["adjusted_weighting"] == mode
        assert spec.variant == mode  # an explicit choice is never overridden
    [(loc, _)] = problems(_adjusted_spec(adjusted_weighting="regression"))
    assert loc == "adjusted_weighting"
    other = base()
    other["adjusted_weighting"] = "fixed_effects"
    [(loc, msg)] = problems(other)
    assert loc == "adjusted_weighting" and "remove" in msg and "estimator 'adjusted')" in msg
    assert StudySpec.from_dict(base()).variant is None


def test_adjusted_weighted_sum_releases_fixed_effects_with_four_parts():
    """``weighted_sum = true`` for the adjusted estimator: four budget parts (a declared split
    must have four), fixed effects for the whole study ('auto' picks it), refused beside
    'subclassification' with the rule and what to do, and not applied to a binary outcome (its
    one-part split stays valid)."""
    d = _adjusted_spec(estimator_options={"weighted_sum": True})
    d["sites"][1]["budget_split"] = ["9/20", "1/20", "3/10", "1/5"]
    spec = StudySpec.from_dict(d)
    assert spec.release_parts == 4 and spec.variant == "fixed_effects"
    assert spec.study_options.weighted_sum is True and spec.study_choice.cautions == ()
    for site in d["sites"]:
        site["n"] = 300  # n x epsilon below QUERIES_FROM at a site: a caution
    (caution,) = StudySpec.from_dict(d).study_choice.cautions
    assert "below 1000" in caution and "resolved" in caution
    for site in d["sites"]:
        del site["n"]
    assert spec.budget_split(spec.sites[0].id).shares == tuple(
        map(Fraction, ("5/8", "3/40", "1/5", "1/10"))
    )
    d["sites"][1]["budget_split"] = ["9/10", "1/10"]
    assert any("4" in msg for _, msg in problems(d))
    bad = _adjusted_spec(
        estimator_options={"weighted_sum": True}, adjusted_weighting="subclassification"
    )
    bad["sites"][1]["budget_split"] = ["9/20", "1/20", "3/10", "1/5"]
    assert any(
        loc == "estimator_options" and "weighted_sum" in msg and "'fixed_effects'" in msg
        for loc, msg in problems(bad)
    )
    binary = _adjusted_spec(estimator_options={"weighted_sum": True})
    binary["outcome"]["binary"] = True
    del binary["sites"][1]["budget_split"]
    spec = StudySpec.from_dict(binary)
    assert spec.release_parts == 1 and spec.study_options.weighted_sum is False
    assert "binary" in spec.study_choice.reason


def test_auto_weighted_sum_gives_the_queries_four_parts_unless_a_site_declares_two():
    """The default ``weighted_sum = "auto"``: a fixed-effects study whose sites declare ``n``
    with ``n x epsilon >= 1000`` releases the queries (four parts, their default split), and
    says so in its reason; a site's own two-part split keeps the histogram alone; four declared
    shares need ``true``, and the error names the parts."""
    d = _adjusted_spec(adjusted_weighting="fixed_effects")
    del d["sites"][1]["budget_split"]
    d["sites"][0]["n"], d["sites"][1]["n"] = 3000, 4000
    spec = StudySpec.from_dict(d)
    assert spec.study_options.weighted_sum is True and spec.release_parts == 4
    assert spec.budget_split("b").shares == tuple(map(Fraction, ("5/8", "3/40", "1/5", "1/10")))
    assert "with the fixed-effects queries" in spec.study_choice.reason
    d["sites"][1]["n"] = 1000  # n x epsilon 500, on 6 strata: neither rule
    assert StudySpec.from_dict(d).study_options.weighted_sum is False
    d["sites"][1]["n"] = 4000
    d["sites"][1]["budget_split"] = ["9/10", "1/10"]
    spec = StudySpec.from_dict(d)
    assert spec.study_options.weighted_sum is False and spec.release_parts == 2
    # fixed effects' own default split for the site that declares none (its squares one query)
    assert spec.budget_split("a").shares == (Fraction(19, 20), Fraction(1, 20))
    d["sites"][1]["budget_split"] = ["5/8", "3/40", "1/5", "1/10"]
    [(loc, msg)] = problems(d)
    assert loc == "sites.1.budget_split" and "cell sums of squares" in msg and "2 parts" in msg


def test_auto_weighting_follows_the_public_rule_once_for_the_whole_study():
    from dpate_core.mechanisms.adjusted import AUTO_RATIO

    def variant(n_a: int | None, n_b: int | None) -> str | None:
        d = _adjusted_spec()
        for site, n in zip(d["sites"], (n_a, n_b), strict=True):
            if n is not None:
                site["n"] = n
        return StudySpec.from_dict(d).variant

    # |X| = 6; default split: the histogram at 9/10 eps. Site a: eps 1, a count's noise the two
    # bins' (the scale of equal variance sqrt(2) 2 / (9/10) = sqrt(2) 20/9); alone,
    # subclassification iff N / 12 >= 10 * sqrt(2) 20 / 9. Site b: eps 1/2 with a split of its
    # own (the same histogram share): twice the scale
    edge = 12 * AUTO_RATIO * math.sqrt(2) * 20 / 9  # 377.1...
    big_b = int(2 * edge) + 1
    small, large = math.floor(edge), math.ceil(edge)
    assert variant(large, big_b) == "subclassification"
    assert variant(small, big_b) == "fixed_effects"  # one small site: fixed effects everywhere
    assert variant(large, large) == "fixed_effects"
    assert variant(None, big_b) == "fixed_effects"  # an undeclared n: fixed effects
    # a declared n is optional and leaves the hash of a spec without it unchanged
    assert "n" not in StudySpec.from_dict(_adjusted_spec()).canonical_dict()["sites"][0]
