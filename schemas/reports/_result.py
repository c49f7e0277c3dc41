"""The study result document (schema ``dpate.study-result``) as one typed object, and its views.

:class:`StudyResult` parses the document the aggregator publishes (``dpate.tasks.aggregate``) and is
the one thing every view is built from: the CLI's table (:func:`dpate.cli.output.sites_table`),
the Prefect artifact's markdown (:meth:`StudyResult.markdown`), and the HTML page with its forest plot
(``dpate.html_report.render_html`` / ``forest_plot_png``, which also read the site ledgers' spend).
Parsing does not change the document: ``to_document()`` gives back the same JSON values
(``tests/schemas/test_result.py``), so a view never sees anything the published bytes do not say.

Version 2 carries, for the combined estimate and for each site, the normal interval (``ci95``) and
the parametric-bootstrap interval (``interval``: ``lo``, ``hi``, ``level``, ``method``,
``uninformative``, ``note``), both clipped to the outcome's feasible range ``[-B, B]``
(:mod:`dpate_core.inference`). Version 3 adds the result's ``status`` ("answered", or
"no_answer" when no site could be combined, e.g. none resolved its estimate) and its ``reason``;
a "no_answer" result has ``estimate``, ``variance``, ``ci95`` and ``interval`` null. A site whose
release is not resolved has ``resolved`` false, null ``tau``, ``variance`` and intervals, and is
"excluded" as "unresolved at this budget". An interval's ``rules`` name the uninformative rules
that fired, and its ``note`` says them in words. Version 1 and 2 documents are still read. Fields this
software does not know are ignored when reading (a view of a newer document still renders), so an
optional field is added without a new version: a released site's ``ledger_head``, ``signed`` and
``lifetime_spend`` (its ledger's lifetime ``spent`` and ``cap`` after this release, exact strings,
copied from its report; the views show them as "spent of cap"); the study's ``estimator`` and
``estimand`` (what every site's estimate and the combination estimate, in words a clinician reads:
one for the whole study, ``StudySpec.estimand``), which every view prints; a released site's
``balance`` (its DP covariate-balance table, copied from its report), which the HTML report shows
beside the forest plot (:meth:`StudyResult.balance_rows`); the study's ``cautions`` (what its
design, read from the spec before any release, says about when the estimate or its interval may
not hold: ``dpate.study_check.design_cautions``), which every view prints; and its ``notes``
(how to read its intervals, from the same prediction: ``dpate.study_check.result_words``, e.g.
the propensity sites whose interval carries an allowance that is conservative where there is
nothing to correct), which every view prints after the cautions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dpate_core.balance import smd_noise_sd

__all__ = [
    "MAX_RESULT_BYTES",
    "NO_ANSWER",
    "NO_INTERVAL",
    "RESULT_SCHEMA",
    "AbsentSite",
    "ReleasedSite",
    "ResultBudget",
    "ResultInterval",
    "ResultSpend",
    "SiteResult",
    "StudyResult",
    "interval_ends",
    "interval_text",
    "spend_text",
]

RESULT_SCHEMA: Literal["dpate.study-result"] = "dpate.study-result"

#: A result document larger than this is not read (it lists one entry of a few hundred bytes per
#: site); its numbers and nesting are bounded too (:mod:`dpate.schemas.reports._bounded_json`)
MAX_RESULT_BYTES = 8 * 1024 * 1024

#: how the views show the interval of an estimate that does not exist (no answer, unresolved)
NO_INTERVAL = "none"
#: what a result with no site to combine says (``status`` "no_answer"; its ``reason`` begins so)
NO_ANSWER = "no answer at this budget"


def _interval_text(lo: float, hi: float, note: str | None, digits: int) -> str:
    text = f"{lo:.{digits}g} to {hi:.{digits}g}"
    return f"{text} ({note})" if note else text


def interval_ends(doc: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(lo, hi)`` of a result's or a site's 95% interval: the bootstrap one when present;
    None when there is none (no answer, or an unresolved site)."""
    iv = doc.get("interval")
    if iv is None:
        if doc.get("ci95") is None:
            return None
        lo, hi = doc["ci95"]
        return float(lo), float(hi)
    return float(iv["lo"]), float(iv["hi"])


def interval_text(doc: Mapping[str, Any], digits: int = 4) -> str:
    """``lo to hi`` of the 95% interval, followed by its note when it is uninformative at this
    budget, or "none" when there is no interval (for a plain dict; a :class:`StudyResult` and its
    sites have the same as a method).

    >>> interval_text({"ci95": [0.1, 0.3]})
    '0.1 to 0.3'
    >>> interval_text({"interval": {"lo": -1.0, "hi": 1.0, "uninformative": True,
    ...                             "note": "uninformative at this budget"}})
    '-1 to 1 (uninformative at this budget)'
    >>> interval_text({"ci95": None, "interval": None})
    'none'
    """
    ends = interval_ends(doc)
    if ends is None:
        return NO_INTERVAL
    iv = doc.get("interval") or {}
    return _interval_text(*ends, iv["note"] if iv.get("uninformative") else None, digits)


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class ResultInterval(_Document):
    """A published bootstrap interval (``dpate_core.inference.Interval.as_dict()``)."""

    estimate: float
    lo: float
    hi: float
    level: float
    method: str
    uninformative: bool
    note: str
    rules: list[str] | None = None  # version 3

    @property
    def noise_dominated(self) -> bool:
        """The noise rule fired (version 3): the interval mostly reflects the privacy noise."""
        return "noise" in (self.rules or ())

    def why(self) -> str:
        """Why the interval is flagged, in words: its note after "uninformative at this budget: "
        or "mostly privacy noise: " (version 3), else the one rule a version-2 document
        applied."""
        _, sep, why = self.note.partition(": ")
        if sep:
            return why
        return "the interval was at least twice the outcome's range wide, or wholly beyond it"


class _WithInterval(_Document):
    ci95: tuple[float, float] | None
    interval: ResultInterval | None = None

    def interval_ends(self) -> tuple[float, float] | None:
        """``(lo, hi)`` of the 95% interval: the bootstrap one when present, else ``ci95``;
        None when there is none (no answer, an unresolved site)."""
        if self.interval is None:
            return self.ci95
        return self.interval.lo, self.interval.hi

    def interval_text(self, digits: int = 4, brief: bool = False) -> str:
        """``lo to hi``, with the interval's note when a rule flagged it ("uninformative at this
        budget" or "mostly privacy noise", only those words when ``brief``; the rule is then said
        elsewhere), or "none"."""
        ends = self.interval_ends()
        if ends is None:
            return NO_INTERVAL
        iv = self.interval
        note = iv.note if iv is not None and iv.note else None
        if note and brief:
            note = note.partition(": ")[0]
        return _interval_text(*ends, note, digits)


class _LedgerHead(_Document):
    seq: int
    row_hash: str


class ResultBudget(_Document):
    """An exact ``(epsilon, delta)`` as written (``"1/3"``)."""

    epsilon: str
    delta: str


class ResultSpend(_Document):
    """A site ledger's lifetime spend and cap right after its release (its report's
    ``lifetime_spend``: public amounts)."""

    spent: ResultBudget
    cap: ResultBudget


def smd_noise_floor(
    row: Mapping[str, Any],
    levels: int,
    scale: float,
    n: int,
    values: Sequence[float] | None = None,
) -> float | None:
    """The least noise sd of a published balance row's SMD before
    (:func:`dpate_core.balance.smd_noise_sd`: the delta method at the row's noisy arm means,
    minimised over the unknown arm split; post-processing of public values: the table's
    discrete Laplace ``scale``, the site's ``N``, the row). A level's row is its indicator
    among ``levels`` with the pooled variance of its shares, ``(p_t (1 - p_t) + p_c (1 -
    p_c)) / 2``; a numeric covariate's one row reads its level ``values`` (its bins' midpoints,
    public in the spec, :attr:`~dpate.schemas.spec.StudySpec.balance_values`) and the pooled
    sd its SMD divides by, ``(m_t - m_c) / SMD`` (the published numbers' own). The within-bands
    SMD compares smaller cells and is noisier. None for a numeric row without ``values``, or
    when undefined (a numeric row's SMD null or 0).

    >>> row = {"level": "a", "mean_treated": 0.5, "mean_control": 0.5}
    >>> round(smd_noise_floor(row, 2, 10.0, 1000), 3)
    0.057
    >>> age = {"level": None, "mean_treated": 52.0, "mean_control": 50.0, "smd_before": 0.1}
    >>> round(smd_noise_floor(age, 4, 10.0, 1000, (25.0, 45.0, 65.0, 85.0)), 3)
    0.091
    """
    m_t, m_c = row.get("mean_treated"), row.get("mean_control")
    if m_t is None or m_c is None:
        return None
    if row.get("level") is not None:  # a level's indicator: 1 at it, 0 at the others
        x: Sequence[float] = (1.0,) + (0.0,) * (levels - 1)
        pooled = (m_t * (1.0 - m_t) + m_c * (1.0 - m_c)) / 2.0
    else:
        smd = row.get("smd_before")
        if not values or not smd:
            return None
        x, pooled = values, ((m_t - m_c) / smd) ** 2
    return smd_noise_sd(x, m_t, m_c, pooled, scale, n)


def table_noise_floors(
    table: Mapping[str, Any], n: int, values: Mapping[str, Sequence[float]] | None = None
) -> list[float | None]:
    """:func:`smd_noise_floor` of every row of a published balance table at the site's ``n``
    (each level row among its covariate's rows; a numeric covariate's row with its level
    ``values``, by covariate, where given), in the table's order."""
    rows = table.get("rows", [])
    levels = Counter(str(r["covariate"]) for r in rows)
    scale = float(table.get("noise_scale") or 0.0)
    given = values or {}
    return [
        smd_noise_floor(r, levels[str(r["covariate"])], scale, n, given.get(str(r["covariate"])))
        for r in rows
    ]


def _smd_text(row: Mapping[str, Any], released: bool = False, floor: float | None = None) -> str:
    """A balance row's "before / within" standardized mean differences (2 decimals); a table
    whose within column is released shows "n/a" where a row's is undefined; ``floor``: the
    least noise sd of the SMD before (:func:`smd_noise_floor`), shown after them."""

    def one(v: Any) -> str:
        return "n/a" if v is None else f"{float(v):+.2f}"

    within = row.get("smd_within")
    shown = within is not None or released
    noise = "" if floor is None else f" (noise sd >= {floor:.2f})"
    return one(row.get("smd_before")) + (f" / {one(within)}" if shown else "") + noise


def spend_text(spent: Any, cap: Any) -> str:
    """``"<spent epsilon> of <cap epsilon> (delta <spent> of <cap>)"``: how every view shows a
    site's lifetime spend against its cap (anything with ``epsilon`` and ``delta``).

    >>> spend_text(ResultBudget(epsilon="2", delta="0"), ResultBudget(epsilon="10", delta="1/10000"))
    '2 of 10 (delta 0 of 1/10000)'
    """
    return f"{spent.epsilon} of {cap.epsilon} (delta {spent.delta} of {cap.delta})"


class ReleasedSite(_WithInterval):
    """A site whose valid report was read: used, not used, or excluded by the aggregator."""

    site_id: str
    release_id: str | None = None  # absent from some version-1 documents
    status: Literal["used", "not_used", "excluded"]
    reason: str
    tau: float | None  # None: not resolved (version 3)
    variance: float | None
    resolved: bool = True
    n: int
    epsilon: str
    delta: str
    weight: float
    signed: bool | None = None
    ledger_head: _LedgerHead | None = None
    lifetime_spend: ResultSpend | None = None
    #: the site's DP covariate-balance table as its report published it (``[balance]``)
    balance: dict[str, Any] | None = None

    def spend_text(self) -> str:
        """The lifetime spend of cap after this release (:func:`spend_text`), or "" when the
        site's report did not carry it (version-1 reports). With a balance table, which is its
        own release reserved after the estimate's and so not in that total, it says so and
        names the table's epsilon."""
        s = self.lifetime_spend
        if s is None:
            return ""
        text = spend_text(s.spent, s.cap)
        eps = (self.balance or {}).get("epsilon")
        return text if eps is None else f"{text}, before this round's balance table (epsilon {eps})"

    def tau_text(self, digits: int = 4, fixed: bool = True) -> str:
        """The site's estimate (``.4f``, or ``.4g`` when not ``fixed``), or "unresolved"."""
        if self.tau is None:
            return "unresolved"
        return f"{self.tau:.{digits}{'f' if fixed else 'g'}}"


class AbsentSite(_Document):
    """A site of the spec with no usable report: missing or rejected, and why."""

    site_id: str
    release_id: str | None = None
    status: Literal["missing", "rejected"]
    reason: str


SiteResult = Annotated[ReleasedSite | AbsentSite, Field(discriminator="status")]


class StudyResult(_WithInterval):
    """One published study result: the combined estimate and every site of the spec."""

    schema_: Literal["dpate.study-result"] = Field(default=RESULT_SCHEMA, alias="schema")
    schema_version: Literal[1, 2, 3] = 2
    study_id: str
    spec_hash: str
    round: str
    aggregator: str
    #: the study's estimator and what it estimates at every site, in words (optional fields)
    estimator: str | None = None
    estimand: str | None = None
    complete: bool
    status: Literal["answered", "no_answer"] = "answered"
    reason: str | None = None
    estimate: float | None
    variance: float | None
    uninformative: bool = False
    #: the full width of the combined 95% interval the study needs (the spec's ``target_width``)
    target_width: float | None = None
    #: what the study's design says, before any release, about when its estimate or interval
    #: may not hold (``dpate.study_check.design_cautions``; an optional field: none when absent)
    cautions: list[str] = Field(default_factory=list)
    #: how to read its intervals, from the design before any release (e.g. a propensity site
    #: whose interval carries an allowance that is conservative where there is nothing to
    #: correct: ``dpate.study_check.result_words``; an optional field: none when absent)
    notes: list[str] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict)
    sites: list[SiteResult]
    software_version: str

    @classmethod
    def of(cls, doc: StudyResult | Mapping[str, Any]) -> StudyResult:
        """``doc`` as a :class:`StudyResult` (a parsed document is returned as it is)."""
        return doc if isinstance(doc, StudyResult) else cls.model_validate(doc)

    def to_document(self) -> dict[str, Any]:
        """The JSON values this object was read from (fields it was not given stay out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    @property
    def released(self) -> list[ReleasedSite]:
        """The sites whose report was read, in the spec's order."""
        return [s for s in self.sites if isinstance(s, ReleasedSite)]

    @property
    def used(self) -> list[str]:
        """The ids of the sites the aggregator combined."""
        return [s.site_id for s in self.sites if s.status == "used"]

    @property
    def answered(self) -> bool:
        """False when no site could be combined: no estimate (``status`` "no_answer")."""
        return self.status == "answered" and self.estimate is not None

    def no_answer_why(self) -> str:
        """Why there is no answer: the ``reason`` after its leading "no answer at this budget"."""
        return (self.reason or "").removeprefix(NO_ANSWER).removeprefix(": ")

    def balance_rows(
        self, values: Mapping[str, Sequence[float]] | None = None
    ) -> tuple[list[str], list[tuple[str, str, list[str]]]]:
        """The sites' balance tables side by side: the ids of the sites that published one,
        and per covariate (and level) row ``(covariate, level, cells)``, one cell per such site,
        "SMD before / within" with the SMD's least noise sd (:func:`table_noise_floors`; a
        numeric covariate's given its level ``values``, the spec's
        :attr:`~dpate.schemas.spec.StudySpec.balance_values`), "" where a site's table has no
        such row; empty without tables."""
        sites = [s for s in self.released if s.balance]
        keys: dict[tuple[str, str], dict[str, str]] = {}
        for s in sites:
            table = s.balance or {}
            released = table.get("within") == "released"
            rows = table.get("rows", [])
            for r, floor in zip(rows, table_noise_floors(table, s.n, values), strict=True):
                key = (str(r["covariate"]), "" if r.get("level") is None else str(r["level"]))
                keys.setdefault(key, {})[s.site_id] = _smd_text(r, released, floor)
        rows = [
            (c, lev, [cells.get(s.site_id, "") for s in sites]) for (c, lev), cells in keys.items()
        ]
        return [s.site_id for s in sites], rows

    def balance_within_text(self) -> str:
        """What the balance tables' "within" column compares, in words: within the propensity
        bands of each site's released model when a site's table releases it (the number of
        bands), else within strata (0 by construction when the strata are every covariate's
        cells)."""
        banded = sorted(
            {int(s.balance["bands"]) for s in self.released if s.balance and s.balance.get("bands")}
        )
        if not banded:
            return (
                "before / within strata (|SMD|\nbelow 0.1 is the usual mark of balance; within "
                "strata of every covariate it is 0 by\nconstruction)"
            )
        k = " or ".join(str(b) for b in banded)
        return (
            f"before / within propensity bands (|SMD| below 0.1 is the usual mark of balance; "
            f"within: the arms compared inside each of the {k} bands of the site's released "
            f"propensity model, the bands its estimate used, averaged over the bands with both "
            f"arms by their share of patients)"
        )

    def estimand_text(self) -> str:
        """ "Estimand: <words>" for the views ("" when the document does not carry it)."""
        return f"Estimand: {self.estimand}" if self.estimand else ""

    def summary_text(self, digits: int = 4, bold: str = "") -> str:
        """One line: "<aggregator> estimate E (variance V; 95% CI ...)", followed by why the
        interval is uninformative when it is, or "No answer at this budget: <reason>"; ``bold``
        (e.g. "**") marks the estimate."""
        if not self.answered or self.estimate is None or self.variance is None:
            why = self.no_answer_why()
            return f"{bold}No answer at this budget{bold}" + (f": {why}" if why else "")
        text = (
            f"{bold}{self.aggregator} estimate {self.estimate:.{digits}g}{bold} (variance "
            f"{self.variance:.4g}; 95% CI {self.interval_text(digits, brief=True)})"
        )
        if self.uninformative:
            return f"{text}. Uninformative: {self.uninformative_why()}"
        if self.noise_dominated:
            text = f"{text}. Mostly privacy noise: {self.noise_why()}"
        if self.misses_target:
            text = f"{text}. Wider than the study's target: {self.target_why()}"
        return text

    @property
    def misses_target(self) -> bool:
        """An answered result whose combined 95% interval is wider than the spec's
        ``target_width``: not as precise as the decision it was planned for needs."""
        width = self._answered_width()
        return self.target_width is not None and width is not None and width > self.target_width

    def _answered_width(self) -> float | None:
        """The combined 95% interval's width when the result has an answer, else None."""
        ends = self.interval_ends() if self.answered else None
        return None if ends is None else ends[1] - ends[0]

    def target_why(self) -> str:
        """How far the combined interval misses the target width, in words ("" when it does
        not)."""
        width = self._answered_width()
        if not self.misses_target or width is None or self.target_width is None:
            return ""
        return (
            f"the 95% interval is {width:.4g} wide, {width / self.target_width:.2g} times the "
            f"{self.target_width:g} the study was planned to reach: not precise enough for that "
            f"decision"
        )

    @property
    def noise_dominated(self) -> bool:
        """The combined interval mostly reflects the privacy noise (its noise rule fired) without
        being uninformative."""
        return (
            not self.uninformative and self.interval is not None and self.interval.noise_dominated
        )

    def noise_why(self) -> str:
        """Why the combined interval is mostly privacy noise, in words ("" when it is not)."""
        return self.interval.why() if self.noise_dominated and self.interval is not None else ""

    def uninformative_why(self) -> str:
        """Why the combined interval is uninformative, in words ("" when it is not)."""
        if not self.uninformative:
            return ""
        if self.interval is None:  # a version-1 result
            return "the combined interval is wider than the outcome's whole range"
        return self.interval.why()

    # --- views --------------------------------------------------------------------------------

    def markdown(self) -> str:
        """The Prefect artifact's text: the estimate (or "no answer" and why), then one table row
        per site."""
        lines = [
            f"# Study {self.study_id}, round {self.round}",
            "",
            self.summary_text(6, bold="**")
            + ("" if self.complete else " -- partial: not every site reported"),
            "",
            *([self.estimand_text(), ""] if self.estimand else []),
            *(line for c in self.cautions for line in (f"**Caution:** {c}", "")),
            *(line for n in self.notes for line in (f"**Note:** {n}", "")),
            "| site | status | tau | 95% CI | N | epsilon | delta | weight | lifetime spent of cap "
            "| why |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s in self.sites:
            if isinstance(s, ReleasedSite):
                lines.append(
                    f"| {s.site_id} | {s.status} | {s.tau_text(6, fixed=False)} | "
                    f"{s.interval_text()} | {s.n} | {s.epsilon} | {s.delta} | {s.weight:.3f} | "
                    f"{s.spend_text()} | {s.reason} |"
                )
            else:
                lines.append(f"| {s.site_id} | {s.status} | | | | | | | | {s.reason} |")
        return "\n".join(lines)
