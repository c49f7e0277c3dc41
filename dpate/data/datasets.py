"""The paper's data sets (IST, STAR, IHDP, Lalonde) mapped to ``(w, y, x)``, and Synth.

Files are read in place from the data directory (:func:`data_dir`: ``$DPATE_DATA_DIR``, else
``$XDG_DATA_HOME/dpate/data``, else ``~/.local/share/dpate/data``), one folder per data set; they
are never copied into the repository. ``dpate data fetch`` puts them there from their original
sources (:data:`SOURCES`, in :mod:`dpate.data.sources`: URLs and pinned sha256
checksums; :mod:`dpate.data.fetch`). Each loader follows the mapping of docs/how-to/data.md and
rescales ``Y`` to ``[0, 1]`` with a **public constant declared here**, not the observed maximum
(docs/explanation/corrections.md, section 7: rescaling by the observed range leaks), clipping to
``[0, B] = [0, 1]``:

========  ===========================================================  ===========================
data set  Y used                                                       X (public strata, |X|)
========  ===========================================================  ===========================
IST       ``DRSISC == 'Y'`` (binary; already in [0, 1])                none (|X| = 1)
STAR      entry-grade maths score: ``(score - 200) / 600``, declared   none (|X| = 1); sites by
          scale [200, 800] (no value is outside it)                    entry-grade urbanicity
IHDP      ``y_factual``: ``(y + 5) / 20``, declared range [-5, 15]      x4 (4 ordinal levels, cut
          (replication 1: nothing clipped; 4 and 5 clip a few; 9 and   at public edges), x7, x13:
          10 are heavy-tailed and clip more)                            |X| = 16
Lalonde   ``re78``: ``min(re78, 50000) / 50000``, declared earnings    age, one stratum per year
          cap US$50,000 (one record above it is clipped)               17..55: |X| = 39
========  ===========================================================  ===========================

Lalonde: 9 ages occur in only one arm (23 records): their strata have no match, and Algorithm 1
lets such strata contribute 0 to ``tau_hat`` (the records still count in ``N``); the smooth
sensitivity handles them (docs/explanation/corrections.md, section 1, ``m = 0``). IHDP's triple
``(x4, x7, x13)`` gives all 16 strata both treated and control records (docs/how-to/data.md).

:func:`load_dataset` dispatches by name (``ist``, ``star``, ``ihdp``, ``lalonde``, ``synth``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpate.errors import DpateError, ExitCode
from dpate_core.synth import synth

__all__ = [
    "DATASETS",
    "IHDP_COVARIATES",
    "IHDP_X4_EDGES",
    "IHDP_Y_RANGE",
    "LALONDE_AGES",
    "LALONDE_EARNINGS_CAP",
    "STAR_SCORE_RANGE",
    "STAR_SITES",
    "DataUnavailableError",
    "PaperDataset",
    "data_dir",
    "load_dataset",
    "load_ihdp",
    "load_ist",
    "load_lalonde",
    "load_star",
]

#: STAR: declared scale of the Stanford Achievement Test maths scaled score used as Y.
STAR_SCORE_RANGE = (200.0, 800.0)
#: STAR's four sites (entry-grade school urbanicity), largest first.
STAR_SITES = ("rural", "suburban", "inner-city", "urban")
#: IHDP: declared range of the simulated outcome (setting "A").
IHDP_Y_RANGE = (-5.0, 15.0)
#: IHDP: the three discrete covariates (column names of columns.txt).
IHDP_COVARIATES = ("x4", "x7", "x13")
#: IHDP: public edges for x4, an ordinal covariate with 4 equally spaced standardised levels.
IHDP_X4_EDGES = (-np.inf, -0.4, 0.7, 1.7, np.inf)
#: Lalonde: declared cap on 1978 earnings (US$).
LALONDE_EARNINGS_CAP = 50_000.0
#: Lalonde: the public age domain, one stratum per year.
LALONDE_AGES = (17, 55)


class DataUnavailableError(DpateError, FileNotFoundError):
    """A data set's files are not in the data directory."""

    exit_code = ExitCode.SITE_DATA
    cause = "site data unavailable"


def data_dir() -> Path:
    """Where the data sets live: ``$DPATE_DATA_DIR`` if set, else ``$XDG_DATA_HOME/dpate/data``
    (an absolute ``XDG_DATA_HOME`` only, as the XDG spec requires), else
    ``~/.local/share/dpate/data``."""
    env = os.environ.get("DPATE_DATA_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "dpate" / "data"


def _file(folder: str, name: str) -> Path:
    path = data_dir() / folder / name
    if not path.is_file():
        raise DataUnavailableError(
            f"{folder}/{name} is not in the data directory {data_dir()}: run `dpate data fetch` "
            f"to download and verify the public data sets (`dpate data fetch {folder}` for this "
            f"one; `--from DIR` copies a local mirror), or set DPATE_DATA_DIR to a folder that "
            f"holds {folder}/"
        )
    return path


@dataclass(frozen=True)
class PaperDataset:
    """A data set as the core needs it. ``y`` is in ``[0, bound]``; ``x`` holds stratum ids in
    ``0 .. domain_size-1``; ``sites`` (if any) the natural site of each record, named by
    ``site_names``. ``clipped`` counts outcomes clipped to the declared scale."""

    name: str
    design: str
    w: np.ndarray
    y: np.ndarray
    x: np.ndarray
    domain_size: int
    bound: float = 1.0
    sites: np.ndarray | None = None
    site_names: tuple[str, ...] = ()
    clipped: int = 0
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.w.shape[0])

    @property
    def n_treated(self) -> int:
        return int(np.count_nonzero(self.w))

    @property
    def n_control(self) -> int:
        return self.n - self.n_treated

    def site_indices(self) -> list[np.ndarray]:
        """Indices of each natural site (STAR), in :attr:`site_names` order."""
        if self.sites is None:
            raise ValueError(f"{self.name} has no natural sites: split it at random instead")
        return [np.flatnonzero(self.sites == j) for j in range(len(self.site_names))]


def _scale(values: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, int]:
    y = (values - lo) / (hi - lo)
    clipped = int(np.count_nonzero((y < 0) | (y > 1)))
    return np.clip(y, 0.0, 1.0), clipped


def _randomized(name: str, w: np.ndarray, y: np.ndarray, **fields: Any) -> PaperDataset:
    """A randomized trial's data set: no covariates (one stratum for every record)."""
    return PaperDataset(
        name=name,
        design="randomized",
        w=w,
        y=y,
        x=np.zeros(w.size, np.int64),
        domain_size=1,
        **fields,
    )


def load_ist() -> PaperDataset:
    """IST: rows with ``DRSISC in {Y, N}``; W = aspirin (``RXASP == 'Y'``); Y = ``DRSISC == 'Y'``."""
    path = _file("ist", "IST_corrected.csv")
    df = pd.read_csv(
        path, usecols=["RXASP", "DRSISC"], keep_default_na=False, na_values=[""], dtype=str
    )
    df = df[df["DRSISC"].isin(["Y", "N"])]
    w = (df["RXASP"] == "Y").to_numpy().astype(np.int8)
    y = (df["DRSISC"] == "Y").to_numpy().astype(np.float64)
    return _randomized(
        "ist", w, y, note="Y = recurrent ischaemic/unknown stroke within 14 days (binary, B = 1)"
    )


def load_star() -> PaperDataset:
    """STAR: entry grade = first grade with a class type; keep students with an entry-grade maths
    score; W = small class; Y = that score on the declared scale; site = entry-grade urbanicity."""
    path = _file("star", "STAR.csv")
    grades = ("k", "1", "2", "3")
    cols = [f"{p}{g}" for p in ("star", "math", "school") for g in grades]
    df = pd.read_csv(path, usecols=cols)
    star = df[[f"star{g}" for g in grades]].to_numpy(dtype=object)
    math_ = df[[f"math{g}" for g in grades]].to_numpy(dtype=np.float64)
    school = df[[f"school{g}" for g in grades]].to_numpy(dtype=object)
    present = pd.notna(star)
    has_entry = present.any(axis=1)
    entry = present.argmax(axis=1)
    rows = np.arange(len(df))
    score = math_[rows, entry]
    keep = has_entry & ~np.isnan(score)
    entry, rows, score = entry[keep], rows[keep], score[keep]
    w = (star[rows, entry] == "small").astype(np.int8)
    y, clipped = _scale(score, *STAR_SCORE_RANGE)
    urban = school[rows, entry]
    site_of = {name: j for j, name in enumerate(STAR_SITES)}
    unknown = sorted({str(u) for u in urban if u not in site_of})
    if unknown:
        raise ValueError(f"STAR urbanicity values {unknown} are not among {list(STAR_SITES)}")
    sites = np.array([site_of[u] for u in urban], dtype=np.int64)
    return _randomized(
        "star",
        w,
        y,
        sites=sites,
        site_names=STAR_SITES,
        clipped=clipped,
        note=f"Y = entry-grade maths score rescaled from the declared scale {STAR_SCORE_RANGE}",
    )


def load_ihdp(replication: int = 1) -> PaperDataset:
    """IHDP (NPCI setting A): W = ``treatment``; Y = ``y_factual`` on the declared range;
    X = ``(x4, x7, x13)`` with x4 cut at :data:`IHDP_X4_EDGES` (|X| = 4 * 2 * 2 = 16)."""
    if not 1 <= replication <= 10:
        raise ValueError(f"IHDP replication ({replication}) must be 1..10")
    path = _file("ihdp", f"ihdp_npci_{replication}.csv")
    df = pd.read_csv(path, header=None)
    # columns: treatment, y_factual, y_cfactual, mu0, mu1, x1 .. x25
    col = {name: 5 + int(name[1:]) - 1 for name in IHDP_COVARIATES}
    w = df[0].to_numpy().astype(np.int8)
    y, clipped = _scale(df[1].to_numpy(dtype=np.float64), *IHDP_Y_RANGE)
    x4 = np.searchsorted(np.asarray(IHDP_X4_EDGES[1:-1]), df[col["x4"]].to_numpy(), side="right")
    x7 = df[col["x7"]].to_numpy()
    x13 = df[col["x13"]].to_numpy()
    for name, v in (("x7", x7), ("x13", x13)):
        if not np.isin(v, (0, 1)).all():
            raise ValueError(f"IHDP {name} must be binary 0/1 (see docs/how-to/data.md)")
    x = (x4 * 4 + x7 * 2 + x13).astype(np.int64)
    mu = df[4].to_numpy() - df[3].to_numpy()
    return PaperDataset(
        name="ihdp",
        design="observational",
        w=w,
        y=y,
        x=x,
        domain_size=16,
        clipped=clipped,
        note=f"replication {replication}; Y rescaled from the declared range {IHDP_Y_RANGE}; "
        f"X = {IHDP_COVARIATES}",
        extra={"true_ate_rescaled": float(mu.mean() / (IHDP_Y_RANGE[1] - IHDP_Y_RANGE[0]))},
    )


def load_lalonde() -> PaperDataset:
    """Lalonde (NSW, DAAG ``nswdemo``): W = ``trt``; Y = ``re78`` capped at
    :data:`LALONDE_EARNINGS_CAP` and divided by it; X = age, one stratum per year 17..55."""
    path = _file("lalonde", "nswdemo.csv")
    df = pd.read_csv(path, usecols=["trt", "age", "re78"])
    w = df["trt"].to_numpy().astype(np.int8)
    y, clipped = _scale(df["re78"].to_numpy(dtype=np.float64), 0.0, LALONDE_EARNINGS_CAP)
    age = df["age"].to_numpy()
    lo, hi = LALONDE_AGES
    if not ((age >= lo) & (age <= hi) & (age == np.round(age))).all():
        raise ValueError(f"Lalonde ages must be whole years in {lo}..{hi} (the public age domain)")
    return PaperDataset(
        name="lalonde",
        design="observational",
        w=w,
        y=y,
        x=(age - lo).astype(np.int64),
        domain_size=hi - lo + 1,
        clipped=clipped,
        note=f"Y = 1978 earnings capped at US${LALONDE_EARNINGS_CAP:,.0f}; X = age {lo}..{hi}; "
        f"ages seen in one arm only are unmatched strata (contribute 0 in Algorithm 1)",
    )


def load_synth(
    n: int = 10_000, domain_size: int = 100, *, a: float | None = None, seed: int = 0
) -> PaperDataset:
    """The paper's Synth (:func:`dpate_core.synth.synth`) as a :class:`PaperDataset`."""
    s = synth(n, domain_size, a=a, seed=seed)
    return PaperDataset(
        name="synth",
        design="observational",
        w=s.w,
        y=s.y,
        x=s.x,
        domain_size=domain_size,
        note=f"seed {seed}, a = {s.a:.4f}, b = {s.b:.4f}, true ATE 0.5",
        extra={"a": s.a, "b": s.b, "tau": s.tau},
    )


DATASETS = ("ist", "star", "ihdp", "lalonde", "synth")


def load_dataset(name: str, **options: Any) -> PaperDataset:
    """Load a data set by name; ``options``: ``replication`` (ihdp), ``n``, ``domain_size``,
    ``a``, ``seed`` (synth)."""
    loaders = {
        "ist": load_ist,
        "star": load_star,
        "ihdp": load_ihdp,
        "lalonde": load_lalonde,
        "synth": load_synth,
    }
    try:
        loader = loaders[name.lower()]
    except KeyError:
        raise ValueError(f"data set ({name!r}) is not one of {list(DATASETS)}") from None
    return loader(**options)
