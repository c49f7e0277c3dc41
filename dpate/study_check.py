"""Everything a study's releases need, checked at every site before any site spends.

An embedded study (``dpate run``: this machine is every site, and its user owns every site's
data) reserves nothing until :func:`check_study` finds, for every site: its settings, its ledger
(it exists, holds the spec's lifetime cap, and has room for the release, or already committed
it), its publication path (the signing key the spec asks for, no report of this release from
another ledger), its data (valid under the spec) and the release's feasibility on it; and, for the
study, that its round was not already released under a different spec. A study that cannot
complete (the spec requires every site and one of them has a problem) then spends nothing
anywhere. In a deployment each site decides for itself before it reserves (docs/reference/pipeline.md).

No Prefect here: ``dpate run`` calls it before Prefect starts, and the ``study`` flow calls it as
its first task (:mod:`dpate.tasks.preflight`). With ``public=True`` (inside a flow, whose states
reach Prefect) a data problem is reported by column and rule only, its counts and row positions
going to the site's operator log, as a release does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dpate.errors import DpateError, ExitCode
from dpate.ledger import (
    BudgetExceededError,
    CapMismatchError,
    LedgerError,
    LedgerNotFoundError,
    budget_text,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dpate.schemas.site_data import PreparationReport
    from dpate.schemas.spec import StudySpec
    from dpate.settings import SiteContext, StudyContext
    from dpate_core.privacy import PrivacyParams

__all__ = [
    "RoundReleasedError",
    "SiteCheck",
    "StudyCheck",
    "StudyNotReadyError",
    "check_site",
    "check_study",
    "design_cautions",
    "design_notes",
    "ledger_init_line",
    "not_ready_error",
    "respend_text",
    "result_words",
]


class RoundReleasedError(DpateError, RuntimeError):
    """The study's round already has a release or a result under a different spec hash: a run
    of this spec would be a new release and spend again. Nothing was reserved."""

    exit_code = ExitCode.STORAGE
    cause = "round already released under another spec"


class StudyNotReadyError(DpateError, RuntimeError):
    """A study that cannot complete was not run: nothing was reserved at any site. ``sites``
    holds each failing site's public error (``{"site_id", "ok", "error": "Type: message"}``)."""

    exit_code = ExitCode.SITES_FAILED
    cause = "study not run"
    sites: list[dict[str, Any]]


@dataclass
class SiteCheck:
    """One site's readiness: ``problems`` (empty: it can release), whether its release is
    already committed (a run re-publishes it and spends nothing), what a run would spend, and
    the operator-only preparation counts (``report``: never sent anywhere)."""

    site_id: str
    cost: PrivacyParams
    problems: list[DpateError] = field(default_factory=list)
    recorded: bool = False
    reserved: bool = False
    report: PreparationReport | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def spends(self) -> bool:
        """Whether a run would debit this site's ledger."""
        return self.ok and not (self.recorded or self.reserved)


@dataclass
class StudyCheck:
    """Every site's :class:`SiteCheck` and the study's own problems (its round's history)."""

    study_id: str
    round: str
    require_all_sites: bool
    sites: list[SiteCheck]
    problems: list[DpateError] = field(default_factory=list)
    #: what ``dpate plan`` says of the study's design before anything is spent
    #: (:func:`design_notes`): public words, for the run's log and ``dpate check``
    notes: list[str] = field(default_factory=list)

    @property
    def can_run(self) -> bool:
        """Whether a run may reserve anything: no study problem, and every site ready when the
        spec requires every site (else at least one ready)."""
        if self.problems:
            return False
        ready = [s.ok for s in self.sites]
        return all(ready) if self.require_all_sites else any(ready)

    @property
    def spends_nothing(self) -> bool:
        """Every site's release is already recorded: a run re-publishes, spending nothing."""
        return all(s.recorded for s in self.sites)


def respend_text(spec: StudySpec, site_ids: list[str] | None = None) -> str:
    """What a new release of every (or the named) site costs: the words a suggestion that
    changes the spec hash carries (a new spec hash is a new release at every site)."""
    ids = site_ids if site_ids is not None else [s.id for s in spec.sites]
    costs = ", ".join(f"site {i} {budget_text(spec.release_cost(i))}" for i in ids)
    return f"a changed spec is a new release and spends again: {costs}"


def ledger_init_line(spec: StudySpec, site_id: str, ledger_url: str | None = None) -> str:
    """The command that creates a site's ledger with the spec's lifetime cap."""
    cap = spec.site(site_id).lifetime_cap.params
    where = f" --ledger {ledger_url}" if ledger_url else ""
    return f"dpate ledger init {site_id} --epsilon {cap.epsilon} --delta {cap.delta}{where}"


def check_study(
    spec: str, round: str | None = None, *, public: bool = False, deployed: bool = False
) -> StudyCheck:
    """Check every site of the study and the round's history; spends and draws nothing.
    ``deployed``: resolve each site's settings as a deployed run does (no fallback to the spec
    or a default ledger)."""
    from dpate.settings import resolve_site, resolve_study

    ctx = resolve_study(spec, round)
    study = StudyCheck(ctx.study_id, ctx.round, ctx.spec.require_all_sites, [])
    for site_id in ctx.site_ids:
        cost = ctx.spec.release_cost(site_id)
        try:
            site_ctx = resolve_site(spec, site_id, round, deployed=deployed)
        except DpateError as exc:
            study.sites.append(SiteCheck(site_id, cost, [exc]))
            continue
        study.sites.append(check_site(site_ctx, public=public))
    study.problems += _round_history(ctx, study, deployed)
    study.notes = design_cautions(ctx.spec, operator=True) + design_notes(ctx.spec)
    return study


def design_notes(spec: StudySpec) -> list[str]:
    """The estimator's own notes on the study's design (``Estimator.describe``) and on how to
    read its intervals (``Estimator.reading_notes``), as ``dpate plan`` gives them at the ``n``
    every site declares and the plan's default assumptions (every stratum filled evenly, treated
    share 0.5), for the study's operator; what questions the estimate's validity is
    :func:`design_cautions`. Public values only; spends and reads nothing. Empty for an
    estimator without notes of its own, or when a site declares no ``n``."""
    est = spec.estimator_info
    described, reading = _predicted_notes(spec, est.describe, est.reading_notes)
    return [f"{note}{_OPERATOR}" for note in described + reading]


def result_words(spec: StudySpec) -> tuple[list[str], list[str]]:
    """What the study's result carries from its design, worded for its reader, from one
    prediction of the study: its cautions (:func:`design_cautions`) and its notes on how to read
    its intervals (``Estimator.reading_notes``: e.g. a propensity site whose interval carries an
    allowance that is conservative where there is nothing to correct). Public values only;
    spends and reads nothing; empty lists where there are none."""
    est = spec.estimator_info
    cautions, reading = _predicted_notes(spec, est.cautions, est.reading_notes)
    return _cautions(spec, cautions, _READER), [f"{note}{_READER}" for note in reading]


#: how a predicted note ends for the study's operator (``dpate check``, the pre-spend check)
_OPERATOR = (
    " (at the declared n and `dpate plan`'s default assumptions; `dpate plan --occupied-strata` "
    "states where the records lie)"
)
#: and for the reader of the study's result
_READER = (
    " (predicted from the study's spec before any release: the n each site declares and `dpate "
    "plan`'s default assumptions)"
)


def design_cautions(spec: StudySpec, *, operator: bool = False) -> list[str]:
    """What questions the validity of the study's estimate, from its spec alone: the cautions
    of its choice (``StudyChoice.cautions``: a propensity study's bands or model share below the
    public rule's, a difference in means' split that starves its squares), then the
    estimator's at the ``n`` every site declares (``Estimator.cautions``: the adjusted
    estimator's fixed-effects sites predicted to rarely resolve, its subclassification sites
    predicted to read few of their strata), each worded for the study's ``operator`` (``dpate
    check``, the pre-spend check) or for the reader of its result (which carries them). Public
    values only; spends and reads nothing; empty where there are none."""
    (predicted,) = _predicted_notes(spec, spec.estimator_info.cautions)
    return _cautions(spec, predicted, _OPERATOR if operator else _READER)


def _cautions(spec: StudySpec, predicted: list[str], end: str) -> list[str]:
    """The study choice's cautions, then the estimator's ``predicted`` ones ending in ``end``."""
    return list(spec.study_choice.cautions) + [f"{note}{end}" for note in predicted]


def _predicted_notes(
    spec: StudySpec, *hooks: Callable[[Any, Sequence[Any]], list[str]] | None
) -> list[list[str]]:
    """The notes of each of ``hooks`` (an estimator's ``describe``, ``reading_notes`` or
    ``cautions``; None: none) on one ``dpate plan`` prediction of the study at the ``n`` every
    site declares, one list per hook: every list empty without a hook, when a site declares no
    ``n``, or for a design the plan cannot predict (``dpate plan`` says why)."""
    empty: list[list[str]] = [[] for _ in hooks]
    if all(h is None for h in hooks) or any(s.n is None for s in spec.sites):
        return empty
    from dpate.study_plan import plan_spec, spec_designs

    try:
        sizes = {s.id: int(s.n or 0) for s in spec.sites}
        plan = plan_spec(spec, spec_designs(spec, sizes), recommend=False)
    except ValueError:
        return empty
    options = spec.study_choice.options
    return [[] if hook is None else hook(options, plan.sites) for hook in hooks]


def check_site(ctx: SiteContext, *, public: bool = False) -> SiteCheck:
    """One site's ledger, publication path and data, as its release would meet them (with the
    spec's ``[balance]``, its covariate-balance table is a second release: its budget counts)."""
    cost = ctx.spec.release_cost(ctx.site_id)
    if ctx.spec.balance is not None:
        cost = cost + ctx.spec.balance_cost()
    check = SiteCheck(ctx.site_id, cost)
    check.problems += _ledger_problems(ctx, check)
    if check.recorded:
        return check  # re-published from the ledger: no data read, nothing spent
    check.problems += _publication_problems(ctx)
    check.problems += _data_problems(ctx, check, public=public)
    return check


def _ledger_problems(ctx: SiteContext, check: SiteCheck) -> list[DpateError]:
    from dpate.ledger import PrivacyLedger
    from dpate_core.privacy import check_budget

    spec_cap = ctx.spec.site(ctx.site_id).lifetime_cap.params
    try:
        with PrivacyLedger(ctx.ledger_url) as led:
            spend = led.spend(ctx.site_id)
            check.recorded = led.committed(ctx.rid) is not None
            events = led.events(ctx.site_id)
    except LedgerNotFoundError:
        return [
            LedgerNotFoundError(
                f"no ledger at {ctx.ledger_url}: create it with the spec's lifetime cap: "
                f"{ledger_init_line(ctx.spec, ctx.site_id)} (or `dpate run --init-ledgers`)"
            )
        ]
    except LedgerError as exc:
        return [exc]
    if check.recorded:
        return []
    problems: list[DpateError] = []
    if spend.cap is None:
        problems.append(
            LedgerError(
                f"the ledger at {ctx.ledger_url} has no lifetime cap for site {ctx.site_id}: "
                f"{ledger_init_line(ctx.spec, ctx.site_id)}"
            )
        )
        return problems
    if spend.cap != spec_cap:
        problems.append(
            CapMismatchError(
                f"the ledger's lifetime cap ({budget_text(spend.cap)}) is not the spec's "
                f"({budget_text(spec_cap)}): change one of them (`dpate ledger set-cap` is "
                f"audited)"
            )
        )
    check.reserved = any(e.kind == "RESERVE" and e.release_id == ctx.rid for e in events)
    if not check.reserved:
        budget = check_budget(spend.cap, spend.spent, check.cost)
        if not budget.fits:
            problems.append(
                BudgetExceededError(
                    f"this release asks {budget_text(check.cost)} but only "
                    f"{budget_text(budget.remaining)} remains of the lifetime cap "
                    f"({budget_text(spend.cap)}; spent {budget_text(spend.spent)}): lower the "
                    f"release's budget or raise the cap with `dpate ledger set-cap`"
                )
            )
    return problems


def _publication_problems(ctx: SiteContext) -> list[DpateError]:
    from dpate.signing import site_signing_key
    from dpate.storage import PublicationConflictError, Store

    problems: list[DpateError] = []
    try:
        site_signing_key(ctx.spec, ctx.site_id, ctx.key_path)
    except DpateError as exc:
        problems.append(exc)
    store = Store(ctx.storage_url)
    key = Store.site_report_key(ctx.study_id, ctx.site_id, ctx.rid)
    try:
        exists = store.exists(key)
    except OSError as exc:
        return [*problems, _StorageUnreadable(f"{store.uri(key)}: {type(exc).__name__}")]
    if exists:  # the ledger has no COMMIT for it (checked before): another ledger released it
        problems.append(
            PublicationConflictError(
                f"a report for release {ctx.rid[:12]} is already published at {store.uri(key)}, "
                f"but this site's ledger has no COMMIT for it (a different ledger released it): "
                f"check that the site's ledger setting names its one ledger"
            )
        )
    return problems


class _StorageUnreadable(DpateError, OSError):
    exit_code = ExitCode.STORAGE
    cause = "publication storage not readable"


def _data_problems(ctx: SiteContext, check: SiteCheck, *, public: bool) -> list[DpateError]:
    from dpate.schemas.site_data import SiteDataError
    from dpate.site.feasibility import FeasibilityError, feasibility_problems
    from dpate.site.plans import read_for_check

    try:  # within dpate run's shared_reads, the release's own read, kept for it
        data = read_for_check(ctx)
    except SiteDataError as exc:
        return [_public_data_error(ctx, exc) if public else exc]
    except Exception as exc:  # a reader's message may quote a value: its type only, in public
        if public:
            from dpate.site.operator_log import unreadable_data_error

            return [unreadable_data_error(ctx, exc)]
        return [SiteDataError([], hint=f"{type(exc).__name__}: {exc}; check the data location")]
    check.report = None if public else data.report
    found = feasibility_problems(data, ctx.spec)
    del data
    return [FeasibilityError(ctx.site_id, found)] if found else []


def _public_data_error(ctx: SiteContext, exc: Any) -> DpateError:
    """The site's data error as a Prefect state may carry it (columns and rules), its full text
    (counts, row positions) written to the site's operator log."""
    from dpate.site.operator_log import operator_logger, redacted_data_error

    operator_logger(ctx).error(
        "site %s, study %s, round %s (checked before the study spent): %s",
        ctx.site_id,
        ctx.study_id,
        ctx.round,
        exc,
    )
    return redacted_data_error(ctx, exc)


def _round_history(ctx: StudyContext, study: StudyCheck, deployed: bool) -> list[DpateError]:
    """A release (a ledger RESERVE) or a published result of this study's round under a spec
    hash other than this spec's: refused, naming the choices."""
    from dpate.ledger import PrivacyLedger
    from dpate.settings import resolve_site
    from dpate.storage import Store

    other: set[str] = set()
    for site in study.sites:
        if site.recorded:
            continue
        try:
            url = resolve_site(
                ctx.spec_source, site.site_id, ctx.round, deployed=deployed
            ).ledger_url
            with PrivacyLedger(url) as led:
                events = led.events(site.site_id)
        except (DpateError, OSError):
            continue  # reported with the site
        other |= {
            e.spec_hash
            for e in events
            if e.kind == "RESERVE"
            and e.study_id == ctx.study_id
            and e.round == ctx.round
            and e.spec_hash
            and e.spec_hash != ctx.spec.spec_hash
        }
    store = Store(ctx.storage_url)
    prefix = Store.result_key(ctx.study_id, ctx.round).removesuffix(".json")
    try:
        keys = store.children(f"{ctx.study_id}/results")
    except OSError:
        keys = []
    for key in keys:
        if not (key == f"{prefix}.json" or key.startswith(f"{prefix}.partial-")):
            continue
        try:
            doc = json.loads(store.read(key) or b"{}")
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("spec_hash") not in (None, ctx.spec.spec_hash):
            other.add(str(doc["spec_hash"]))
    if not other:
        return []
    spending = [s.site_id for s in study.sites if not s.recorded]
    recorded = ", ".join(sorted(h[:12] for h in other))
    return [
        RoundReleasedError(
            f"study {ctx.study_id} round {ctx.round} was already released under spec hash "
            f"{recorded}, and this spec's hash is {ctx.spec.spec_hash[:12]}. Nothing was "
            f"reserved. Choose: a new round label for this spec (`--round NEW`: "
            f"{respend_text(ctx.spec, spending)}), or the recorded spec again (hash {recorded}), "
            f"which re-publishes the recorded release and spends nothing"
        )
    ]


def not_ready_error(check: StudyCheck) -> DpateError:
    """The error a study that cannot run ends with, naming each site's problems (``sites``)."""
    failing = [s for s in check.sites if not s.ok]
    exc: DpateError
    if check.problems:
        exc = check.problems[0]
    else:
        names = ", ".join(s.site_id for s in failing)
        need = "the spec requires every site" if check.require_all_sites else "no site is ready"
        exc = StudyNotReadyError(
            f"study {check.study_id} round {check.round} was not run ({need}): nothing was "
            f"reserved or spent at any site; fix site(s) {names} and run it again"
        )
    exc.sites = [  # type: ignore[attr-defined]
        {"site_id": s.site_id, "ok": False, "error": f"{type(p).__name__}: {p}"}
        for s in failing
        for p in s.problems
    ]
    return exc
