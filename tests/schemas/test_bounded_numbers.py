"""Every number in a report, a result or a spec is read with bounded size and exponent before any
arithmetic: an out-of-bounds report is one refusal with a reason (a ReportError), never an
OverflowError, a RecursionError or minutes of CPU, and the signature is checked before the
numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpate.schemas.reports import (
    MAX_DEPTH,
    BoundedJSONError,
    ReportError,
    loads_bounded,
    read_report,
)
from dpate.schemas.spec import SpecError, StudySpec
from dpate.signing import generate_key_pair, load_private_key
from dpate_core.privacy import PrivacyParams, exact

from .test_report_trust import SPECS, release
from .test_spec import base


def _raw_edit(report_bytes: bytes, **literals: str) -> bytes:
    """The report with each ``estimate.<field>`` replaced by a JSON literal written as is."""
    d = json.loads(report_bytes)
    for i, field in enumerate(literals):
        d["estimate"][field] = f"@@{i}"
    out = json.dumps(d).encode()
    for i, literal in enumerate(literals.values()):
        out = out.replace(f'"@@{i}"'.encode(), literal.encode())
    return out


BIG = "1" + "0" * 400
BIG_PLUS = "1" + "0" * 398 + "400"  # BIG + 400: the arms add up to n


@pytest.mark.parametrize(
    "literals",
    [
        {"n_treated": BIG, "n_control": "400", "n": BIG_PLUS},
        {"n": BIG},
        {"tau": "1e999"},
        {"variance": "-1e999"},
        {"epsilon": '"1e-999999999"'},
        {"epsilon": '"1e999999999"'},
        {"delta": '"1/' + "7" * 5000 + '"'},
        {"budget_split": '["1e-999999999", "1"]'},
        {"diagnostics": "[" * 10000 + "]" * 10000},
    ],
)
def test_out_of_bounds_numbers_are_one_refusal_with_a_reason(literals):
    spec = SPECS["dim-public-arms"]()
    good = release(spec, "a", np.random.default_rng(3))
    assert good.estimate.n == 400
    with pytest.raises(ReportError) as info:
        read_report(_raw_edit(good.to_json_bytes(), **literals), spec)
    assert info.value.reasons and all(len(r) < 400 for r in info.value.reasons)


def test_an_unsigned_report_is_refused_for_its_signature_before_its_numbers(tmp_path):
    _, pub_a = generate_key_pair("a", tmp_path / "a")
    path_b, pub_b = generate_key_pair("b", tmp_path / "b")
    d = base()
    d["sites"][0]["public_key"], d["sites"][1]["public_key"] = pub_a, pub_b
    spec = StudySpec.from_dict(d)  # signed reports: the default
    report = release(spec, "b", np.random.default_rng(4))
    # numbers no mechanism produces, in an unsigned report: the signature is the one reason
    d = json.loads(report.to_json_bytes())
    d["estimate"].update(tau=1e308, variance=1e-300)
    with pytest.raises(ReportError) as info:
        read_report(json.dumps(d).encode(), spec)
    assert info.value.reasons == [
        "signature: the report is unsigned, but the spec lists a public key for this site"
    ]
    # out-of-bounds numbers are refused by the bounded parse, before anything else
    d["estimate"].update(n_treated=10**300)
    with pytest.raises(ReportError, match="integer has more than"):
        read_report(json.dumps(d).encode(), spec)
    signed = report.signed_with(load_private_key(path_b)).to_json_bytes()
    assert read_report(signed, spec).signature is not None


@pytest.mark.parametrize("text", ["1e-999999999", "1e999999999", "1" * 400, "1/" + "3" * 400])
def test_exact_refuses_unbounded_text_at_once(text):
    with pytest.raises(ValueError, match=r"exponent|characters|digits"):
        exact(text, "epsilon")


def test_exact_keeps_every_ordinary_parameter():
    assert exact("1e-5") == exact("1/100000")
    assert PrivacyParams.of("1/3", "1e-10").epsilon * 3 == 1
    with pytest.raises(ValueError, match="bits"):
        exact(2**2000, "epsilon")


def test_a_spec_budget_of_unbounded_exponent_is_a_spec_error():
    d = base()
    d["sites"][0]["delta"] = "1e-999999999"
    with pytest.raises(SpecError, match="exponent"):
        StudySpec.from_dict(d)


@pytest.mark.parametrize(
    "doc",
    [
        b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
        b'{"seq": 1e999}',
        b'{"seq": NaN}',
        b'{"n": ' + b"9" * 30 + b"}",
        b'{"x": "\xd6"}',
    ],
)
def test_loads_bounded_refuses_with_a_value_error(doc):
    with pytest.raises(BoundedJSONError):
        loads_bounded(doc)


def test_loads_bounded_reads_ordinary_documents():
    doc = {"a": [1, 2.5, -3e-7, {"b": "[[[[ not nesting"}], "c": None, "d": True}
    assert loads_bounded(json.dumps(doc)) == doc
