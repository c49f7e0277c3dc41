"""What one run of the experiments does (:class:`ExperimentSettings`), the grid it covers (the
paper's alphas, three-site proportions and delta; the combiners and estimators drawn, with their
labels) and how every random stream is seeded.

Simulation noise comes from a seeded :class:`numpy.random.Generator` (``--seed``): it is **not**
private. Each stream is keyed by its place in the run (:func:`generator`), so a run is reproducible
and one part of it can be re-run alone.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from dpate_core.aggregation import aggregator_of

__all__ = [
    "AGGREGATOR_LABELS",
    "ALPHAS",
    "COMPARED_AGGREGATORS",
    "DELTA",
    "ESTIMATOR_LABELS",
    "PAPER_ESTIMATORS",
    "THREE_SITE_PROPORTIONS",
    "Z95",
    "ExperimentSettings",
    "frac",
    "generator",
    "seed_key",
]

ALPHAS: tuple[Fraction, ...] = tuple(Fraction(a) for a in ("1/8", "1/4", "1/2", "1", "2", "4", "8"))
THREE_SITE_PROPORTIONS: tuple[tuple[int, ...], ...] = ((1, 1, 1), (3, 2, 1), (9, 9, 2), (18, 1, 1))
DELTA = Fraction(1, 100_000)
#: the combiners the experiments compare: the paper's three and the two meta-analysis ones (names
#: of dpate_core.aggregation.AGGREGATORS)
COMPARED_AGGREGATORS = ("mvagg", "all", "largest", "inverse_variance", "random_effects")
AGGREGATOR_LABELS = {a: aggregator_of(a).label for a in COMPARED_AGGREGATORS}
ESTIMATOR_LABELS = {
    "dim": "DP difference in means",
    "smooth_matching": "SmoothDPMatching",
    "global_matching": "GlobalDPMatching",
    "adjusted": "DP subclassification (adjusted)",
    "propensity": "DP propensity subclassification",
}
#: the paper's mechanisms: the paper's claims are checked on these only
PAPER_ESTIMATORS = ("dim", "smooth_matching", "global_matching")
#: the two-sided 95% normal quantile of the interval ``tau +- Z95 sqrt(variance)``
Z95 = 1.959963984540054


@dataclass(frozen=True)
class ExperimentSettings:
    """What one run does. ``quick`` lowers the repetitions and the sensitivity grid only."""

    reps: int = 100
    splits: int = 10  # random splits per configuration (reps shared out among them)
    seed: int = 20240229
    alphas: tuple[Fraction, ...] = ALPHAS
    delta: Fraction = DELTA
    eps_rct: Fraction = Fraction(1)
    eps_synth: Fraction = Fraction(1)
    eps_small_obs: Fraction = Fraction(5)  # IHDP and Lalonde
    synth_n: int = 10_000
    synth_domain: int = 100
    sens_sizes: tuple[int, ...] = (
        1_000,
        2_000,
        5_000,
        10_000,
        20_000,
        50_000,
        100_000,
        200_000,
        500_000,
    )
    sens_imbalances: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0)
    sens_seeds: int = 5
    figures: bool = True
    #: the coverage study (coverage.csv / coverage.md): releases per point (normal intervals,
    #: vectorised), data draws they are spread over, releases per point given bootstrap
    #: intervals, and draws per bootstrap; None scales with ``reps`` (20 reps, reps, reps / 10)
    coverage: bool = True
    coverage_reps: int | None = None
    coverage_data: int | None = None
    coverage_boot: int | None = None
    coverage_boot_draws: int = 1000

    def coverage_sizes(self) -> tuple[int, int, int]:
        """``(releases, data draws, bootstrapped releases)`` per coverage point."""
        reps = self.coverage_reps if self.coverage_reps is not None else 20 * self.reps
        data = self.coverage_data if self.coverage_data is not None else self.reps
        boot = self.coverage_boot if self.coverage_boot is not None else max(1, self.reps // 10)
        return reps, max(1, min(data, reps)), boot

    @classmethod
    def quick(cls, **kw: Any) -> ExperimentSettings:
        base = cls(
            reps=30,
            splits=3,
            sens_sizes=(1_000, 5_000, 20_000, 100_000, 200_000),
            sens_imbalances=(0.0, 1.0, 4.0, 8.0),
            sens_seeds=2,
            coverage_reps=300,
            coverage_data=10,
            coverage_boot=6,
            coverage_boot_draws=400,
        )
        return replace(base, **kw)


def seed_key(*parts: object) -> int:
    """A stable 32-bit key for seeding (Python's ``hash`` of a string is salted per process)."""
    return zlib.crc32("|".join(map(str, parts)).encode())


def generator(settings: ExperimentSettings, *parts: object) -> np.random.Generator:
    """The seeded stream of one place in the run, keyed by ``parts`` (not private)."""
    return np.random.default_rng([settings.seed, seed_key(*parts)])


def frac(f: Fraction) -> str:
    """An exact privacy parameter as written in the tables (``"1/8"``)."""
    return str(f)
